// The launch-line decisions of `gyre serve`: where the API key comes from, and --max-model-len
// against the model's max_position_embeddings.
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

TEST(LaunchOptions, MaxModelLenIsCappedByTheTrainedLength) {
  EXPECT_EQ(*CheckMaxModelLen(0, 4096, false), 0);     // not given: derived (and capped) later
  EXPECT_EQ(*CheckMaxModelLen(4096, 4096, false), 4096);
  EXPECT_EQ(*CheckMaxModelLen(1000, 4096, false), 1000);
  EXPECT_EQ(*CheckMaxModelLen(9999, 0, false), 9999);  // the config does not say: nothing to check
  auto longer = CheckMaxModelLen(8192, 4096, false);
  ASSERT_FALSE(longer.ok());
  EXPECT_EQ(longer.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = longer.status().message();
  EXPECT_NE(m.find("8192"), std::string::npos) << m;
  EXPECT_NE(m.find("max_position_embeddings (4096"), std::string::npos) << m;
  EXPECT_NE(m.find("--allow-long-max-model-len"), std::string::npos) << m;
  EXPECT_EQ(*CheckMaxModelLen(8192, 4096, true), 8192);  // the explicit override
  EXPECT_FALSE(CheckMaxModelLen(-1, 4096, false).ok());
}

}  // namespace
}  // namespace gyre::serve
