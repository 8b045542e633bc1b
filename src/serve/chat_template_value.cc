// Values of the chat template engine: conversion from JSON, printing, tojson, equality, ordering.
#include "serve/chat_template_value.h"

#include "tokenizer/unicode.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace gyre::jinja {
namespace {

// Containers nest at most this deep when printed or serialized; a namespace can contain itself.
constexpr int kMaxPrintDepth = 256;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Dict, Value basics

const Value* Dict::Find(std::string_view key) const {
  for (const Entry& e : entries_) {
    if (e.first.is_string() && e.first.as_string() == key) return &e.second;
  }
  return nullptr;
}

Value* Dict::Find(std::string_view key) {
  for (Entry& e : entries_) {
    if (e.first.is_string() && e.first.as_string() == key) return &e.second;
  }
  return nullptr;
}

const Value* Dict::Find(const Value& key) const {
  if (key.is_string()) return Find(std::string_view(key.as_string()));
  for (const Entry& e : entries_) {
    if (ValuesEqual(e.first, key)) return &e.second;
  }
  return nullptr;
}

void Dict::Set(std::string_view key, Value value) {
  if (Value* existing = Find(key)) {
    *existing = std::move(value);
    return;
  }
  entries_.emplace_back(Value::String(std::string(key)), std::move(value));
}

void Dict::Set(Value key, Value value) {
  if (key.is_string()) return Set(std::string_view(key.as_string()), std::move(value));
  for (Entry& e : entries_) {
    if (ValuesEqual(e.first, key)) {
      e.second = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

std::string KeyString(const Value& key) {
  switch (key.kind()) {
    case ValueKind::kString:
      return key.as_string();
    case ValueKind::kNone:
      return "null";
    case ValueKind::kBool:
      return key.as_bool() ? "true" : "false";
    case ValueKind::kInt:
      return std::to_string(key.as_int());
    case ValueKind::kFloat:
      return FormatFloat(key.as_float());
    default:
      return Stringify(key, StringifyStyle::kHuggingFace);
  }
}

Value Value::MakeList(List items) {
  int depth = 0;
  for (const Value& v : items) depth = std::max(depth, v.depth());
  return Value(std::make_shared<const List>(std::move(items)), depth + 1);
}

Value Value::MakeDict(Dict dict) {
  int depth = 0;
  for (const auto& [key, v] : dict) depth = std::max({depth, key.depth(), v.depth()});
  return Value(std::make_shared<const Dict>(std::move(dict)), depth + 1);
}

Value Value::MakeNamespace(Dict attrs) {
  auto ns = std::make_shared<Namespace>();
  ns->attrs = std::move(attrs);
  return Value(std::move(ns), 1);
}

double Value::ToDouble() const {
  if (is_float()) return as_float();
  if (is_int()) return static_cast<double>(as_int());
  return as_bool() ? 1.0 : 0.0;
}

bool Value::Truthy() const {
  switch (kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return false;
    case ValueKind::kBool:
      return as_bool();
    case ValueKind::kInt:
      return as_int() != 0;
    case ValueKind::kFloat:
      return as_float() != 0.0;
    case ValueKind::kString:
      return !as_string().empty();
    case ValueKind::kList:
      return !as_list().empty();
    case ValueKind::kDict:
      return !as_dict().empty();
    case ValueKind::kNamespace:
    case ValueKind::kCallable:
      return true;
  }
  return false;
}

const char* KindName(ValueKind kind) {
  switch (kind) {
    case ValueKind::kUndefined:
      return "undefined";
    case ValueKind::kNone:
      return "none";
    case ValueKind::kBool:
      return "bool";
    case ValueKind::kInt:
      return "int";
    case ValueKind::kFloat:
      return "float";
    case ValueKind::kString:
      return "string";
    case ValueKind::kList:
      return "list";
    case ValueKind::kDict:
      return "dict";
    case ValueKind::kNamespace:
      return "namespace";
    case ValueKind::kCallable:
      return "callable";
  }
  return "?";
}

Result<Value> ValueFromJson(const nlohmann::ordered_json& json, int max_depth) {
  using Type = nlohmann::ordered_json::value_t;
  if (max_depth < 0) return Status::InvalidArgument("chat template context is nested too deeply");
  switch (json.type()) {
    case Type::null:
    case Type::discarded:
      return Value::None();
    case Type::boolean:
      return Value::Bool(json.get<bool>());
    case Type::number_integer:
      return Value::Int(json.get<int64_t>());
    case Type::number_unsigned: {
      uint64_t u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value::Float(static_cast<double>(u));
      }
      return Value::Int(static_cast<int64_t>(u));
    }
    case Type::number_float:
      return Value::Float(json.get<double>());
    case Type::string:
      return Value::String(json.get_ref<const std::string&>());
    case Type::binary:
      return Status::InvalidArgument("chat template context holds binary data");
    case Type::array: {
      List items;
      items.reserve(json.size());
      for (const auto& item : json) {
        GYRE_ASSIGN_OR_RETURN(Value v, ValueFromJson(item, max_depth - 1));
        items.push_back(std::move(v));
      }
      return Value::MakeList(std::move(items));
    }
    case Type::object: {
      Dict dict;
      for (const auto& [key, item] : json.items()) {
        GYRE_ASSIGN_OR_RETURN(Value v, ValueFromJson(item, max_depth - 1));
        dict.Set(key, std::move(v));
      }
      return Value::MakeDict(std::move(dict));
    }
  }
  return Value::None();
}

// ---------------------------------------------------------------------------------------------
// UTF-8

std::vector<std::pair<size_t, size_t>> Utf8Chars(std::string_view s) {
  std::vector<std::pair<size_t, size_t>> chars;
  chars.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len != 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (!ok) len = 1;
    chars.emplace_back(i, len);
    i += len;
  }
  return chars;
}

uint32_t DecodeUtf8Char(std::string_view s, size_t offset, size_t length) {
  auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[offset + k])); };
  switch (length) {
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    case 4:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    default:
      return b(0);
  }
}

