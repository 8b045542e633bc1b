// Test helper (header-only, tests only): an independent validator of a JSON value against the
// JSON Schema subset structured/json_schema.h supports, and random schemas of that subset.
#pragma once

#include <random>
#include <string>

#include <nlohmann/json.hpp>

namespace gyre::structured::testing {

using Json = nlohmann::json;

inline size_t Utf8Length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Whether `v` is valid under `s` (the supported keywords only).
inline bool Validates(const Json& v, const Json& s) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum")) {
    bool any = false;
    for (const Json& e : s["enum"]) any |= e == v;
    if (!any) return false;
  }
  if (s.contains("anyOf")) {
    bool any = false;
    for (const Json& a : s["anyOf"]) any |= Validates(v, a);
    if (!any) return false;
  }
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_array()) {
      for (const Json& t : s["type"]) types.push_back(t.get<std::string>());
    } else {
      types.push_back(s["type"].get<std::string>());
    }
    bool any = false;
    for (const std::string& t : types) {
      if (t == "string") any |= v.is_string();
      if (t == "integer") any |= v.is_number_integer();
      if (t == "number") any |= v.is_number();
      if (t == "boolean") any |= v.is_boolean();
      if (t == "null") any |= v.is_null();
      if (t == "array") any |= v.is_array();
      if (t == "object") any |= v.is_object();
    }
    if (!any) return false;
  }
  if (v.is_string()) {
    const size_t n = Utf8Length(v.get<std::string>());
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return false;
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    if (s.contains("items"))
      for (const Json& e : v)
        if (!Validates(e, s["items"])) return false;
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const Json& r : s["required"])
        if (!v.contains(r.get<std::string>())) return false;
    const Json props = s.value("properties", Json::object());
    for (const auto& [k, e] : v.items()) {
      if (props.contains(k)) {
        if (!Validates(e, props[k])) return false;
      } else if (s.contains("additionalProperties") && !s["additionalProperties"].get<bool>()) {
        return false;
      }
    }
  }
  return true;
}

// A random schema of the supported subset whose every instance is short (bounded strings and
// arrays), so that a random model can finish one.
inline Json RandomSchema(std::mt19937_64& rng, int depth = 0) {
  const int k = static_cast<int>(rng() % (depth >= 2 ? 6 : 9));
  auto small = [&](int n) { return static_cast<int>(rng() % n); };
  switch (k) {
    case 0: {
      Json s = {{"type", "string"}, {"maxLength", small(4)}};
      if (rng() % 2) s["minLength"] = std::min(small(3), s["maxLength"].get<int>());
      return s;
    }
    case 1: return {{"type", "integer"}};
    case 2: return {{"type", "number"}};
    case 3: return {{"type", rng() % 2 ? "boolean" : "null"}};
    case 4: return {{"enum", Json::array({"red", 7, nullptr, Json::array({1, "x"}), "gr\"een"})}};
    case 5: return {{"const", Json{{"k", small(100)}}}};
    case 6: {
      Json s = {{"type", "array"}, {"items", RandomSchema(rng, depth + 1)}, {"maxItems", small(4)}};
      if (rng() % 2) s["minItems"] = std::min(small(3), s["maxItems"].get<int>());
      return s;
    }
    case 7: return {{"anyOf", Json::array({RandomSchema(rng, depth + 1), RandomSchema(rng, depth + 1)})}};
    default: {
      Json props = Json::object(), req = Json::array();
      const int n = 1 + small(3);
      for (int i = 0; i < n; ++i) {
        const std::string name = std::string(1, "abcdef"[small(6)]) + std::to_string(i);
        props[name] = RandomSchema(rng, depth + 1);
        if (rng() % 3) req.push_back(name);
      }
      return {{"type", "object"}, {"properties", props}, {"required", req}, {"additionalProperties", false}};
    }
  }
}

}  // namespace gyre::structured::testing
