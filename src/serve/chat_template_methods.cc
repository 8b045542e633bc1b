// Methods of strings, dicts and lists (`s.split(',')`, `d.items()`), the global functions, and the
// string helpers the filters share. Sections: string helpers, string methods, dict and list
// methods, globals. To add a method, add its name to the kind's list in HasMethod and a branch to
// the kind's Call*Method.
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>

#include "serve/chat_template_builtins.h"

namespace gyre::jinja {

// --- String helpers -----------------------------------------------------------------------------

bool IsPySpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

template <typename Map>
std::string MapCodePoints(std::string_view s, Map map) {
  std::string out;
  out.reserve(s.size());
  for (auto [offset, len] : Utf8Chars(s)) {
    uint32_t cp = DecodeUtf8Char(s, offset, len);
    if (len == 1 && cp >= 0x80) {  // an invalid byte: keep it as is
      out.push_back(s[offset]);
      continue;
    }
    AppendUtf8(map(cp), &out);
  }
  return out;
}

uint32_t Upper(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  return static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}

uint32_t Lower(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  return static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}

bool IsCased(uint32_t cp) {
  auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

bool IsAlpha(uint32_t cp) {
  auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}

bool IsDigit(uint32_t cp) { return utf8proc_category(static_cast<utf8proc_int32_t>(cp)) == UTF8PROC_CATEGORY_ND; }

std::vector<uint32_t> CodePoints(std::string_view s) {
  std::vector<uint32_t> cps;
  for (auto [offset, len] : Utf8Chars(s)) cps.push_back(DecodeUtf8Char(s, offset, len));
  return cps;
}

}  // namespace

std::string ToUpper(std::string_view s) { return MapCodePoints(s, Upper); }
std::string ToLower(std::string_view s) { return MapCodePoints(s, Lower); }

std::string Capitalize(std::string_view s) {
  auto chars = Utf8Chars(s);
  if (chars.empty()) return "";
  std::string out = ToUpper(s.substr(0, chars[0].second));
  out += ToLower(s.substr(chars[0].second));
  return out;
}

std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<uint32_t> strip_set;
  if (chars != nullptr) strip_set = CodePoints(*chars);
  auto strip = [&](uint32_t cp) {
    if (chars == nullptr) return IsPySpace(cp);
    return std::find(strip_set.begin(), strip_set.end(), cp) != strip_set.end();
  };
  auto spans = Utf8Chars(s);
  size_t begin = 0, end = spans.size();
  while (left && begin < end && strip(DecodeUtf8Char(s, spans[begin].first, spans[begin].second))) ++begin;
  while (right && end > begin && strip(DecodeUtf8Char(s, spans[end - 1].first, spans[end - 1].second))) --end;
  if (begin == end) return "";
  size_t from = spans[begin].first;
  size_t to = spans[end - 1].first + spans[end - 1].second;
  return std::string(s.substr(from, to - from));
}

std::string CoerceString(const Evaluator& ev, const Value& v) {
  if (v.is_none()) return "None";
  return ev.Str(v);
}

// --- String methods -----------------------------------------------------------------------------