void AppendUtf8(uint32_t cp, std::string* out) { tok::AppendUtf8(static_cast<char32_t>(cp), out); }

// ---------------------------------------------------------------------------------------------
// Printing

std::string FormatFloat(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  std::string out = std::signbit(f) ? "-" : "";
  f = std::fabs(f);
  if (f == 0.0) return out + "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "d.ddde+XX" with the shortest round-trip digits
  size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, 1) + (e_pos > 2 ? sci.substr(2, e_pos - 2) : "");
  int exponent = std::atoi(sci.c_str() + e_pos + 1);
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp_buf;
  }
  if (exponent < 0) {
    return out + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  }
  size_t int_len = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_len) {
    return out + digits + std::string(int_len - digits.size(), '0') + ".0";
  }
  return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

namespace {

void AppendJsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  static const char kHex[] = "0123456789abcdef";
  auto append_u = [&](uint32_t unit) {
    out->append("\\u");
    for (int shift = 12; shift >= 0; shift -= 4) out->push_back(kHex[(unit >> shift) & 0xF]);
  };
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          out->append("\\\"");
          break;
        case '\\':
          out->append("\\\\");
          break;
        case '\n':
          out->append("\\n");
          break;
        case '\r':
          out->append("\\r");
          break;
        case '\t':
          out->append("\\t");
          break;
        case '\b':
          out->append("\\b");
          break;
        case '\f':
          out->append("\\f");
          break;
        default:
          if (c < 0x20) {
            append_u(c);
          } else {
            out->push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    // A multi-byte character: copied as is unless ensure_ascii.
    size_t len = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    if (i + len > s.size()) len = 1;
    if (!ensure_ascii) {
      out->append(s.substr(i, len));
    } else {
      uint32_t cp = DecodeUtf8Char(s, i, len);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        append_u(0xD800 + (cp >> 10));
        append_u(0xDC00 + (cp & 0x3FF));
      } else {
        append_u(cp);
      }
    }
    i += len;
  }
  out->push_back('"');
}

