#include "serve/launch_options.h"

namespace gyre::serve {

std::string ResolveApiKey(const std::optional<std::string>& flag, const char* env_value) {
  if (flag) return *flag;
  return env_value ? std::string(env_value) : std::string();
}

Result<int64_t> CheckMaxModelLen(int64_t requested, int64_t trained, bool allow_long) {
  if (requested < 0) return Status::InvalidArgument("--max-model-len must be >= 0");
  if (requested > 0 && trained > 0 && requested > trained && !allow_long) {
    return Status::InvalidArgument("--max-model-len " + std::to_string(requested) +
                                   " is longer than the model's max_position_embeddings (" + std::to_string(trained) +
                                   " in config.json): positions beyond it were never trained. Use a value <= " +
                                   std::to_string(trained) + ", or pass --allow-long-max-model-len to serve it anyway");
  }
  return requested;
}

}  // namespace gyre::serve
