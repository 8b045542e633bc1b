// What `gyre serve`'s launch line decides, as functions the CLI calls and tests can reach: the API
// key (flag or environment).
//
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>

namespace gyre::serve {

// The environment variable that holds the API key when --api-key is not given.
inline constexpr const char* kApiKeyEnv = "GYRE_API_KEY";

// The API key to require: `flag` when --api-key was given (an empty value turns authentication
// off, whatever the environment says), else `env_value` ($GYRE_API_KEY; null or empty: none).
std::string ResolveApiKey(const std::optional<std::string>& flag, const char* env_value);

}  // namespace gyre::serve