// The shared serializer behind ToJson and the @huggingface/jinja container printing.
struct JsonWriter {
  const JsonOptions& options;
  const char* undefined_text;  // "null" for tojson, "undefined" when printing containers
  std::string item_sep;
  std::string key_sep;
  std::string indent_unit;
  bool indenting = false;

  Status Write(const Value& v, int depth, std::string* out) const {
    if (depth > kMaxPrintDepth) return Status::InvalidArgument("tojson: value is nested too deeply");
    switch (v.kind()) {
      case ValueKind::kUndefined:
        out->append(undefined_text);
        return Status::Ok();
      case ValueKind::kNone:
        out->append("null");
        return Status::Ok();
      case ValueKind::kBool:
        out->append(v.as_bool() ? "true" : "false");
        return Status::Ok();
      case ValueKind::kInt:
        out->append(std::to_string(v.as_int()));
        return Status::Ok();
      case ValueKind::kFloat: {
        double f = v.as_float();
        out->append(std::isnan(f) ? "NaN" : std::isinf(f) ? (f < 0 ? "-Infinity" : "Infinity") : FormatFloat(f));
        return Status::Ok();
      }
      case ValueKind::kString:
        AppendJsonString(v.as_string(), options.ensure_ascii, out);
        return Status::Ok();
      case ValueKind::kList: {
        const List& items = v.as_list();
        if (items.empty()) {
          out->append("[]");
          return Status::Ok();
        }
        out->push_back('[');
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out->append(item_sep);
          NewLine(depth + 1, out);
          GYRE_RETURN_IF_ERROR(Write(items[i], depth + 1, out));
        }
        NewLine(depth, out);
        out->push_back(']');
        return Status::Ok();
      }
      case ValueKind::kDict:
        return WriteDict(v.as_dict(), depth, out);
      case ValueKind::kNamespace:
        return WriteDict(v.as_namespace().attrs, depth, out);
      case ValueKind::kCallable:
        return Status::InvalidArgument("tojson: a callable is not JSON serializable");
    }
    return Status::Ok();
  }

  Status WriteDict(const Dict& dict, int depth, std::string* out) const {
    if (dict.empty()) {
      out->append("{}");
      return Status::Ok();
    }
    std::vector<std::pair<std::string, const Value*>> entries;
    for (const Dict::Entry& e : dict) entries.emplace_back(KeyString(e.first), &e.second);
    if (options.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    out->push_back('{');
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out->append(item_sep);
      NewLine(depth + 1, out);
      AppendJsonString(entries[i].first, options.ensure_ascii, out);
      out->append(key_sep);
      GYRE_RETURN_IF_ERROR(Write(*entries[i].second, depth + 1, out));
    }
    NewLine(depth, out);
    out->push_back('}');
    return Status::Ok();
  }

  void NewLine(int depth, std::string* out) const {
    if (!indenting) return;
    out->push_back('\n');
    for (int i = 0; i < depth; ++i) out->append(indent_unit);
  }
};

JsonWriter MakeWriter(const JsonOptions& options, const char* undefined_text) {
  JsonWriter w{options, undefined_text, ", ", ": ", "", false};
  if (options.use_indent_string) {
    w.indenting = true;
    w.indent_unit = options.indent_string;
  } else if (options.indent >= 0) {
    w.indenting = true;
    w.indent_unit = std::string(static_cast<size_t>(options.indent), ' ');
  }
  if (w.indenting) w.item_sep = ",";
  if (options.custom_separators) {
    w.item_sep = options.item_separator;
    w.key_sep = options.key_separator;
  }
  return w;
}

std::string PythonStringRepr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (auto [offset, len] : Utf8Chars(s)) {
    uint32_t cp = DecodeUtf8Char(s, offset, len);
    char buf[16];
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out.append("\\n");
    } else if (cp == '\r') {
      out.append("\\r");
    } else if (cp == '\t') {
      out.append("\\t");
    } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
      out.append(buf);
    } else if (cp == 0x2028 || cp == 0x2029) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      out.append(buf);
    } else {
      out.append(s.substr(offset, len));
    }
  }
  out.push_back(quote);
  return out;
}

