// engine/engine.h MakeNoGenerationEngine: the engine of an encode instance refuses every request
// with its reason and reports the config and context length it was given.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "model/config.h"

namespace gyre {
namespace {

TEST(NoGenerationEngine, RefusesWithTheReasonAndReportsTheConfig) {
  ModelConfig c;
  c.vocab_size = 1234;
  c.eos_token_ids = {7, 9};
  auto e = MakeNoGenerationEngine(c, 4096, "this is an encode instance");
  ASSERT_TRUE(e->Start().ok());
  RequestParams p;
  p.prompt = {1, 2, 3};
  auto r = e->Submit(p, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "this is an encode instance");
  EXPECT_FALSE(e->SubmitImported(p, ImportedSequence{}, nullptr).ok());
  EXPECT_EQ(e->Stats().max_model_len, 4096);
  EXPECT_EQ(e->Stats().num_running, 0);
  EXPECT_EQ(e->Stats().kv_pages_total, 0);
  EXPECT_EQ(e->config().vocab_size, 1234);
  EXPECT_EQ(e->config().eos_token_ids, (std::vector<int32_t>{7, 9}));
  e->Cancel(5);  // unknown ids are ignored
  e->Stop();
}

}  // namespace
}  // namespace gyre