namespace {

constexpr std::string_view kStringMethods[] = {
    "upper",   "lower",   "strip",   "lstrip",  "rstrip",  "startswith", "endswith", "split",  "rsplit",
    "replace", "find",    "rfind",   "count",   "title",   "capitalize", "join",     "format", "isdigit",
    "isalpha", "isalnum", "isspace", "islower", "isupper", "splitlines", "index",    "rindex"};
constexpr std::string_view kDictMethods[] = {"get", "items", "keys", "values"};
constexpr std::string_view kListMethods[] = {"index", "count"};

template <size_t N>
bool Contains(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

Result<std::string> StringArg(Evaluator& ev, const CallArgs& args, size_t pos, std::string_view name,
                              std::string_view method, int line) {
  const Value* v = args.Get(pos, name);
  if (v == nullptr || !v->is_string()) {
    return ev.Error(line, std::string(method) + "() argument '" + std::string(name) + "' must be a string");
  }
  return v->as_string();
}

// Python str.split / str.rsplit.
List Split(std::string_view s, const std::string* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep == nullptr) {
    auto spans = Utf8Chars(s);
    std::vector<std::pair<size_t, size_t>> words;  // byte ranges of whitespace-separated words
    size_t i = 0;
    while (i < spans.size()) {
      while (i < spans.size() && IsPySpace(DecodeUtf8Char(s, spans[i].first, spans[i].second))) ++i;
      if (i == spans.size()) break;
      size_t start = i;
      while (i < spans.size() && !IsPySpace(DecodeUtf8Char(s, spans[i].first, spans[i].second))) ++i;
      words.emplace_back(spans[start].first, spans[i - 1].first + spans[i - 1].second);
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= words.size()) {
      for (auto [b, e] : words) parts.emplace_back(s.substr(b, e - b));
    } else if (!from_right) {
      for (size_t k = 0; k < static_cast<size_t>(maxsplit); ++k)
        parts.emplace_back(s.substr(words[k].first, words[k].second - words[k].first));
      std::string rest(s.substr(words[static_cast<size_t>(maxsplit)].first));
      parts.push_back(PyStrip(rest, nullptr, false, true));
    } else {
      size_t keep = words.size() - static_cast<size_t>(maxsplit);
      parts.push_back(PyStrip(s.substr(0, words[keep - 1].second), nullptr, true, false));
      for (size_t k = keep; k < words.size(); ++k)
        parts.emplace_back(s.substr(words[k].first, words[k].second - words[k].first));
    }
  } else if (!from_right) {
    size_t start = 0;
    int64_t splits = 0;
    while (maxsplit < 0 || splits < maxsplit) {
      size_t at = s.find(*sep, start);
      if (at == std::string_view::npos) break;
      parts.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
      ++splits;
    }
    parts.emplace_back(s.substr(start));
  } else {
    size_t end = s.size();
    int64_t splits = 0;
    std::vector<std::string> reversed;
    while (maxsplit < 0 || splits < maxsplit) {
      if (end < sep->size()) break;
      size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      reversed.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
      ++splits;
    }
    reversed.emplace_back(s.substr(0, end));
    parts.assign(reversed.rbegin(), reversed.rend());
  }
  List out;
  for (std::string& p : parts) out.push_back(Value::String(std::move(p)));
  return out;
}

// Python str.title(): a cased character after an uncased one is upper case, others lower case.
std::string PyTitle(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (auto [offset, len] : Utf8Chars(s)) {
    uint32_t cp = DecodeUtf8Char(s, offset, len);
    AppendUtf8(prev_cased ? Lower(cp) : Upper(cp), &out);
    prev_cased = IsCased(cp);
  }
  return out;
}

// Python str.format with automatic ({}), positional ({0}) and named ({name}) fields; format specs
// and conversions are not supported.
Result<Value> Format(Evaluator& ev, const std::string& fmt, const CallArgs& args, int line) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) return ev.Error(line, "format(): unmatched '{'");
    std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!") != std::string::npos)
      return ev.Error(line, "format(): format specs are not supported");
    const Value* v = nullptr;
    if (field.empty()) {
      if (auto_index < args.positional.size()) v = &args.positional[auto_index];
      ++auto_index;
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      size_t k = std::strtoul(field.c_str(), nullptr, 10);
      if (k < args.positional.size()) v = &args.positional[k];
    } else {
      for (const auto& [key, value] : args.keyword) {
        if (key == field) v = &value;
      }
    }
    if (v == nullptr) return ev.Error(line, "format(): no argument for field {" + field + "}");
    out += v->is_none() ? "None" : ev.Str(*v);
    GYRE_RETURN_IF_ERROR(ev.CheckSize(out.size(), line));
    i = close;
  }
  return Value::String(std::move(out));
}

