// Built-in filters and tests. Sections: helpers (iteration, attribute paths, sorting keys),
// filters (one function each, registered in kFilters), tests (kTests). To add a filter, write a
// `Result<Value> FilterX(Evaluator&, const Value&, CallArgs&, int line)` and add it to kFilters.
#include "serve/chat_template_builtins.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace gyre::jinja {
namespace {

using FilterFn = Result<Value> (*)(Evaluator& ev, const Value& v, CallArgs& args, int line);
using TestFn = Result<bool> (*)(Evaluator& ev, const Value& v, CallArgs& args, int line);

// --- Helpers ------------------------------------------------------------------------------------

// The items `for x in v` visits: list items, dict keys, string characters; undefined is empty.
// Counts a step per item, since the filters that call it do work per item.
Result<List> Iterate(Evaluator& ev, const Value& v, int line) {
  switch (v.kind()) {
    case ValueKind::kList:
      GYRE_RETURN_IF_ERROR(ev.Step(line, static_cast<int64_t>(v.as_list().size())));
      return v.as_list();
    case ValueKind::kDict: {
      GYRE_RETURN_IF_ERROR(ev.Step(line, static_cast<int64_t>(v.as_dict().size())));
      List keys;
      for (const auto& entry : v.as_dict()) keys.push_back(entry.first);
      return keys;
    }
    case ValueKind::kString: {
      GYRE_RETURN_IF_ERROR(ev.Step(line, static_cast<int64_t>(v.as_string().size())));
      List chars;
      for (auto [offset, len] : Utf8Chars(v.as_string()))
        chars.push_back(Value::String(v.as_string().substr(offset, len)));
      return chars;
    }
    case ValueKind::kUndefined:
      return List{};
    default:
      return ev.Error(line, std::string("'") + KindName(v.kind()) + "' object is not iterable");
  }
}

// Follows a dotted attribute path ("function.name", "items.0") the way jinja2's filters do.
Value GetAttributePath(const Value& item, std::string_view path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part(path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (v.is_dict()) {
      const Value* next = v.as_dict().Find(part);
      v = next ? *next : Value::Undefined(part);
    } else if (v.is_namespace()) {
      const Value* next = v.as_namespace().attrs.Find(part);
      v = next ? *next : Value::Undefined(part);
    } else if (v.is_list() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      size_t index = std::strtoul(part.c_str(), nullptr, 10);
      v = index < v.as_list().size() ? v.as_list()[index] : Value::Undefined(part);
    } else {
      return Value::Undefined(part);
    }
    if (dot == std::string_view::npos) return v;
    start = dot + 1;
  }
}

bool BoolArg(const CallArgs& args, size_t pos, std::string_view name, bool fallback) {
  const Value* v = args.Get(pos, name);
  return v != nullptr ? v->Truthy() : fallback;
}

// The key sort/min/max/unique compare: the attribute (if any), lower-cased unless case-sensitive.
Value SortKey(const Value& item, const Value* attribute, bool case_sensitive) {
  Value key = item;
  if (attribute != nullptr && attribute->is_string()) key = GetAttributePath(item, attribute->as_string());
  if (attribute != nullptr && attribute->is_int()) key = GetAttributePath(item, std::to_string(attribute->as_int()));
  if (!case_sensitive && key.is_string()) return Value::String(ToLower(key.as_string()));
  return key;
}

// Sorts `items` by `keys` (stable). Keys must all be numbers or all strings.
Status SortByKeys(Evaluator& ev, List* items, const List& keys, bool reverse, int line) {
  bool numbers = std::all_of(keys.begin(), keys.end(), [](const Value& k) { return k.is_number(); });
  bool strings = std::all_of(keys.begin(), keys.end(), [](const Value& k) { return k.is_string(); });
  if (!numbers && !strings) return ev.Error(line, "sort: values must be all numbers or all strings");
  GYRE_RETURN_IF_ERROR(ev.Step(line, static_cast<int64_t>(keys.size())));
  std::vector<size_t> order(items->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    Result<int> c = reverse ? CompareValues(keys[b], keys[a]) : CompareValues(keys[a], keys[b]);
    return c.ok() && *c < 0;
  });
  List sorted;
  for (size_t i : order) sorted.push_back((*items)[i]);
  *items = std::move(sorted);
  return Status::Ok();
}

