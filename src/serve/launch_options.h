// What `gyre serve`'s launch line decides, as functions the CLI calls and tests can reach: the API
// key (flag or environment) and the context length against the model's trained length.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"

namespace gyre::serve {

// The environment variable that holds the API key when --api-key is not given.
inline constexpr const char* kApiKeyEnv = "GYRE_API_KEY";

// The API key to require: `flag` when --api-key was given (an empty value turns authentication
// off, whatever the environment says), else `env_value` ($GYRE_API_KEY; null or empty: none).
std::string ResolveApiKey(const std::optional<std::string>& flag, const char* env_value);

// Checks --max-model-len (`requested`, 0 = not given) against config.json's
// max_position_embeddings (`trained`, 0 = unknown). A longer request is InvalidArgument naming
// both numbers unless `allow_long` (--allow-long-max-model-len). Returns the length to ask the
// engine for (0: derive it from the KV budget; the caller caps that by `trained`).
Result<int64_t> CheckMaxModelLen(int64_t requested, int64_t trained, bool allow_long);

}  // namespace gyre::serve
