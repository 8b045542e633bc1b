#include "structured/json_schema.h"

#include <set>

#include "structured/regex.h"

namespace gyre::structured {

namespace {

using Json = nlohmann::json;

constexpr int kMaxSchemaDepth = 64;

const char* kWs = "( )?";  // after ':' and ','
const char* kStringChar = R"(([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}))";
const char* kInteger = "(-?(0|[1-9][0-9]{0,17}))";
const char* kNumber = R"((-?(0|[1-9][0-9]{0,17})(\.[0-9]{1,16})?([eE][-+]?[0-9]{1,2})?))";

std::string StringRegex(int64_t min_len, int64_t max_len) {
  std::string o = "\"";
  o += kStringChar;
  if (min_len == 0 && max_len < 0) {
    o += "*";
  } else {
    o += "{" + std::to_string(min_len) + "," + (max_len < 0 ? "" : std::to_string(max_len)) + "}";
  }
  return o + "\"";
}

std::string FreeValue(int depth) {
  std::string scalar = StringRegex(0, -1) + "|" + kNumber + "|true|false|null";
  if (depth <= 0) return "(" + scalar + ")";
  const std::string v = FreeValue(depth - 1);
  const std::string member = StringRegex(0, -1) + ":" + kWs + v;
  const std::string obj = "\\{(" + member + "(," + kWs + member + ")*)?\\}";
  const std::string arr = "\\[(" + v + "(," + kWs + v + ")*)?\\]";
  return "(" + scalar + "|" + obj + "|" + arr + ")";
}

std::string FreeObject(int depth) {
  const std::string v = FreeValue(depth - 1);
  const std::string member = StringRegex(0, -1) + ":" + kWs + v;
  return "(\\{(" + member + "(," + kWs + member + ")*)?\\})";
}

Status Bad(const std::string& path, const std::string& what) {
  return Status::InvalidArgument("json schema" + (path.empty() ? std::string() : " at " + path) + ": " + what);
}

Result<int64_t> Count(const Json& s, const char* key, const std::string& path, int64_t dflt) {
  if (!s.contains(key)) return dflt;
  const Json& v = s.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1000)
    return Bad(path, std::string(key) + " must be an integer in [0, 1000]");
  return v.get<int64_t>();
}

class Converter {
 public:
  Result<std::string> Value(const Json& s, const std::string& path, int depth) {
    if (depth > kMaxSchemaDepth) return Bad(path, "nested deeper than " + std::to_string(kMaxSchemaDepth));
    if (s.is_boolean()) {
      if (!s.get<bool>()) return Bad(path, "the schema false matches nothing");
      return FreeValue(kFreeJsonDepth);
    }
    if (!s.is_object()) return Bad(path, "a schema must be an object or a boolean");
    static const std::set<std::string> kKnown = {
        "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
        "minLength", "maxLength", "enum", "const", "anyOf", "title", "description", "$schema", "$id",
        "default", "examples", "$comment", "strict"};
    for (const auto& [k, v] : s.items())
      if (!kKnown.count(k)) return Bad(path, "the keyword '" + k + "' is not supported");
    if (s.contains("const")) return Literal(s.at("const"));
    if (s.contains("enum")) {
      const Json& e = s.at("enum");
      if (!e.is_array() || e.empty()) return Bad(path, "enum must be a non-empty array");
      std::string o = "(";
      for (size_t i = 0; i < e.size(); ++i) o += (i ? "|" : "") + Literal(e[i]);
      return o + ")";
    }
    if (s.contains("anyOf")) {
      const Json& a = s.at("anyOf");
      if (!a.is_array() || a.empty()) return Bad(path, "anyOf must be a non-empty array");
      if (s.contains("type")) return Bad(path, "anyOf together with type is not supported");
      std::string o = "(";
      for (size_t i = 0; i < a.size(); ++i) {
        GYRE_ASSIGN_OR_RETURN(std::string r, Value(a[i], path + "/anyOf/" + std::to_string(i), depth + 1));
        o += (i ? "|" : "") + r;
      }
      return o + ")";
    }
    if (!s.contains("type")) {
      for (const char* k : {"properties", "items", "minLength", "maxLength", "minItems", "maxItems", "required"})
        if (s.contains(k)) return Bad(path, std::string("'") + k + "' without a type is not supported");
      return FreeValue(kFreeJsonDepth);
    }
    const Json& t = s.at("type");
    if (t.is_array()) {
      if (t.empty()) return Bad(path, "type must not be an empty list");
      std::string o = "(";
      for (size_t i = 0; i < t.size(); ++i) {
        if (!t[i].is_string()) return Bad(path, "type must be a string or a list of strings");
        GYRE_ASSIGN_OR_RETURN(std::string r, Typed(s, t[i].get<std::string>(), path, depth, /*one_of_many=*/true));
        o += (i ? "|" : "") + r;
      }
      return o + ")";
    }
    if (!t.is_string()) return Bad(path, "type must be a string or a list of strings");
    return Typed(s, t.get<std::string>(), path, depth);
  }

 private:
  static std::string Literal(const Json& v) { return "(" + RegexQuote(v.dump()) + ")"; }

