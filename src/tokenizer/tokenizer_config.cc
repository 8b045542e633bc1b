// LoadTokenizerConfig: the fields gyre reads from tokenizer_config.json.
#include <filesystem>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>

#include "tokenizer/json_util.h"
#include "tokenizer/tokenizer.h"

namespace gyre {
namespace {

using tok::Json;

// A special-token field: a string, an AddedToken object {"content": ...}, or null.
Result<std::optional<std::string>> ReadTokenField(const Json& root, const char* key) {
  const Json* v = tok::FindField(root, key);
  if (v == nullptr) return std::optional<std::string>();
  if (v->is_string()) return std::optional<std::string>(v->get<std::string>());
  if (v->is_object()) {
    GYRE_ASSIGN_OR_RETURN(std::string content, tok::GetString(*v, "content", key));
    return std::optional<std::string>(std::move(content));
  }
  return tok::TypeError(key, "string or {\"content\": string}", *v);
}

// chat_template: a string, or a list of {"name", "template"} from which "default" is taken.
Result<std::string> ReadChatTemplate(const Json& root) {
  const Json* v = tok::FindField(root, "chat_template");
  if (v == nullptr) return std::string();
  if (v->is_string()) return v->get<std::string>();
  if (!v->is_array()) return tok::TypeError("chat_template", "string or array", *v);
  for (size_t i = 0; i < v->size(); ++i) {
    const std::string path = tok::IndexPath("chat_template", i);
    GYRE_ASSIGN_OR_RETURN(std::string name, tok::GetString((*v)[i], "name", path));
    if (name == "default") return tok::GetString((*v)[i], "template", path);
  }
  return std::string();
}

Result<int64_t> ReadMaxLength(const Json& root) {
  const Json* v = tok::FindField(root, "model_max_length");
  if (v == nullptr) return int64_t{0};
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    return u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
               ? std::numeric_limits<int64_t>::max()
               : static_cast<int64_t>(u);
  }
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    // HF writes "no limit" as 1e30.
    const double d = v->get<double>();
    if (!(d >= 0)) return tok::TypeError("model_max_length", "non-negative number", *v);
    if (d >= 9.2e18) return std::numeric_limits<int64_t>::max();
    return static_cast<int64_t>(d);
  }
  return tok::TypeError("model_max_length", "number", *v);
}

Result<TokenizerConfig> ParseConfig(const Json& root) {
  if (!root.is_object()) return tok::TypeError("(root)", "object", root);
  TokenizerConfig c;
  GYRE_ASSIGN_OR_RETURN(c.bos_token, ReadTokenField(root, "bos_token"));
  GYRE_ASSIGN_OR_RETURN(c.eos_token, ReadTokenField(root, "eos_token"));
  GYRE_ASSIGN_OR_RETURN(c.pad_token, ReadTokenField(root, "pad_token"));
  GYRE_ASSIGN_OR_RETURN(c.add_bos_token, tok::GetBool(root, "add_bos_token", false, ""));
  GYRE_ASSIGN_OR_RETURN(c.chat_template, ReadChatTemplate(root));
  GYRE_ASSIGN_OR_RETURN(c.model_max_length, ReadMaxLength(root));
  return c;
}

}  // namespace

Result<TokenizerConfig> LoadTokenizerConfig(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  try {
    GYRE_ASSIGN_OR_RETURN(std::string text, tok::ReadFile(path));
    GYRE_ASSIGN_OR_RETURN(Json root, tok::ParseJson(text, path));
    Result<TokenizerConfig> c = ParseConfig(root);
    if (!c.has_value()) return c.error().WithContext(path);
    return c;
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(path + ": out of memory");
  } catch (const std::exception& e) {
    return Status::InvalidArgument(path + ": " + e.what());
  }
}

}  // namespace gyre
