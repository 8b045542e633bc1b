// The launch-line decisions of `gyre serve`: where the API key comes from.
#include "serve/launch_options.h"

#include <gtest/gtest.h>

namespace gyre::serve {
namespace {

TEST(LaunchOptions, ApiKeyFlagWinsOverTheEnvironment) {
  EXPECT_EQ(ResolveApiKey(std::nullopt, nullptr), "");
  EXPECT_EQ(ResolveApiKey(std::nullopt, ""), "");
  EXPECT_EQ(ResolveApiKey(std::nullopt, "from-env"), "from-env");
  EXPECT_EQ(ResolveApiKey(std::string("from-flag"), "from-env"), "from-flag");
  EXPECT_EQ(ResolveApiKey(std::string("from-flag"), nullptr), "from-flag");
  // An explicitly empty flag turns authentication off even when the environment has a key.
  EXPECT_EQ(ResolveApiKey(std::string(""), "from-env"), "");
  EXPECT_STREQ(kApiKeyEnv, "GYRE_API_KEY");
}

}  // namespace
}  // namespace gyre::serve