Result<Value> CallStringMethod(Evaluator& ev, const std::string& s, std::string_view name, const CallArgs& args,
                               int line) {
  if (name == "upper") return Value::String(ToUpper(s));
  if (name == "lower") return Value::String(ToLower(s));
  if (name == "title") return Value::String(PyTitle(s));
  if (name == "capitalize") return Value::String(Capitalize(s));
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value* chars = args.Get(0, "chars");
    const std::string* set = (chars != nullptr && chars->is_string()) ? &chars->as_string() : nullptr;
    return Value::String(PyStrip(s, set, name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* arg = args.Get(0, "prefix");
    if (arg == nullptr) return ev.Error(line, std::string(name) + "() takes at least 1 argument");
    std::vector<std::string> candidates;
    if (arg->is_string()) {
      candidates.push_back(arg->as_string());
    } else if (arg->is_list()) {
      for (const Value& item : arg->as_list()) {
        if (!item.is_string()) return ev.Error(line, std::string(name) + "() tuple items must be strings");
        candidates.push_back(item.as_string());
      }
    } else {
      return ev.Error(line, std::string(name) + "() argument must be a string or a tuple of strings");
    }
    for (const std::string& c : candidates) {
      bool hit = name == "startswith" ? s.compare(0, c.size(), c) == 0 && s.size() >= c.size()
                                      : s.size() >= c.size() && s.compare(s.size() - c.size(), c.size(), c) == 0;
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "split" || name == "rsplit") {
    const Value* sep = args.Get(0, "sep");
    const Value* maxsplit = args.Get(1, "maxsplit");
    if (sep != nullptr && !sep->is_string() && !sep->is_none())
      return ev.Error(line, "split() separator must be a string or none");
    if (sep != nullptr && sep->is_string() && sep->as_string().empty())
      return ev.Error(line, "split(): empty separator");
    if (maxsplit != nullptr && !maxsplit->is_int()) return ev.Error(line, "split() maxsplit must be an integer");
    return Value::MakeList(Split(s, sep != nullptr && sep->is_string() ? &sep->as_string() : nullptr,
                                 maxsplit ? maxsplit->as_int() : -1, name == "rsplit"));
  }
  if (name == "replace") {
    GYRE_ASSIGN_OR_RETURN(std::string from, StringArg(ev, args, 0, "old", name, line));
    GYRE_ASSIGN_OR_RETURN(std::string to, StringArg(ev, args, 1, "new", name, line));
    const Value* count_arg = args.Get(2, "count");
    int64_t count = count_arg != nullptr && count_arg->is_int() ? count_arg->as_int() : -1;
    std::string out;
    if (from.empty()) {
      // Python inserts `to` before every character and at the end.
      int64_t done = 0;
      for (auto [offset, len] : Utf8Chars(s)) {
        if (count < 0 || done < count) {
          out += to;
          ++done;
        }
        out.append(s, offset, len);
        GYRE_RETURN_IF_ERROR(ev.CheckSize(out.size(), line));
      }
      if (count < 0 || done < count) out += to;
      return Value::String(std::move(out));
    }
    size_t start = 0;
    for (int64_t done = 0; count < 0 || done < count; ++done) {
      size_t at = s.find(from, start);
      if (at == std::string::npos) break;
      out.append(s, start, at - start);
      out += to;
      GYRE_RETURN_IF_ERROR(ev.CheckSize(out.size(), line));
      start = at + from.size();
    }
    out.append(s, start, std::string::npos);
    return Value::String(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    GYRE_ASSIGN_OR_RETURN(std::string sub, StringArg(ev, args, 0, "sub", name, line));
    if (name == "count") {
      if (sub.empty()) return Value::Int(static_cast<int64_t>(Utf8Chars(s).size()) + 1);
      int64_t n = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value::Int(n);
    }
    size_t at = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
    if (at == std::string::npos) {
      if (name == "index" || name == "rindex") return ev.Error(line, "substring not found");
      return Value::Int(-1);
    }
    return Value::Int(static_cast<int64_t>(Utf8Chars(std::string_view(s).substr(0, at)).size()));
  }
  if (name == "join") {
    const Value* items = args.Get(0, "iterable");
    if (items == nullptr || !items->is_list()) return ev.Error(line, "join() argument must be a list of strings");
    std::string out;
    bool first = true;
    for (const Value& item : items->as_list()) {
      if (!item.is_string()) return ev.Error(line, "join() expects strings");
      if (!first) out += s;
      first = false;
      out += item.as_string();
      GYRE_RETURN_IF_ERROR(ev.CheckSize(out.size(), line));
    }
    return Value::String(std::move(out));
  }
  if (name == "format") return Format(ev, s, args, line);
  if (name == "splitlines") {
    List lines;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        lines.push_back(Value::String(s.substr(start, i - start)));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) lines.push_back(Value::String(s.substr(start)));
    return Value::MakeList(std::move(lines));
  }
  // The is*() predicates.
  std::vector<uint32_t> cps = CodePoints(s);
  auto all = [&](auto pred) { return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred); };
  if (name == "isdigit") return Value::Bool(all(IsDigit));
  if (name == "isalpha") return Value::Bool(all(IsAlpha));
  if (name == "isalnum") return Value::Bool(all([](uint32_t c) { return IsAlpha(c) || IsDigit(c); }));
  if (name == "isspace") return Value::Bool(all(IsPySpace));
  if (name == "islower" || name == "isupper") {
    bool want_lower = name == "islower";
    bool any_cased = false;
    for (uint32_t c : cps) {
      if (!IsCased(c)) continue;
      any_cased = true;
      if (want_lower ? Lower(c) != c : Upper(c) != c) return Value::Bool(false);
    }
    return Value::Bool(any_cased);
  }
  return Value::Undefined();
}

// --- printf-style formatting -------------------------------------------------------------------

}  // namespace

