// Multimodal prompts through the engine (RequestParams::prompt_embeds, docs/vision.md), on the CPU
// runner and on the CUDA model (instances "cuda", ctest gpu_prompt_embeds): the runner feeds the
// given rows instead of the embedding-table rows at their positions, across prefill chunks, and
// such a request neither hits nor publishes prefix-cache blocks: the same ids without the rows,
// before and after it, keep their own outputs and the cache's hits count only them.
// Reference: Model::Forward (CPU, fp32) with SeqInput::input_embeds.
//   Logits of every prompt position, fed in chunks of 8 through RunnerSession: rel-L2 <= 1e-5 on
//   the CPU runner (the same ops; the chunked KDA and attention over cached rows reassociate:
//   2.5e-6 observed), <= 1e-4 on the CUDA model (fp32 weights; other summation orders), and >= 100x that bound away from the same prompt without the rows (so
//   rows dropped, misplaced by a chunk offset, or taken from the wrong position fail it).
//   Greedy tokens through the engine: equal to the reference's (both fp32; the tiny fixture's
//   top-2 margins at these 5 steps are not near ties).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/test_collector.h"
#include "ops/basic.h"
#include "engine/test_backends.h"
#include "runtime/model.h"
#include "runtime/model_runner.h"

namespace gyre {
namespace {

using testing::Collector;

std::string Fixture() { return std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/glm5_tiny"; }

// The table rows of `prompt` with `embeds` (may be null) written over their positions.
std::vector<float> Merged(const Model& m, const std::vector<int32_t>& prompt, const PromptEmbeds* embeds) {
  const int64_t D = m.config().hidden_size;
  std::vector<float> e(prompt.size() * D);
  ops::Embedding(prompt, m.weights().embed, e.data());
  if (embeds) {
    for (size_t k = 0; k < embeds->positions.size(); ++k)
      std::copy_n(embeds->rows.begin() + static_cast<long>(k * D), D, e.begin() + embeds->positions[k] * D);
  }
  return e;
}

// Greedy tokens of `prompt` by Model::Forward alone, with `embeds` (may be null) merged in.
std::vector<int32_t> Reference(const Model& m, const std::vector<int32_t>& prompt, const PromptEmbeds* embeds, int n) {
  const int64_t V = m.config().vocab_size;
  const std::vector<float> e = Merged(m, prompt, embeds);
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

// Logits of every position of `prompt` by Model::Forward with `embeds` (may be null) merged in.
std::vector<float> ReferenceLogits(const Model& m, const std::vector<int32_t>& prompt, const PromptEmbeds* embeds) {
  const std::vector<float> e = Merged(m, prompt, embeds);
  SequenceState st = m.NewSequence();
  SeqInput in{&st, prompt, true};
  in.input_embeds = e;
  std::vector<float> logits;
  EXPECT_TRUE(m.Forward(std::span<const SeqInput>(&in, 1), &logits).ok());
  return logits;
}

// The runners of test_backends.h, 4 slots of 4-token pages, 64 pages (256 cache tokens).
Result<std::unique_ptr<ModelRunner>> MakeRunner(const Model& model, const testing::Backend& b) {
  return b.make(model, 4, 4, 64);
}

class PromptEmbedsOn : public ::testing::TestWithParam<testing::Backend> {
 protected:
  void SetUp() override {
    auto m = Model::Load(Fixture());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    const int64_t D = model_->config().hidden_size;
    std::mt19937 rng(29);
    prompt_.resize(37);
    for (auto& x : prompt_) x = static_cast<int32_t>(rng() % 1000);
    auto e = std::make_shared<PromptEmbeds>();
    e->width = D;
    for (int64_t p = 6; p < 26; ++p) e->positions.push_back(p);  // spans several prefill chunks
    std::normal_distribution<float> nd(0.0f, 1.0f);
    e->rows.resize(e->positions.size() * D);
    for (float& x : e->rows) x = nd(rng);
    embeds_ = std::move(e);
  }
  std::unique_ptr<Model> model_;
  std::vector<int32_t> prompt_;
  std::shared_ptr<const PromptEmbeds> embeds_;
};

TEST_P(PromptEmbedsOn, RunnerLogitsEqualTheModelWithTheRows) {
  const Model& model = *model_;
  const int64_t V = model.config().vocab_size;
  const std::vector<float> want = ReferenceLogits(model, prompt_, embeds_.get());
  const std::vector<float> plain = ReferenceLogits(model, prompt_, nullptr);
  auto runner = MakeRunner(model, GetParam());
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  std::vector<float> got(want.size(), std::nanf(""));  // poisoned: every position must be written
  RunnerSession sess(**runner);
  auto seq = sess.NewSequence();
  ASSERT_TRUE(seq.ok());
  for (size_t at = 0; at < prompt_.size(); at += 8) {
    const size_t n = std::min<size_t>(8, prompt_.size() - at);
    RunnerSession::Input in{*seq, std::span<const int32_t>(prompt_).subspan(at, n), {}, true, embeds_.get()};
    std::vector<float> lg;
    ASSERT_TRUE(sess.Step(std::span<const RunnerSession::Input>(&in, 1), nullptr, &lg).ok());
    ASSERT_EQ(lg.size(), n * V);
    std::copy(lg.begin(), lg.end(), got.begin() + static_cast<long>(at * V));
  }
  const double bound = GetParam().name == "cuda" ? 1e-4 : 1e-5;
  const double rel = ops::Compare(got, want).rel_l2, off = ops::Compare(plain, want).rel_l2;
  std::printf("[ embeds ] %s: rel-L2 to the reference %.3g (bound %.0e); without the rows %.3g\n",
              GetParam().name.c_str(), rel, bound, off);
  EXPECT_LE(rel, bound);
  EXPECT_GE(off, 100 * bound) << "the rows barely change the logits: the test could not fail";

  // Rows of another width are refused by name.
  PromptEmbeds bad = *embeds_;
  bad.width += 1;
  auto seq2 = sess.NewSequence();
  ASSERT_TRUE(seq2.ok());
  RunnerSession::Input in{*seq2, std::span<const int32_t>(prompt_).first(8), {}, false, &bad};
  const Status st = sess.Step(std::span<const RunnerSession::Input>(&in, 1), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("width"), std::string::npos) << st.ToString();
}

TEST_P(PromptEmbedsOn, EngineFeedsTheRowsAndBypassesThePrefixCache) {
  const Model& model = *model_;
  const std::vector<int32_t>& prompt = prompt_;
  const std::shared_ptr<const PromptEmbeds>& embeds = embeds_;
  const int kTokens = 5;
  const auto want_plain = Reference(model, prompt, nullptr, kTokens);
  const auto want_image = Reference(model, prompt, embeds.get(), kTokens);
  ASSERT_NE(want_plain, want_image) << "the rows do not change the output: the test could not fail";

  auto runner = MakeRunner(model, GetParam());
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

INSTANTIATE_TEST_SUITE_P(Backends, PromptEmbedsOn, ::testing::ValuesIn(testing::Backends()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace gyre
