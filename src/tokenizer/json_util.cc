#include "tokenizer/json_util.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/json_depth.h"

namespace gyre::tok {

Result<std::string> ReadFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return Status::NotFound(path + ": no such file");
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) return Status::DataLoss(path + ": cannot open");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad() || buf.fail()) return Status::DataLoss(path + ": read failed");
  return buf.str();
}

Result<Json> ParseJson(std::string_view text, std::string_view what) {
  GYRE_RETURN_IF_ERROR(CheckJsonDepth(text, what));
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return Status::InvalidArgument(std::string(what) + ": malformed JSON: " + e.what());
  }
}

std::string FieldPath(const std::string& path, std::string_view key) {
  if (path.empty()) return std::string(key);
  return path + "." + std::string(key);
}

std::string IndexPath(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

const Json* FindField(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

Status TypeError(const std::string& path, std::string_view expected, const Json& got) {
  return Status::InvalidArgument(path + ": expected " + std::string(expected) + ", got " +
                                 got.type_name());
}

Result<std::string> GetString(const Json& obj, std::string_view key, const std::string& path) {
  const std::string field = FieldPath(path, key);
  const Json* v = FindField(obj, key);
  if (v == nullptr) return Status::InvalidArgument(field + ": missing");
  if (!v->is_string()) return TypeError(field, "string", *v);
  return v->get<std::string>();
}

Result<bool> GetBool(const Json& obj, std::string_view key, bool default_value,
                     const std::string& path) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return default_value;
  if (!v->is_boolean()) return TypeError(FieldPath(path, key), "boolean", *v);
  return v->get<bool>();
}

Result<std::string> GetType(const Json& obj, const std::string& path) {
  if (!obj.is_object()) return TypeError(path, "object", obj);
  return GetString(obj, "type", path);
}

}  // namespace gyre::tok