// --- Filters ------------------------------------------------------------------------------------

Result<Value> FilterAbs(Evaluator& ev, const Value& v, CallArgs&, int line) {
  if (v.is_float()) return Value::Float(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    int64_t i = v.is_int() ? v.as_int() : v.as_bool();
    if (i == INT64_MIN) return ev.Error(line, "integer overflow");
    return Value::Int(i < 0 ? -i : i);
  }
  return ev.Error(line, std::string("bad operand type for abs(): '") + KindName(v.kind()) + "'");
}

Result<Value> FilterAttr(Evaluator& ev, const Value& v, CallArgs& args, int line) {
  const Value* name = args.Get(0, "name");
  if (name == nullptr || !name->is_string()) return ev.Error(line, "attr() needs an attribute name");
  return GetAttributePath(v, name->as_string());
}

Result<Value> FilterBatch(Evaluator& ev, const Value& v, CallArgs& args, int line) {
  const Value* size_arg = args.Get(0, "linecount");
  if (size_arg == nullptr || !size_arg->is_int() || size_arg->as_int() <= 0) {
    return ev.Error(line, "batch() needs a positive size");
  }
  if (static_cast<uint64_t>(size_arg->as_int()) > ev.limits().max_list_length) {
    return Status::ResourceExhausted("chat template line " + std::to_string(line) + ": batch() size is too large");
  }
  const auto size = static_cast<size_t>(size_arg->as_int());
  const Value* fill = args.Get(1, "fill_with");
  GYRE_ASSIGN_OR_RETURN(List items, Iterate(ev, v, line));
  List out, current;
  for (Value& item : items) {
    current.push_back(std::move(item));
    if (current.size() == size) {
      out.push_back(Value::MakeList(std::move(current)));
      current.clear();
    }
  }
  if (!current.empty()) {
    if (fill != nullptr && !fill->is_none()) current.resize(size, *fill);
    out.push_back(Value::MakeList(std::move(current)));
  }
  return Value::MakeList(std::move(out));
}

Result<Value> FilterCapitalize(Evaluator& ev, const Value& v, CallArgs&, int) {
  return Value::String(Capitalize(CoerceString(ev, v)));
}

Result<Value> FilterCenter(Evaluator& ev, const Value& v, CallArgs& args, int line) {
  std::string s = CoerceString(ev, v);
  const Value* width = args.Get(0, "width");
  int64_t w = width != nullptr && width->is_int() ? width->as_int() : 80;
  auto n = static_cast<int64_t>(Utf8Chars(s).size());
  if (w <= n) return Value::String(s);
  GYRE_RETURN_IF_ERROR(ev.CheckSize(static_cast<size_t>(w), line));
  int64_t pad = w - n;
  int64_t left = pad / 2 + (pad & w & 1);  // Python puts the odd space on the left when width is odd
  return Value::String(std::string(static_cast<size_t>(left), ' ') + s +
                       std::string(static_cast<size_t>(pad - left), ' '));
}

Result<Value> FilterDefault(Evaluator&, const Value& v, CallArgs& args, int) {
  const Value* fallback = args.Get(0, "default_value");
  bool boolean = BoolArg(args, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !v.Truthy())) return fallback != nullptr ? *fallback : Value::String("");
  return v;
}

Result<Value> FilterDictsort(Evaluator& ev, const Value& v, CallArgs& args, int line) {
  if (!v.is_dict()) return ev.Error(line, "dictsort() expects a mapping");
  bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
  const Value* by = args.Get(1, "by");
  bool by_value = by != nullptr && by->is_string() && by->as_string() == "value";
  if (by != nullptr && !(by->is_string() && (by->as_string() == "key" || by->as_string() == "value"))) {
    return ev.Error(line, "dictsort(): 'by' must be 'key' or 'value'");
  }
  bool reverse = BoolArg(args, 2, "reverse", false);
  List items, keys;
  for (const auto& [key, value] : v.as_dict()) {
    items.push_back(Value::MakeList({key, value}));
    keys.push_back(SortKey(by_value ? value : key, nullptr, case_sensitive));
  }
  GYRE_RETURN_IF_ERROR(SortByKeys(ev, &items, keys, reverse, line));
  return Value::MakeList(std::move(items));
}

