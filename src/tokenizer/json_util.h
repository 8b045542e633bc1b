// Path-aware, non-throwing readers for tokenizer.json and tokenizer_config.json (internal).
// ReadFile and ParseJson load a file; the accessors below read typed fields from it.
//
// `path` names the value being read, e.g. "pre_tokenizer.pretokenizers[1]"; every error is an
// InvalidArgument whose message starts with the full path of the offending field, so a user can
// find it in the file. nlohmann exceptions never leave these functions.
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>

#include "core/status.h"

namespace gyre::tok {

using Json = nlohmann::json;

// The contents of the file at `path`. Errors: NotFound if it is not a regular file, DataLoss if
// reading fails.
Result<std::string> ReadFile(const std::string& path);

// Parses `text`; a syntax error (or a non-UTF-8 string) is InvalidArgument naming `what` and
// the byte position.
Result<Json> ParseJson(std::string_view text, std::string_view what);

// `path` + "." + `key` (or just `key` when `path` is empty).
std::string FieldPath(const std::string& path, std::string_view key);
// `path` + "[" + `index` + "]".
std::string IndexPath(const std::string& path, size_t index);

// The member `key` of `obj`, or nullptr when `obj` is not an object, or the member is absent or
// null.
const Json* FindField(const Json& obj, std::string_view key);

// InvalidArgument "<path>: expected <expected>, got <type of got>".
Status TypeError(const std::string& path, std::string_view expected, const Json& got);

// Reads a required string member.
Result<std::string> GetString(const Json& obj, std::string_view key, const std::string& path);
// Reads an optional bool member (absent or null gives `default_value`).
Result<bool> GetBool(const Json& obj, std::string_view key, bool default_value,
                     const std::string& path);
// REQUIRES nothing of `obj`: checks that it is an object with a string "type" and returns it.
Result<std::string> GetType(const Json& obj, const std::string& path);

}  // namespace gyre::tok
