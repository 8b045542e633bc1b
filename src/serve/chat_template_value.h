// Runtime values of the chat template engine (internal to src/serve/chat_template*).
//
// A Value is one of: undefined, none, bool, int, float, string, list, dict, namespace, callable,
// mirroring what a Jinja template sees in Python. Lists and dicts are immutable once built and
// shared by pointer, so copying a Value is cheap; a namespace is the one mutable, shared object
// (`{% set ns.attr = ... %}` is visible through every copy). Strings are UTF-8; operations that
// Python defines on code points (length, indexing, slicing) decode them (see Utf8Chars).
//
// Thread safety: a Value may be read from many threads; namespaces are only mutated by the render
// that created them.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.h"

namespace gyre::jinja {

class Value;
class Callable;
using List = std::vector<Value>;

class Dict;
struct Namespace;

enum class ValueKind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kDict,
  kNamespace,
  kCallable,
};

// How Stringify prints none, booleans and containers. @huggingface/jinja (the default, which the
// goldens are generated with) prints none as "", booleans as true/false and lists/dicts as JSON;
// Python jinja2 prints None, True/False and Python reprs.
enum class StringifyStyle { kHuggingFace, kPython };

class Value {
 public:
  Value() = default;  // undefined
  static Value Undefined(std::string name = {}) { return Value(UndefinedTag{std::move(name)}); }
  static Value None() { return Value(nullptr); }
  static Value Bool(bool b) { return Value(b); }
  static Value Int(int64_t i) { return Value(i); }
  static Value Float(double f) { return Value(f); }
  static Value String(std::string s) { return Value(std::move(s)); }
  static Value MakeList(List items);
  static Value MakeDict(Dict dict);
  static Value MakeNamespace(Dict attrs);
  static Value MakeCallable(std::shared_ptr<const Callable> fn) { return Value(std::move(fn), 1); }

  ValueKind kind() const { return static_cast<ValueKind>(v_.index()); }
  bool is_undefined() const { return kind() == ValueKind::kUndefined; }
  bool is_none() const { return kind() == ValueKind::kNone; }
  bool is_bool() const { return kind() == ValueKind::kBool; }
  bool is_int() const { return kind() == ValueKind::kInt; }
  bool is_float() const { return kind() == ValueKind::kFloat; }
  // int, float or bool (Python's bool is an int).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == ValueKind::kString; }
  bool is_list() const { return kind() == ValueKind::kList; }
  bool is_dict() const { return kind() == ValueKind::kDict; }
  bool is_namespace() const { return kind() == ValueKind::kNamespace; }
  bool is_callable() const { return kind() == ValueKind::kCallable; }

  // REQUIRES: the matching is_*() is true.
  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const List& as_list() const { return *std::get<std::shared_ptr<const List>>(v_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<const Dict>>(v_); }
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(v_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(v_); }
  // The variable name an undefined value came from ("" when unknown), for error messages.
  const std::string& undefined_name() const { return std::get<UndefinedTag>(v_).name; }

  // How deeply lists and dicts nest in this value: 0 for scalars, 1 + the deepest item for
  // containers (a namespace counts as 1: its contents may change).
  int depth() const { return depth_; }

  // REQUIRES: is_number(). The value as a double (bools are 0/1).
  double ToDouble() const;
  // Python truthiness: undefined, none, false, 0, 0.0, "" and empty containers are false.
  bool Truthy() const;

 private:
  struct UndefinedTag {
    std::string name;
  };
  using Rep =
      std::variant<UndefinedTag, std::nullptr_t, bool, int64_t, double, std::string, std::shared_ptr<const List>,
                   std::shared_ptr<const Dict>, std::shared_ptr<Namespace>, std::shared_ptr<const Callable>>;
  template <typename T>
  explicit Value(T v, int depth = 0) : v_(std::move(v)), depth_(depth) {}

  Rep v_;
  int depth_ = 0;
};

// An insertion-ordered map (Python dicts keep insertion order). Keys are strings except in dict
// literals such as `{1024: 256}`; keys that Python considers equal (1, 1.0, true) are one key.
class Dict {
 public:
  using Entry = std::pair<Value, Value>;  // key, value

  const Value* Find(std::string_view key) const;
  Value* Find(std::string_view key);
  const Value* Find(const Value& key) const;
  // Replaces the value of `key`, or appends it at the end.
  void Set(std::string_view key, Value value);
  void Set(Value key, Value value);
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  std::vector<Entry>::const_iterator begin() const { return entries_.begin(); }
  std::vector<Entry>::const_iterator end() const { return entries_.end(); }

 private:
  std::vector<Entry> entries_;
};

// The object `namespace(...)` returns: attributes that `{% set ns.x = ... %}` may change.
struct Namespace {
  Dict attrs;
};

// A short, user-facing name of a value's type ("string", "list", ...), for error messages.
const char* KindName(ValueKind kind);

// The text json.dumps writes for a dict key: a string as is, numbers printed, true/false/null.
std::string KeyString(const Value& key);

// Converts JSON data (a render context) to a Value, keeping object key order. Unsigned integers
// above INT64_MAX become floats. InvalidArgument if nesting is deeper than `max_depth`.
Result<Value> ValueFromJson(const nlohmann::ordered_json& json, int max_depth);

// Python's repr() of a float: shortest round-trip digits, "1.0" for integral values, exponent form
// below 1e-4 and from 1e16 ("1e-05", "1e+16"), and "inf"/"-inf"/"nan".
std::string FormatFloat(double f);

// The text `{{ value }}` prints (str() in Python, with the conventions of `style`).
std::string Stringify(const Value& value, StringifyStyle style);

struct JsonOptions {
  // Spaces per indent level (or the `indent_string`); no newlines when both are unset.
  int indent = -1;
  std::string indent_string;
  bool use_indent_string = false;
  bool ensure_ascii = false;
  bool sort_keys = false;
  // Python json.dumps separators; defaults are (", ", ": "), or (",", ": ") when indenting.
  std::string item_separator;
  std::string key_separator;
  bool custom_separators = false;
};

// json.dumps(value, ...) as transformers' tojson filter calls it. Undefined becomes null (as in
// @huggingface/jinja); callables are an InvalidArgument error.
Result<std::string> ToJson(const Value& value, const JsonOptions& options);

// Python equality (==): numbers compare by value (True == 1), containers element-wise, undefined
// equals only undefined, values of different types are unequal.
bool ValuesEqual(const Value& a, const Value& b);

// Python ordering (<) for sort/min/max/comparisons: numbers, strings (by code point) and lists
// (lexicographic). Returns -1/0/1; InvalidArgument for values Python cannot order.
Result<int> CompareValues(const Value& a, const Value& b);

// The characters of a UTF-8 string as byte ranges [offset, offset + length). Invalid bytes count as
// one character each, so that every byte survives slicing.
std::vector<std::pair<size_t, size_t>> Utf8Chars(std::string_view s);
// Decodes the code point of one character as returned by Utf8Chars (invalid bytes map to the byte).
uint32_t DecodeUtf8Char(std::string_view s, size_t offset, size_t length);
void AppendUtf8(uint32_t code_point, std::string* out);

}  // namespace gyre::jinja