void AppendPythonRepr(const Value& v, int depth, std::string* out) {
  if (depth > kMaxPrintDepth) {
    out->append("...");
    return;
  }
  switch (v.kind()) {
    case ValueKind::kString:
      out->append(PythonStringRepr(v.as_string()));
      return;
    case ValueKind::kList: {
      out->push_back('[');
      bool first = true;
      for (const Value& item : v.as_list()) {
        if (!first) out->append(", ");
        first = false;
        AppendPythonRepr(item, depth + 1, out);
      }
      out->push_back(']');
      return;
    }
    case ValueKind::kDict: {
      out->push_back('{');
      bool first = true;
      for (const auto& [key, item] : v.as_dict()) {
        if (!first) out->append(", ");
        first = false;
        AppendPythonRepr(key, depth + 1, out);
        out->append(": ");
        AppendPythonRepr(item, depth + 1, out);
      }
      out->push_back('}');
      return;
    }
    case ValueKind::kNamespace: {
      out->append("<Namespace {");
      bool first = true;
      for (const auto& [key, item] : v.as_namespace().attrs) {
        if (!first) out->append(", ");
        first = false;
        AppendPythonRepr(key, depth + 1, out);
        out->append(": ");
        AppendPythonRepr(item, depth + 1, out);
      }
      out->append("}>");
      return;
    }
    default:
      out->append(Stringify(v, StringifyStyle::kPython));
      return;
  }
}

}  // namespace

Result<std::string> ToJson(const Value& value, const JsonOptions& options) {
  std::string out;
  GYRE_RETURN_IF_ERROR(MakeWriter(options, "null").Write(value, 0, &out));
  return out;
}

std::string Stringify(const Value& value, StringifyStyle style) {
  const bool py = style == StringifyStyle::kPython;
  switch (value.kind()) {
    case ValueKind::kUndefined:
      return "";
    case ValueKind::kNone:
      return py ? "None" : "";
    case ValueKind::kBool:
      return value.as_bool() ? (py ? "True" : "true") : (py ? "False" : "false");
    case ValueKind::kInt:
      return std::to_string(value.as_int());
    case ValueKind::kFloat:
      return FormatFloat(value.as_float());
    case ValueKind::kString:
      return value.as_string();
    case ValueKind::kList:
    case ValueKind::kDict:
    case ValueKind::kNamespace: {
      std::string out;
      if (py) {
        AppendPythonRepr(value, 0, &out);
        return out;
      }
      JsonOptions options;
      Status s = MakeWriter(options, "undefined").Write(value, 0, &out);
      return s.ok() ? out : "...";
    }
    case ValueKind::kCallable:
      return "<function>";
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Equality and ordering

bool ValuesEqual(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.ToDouble() == b.ToDouble();
    auto as_i = [](const Value& v) { return v.is_int() ? v.as_int() : (v.as_bool() ? 1 : 0); };
    return as_i(a) == as_i(b);
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return true;
    case ValueKind::kString:
      return a.as_string() == b.as_string();
    case ValueKind::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (&x == &y) return true;
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!ValuesEqual(x[i], y[i])) return false;
      }
      return true;
    }
    case ValueKind::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (&x == &y) return true;
      if (x.size() != y.size()) return false;
      for (const auto& [key, item] : x) {
        const Value* other = y.Find(key);
        if (other == nullptr || !ValuesEqual(item, *other)) return false;
      }
      return true;
    }
    case ValueKind::kNamespace:
      return &a.as_namespace() == &b.as_namespace();
    case ValueKind::kCallable:
      return &a.as_callable() == &b.as_callable();
    default:
      return false;
  }
}

Result<int> CompareValues(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    double x = a.ToDouble(), y = b.ToDouble();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());  // byte order is code point order in UTF-8
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      GYRE_ASSIGN_OR_RETURN(int c, CompareValues(x[i], y[i]));
      if (c != 0) return c;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return Status::InvalidArgument(std::string("cannot compare ") + KindName(a.kind()) + " with " + KindName(b.kind()));
}

}  // namespace gyre::jinja
