#include "serve/launch_options.h"

namespace gyre::serve {

std::string ResolveApiKey(const std::optional<std::string>& flag, const char* env_value) {
  if (flag) return *flag;
  return env_value ? std::string(env_value) : std::string();
}

}  // namespace gyre::serve