Result<Value> FilterEscape(Evaluator& ev, const Value& v, CallArgs&, int line) {
  std::string s = CoerceString(ev, v), out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  GYRE_RETURN_IF_ERROR(ev.CheckSize(out.size(), line));
  return Value::String(std::move(out));
}

// jinja2's format filter: `fmt|format(*args)` or `fmt|format(**kwargs)` is `fmt % args`.
Result<Value> FilterFormat(Evaluator& ev, const Value& v, CallArgs& args, int line) {
  if (!args.positional.empty() && !args.keyword.empty())
    return ev.Error(line, "format(): use positional or keyword arguments, not both");
  if (!args.keyword.empty()) {
    Dict kwargs;
    for (auto& [key, value] : args.keyword) kwargs.Set(key, value);
    return PercentFormat(ev, CoerceString(ev, v), Value::MakeDict(std::move(kwargs)), line);
  }
  return PercentFormat(ev, CoerceString(ev, v), Value::MakeList(args.positional), line);
}

Result<Value> FilterFirst(Evaluator& ev, const Value& v, CallArgs&, int line) {
  GYRE_ASSIGN_OR_RETURN(List items, Iterate(ev, v, line));
  return items.empty() ? Value::Undefined() : items.front();
}

Result<Value> FilterLast(Evaluator& ev, const Value& v, CallArgs&, int line) {
  GYRE_ASSIGN_OR_RETURN(List items, Iterate(ev, v, line));
  return items.empty() ? Value::Undefined() : items.back();
}

// Python float(): surrounding whitespace allowed, the whole rest must be a number.
bool ParseFloat(const std::string& text, double* out) {
  std::string s = PyStrip(text, nullptr, true, true);
  if (s.empty() || s.find_first_of("xXpP") != std::string::npos) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

Result<Value> FilterFloat(Evaluator&, const Value& v, CallArgs& args, int) {
  const Value* fallback = args.Get(0, "default");
  Value def = fallback != nullptr ? *fallback : Value::Float(0.0);
  if (v.is_number()) return Value::Float(v.ToDouble());
  double d;
  if (v.is_string() && ParseFloat(v.as_string(), &d)) return Value::Float(d);
  return def;
}

Result<Value> FilterInt(Evaluator&, const Value& v, CallArgs& args, int) {
  const Value* fallback = args.Get(0, "default");
  Value def = fallback != nullptr ? *fallback : Value::Int(0);
  const Value* base_arg = args.Get(1, "base");
  int base = base_arg != nullptr && base_arg->is_int() ? static_cast<int>(base_arg->as_int()) : 10;
  if (v.is_int() || v.is_bool()) return Value::Int(v.is_int() ? v.as_int() : v.as_bool());
  if (v.is_float()) {
    double d = std::trunc(v.as_float());
    if (!(d >= -9.2e18 && d <= 9.2e18)) return def;
    return Value::Int(static_cast<int64_t>(d));
  }
  if (!v.is_string()) return def;
  std::string s = PyStrip(v.as_string(), nullptr, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (!s.empty() && base >= 2 && base <= 36) {
    errno = 0;
    char* end = nullptr;
    long long i = std::strtoll(s.c_str(), &end, base);
    if (errno == 0 && end == s.c_str() + s.size()) return Value::Int(i);
  }
  double d;  // jinja2 falls back to int(float(value))
  if (ParseFloat(v.as_string(), &d) && d >= -9.2e18 && d <= 9.2e18)
    return Value::Int(static_cast<int64_t>(std::trunc(d)));
  return def;
}

// jinja2 3.1 indent: lines after the first (and blank lines) are not indented unless asked.
Result<Value> FilterIndent(Evaluator& ev, const Value& v, CallArgs& args, int line) {
  std::string s = CoerceString(ev, v);
  const Value* width = args.Get(0, "width");
  std::string pad =
      width == nullptr ? "    "
      : width->is_string()
          ? width->as_string()
          : std::string(static_cast<size_t>(std::clamp<int64_t>(width->is_int() ? width->as_int() : 4, 0, 1 << 16)),
                        ' ');
  bool first = BoolArg(args, 1, "first", false);
  bool blank = BoolArg(args, 2, "blank", false);
  std::string out;
  size_t start = 0;
  bool is_first = true;
  while (true) {
    size_t nl = s.find('\n', start);
    std::string_view ln = std::string_view(s).substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    bool indent = is_first ? first : (blank || !ln.empty());
    if (indent) out += pad;
    out += ln;
    GYRE_RETURN_IF_ERROR(ev.CheckSize(out.size(), line));
    if (nl == std::string::npos) break;
    out.push_back('\n');
    start = nl + 1;
    is_first = false;
  }
  return Value::String(std::move(out));
}

Result<Value> FilterItems(Evaluator& ev, const Value& v, CallArgs&, int line) {
  if (v.is_undefined()) return Value::MakeList({});
  if (!v.is_dict()) return ev.Error(line, "items() expects a mapping");
  List items;
  for (const auto& [key, value] : v.as_dict()) items.push_back(Value::MakeList({key, value}));
  return Value::MakeList(std::move(items));
}

Result<Value> FilterJoin(Evaluator& ev, const Value& v, CallArgs& args, int line) {
  const Value* sep = args.Get(0, "d");
  const Value* attribute = args.Get(1, "attribute");
  GYRE_ASSIGN_OR_RETURN(List items, Iterate(ev, v, line));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0 && sep != nullptr) out += ev.Str(*sep);
    const Value item =
        attribute != nullptr && attribute->is_string() ? GetAttributePath(items[i], attribute->as_string()) : items[i];
    out += ev.Str(item);
    GYRE_RETURN_IF_ERROR(ev.CheckSize(out.size(), line));
  }
  return Value::String(std::move(out));
}