  // `one_of_many`: `type` is one entry of a list, so keywords of the other types are expected.
  Result<std::string> Typed(const Json& s, const std::string& type, const std::string& path, int depth,
                            bool one_of_many = false) {
    auto only = [&](std::initializer_list<const char*> keys) -> Status {
      if (one_of_many) return Status::Ok();
      for (const char* k : {"properties", "required", "additionalProperties", "items", "minItems", "maxItems",
                            "minLength", "maxLength"}) {
        bool ok = false;
        for (const char* a : keys) ok |= std::string_view(a) == k;
        if (!ok && s.contains(k)) return Bad(path, std::string("'") + k + "' does not apply to type " + type);
      }
      return Status::Ok();
    };
    if (type == "string") {
      GYRE_RETURN_IF_ERROR(only({"minLength", "maxLength"}));
      GYRE_ASSIGN_OR_RETURN(int64_t mn, Count(s, "minLength", path, 0));
      GYRE_ASSIGN_OR_RETURN(int64_t mx, Count(s, "maxLength", path, -1));
      if (mx >= 0 && mx < mn) return Bad(path, "maxLength < minLength");
      return "(" + StringRegex(mn, mx) + ")";
    }
    if (type == "integer") {
      GYRE_RETURN_IF_ERROR(only({}));
      return std::string(kInteger);
    }
    if (type == "number") {
      GYRE_RETURN_IF_ERROR(only({}));
      return std::string(kNumber);
    }
    if (type == "boolean") {
      GYRE_RETURN_IF_ERROR(only({}));
      return std::string("(true|false)");
    }
    if (type == "null") {
      GYRE_RETURN_IF_ERROR(only({}));
      return std::string("null");
    }
    if (type == "array") {
      GYRE_RETURN_IF_ERROR(only({"items", "minItems", "maxItems"}));
      GYRE_ASSIGN_OR_RETURN(int64_t mn, Count(s, "minItems", path, 0));
      GYRE_ASSIGN_OR_RETURN(int64_t mx, Count(s, "maxItems", path, -1));
      if (mx >= 0 && mx < mn) return Bad(path, "maxItems < minItems");
      std::string item = FreeValue(kFreeJsonDepth - 1);
      if (s.contains("items")) {
        GYRE_ASSIGN_OR_RETURN(item, Value(s.at("items"), path + "/items", depth + 1));
      }
      if (mx == 0) return std::string("\\[\\]");
      const std::string rest = "(," + std::string(kWs) + item + ")";
      std::string body = item + rest + "{" + std::to_string(std::max<int64_t>(mn - 1, 0)) + "," +
                         (mx < 0 ? "" : std::to_string(mx - 1)) + "}";
      return "(\\[" + (mn == 0 ? "(" + body + ")?" : body) + "\\])";
    }
    if (type == "object") return Object(s, path, depth, one_of_many);
    return Bad(path, "the type '" + type + "' is not supported");
  }

  Result<std::string> Object(const Json& s, const std::string& path, int depth, bool one_of_many) {
    for (const char* k : {"items", "minItems", "maxItems", "minLength", "maxLength"})
      if (s.contains(k) && !one_of_many) return Bad(path, std::string("'") + k + "' does not apply to type object");
    if (s.contains("additionalProperties") && !s.at("additionalProperties").is_boolean())
      return Bad(path, "additionalProperties must be true or false (a schema is not supported)");
    std::set<std::string> required;
    if (s.contains("required")) {
      const Json& r = s.at("required");
      if (!r.is_array()) return Bad(path, "required must be an array of names");
      for (const Json& n : r) {
        if (!n.is_string()) return Bad(path, "required must be an array of names");
        required.insert(n.get<std::string>());
      }
    }
    if (!s.contains("properties")) {
      if (!required.empty()) return Bad(path, "required names properties that are not defined");
      const bool closed = s.contains("additionalProperties") && !s.at("additionalProperties").get<bool>();
      return closed ? std::string("(\\{\\})") : FreeObject(kFreeJsonDepth);
    }
    const Json& props = s.at("properties");
    if (!props.is_object()) return Bad(path, "properties must be an object");
    for (const std::string& r : required)
      if (!props.contains(r)) return Bad(path, "required names '" + r + "', which is not in properties");
    struct Item {
      std::string re;
      bool required;
    };
    std::vector<Item> items;
    for (const auto& [name, sub] : props.items()) {
      GYRE_ASSIGN_OR_RETURN(std::string v, Value(sub, path + "/properties/" + name, depth + 1));
      items.push_back({RegexQuote(Json(name).dump()) + ":" + kWs + v, required.count(name) > 0});
    }
    // Present items joined by commas, in order: one alternative per possible first item (every
    // item before it optional), then the rest each present or (if optional) absent.
    const std::string sep = "," + std::string(kWs);
    std::string alts;
    bool any_required = false;
    for (size_t first = 0; first < items.size(); ++first) {
      std::string a = items[first].re;
      for (size_t j = first + 1; j < items.size(); ++j)
        a += items[j].required ? sep + items[j].re : "(" + sep + items[j].re + ")?";
      alts += (alts.empty() ? "" : "|") + ("(" + a + ")");
      if (items[first].required) {
        any_required = true;
        break;
      }
    }
    if (items.empty()) return std::string("(\\{\\})");
    return "(\\{(" + alts + ")" + (any_required ? "" : "?") + "\\})";
  }
};

}  // namespace

Result<std::string> JsonSchemaRegex(const nlohmann::json& schema) {
  Converter c;
  return c.Value(schema, "", 0);
}

std::string JsonObjectRegex() { return FreeObject(kFreeJsonDepth); }

}  // namespace gyre::structured