Result<Value> PercentFormat(Evaluator& ev, const std::string& fmt, const Value& args, int line) {
  std::string out;
  size_t next_arg = 0;
  auto positional = [&]() -> const Value* {
    if (args.is_list()) return next_arg < args.as_list().size() ? &args.as_list()[next_arg++] : nullptr;
    return next_arg++ == 0 ? &args : nullptr;
  };
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) return ev.Error(line, "format: incomplete format");
    if (fmt[i] == '%') {
      out.push_back('%');
      continue;
    }
    const Value* arg = nullptr;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string::npos) return ev.Error(line, "format: incomplete format key");
      if (!args.is_dict()) return ev.Error(line, "format: a format key needs a mapping");
      arg = args.as_dict().Find(std::string_view(fmt).substr(i + 1, close - i - 1));
      if (arg == nullptr) return ev.Error(line, "format: missing key '" + fmt.substr(i + 1, close - i - 1) + "'");
      i = close + 1;
    }
    // %[flags][width][.precision]type
    std::string flags;
    while (i < fmt.size() && std::string_view("-+ 0#").find(fmt[i]) != std::string_view::npos)
      flags.push_back(fmt[i++]);
    int width = 0, precision = -1;
    while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i])))
      width = std::min(width * 10 + (fmt[i++] - '0'), 4096);
    if (i < fmt.size() && fmt[i] == '.') {
      precision = 0;
      for (++i; i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]));)
        precision = std::min(precision * 10 + (fmt[i++] - '0'), 400);
    }
    if (i >= fmt.size()) return ev.Error(line, "format: incomplete format");
    char type = fmt[i];
    if (arg == nullptr) arg = positional();
    if (arg == nullptr) return ev.Error(line, "format: not enough arguments for format string");
    std::string spec = "%" + flags + (width > 0 ? std::to_string(width) : "") +
                       (precision >= 0 ? "." + std::to_string(precision) : "");
    char buf[8192];  // width <= 4096, precision <= 400, |value| <= 1.8e308
    if (type == 's' || type == 'r') {
      std::string text = type == 'r' && arg->is_string() ? "'" + arg->as_string() + "'" : CoerceString(ev, *arg);
      auto chars = Utf8Chars(text);
      if (precision >= 0 && static_cast<size_t>(precision) < chars.size()) {
        text.resize(chars[static_cast<size_t>(precision)].first);
        chars.resize(static_cast<size_t>(precision));
      }
      std::string pad(static_cast<size_t>(width) > chars.size() ? static_cast<size_t>(width) - chars.size() : 0, ' ');
      out += flags.find('-') != std::string::npos ? text + pad : pad + text;
    } else if (std::string_view("diuxXoc").find(type) != std::string_view::npos) {
      if (!arg->is_number()) return ev.Error(line, std::string("format: %") + type + " needs a number");
      long long value = arg->is_int()
                            ? arg->as_int()
                            : static_cast<long long>(std::clamp(std::trunc(arg->ToDouble()), -9.2e18, 9.2e18));
      if (type == 'c') {
        AppendUtf8(static_cast<uint32_t>(value) & 0x1FFFFF, &out);
        continue;
      }
      std::snprintf(buf, sizeof(buf), (spec + "ll" + (type == 'u' || type == 'i' ? 'd' : type)).c_str(), value);
      out += buf;
    } else if (std::string_view("fFeEgG").find(type) != std::string_view::npos) {
      if (!arg->is_number()) return ev.Error(line, std::string("format: %") + type + " needs a number");
      std::snprintf(buf, sizeof(buf), (spec + type).c_str(), arg->ToDouble());
      out += buf;
    } else {
      return ev.Error(line, std::string("format: unsupported format character '") + type + "'");
    }
    GYRE_RETURN_IF_ERROR(ev.CheckSize(out.size(), line));
  }
  if (args.is_list() ? next_arg < args.as_list().size() : (next_arg == 0 && !args.is_dict())) {
    return ev.Error(line, "format: not all arguments converted during string formatting");
  }
  return Value::String(std::move(out));
}