Result<Value> FilterLength(Evaluator& ev, const Value& v, CallArgs&, int line) {
  switch (v.kind()) {
    case ValueKind::kString:
      return Value::Int(static_cast<int64_t>(Utf8Chars(v.as_string()).size()));
    case ValueKind::kList:
      return Value::Int(static_cast<int64_t>(v.as_list().size()));
    case ValueKind::kDict:
      return Value::Int(static_cast<int64_t>(v.as_dict().size()));
    case ValueKind::kUndefined:
      return Value::Int(0);
    default:
      return ev.Error(line, std::string("object of type '") + KindName(v.kind()) + "' has no len()");
  }
}

Result<Value> FilterList(Evaluator& ev, const Value& v, CallArgs&, int line) {
  GYRE_ASSIGN_OR_RETURN(List items, Iterate(ev, v, line));
  return Value::MakeList(std::move(items));
}

Result<Value> FilterLower(Evaluator& ev, const Value& v, CallArgs&, int) {
  return Value::String(ToLower(CoerceString(ev, v)));
}
Result<Value> FilterUpper(Evaluator& ev, const Value& v, CallArgs&, int) {
  return Value::String(ToUpper(CoerceString(ev, v)));
}

Result<Value> FilterMap(Evaluator& ev, const Value& v, CallArgs& args, int line) {
  if (!v.Truthy()) return Value::MakeList({});  // like jinja2, mapping a false value (none too) gives nothing
  GYRE_ASSIGN_OR_RETURN(List items, Iterate(ev, v, line));
  const Value* attribute = args.Get(SIZE_MAX, "attribute");
  List out;
  if (attribute != nullptr) {
    const Value* fallback = args.Get(SIZE_MAX, "default");
    for (const Value& item : items) {
      Value mapped = GetAttributePath(item, attribute->is_string() ? attribute->as_string() : ev.Str(*attribute));
      out.push_back(mapped.is_undefined() && fallback != nullptr ? *fallback : mapped);
    }
    return Value::MakeList(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string())
    return ev.Error(line, "map() needs a filter name or attribute=");
  std::string name = args.positional[0].as_string();
  if (!IsKnownFilter(name)) return ev.Error(line, "map(): unknown filter '" + name + "'");
  for (const Value& item : items) {
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    GYRE_ASSIGN_OR_RETURN(Value mapped, ApplyFilter(ev, name, item, std::move(rest), line));
    out.push_back(std::move(mapped));
  }
  return Value::MakeList(std::move(out));
}

Result<Value> MinMax(Evaluator& ev, const Value& v, CallArgs& args, int line, bool want_max) {
  GYRE_ASSIGN_OR_RETURN(List items, Iterate(ev, v, line));
  if (items.empty()) return Value::Undefined();
  bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
  const Value* attribute = args.Get(1, "attribute");
  size_t best = 0;
  Value best_key = SortKey(items[0], attribute, case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = SortKey(items[i], attribute, case_sensitive);
    Result<int> c = CompareValues(key, best_key);
    if (!c.ok()) return ev.Error(line, c.error().message());
    if (want_max ? *c > 0 : *c < 0) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}
Result<Value> FilterMax(Evaluator& ev, const Value& v, CallArgs& args, int line) {
  return MinMax(ev, v, args, line, true);
}
Result<Value> FilterMin(Evaluator& ev, const Value& v, CallArgs& args, int line) {
  return MinMax(ev, v, args, line, false);
}

Result<Value> FilterReplace(Evaluator& ev, const Value& v, CallArgs& args, int line) {
  bool found = false;
  return CallMethod(ev, Value::String(CoerceString(ev, v)), "replace", std::move(args), line, &found);
}

Result<Value> FilterReverse(Evaluator& ev, const Value& v, CallArgs&, int line) {
  GYRE_ASSIGN_OR_RETURN(List items, Iterate(ev, v, line));
  std::reverse(items.begin(), items.end());
  if (!v.is_string()) return Value::MakeList(std::move(items));
  std::string out;
  for (const Value& c : items) out += c.as_string();
  return Value::String(std::move(out));
}

Result<Value> FilterRound(Evaluator& ev, const Value& v, CallArgs& args, int line) {
  if (!v.is_number()) return ev.Error(line, "round() expects a number");
  const Value* precision_arg = args.Get(0, "precision");
  int64_t precision =
      precision_arg != nullptr && precision_arg->is_int() ? std::clamp<int64_t>(precision_arg->as_int(), -300, 300) : 0;
  const Value* method = args.Get(1, "method");
  std::string how = method != nullptr && method->is_string() ? method->as_string() : "common";
  double x = v.ToDouble();
  if (how == "ceil" || how == "floor") {
    double scale = std::pow(10.0, static_cast<double>(precision));
    return Value::Float((how == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
  }
  if (how != "common") return ev.Error(line, "round(): method must be 'common', 'ceil' or 'floor'");
  if (precision < 0 || !std::isfinite(x)) {
    double scale = std::pow(10.0, static_cast<double>(-precision));
    return Value::Float(std::nearbyint(x / scale) * scale);
  }
  // printf rounds the exact binary value half-to-even, which is what Python's round() does.
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), x);
  return Value::Float(std::strtod(buf, nullptr));
}

Result<Value> SelectOrReject(Evaluator& ev, const Value& v, CallArgs& args, int line, bool select, bool by_attribute) {
  if (!v.Truthy()) return Value::MakeList({});  // jinja2 selects nothing from a false value (none too)
  GYRE_ASSIGN_OR_RETURN(List items, Iterate(ev, v, line));
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty() || !args.positional[0].is_string())
      return ev.Error(line, "selectattr() needs an attribute name");
    attribute = args.positional[next++].as_string();
  }
  std::string test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) return ev.Error(line, "select(): the test name must be a string");
    test = args.positional[next++].as_string();
    if (!IsKnownTest(test)) return ev.Error(line, "unknown test '" + test + "'");
  }
  List out;
  for (const Value& item : items) {
    Value subject = by_attribute ? GetAttributePath(item, attribute) : item;
    bool pass;
    if (test.empty()) {
      pass = subject.Truthy();
    } else {
      CallArgs rest;
      rest.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
      rest.keyword = args.keyword;
      GYRE_ASSIGN_OR_RETURN(pass, ApplyTest(ev, test, subject, std::move(rest), line));
    }
    if (pass == select) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}
