#include "serve/tool_call_grammar.h"

#include <set>

#include "structured/json_schema.h"
#include "structured/regex.h"

namespace gyre::serve {
namespace {

using structured::RegexQuote;

constexpr const char* kNl = "\\n?";
// Raw text inside <arg_value>: no "</" anywhere and no trailing '<' (so "</arg_value>" ends it).
constexpr const char* kRawText = "(?:[^<]|<[^/])*";
constexpr const char* kKey = "[^<\\n]+";

bool IsStringSchema(const Json& s) {
  if (!s.is_object()) return true;  // `true` / anything unusual: the markup writes text
  if (s.contains("enum") || s.contains("const")) return false;
  const Json* type = s.contains("type") ? &s["type"] : nullptr;
  if (!type) return !s.contains("properties") && !s.contains("items") && !s.contains("anyOf");
  if (type->is_string()) return *type == "string";
  if (type->is_array()) {
    for (const Json& t : *type) {
      if (t == "string") return true;
    }
  }
  return false;
}

// A string enum (every value a string): the markup writes the value as it is.
bool IsStringEnum(const Json& s) {
  if (!s.is_object() || !s.contains("enum") || !s["enum"].is_array() || s["enum"].empty()) return false;
  for (const Json& v : s["enum"]) {
    if (!v.is_string()) return false;
  }
  return true;
}

Result<std::string> ValueRegex(const Json& schema, const std::string& where) {
  if (IsStringEnum(schema)) {
    std::string alt;
    for (const Json& v : schema["enum"]) alt += (alt.empty() ? "" : "|") + RegexQuote(v.get<std::string>());
    return "(?:" + alt + ")";
  }
  if (IsStringSchema(schema)) return std::string(kRawText);
  auto re = structured::JsonSchemaRegex(schema);
  if (!re.ok()) return FieldError(where, re.error().message());
  return "(?:" + *re + ")";
}

std::string Arg(const std::string& key_re, const std::string& value_re) {
  return "<arg_key>" + key_re + "</arg_key>" + kNl + "<arg_value>" + value_re + "</arg_value>" + kNl;
}

Result<std::string> CallRegex(const Json& tool, size_t index) {
  const Json& fn = tool["function"];
  const std::string where = "tools[" + std::to_string(index) + "].function.parameters";
  std::string args;
  const Json* params = fn.contains("parameters") ? &fn["parameters"] : nullptr;
  const Json* props = params && params->contains("properties") ? &(*params)["properties"] : nullptr;
  if (props && !props->is_object()) return FieldError(where + ".properties", "must be an object");
  if (props) {
    std::set<std::string> required;
    if (params->contains("required") && (*params)["required"].is_array()) {
      for (const Json& r : (*params)["required"]) {
        if (r.is_string()) required.insert(r.get<std::string>());
      }
    }
    for (const auto& [key, schema] : props->items()) {
      GYRE_ASSIGN_OR_RETURN(std::string v, ValueRegex(schema, where + ".properties." + key));
      const std::string one = Arg(RegexQuote(key), v);
      args += required.count(key) ? one : "(?:" + one + ")?";
    }
  } else if (params) {
    args = "(?:" + Arg(kKey, kRawText) + ")*";  // no properties: any keys, values as text
  }  // no parameters at all: a function without arguments
  return "<tool_call>" + RegexQuote(fn["name"].get<std::string>()) + kNl + args + "</tool_call>" + kNl;
}

}  // namespace

Result<std::string> GlmToolCallsRegex(const Json& tools, std::string_view only) {
  if (!tools.is_array() || tools.empty()) return FieldError("tools", "must be a non-empty array");
  std::string alt;
  for (size_t i = 0; i < tools.size(); ++i) {
    if (!only.empty() && tools[i]["function"]["name"] != only) continue;
    GYRE_ASSIGN_OR_RETURN(std::string call, CallRegex(tools[i], i));
    alt += (alt.empty() ? "" : "|") + call;
    if (!only.empty()) return call;  // named: exactly one call
  }
  if (alt.empty()) return FieldError("tool_choice", "names a function that is not in 'tools'");
  return "(?:" + alt + ")+";
}

}  // namespace gyre::serve
