// Multimodal prompts through the engine (RequestParams::prompt_embeds, docs/vision.md): the CPU
// runner feeds the given rows instead of the embedding-table rows at their positions (checked
// against Model::Forward with SeqInput::input_embeds, greedy), across prefill chunks, and such a
// request neither hits nor publishes prefix-cache blocks: the same ids without the rows, before
// and after it, keep their own outputs and the cache's hits count only them.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/test_collector.h"
#include "ops/basic.h"
#include "runtime/cpu_runner.h"
#include "runtime/model.h"
#include "runtime/model_runner.h"

namespace gyre {
namespace {

using testing::Collector;

std::string Fixture() { return std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/glm5_tiny"; }

// Greedy tokens of `prompt` by Model::Forward alone, with `embeds` (may be null) merged in.
std::vector<int32_t> Reference(const Model& m, const std::vector<int32_t>& prompt, const PromptEmbeds* embeds, int n) {
  const int64_t D = m.config().hidden_size, V = m.config().vocab_size;
  std::vector<float> e(prompt.size() * D);
  ops::Embedding(prompt, m.weights().embed, e.data());
  if (embeds) {
    for (size_t k = 0; k < embeds->positions.size(); ++k)
      std::copy_n(embeds->rows.begin() + static_cast<long>(k * D), D, e.begin() + embeds->positions[k] * D);
  }
  SequenceState st = m.NewSequence();
  SeqInput in{&st, prompt, false};
  in.input_embeds = e;
  std::vector<float> logits;
  EXPECT_TRUE(m.Forward(std::span<const SeqInput>(&in, 1), &logits).ok());
  std::vector<int32_t> out;
  for (int t = 0; t < n; ++t) {
    const auto last = logits.end() - V;
    out.push_back(static_cast<int32_t>(std::max_element(last, logits.end()) - last));
    SeqInput next{&st, std::span<const int32_t>(&out.back(), 1), false};
    EXPECT_TRUE(m.Forward(std::span<const SeqInput>(&next, 1), &logits).ok());
  }
  return out;
}

TEST(PromptEmbeds, CpuRunnerFeedsTheRowsAndBypassesThePrefixCache) {
  auto m = Model::Load(Fixture());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Model& model = **m;
  const int64_t D = model.config().hidden_size;
  std::mt19937 rng(29);
  std::vector<int32_t> prompt(37);
  for (auto& x : prompt) x = static_cast<int32_t>(rng() % 1000);
  auto embeds = std::make_shared<PromptEmbeds>();
  embeds->width = D;
  for (int64_t p = 6; p < 26; ++p) embeds->positions.push_back(p);  // spans several prefill chunks
  std::normal_distribution<float> nd(0.0f, 1.0f);
  embeds->rows.resize(embeds->positions.size() * D);
  for (float& x : embeds->rows) x = nd(rng);
  const int kTokens = 5;
  const auto want_plain = Reference(model, prompt, nullptr, kTokens);
  const auto want_image = Reference(model, prompt, embeds.get(), kTokens);
  ASSERT_NE(want_plain, want_image) << "the rows do not change the output: the test could not fail";

  CpuRunnerOptions ro;
  ro.num_slots = 4;
  ro.page_tokens = 4;
  ro.num_pages = 64;
  ro.max_step_tokens = 8;  // prefill in chunks of 8
  auto runner = CpuRunner::Create(model, ro);
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  EngineOptions eo;
  eo.max_num_seqs = 2;
  eo.kv_page_tokens = 4;
  eo.max_num_batched_tokens = 8;
  eo.enable_prefix_caching = true;
  auto engine = Engine::Create(**runner, eo);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  ASSERT_TRUE((*engine)->Start().ok());
  auto run = [&](std::shared_ptr<const PromptEmbeds> e) {
    RequestParams p;
    p.prompt = prompt;
    p.max_tokens = kTokens;
    p.ignore_eos = true;
    p.prompt_embeds = std::move(e);
    auto sink = std::make_shared<Collector>();
    EXPECT_TRUE((*engine)->Submit(p, sink).ok());
    sink->Wait();
    EXPECT_EQ(sink->reason, FinishReason::kLength) << sink->status.ToString();
    return sink->ids;
  };
  EXPECT_EQ(run(nullptr), want_plain);   // publishes the prompt's blocks
  EXPECT_EQ(run(embeds), want_image);    // same ids: must not hit them
  EXPECT_EQ(run(nullptr), want_plain);   // hits the plain blocks, not the image request's
  EXPECT_EQ(run(embeds), want_image);
  for (int i = 0; i < 1000 && (*engine)->Stats().requests_finished < 4; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const EngineStats st = (*engine)->Stats();
  EXPECT_EQ(st.prefix_cache_queried_tokens, 2 * static_cast<int64_t>(prompt.size()));  // the plain requests only
  EXPECT_GT(st.prefix_cache_hit_tokens, 0);

  // Rows that do not fit the prompt or the model are refused at Submit.
  auto bad = std::make_shared<PromptEmbeds>(*embeds);
  bad->positions.back() = static_cast<int64_t>(prompt.size());
  RequestParams p;
  p.prompt = prompt;
  p.prompt_embeds = bad;
  EXPECT_FALSE((*engine)->Submit(p, std::make_shared<Collector>()).ok());
  (*engine)->Stop();
}

}  // namespace
}  // namespace gyre