Result<Value> FilterSelect(Evaluator& ev, const Value& v, CallArgs& a, int line) {
  return SelectOrReject(ev, v, a, line, true, false);
}
Result<Value> FilterReject(Evaluator& ev, const Value& v, CallArgs& a, int line) {
  return SelectOrReject(ev, v, a, line, false, false);
}
Result<Value> FilterSelectattr(Evaluator& ev, const Value& v, CallArgs& a, int line) {
  return SelectOrReject(ev, v, a, line, true, true);
}
Result<Value> FilterRejectattr(Evaluator& ev, const Value& v, CallArgs& a, int line) {
  return SelectOrReject(ev, v, a, line, false, true);
}

Result<Value> FilterSafe(Evaluator&, const Value& v, CallArgs&, int) { return v; }

Result<Value> FilterSort(Evaluator& ev, const Value& v, CallArgs& args, int line) {
  GYRE_ASSIGN_OR_RETURN(List items, Iterate(ev, v, line));
  bool reverse = BoolArg(args, 0, "reverse", false);
  bool case_sensitive = BoolArg(args, 1, "case_sensitive", false);
  const Value* attribute = args.Get(2, "attribute");
  List keys;
  for (const Value& item : items) keys.push_back(SortKey(item, attribute, case_sensitive));
  GYRE_RETURN_IF_ERROR(SortByKeys(ev, &items, keys, reverse, line));
  return Value::MakeList(std::move(items));
}