namespace {

// --- Dict and list methods ----------------------------------------------------------------------

List DictItems(const Dict& dict) {
  List items;
  for (const auto& [key, value] : dict) items.push_back(Value::MakeList({key, value}));
  return items;
}

Result<Value> CallDictMethod(Evaluator& ev, const Dict& dict, std::string_view name, const CallArgs& args, int line) {
  if (name == "get") {
    const Value* key = args.Get(0, "key");
    if (key == nullptr) return ev.Error(line, "get() takes at least 1 argument");
    const Value* found = dict.Find(*key);
    if (found != nullptr) return *found;
    const Value* fallback = args.Get(1, "default");
    return fallback != nullptr ? *fallback : Value::None();
  }
  if (name == "items") return Value::MakeList(DictItems(dict));
  List out;
  for (const auto& [key, value] : dict) out.push_back(name == "keys" ? key : value);
  return Value::MakeList(std::move(out));
}

Result<Value> CallListMethod(Evaluator& ev, const List& list, std::string_view name, const CallArgs& args, int line) {
  const Value* needle = args.Get(0, "value");
  if (needle == nullptr) return ev.Error(line, std::string(name) + "() takes exactly 1 argument");
  int64_t count = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!ValuesEqual(list[i], *needle)) continue;
    if (name == "index") return Value::Int(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") return ev.Error(line, "value is not in list");
  return Value::Int(count);
}

}  // namespace

bool HasMethod(const Value& object, std::string_view name) {
  switch (object.kind()) {
    case ValueKind::kString:
      return Contains(kStringMethods, name);
    case ValueKind::kDict:
      return Contains(kDictMethods, name);
    case ValueKind::kList:
      return Contains(kListMethods, name);
    default:
      return false;
  }
}

Result<Value> CallMethod(Evaluator& ev, const Value& object, std::string_view name, CallArgs args, int line,
                         bool* found) {
  *found = HasMethod(object, name);
  if (!*found) return Value::Undefined();
  switch (object.kind()) {
    case ValueKind::kString:
      return CallStringMethod(ev, object.as_string(), name, args, line);
    case ValueKind::kDict:
      return CallDictMethod(ev, object.as_dict(), name, args, line);
    case ValueKind::kList:
      return CallListMethod(ev, object.as_list(), name, args, line);
    default:
      return Value::Undefined();
  }
}

// --- Globals ------------------------------------------------------------------------------------

namespace {

using GlobalFn = Result<Value> (*)(Evaluator& ev, CallArgs& args, int line);

class GlobalCallable : public Callable {
 public:
  explicit GlobalCallable(GlobalFn fn) : fn_(fn) {}
  Result<Value> Call(Evaluator& ev, CallArgs args, int line) const override { return fn_(ev, args, line); }