Result<Value> FilterString(Evaluator& ev, const Value& v, CallArgs&, int) { return Value::String(CoerceString(ev, v)); }

Result<Value> FilterSum(Evaluator& ev, const Value& v, CallArgs& args, int line) {
  GYRE_ASSIGN_OR_RETURN(List items, Iterate(ev, v, line));
  const Value* attribute = args.Get(0, "attribute");
  const Value* start = args.Get(1, "start");
  Value total = start != nullptr ? *start : Value::Int(0);
  for (const Value& item : items) {
    Value x = attribute != nullptr && attribute->is_string() ? GetAttributePath(item, attribute->as_string()) : item;
    if (!total.is_number() || !x.is_number()) return ev.Error(line, "sum() expects numbers");
    if (total.is_float() || x.is_float()) {
      total = Value::Float(total.ToDouble() + x.ToDouble());
    } else {
      int64_t r;
      if (__builtin_add_overflow(static_cast<int64_t>(total.ToDouble()), static_cast<int64_t>(x.ToDouble()), &r)) {
        return ev.Error(line, "integer overflow");
      }
      total = Value::Int(r);
    }
  }
  return total;
}

// jinja2's title filter: the first letter of every word (after whitespace, -, (, {, [, <) upper
// case, the rest lower case.
Result<Value> FilterTitle(Evaluator& ev, const Value& v, CallArgs&, int) {
  std::string s = CoerceString(ev, v), out;
  bool word_start = true;
  for (auto [offset, len] : Utf8Chars(s)) {
    uint32_t cp = DecodeUtf8Char(s, offset, len);
    bool sep = IsPySpace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    std::string ch = s.substr(offset, len);
    out += sep ? ch : word_start ? ToUpper(ch) : ToLower(ch);
    word_start = sep;
  }
  return Value::String(std::move(out));
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False), with the same positional order.
Result<Value> FilterTojson(Evaluator& ev, const Value& v, CallArgs& args, int line) {
  JsonOptions options;
  options.ensure_ascii = BoolArg(args, 0, "ensure_ascii", false);
  if (const Value* indent = args.Get(1, "indent"); indent != nullptr && !indent->is_none()) {
    if (indent->is_string()) {
      options.use_indent_string = true;
      options.indent_string = indent->as_string();
    } else if (indent->is_int()) {
      options.indent = static_cast<int>(std::clamp<int64_t>(indent->as_int(), 0, 1024));
    } else {
      return ev.Error(line, "tojson(): indent must be an integer or a string");
    }
  }
  if (const Value* seps = args.Get(2, "separators"); seps != nullptr && !seps->is_none()) {
    if (!seps->is_list() || seps->as_list().size() != 2 || !seps->as_list()[0].is_string() ||
        !seps->as_list()[1].is_string()) {
      return ev.Error(line, "tojson(): separators must be a pair of strings");
    }
    options.custom_separators = true;
    options.item_separator = seps->as_list()[0].as_string();
    options.key_separator = seps->as_list()[1].as_string();
  }
  options.sort_keys = BoolArg(args, 3, "sort_keys", false);
  Result<std::string> json = ToJson(v, options);
  if (!json.ok()) return ev.Error(line, json.error().message());
  GYRE_RETURN_IF_ERROR(ev.CheckSize(json->size(), line));
  return Value::String(std::move(json).value());
}

Result<Value> FilterTrim(Evaluator& ev, const Value& v, CallArgs& args, int) {
  const Value* chars = args.Get(0, "chars");
  const std::string* set = chars != nullptr && chars->is_string() ? &chars->as_string() : nullptr;
  return Value::String(PyStrip(CoerceString(ev, v), set, true, true));
}

Result<Value> FilterUnique(Evaluator& ev, const Value& v, CallArgs& args, int line) {
  GYRE_ASSIGN_OR_RETURN(List items, Iterate(ev, v, line));
  bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
  const Value* attribute = args.Get(1, "attribute");
  List out, seen;
  for (const Value& item : items) {
    Value key = SortKey(item, attribute, case_sensitive);
    GYRE_RETURN_IF_ERROR(ev.Step(line, static_cast<int64_t>(seen.size())));
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return ValuesEqual(s, key); })) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

Result<Value> FilterWordcount(Evaluator& ev, const Value& v, CallArgs&, int) {
  std::string s = CoerceString(ev, v);
  int64_t words = 0;
  bool in_word = false;
  for (auto [offset, len] : Utf8Chars(s)) {
    uint32_t cp = DecodeUtf8Char(s, offset, len);
    auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    bool word_char = cp == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_NO);
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::Int(words);
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", FilterAbs},
    {"attr", FilterAttr},
    {"batch", FilterBatch},
    {"capitalize", FilterCapitalize},
    {"center", FilterCenter},
    {"count", FilterLength},
    {"d", FilterDefault},
    {"default", FilterDefault},
    {"dictsort", FilterDictsort},
    {"e", FilterEscape},
    {"escape", FilterEscape},
    {"first", FilterFirst},
    {"float", FilterFloat},
    {"forceescape", FilterEscape},
    {"format", FilterFormat},
    {"indent", FilterIndent},
    {"int", FilterInt},
    {"items", FilterItems},
    {"join", FilterJoin},
    {"last", FilterLast},
    {"length", FilterLength},
    {"list", FilterList},
    {"lower", FilterLower},
    {"map", FilterMap},
    {"max", FilterMax},
    {"min", FilterMin},
    {"reject", FilterReject},
    {"rejectattr", FilterRejectattr},
    {"replace", FilterReplace},
    {"reverse", FilterReverse},
    {"round", FilterRound},
    {"safe", FilterSafe},
    {"select", FilterSelect},
    {"selectattr", FilterSelectattr},
    {"sort", FilterSort},
    {"strip", FilterTrim},  // not a jinja2 filter; accepted as an alias of trim
    {"string", FilterString},
    {"sum", FilterSum},
    {"title", FilterTitle},
    {"tojson", FilterTojson},
    {"trim", FilterTrim},
    {"unique", FilterUnique},
    {"upper", FilterUpper},
    {"wordcount", FilterWordcount},
};