 private:
  GlobalFn fn_;
};

Result<Value> Range(Evaluator& ev, CallArgs& args, int line) {
  int64_t p[3] = {0, 0, 1};
  size_t n = args.positional.size();
  if (n == 0 || n > 3) return ev.Error(line, "range() takes 1 to 3 arguments");
  for (size_t i = 0; i < n; ++i) {
    const Value& v = args.positional[i];
    if (!v.is_int() && !v.is_bool()) return ev.Error(line, "range() arguments must be integers");
    p[n == 1 ? 1 : i] = v.is_int() ? v.as_int() : v.as_bool();
  }
  int64_t start = p[0], stop = p[1], step = p[2];
  if (step == 0) return ev.Error(line, "range() step must not be zero");
  // The length, computed in unsigned arithmetic so that no bound overflows.
  uint64_t length = 0;
  if (step > 0 && start < stop) {
    length = (static_cast<uint64_t>(stop) - static_cast<uint64_t>(start) - 1) / static_cast<uint64_t>(step) + 1;
  } else if (step < 0 && start > stop) {
    length = (static_cast<uint64_t>(start) - static_cast<uint64_t>(stop) - 1) / (0 - static_cast<uint64_t>(step)) + 1;
  }
  if (length > ev.limits().max_list_length) {
    return Status::ResourceExhausted("chat template line " + std::to_string(line) + ": range() of " +
                                     std::to_string(length) + " items is too long");
  }
  GYRE_RETURN_IF_ERROR(ev.Step(line, static_cast<int64_t>(length)));
  List items;
  items.reserve(length);
  for (uint64_t i = 0; i < length; ++i) items.push_back(Value::Int(start + static_cast<int64_t>(i) * step));
  return Value::MakeList(std::move(items));
}

Result<Dict> DictFromArgs(Evaluator& ev, const CallArgs& args, const char* fn, int line) {
  Dict dict;
  if (args.positional.size() > 1) return ev.Error(line, std::string(fn) + "() takes at most 1 positional argument");
  if (args.positional.size() == 1) {
    const Value& source = args.positional[0];
    if (source.is_dict()) {
      dict = source.as_dict();
    } else if (source.is_list()) {
      for (const Value& pair : source.as_list()) {
        if (!pair.is_list() || pair.as_list().size() != 2) {
          return ev.Error(line, std::string(fn) + "() expects a mapping or a list of (key, value) pairs");
        }
        dict.Set(pair.as_list()[0], pair.as_list()[1]);
      }
    } else {
      return ev.Error(line, std::string(fn) + "() expects a mapping or a list of (key, value) pairs");
    }
  }
  for (const auto& [key, value] : args.keyword) dict.Set(key, value);
  return dict;
}

Result<Value> NamespaceFn(Evaluator& ev, CallArgs& args, int line) {
  GYRE_ASSIGN_OR_RETURN(Dict attrs, DictFromArgs(ev, args, "namespace", line));
  Value ns = Value::MakeNamespace(std::move(attrs));
  ev.TrackNamespace(ns);
  return ns;
}

Result<Value> DictFn(Evaluator& ev, CallArgs& args, int line) {
  GYRE_ASSIGN_OR_RETURN(Dict dict, DictFromArgs(ev, args, "dict", line));
  return Value::MakeDict(std::move(dict));
}

Result<Value> RaiseException(Evaluator& ev, CallArgs& args, int line) {
  // The message is exactly the template's, with no position, like transformers' TemplateError.
  const Value* message = args.Get(0, "message");
  return Status::InvalidArgument(message != nullptr ? CoerceString(ev, *message) : std::string("raise_exception()"));
}

Result<Value> StrftimeNow(Evaluator& ev, CallArgs& args, int line) {
  const Value* format = args.Get(0, "format");
  if (format == nullptr || !format->is_string()) return ev.Error(line, "strftime_now() needs a format string");
  const std::string& fmt = format->as_string();
  if (fmt.empty()) return Value::String("");
  GYRE_RETURN_IF_ERROR(ev.CheckSize(fmt.size() * 32, line));
  std::string buf(fmt.size() * 32 + 64, '\0');
  size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &ev.now());
  buf.resize(n);
  return Value::String(std::move(buf));
}

}  // namespace

Value LookupGlobal(std::string_view name) {
  static const struct {
    std::string_view name;
    Value fn;
  } kGlobals[] = {
      {"range", Value::MakeCallable(std::make_shared<GlobalCallable>(Range))},
      {"namespace", Value::MakeCallable(std::make_shared<GlobalCallable>(NamespaceFn))},
      {"dict", Value::MakeCallable(std::make_shared<GlobalCallable>(DictFn))},
      {"raise_exception", Value::MakeCallable(std::make_shared<GlobalCallable>(RaiseException))},
      {"strftime_now", Value::MakeCallable(std::make_shared<GlobalCallable>(StrftimeNow))},
  };
  for (const auto& g : kGlobals) {
    if (g.name == name) return g.fn;
  }
  return Value::Undefined();
}

}  // namespace gyre::jinja