const FilterEntry* FindFilter(std::string_view name) {
  for (const FilterEntry& f : kFilters) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// --- Tests --------------------------------------------------------------------------------------

Result<Value> TestArg(Evaluator& ev, const CallArgs& args, std::string_view test, int line) {
  const Value* arg = args.Get(0, "other");
  if (arg == nullptr) arg = args.Get(0, "num");
  if (arg == nullptr) arg = args.Get(0, "value");
  if (arg == nullptr) return ev.Error(line, "test '" + std::string(test) + "' needs an argument");
  return *arg;
}

Result<bool> Ordered(Evaluator& ev, const Value& v, CallArgs& args, int line, std::string_view test) {
  GYRE_ASSIGN_OR_RETURN(Value other, TestArg(ev, args, test, line));
  Result<int> c = CompareValues(v, other);
  if (!c.ok()) return ev.Error(line, c.error().message());
  if (test == "lt" || test == "<" || test == "lessthan") return *c < 0;
  if (test == "le" || test == "<=") return *c <= 0;
  if (test == "gt" || test == ">" || test == "greaterthan") return *c > 0;
  return *c >= 0;
}

Result<bool> ApplyTestImpl(Evaluator& ev, std::string_view name, const Value& v, CallArgs& args, int line) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  // jinja2's Undefined is an empty iterable and sequence.
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return false;
  if (name == "lower") return v.is_string() && ToLower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && ToUpper(v.as_string()) == v.as_string();
  if (name == "odd" || name == "even") {
    if (!v.is_int() && !v.is_bool()) return ev.Error(line, "test '" + std::string(name) + "' needs an integer");
    int64_t i = v.is_int() ? v.as_int() : v.as_bool();
    return (i % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    GYRE_ASSIGN_OR_RETURN(Value n, TestArg(ev, args, name, line));
    if (!(v.is_int() || v.is_bool()) || !(n.is_int() || n.is_bool()))
      return ev.Error(line, "divisibleby needs integers");
    int64_t d = n.is_int() ? n.as_int() : n.as_bool();
    if (d == 0) return ev.Error(line, "divisibleby(0)");
    if (d == -1) return true;
    return (v.is_int() ? v.as_int() : v.as_bool()) % d == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==" || name == "ne" || name == "!=") {
    GYRE_ASSIGN_OR_RETURN(Value other, TestArg(ev, args, name, line));
    return ValuesEqual(v, other) == (name != "ne" && name != "!=");
  }
  if (name == "sameas") {
    GYRE_ASSIGN_OR_RETURN(Value other, TestArg(ev, args, name, line));
    if (v.kind() != other.kind()) return false;
    if (v.is_list()) return &v.as_list() == &other.as_list();
    if (v.is_dict()) return &v.as_dict() == &other.as_dict();
    return ValuesEqual(v, other);
  }
  if (name == "in") {
    GYRE_ASSIGN_OR_RETURN(Value seq, TestArg(ev, args, name, line));
    if (seq.is_string()) return v.is_string() && seq.as_string().find(v.as_string()) != std::string::npos;
    if (seq.is_dict()) return seq.as_dict().Find(v) != nullptr;
    if (seq.is_list()) {
      return std::any_of(seq.as_list().begin(), seq.as_list().end(), [&](const Value& x) { return ValuesEqual(v, x); });
    }
    return false;
  }
  if (name == "filter" || name == "test") {
    return v.is_string() && (name == "filter" ? IsKnownFilter(v.as_string()) : IsKnownTest(v.as_string()));
  }
  return Ordered(ev, v, args, line, name);
}

constexpr std::string_view kTests[] = {
    "defined", "undefined", "none",    "boolean",     "false",       "true",     "integer", "float",
    "number",  "string",    "mapping", "iterable",    "sequence",    "callable", "escaped", "lower",
    "upper",   "odd",       "even",    "divisibleby", "eq",          "equalto",  "==",      "ne",
    "!=",      "sameas",    "in",      "filter",      "test",        "lt",       "<",       "lessthan",
    "le",      "<=",        "gt",      ">",           "greaterthan", "ge",       ">="};

}  // namespace

bool IsKnownFilter(std::string_view name) { return FindFilter(name) != nullptr; }

bool IsKnownTest(std::string_view name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

Result<Value> ApplyFilter(Evaluator& ev, std::string_view name, const Value& operand, CallArgs args, int line) {
  const FilterEntry* f = FindFilter(name);
  if (f == nullptr) return ev.Error(line, "unknown filter '" + std::string(name) + "'");
  return f->fn(ev, operand, args, line);
}

Result<bool> ApplyTest(Evaluator& ev, std::string_view name, const Value& operand, CallArgs args, int line) {
  if (!IsKnownTest(name)) return ev.Error(line, "unknown test '" + std::string(name) + "'");
  return ApplyTestImpl(ev, name, operand, args, line);
}

}  // namespace gyre::jinja
