// Speculative decoding with ReplaySSM on the CPU runner and, in CUDA builds, the CUDA model
// (docs/engine.md "Speculative decoding"):
// a verify piece then CommitSpeculative(n) leaves the KDA state bit for bit where decoding those n
// tokens one by one leaves it, and the sequence continues as if the rejected tokens never ran;
// the engine's greedy output with n-gram drafts equals plain decoding on the fixtures, with drafts
// accepted (repetitive prompt) and rejected; n-gram lookup; --speculative-config parsing.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <ostream>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/test_collector.h"
#include "engine/ngram_draft.h"
#include "ops/sampling.h"
#include "runtime/cpu_runner.h"
#ifdef GYRE_CUDA
#include "runtime/cuda_model.h"
#endif
#include "runtime/model.h"
#include "runtime/model_runner.h"
#include "runtime/random_model_for_tests.h"

namespace gyre {
namespace {

std::string Fixture(const std::string& name) { return std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/" + name; }

TEST(NgramDraft, LatestLongestMatch) {
  std::vector<int32_t> out;
  // ... 1 2 3 [7 8] ... 1 2 3 [9] ... 1 2 3: the 3-gram's latest earlier occurrence is followed by 9.
  const std::vector<int32_t> t = {1, 2, 3, 7, 8, 5, 1, 2, 3, 9, 6, 1, 2, 3};
  ASSERT_TRUE(NgramDraft(t, 2, 4, 3, &out));
  EXPECT_EQ(out, (std::vector<int32_t>{9, 6, 1}));
  ASSERT_TRUE(NgramDraft(t, 2, 4, 10, &out));  // never past the end
  EXPECT_EQ(out, (std::vector<int32_t>{9, 6, 1, 2, 3}));
  // Longest n first: "5 1 2 3"? no; "1 2 3" yes (n = 3) — not the 2-gram "2 3" (also followed by 9 here).
  const std::vector<int32_t> u = {4, 2, 3, 5, 1, 2, 3, 6, 1, 2, 3};
  ASSERT_TRUE(NgramDraft(u, 2, 4, 1, &out));
  EXPECT_EQ(out, (std::vector<int32_t>{6}));
  ASSERT_TRUE(NgramDraft(u, 2, 2, 1, &out));  // only 2-grams: "2 3" latest earlier at 5..6 → 6
  EXPECT_EQ(out, (std::vector<int32_t>{6}));
  EXPECT_FALSE(NgramDraft(std::vector<int32_t>{1, 2, 3, 4, 5}, 2, 4, 3, &out));
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE(NgramDraft(t, 2, 4, 0, &out));
  EXPECT_FALSE(NgramDraft(std::vector<int32_t>{1, 1}, 2, 4, 3, &out));  // the 2-gram has no earlier occurrence
  ASSERT_TRUE(NgramDraft(std::vector<int32_t>{1, 1, 1}, 2, 4, 3, &out));  // overlapping: [1 1] at 0 → 1
  EXPECT_EQ(out, (std::vector<int32_t>{1}));
}

// The engine's incremental drafter answers as NgramDraft on every prefix of random sequences
// over small alphabets (n-grams recur), and after a sequence that does not extend the last one.
TEST(NgramIndex, EqualsNgramDraftOnEveryPrefix) {
  std::mt19937 rng(5);
  int64_t hits = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int alphabet = 2 + trial % 5;
    const int64_t n_min = 1 + trial % 3, n_max = n_min + trial % 4, k = 1 + trial % 6;
    std::vector<int32_t> t(300);
    for (int32_t& x : t) x = static_cast<int32_t>(rng() % alphabet);
    NgramIndex index(n_min, n_max);
    std::vector<int32_t> a, b;
    for (size_t len = 0; len <= t.size(); ++len) {
      const std::span<const int32_t> prefix(t.data(), len);
      const bool x = index.Draft(prefix, k, &a);
      ASSERT_EQ(x, NgramDraft(prefix, n_min, n_max, k, &b)) << trial << " " << len;
      ASSERT_EQ(a, b) << trial << " " << len;
      hits += x;
    }
    t[100] = alphabet;  // a different sequence: rebuilt, still equal
    ASSERT_EQ(index.Draft(t, k, &a), NgramDraft(t, n_min, n_max, k, &b));
    ASSERT_EQ(a, b);
  }
  EXPECT_GT(hits, 1000);
}

TEST(SpeculativeConfig, ParsesVllmJsonAndRefusesTheRest) {
  auto o = ParseSpeculativeConfig(
      R"({"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":6,"prompt_lookup_min":3})");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->method, "ngram");
  EXPECT_EQ(o->num_speculative_tokens, 5);
  EXPECT_EQ(o->prompt_lookup_max, 6);
  EXPECT_EQ(o->prompt_lookup_min, 3);
  EXPECT_FALSE(ParseSpeculativeConfig(R"({"method":"eagle","num_speculative_tokens":3})").ok());
  auto mtp = ParseSpeculativeConfig(R"({"method":"mtp","num_speculative_tokens":1})");
  ASSERT_TRUE(mtp.ok()) << mtp.status().ToString();
  EXPECT_EQ(mtp->method, "mtp");
  EXPECT_EQ(mtp->num_speculative_tokens, 1);
  auto legacy = ParseSpeculativeConfig(R"({"method":"deepseek_mtp","num_speculative_tokens":2})");
  ASSERT_TRUE(legacy.ok());
  EXPECT_EQ(legacy->method, "mtp");
  EXPECT_FALSE(ParseSpeculativeConfig(R"({"method":"mtp","prompt_lookup_max":3})").ok());
  EXPECT_FALSE(ParseSpeculativeConfig(R"({"method":"ngram","draft_model":"x"})").ok());
  EXPECT_FALSE(ParseSpeculativeConfig(R"({"num_speculative_tokens":3})").ok());
  EXPECT_FALSE(ParseSpeculativeConfig("ngram").ok());
  EXPECT_FALSE(ParseSpeculativeConfig(R"({"method":"ngram","num_speculative_tokens":"3"})").ok());
}

// A fixture on a backend: the CPU runner, and in CUDA builds the CUDA model (fp32 weights, the
// CPU engine's function; needs a GPU: `test_engine --gtest_filter='*cuda*'`).
struct SpecCase {
  std::string fixture, backend;
};

void PrintTo(const SpecCase& c, std::ostream* os) { *os << c.fixture << "/" << c.backend; }

std::vector<SpecCase> SpecCases() {
  std::vector<SpecCase> c;
  for (const char* f : {"glm5_tiny", "kimi_tiny", "glm5_mini"}) {
    c.push_back({f, "cpu"});
#ifdef GYRE_CUDA
    c.push_back({f, "cuda"});
#endif
  }
  return c;
}

// A runner of `backend` over `model` with ReplaySSM rings for pieces of up to 5 tokens, and with
// `mtp` > 0 MTP drafts of up to that many tokens.
std::unique_ptr<ModelRunner> MakeSpecRunner(const Model& model, const std::string& backend, int64_t slots,
                                            int64_t mtp = 0) {
#ifdef GYRE_CUDA
  if (backend == "cuda") {
    CudaModelOptions o;
    o.max_seqs = slots;
    o.max_batch_tokens = 256;
    o.page_tokens = 4;
    o.kv_tokens = 128 * 4;
    o.speculative_tokens = 4;
    o.mtp_drafts = mtp;
    auto r = CudaModel::FromHost(model.config(), model.weights(), o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return nullptr;
    return std::move(*r);
  }
#endif
  EXPECT_EQ(backend, "cpu");
  CpuRunnerOptions ro;
  ro.page_tokens = 4;
  ro.num_slots = slots;
  ro.num_pages = 128;
  ro.mtp_drafts = mtp;
  auto r = CpuRunner::Create(model, ro);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return nullptr;
  return std::move(*r);
}

class SpecOnFixture : public ::testing::TestWithParam<SpecCase> {
 protected:
  void SetUp() override {
    auto m = Model::Load(Fixture(GetParam().fixture));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
  }
  std::vector<int32_t> Ids(int64_t n, uint64_t seed) const {
    std::mt19937_64 rng(seed);
    const int64_t v = std::min<int64_t>(model_->config().vocab_size, 1000);
    std::vector<int32_t> out(n);
    for (auto& x : out) x = static_cast<int32_t>(rng() % v);
    return out;
  }
  std::unique_ptr<ModelRunner> Runner(int64_t slots) const { return MakeSpecRunner(*model_, GetParam().backend, slots); }
  bool Cuda() const { return GetParam().backend == "cuda"; }
  // Logits of a verify row vs a decode step: fp32 reassociation (a 5-row step's GEMMs and, on
  // the GPU, the prefill attention path vs the decode kernels).
  double LogitTol() const { return Cuda() ? 2e-3 : 1e-4; }
  std::unique_ptr<Model> model_;
};

std::vector<std::byte> SlotBytes(ModelRunner& r, SlotId s) {
  std::vector<std::byte> b(r.capacity().bytes_per_slot);
  EXPECT_TRUE(r.ReadSlotState(s, b).ok());
  return b;
}

// Relative L2 distance of two CPU slot images read as fp32 (the CPU slot is all fp32).
double StateDiff(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i + 4 <= a.size(); i += 4) {
    float x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    num += (double(x) - y) * (double(x) - y);
    den += double(y) * y;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Slot 0 decodes d_0..d_k one token per step; slot 1 runs them as one speculative piece, commits
// n of them, and decodes d_n next. The speculative piece leaves the state bit for bit as it was;
// the state after the commit is slot 0's after n decodes, and the next token's logits are slot 0's
// (stale rows and pooled keys handled). Not bit for bit here: a (k+1)-row step's projections
// (BLAS GEMM) differ from k+1 one-row steps in the last bits, as prefill already does; the fold
// itself equals the recurrence bit for bit on the same inputs (ops KdaFold test, kda.replay_fold).
TEST_P(SpecOnFixture, CommitEqualsPlainRecurrenceBitForBit) {
  const int64_t kP = 13, kK = 4;  // prompt, then the known token + 3 drafts
  auto runner = Runner(2);
  ASSERT_TRUE(runner);
  const int64_t V = model_->config().vocab_size;
  const std::vector<int32_t> prompt = Ids(kP, 5), d = Ids(kK + 1, 6);
  std::vector<PageId> pages0, pages1;
  for (PageId p = 0; p < 8; ++p) {
    pages0.push_back(p);
    pages1.push_back(8 + p);
  }
  auto step = [&](SlotId slot, const std::vector<PageId>& pages, int64_t start, std::span<const int32_t> ids,
                  bool spec, std::vector<float>* logits) {
    StepPiece p;
    p.slot = slot;
    p.pages = pages;
    p.start = start;
    p.ids = ids;
    p.speculative = spec;
    p.sample.enabled = true;
    std::vector<SampledToken> out;
    EXPECT_TRUE(runner->Step(std::span<const StepPiece>(&p, 1), &out, logits).ok());
    return out[0];
  };
  std::vector<float> lg;
  step(0, pages0, 0, prompt, false, &lg);
  std::vector<std::vector<std::byte>> plain_state = {SlotBytes(*runner, 0)};
  std::vector<std::vector<float>> plain_logits;
  for (int64_t j = 0; j <= kK; ++j) {
    step(0, pages0, kP + j, std::span<const int32_t>(&d[j], 1), false, &lg);
    plain_logits.push_back(lg);
    plain_state.push_back(SlotBytes(*runner, 0));
  }
  step(1, pages1, 0, prompt, false, &lg);
  const std::vector<std::byte> after_prompt = SlotBytes(*runner, 1);
  ASSERT_LE(StateDiff(after_prompt, plain_state[0]), Cuda() ? 1e-6 : 0.0);  // the same prefill, another slot
  double worst_row = 0, worst_state = 0;
  for (int64_t n = 0; n <= kK + 1; ++n) {
    ASSERT_TRUE(runner->WriteSlotState(1, after_prompt, kP).ok());
    SampledToken t = step(1, pages1, kP, d, true, &lg);
    ASSERT_EQ(t.rows.size(), static_cast<size_t>(kK + 1));
    EXPECT_EQ(SlotBytes(*runner, 1), after_prompt) << "the speculative piece moved the state";
    for (int64_t j = 0; j <= kK; ++j) {  // the rows are the plain decode's logits
      float worst = 0;
      for (int64_t x = 0; x < V; ++x) worst = std::max(worst, std::abs(lg[j * V + x] - plain_logits[j][x]));
      EXPECT_LT(worst, LogitTol()) << "row " << j;
      worst_row = std::max<double>(worst_row, worst);
    }
    // The rows' greedy ids are the logits' argmax (device sampler vs the returned logits).
    for (int64_t j = 0; j <= kK; ++j) {
      const float* row = &lg[j * V];
      EXPECT_EQ(t.rows[j].first, static_cast<int32_t>(std::max_element(row, row + V) - row)) << "row " << j;
    }
    // A second piece before the commit is refused.
    StepPiece early;
    early.slot = 1;
    early.pages = pages1;
    early.start = kP + kK + 1;
    early.ids = std::span<const int32_t>(&d[0], 1);
    EXPECT_FALSE(runner->Launch(std::span<const StepPiece>(&early, 1)).ok());
    EXPECT_FALSE(runner->CommitSpeculative(1, kK + 2).ok());
    ASSERT_TRUE(runner->CommitSpeculative(1, n).ok());
    EXPECT_FALSE(runner->CommitSpeculative(1, n).ok());  // nothing pending any more
    const double sd = StateDiff(SlotBytes(*runner, 1), plain_state[n]);
    EXPECT_LT(sd, 1e-5) << "n=" << n;
    worst_state = std::max(worst_state, sd);
    if (n == 0) {
      EXPECT_EQ(SlotBytes(*runner, 1), after_prompt);  // nothing folded
    }
    if (n <= kK) {  // continue with d_n at position kP + n over the stale rows of the rejected tokens
      step(1, pages1, kP + n, std::span<const int32_t>(&d[n], 1), false, &lg);
      float worst = 0;
      for (int64_t x = 0; x < V; ++x) worst = std::max(worst, std::abs(lg[x] - plain_logits[n][x]));
      EXPECT_LT(worst, LogitTol()) << "n=" << n;
      worst_row = std::max<double>(worst_row, worst);
      EXPECT_LT(StateDiff(SlotBytes(*runner, 1), plain_state[n + 1]), 1e-5) << "n=" << n;
    }
  }
  std::printf("[ spec ] %s/%s: worst |logit - decode| %.3g, worst state rel-L2 after commit %.3g\n",
              GetParam().fixture.c_str(), GetParam().backend.c_str(), worst_row, worst_state);
}

using gyre::testing::Collector;

struct RunOut {
  std::vector<std::vector<int32_t>> outputs;
  EngineStats stats;
};

RunOut RunAllOn(ModelRunner& runner, const EngineOptions& eo, const std::vector<std::vector<int32_t>>& prompts,
                int64_t max_tokens, float temperature_of_last = 0);

RunOut RunAll(const Model& model, const std::string& backend, const EngineOptions& eo,
              const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens, float temperature_of_last = 0) {
  std::unique_ptr<ModelRunner> runner = MakeSpecRunner(model, backend, eo.max_num_seqs);
  if (!runner) return RunOut{};
  return RunAllOn(*runner, eo, prompts, max_tokens, temperature_of_last);
}

RunOut RunAllOn(ModelRunner& runner, const EngineOptions& eo, const std::vector<std::vector<int32_t>>& prompts,
                int64_t max_tokens, float temperature_of_last) {
  RunOut res;
  auto engine = Engine::Create(runner, eo);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return res;
  EXPECT_TRUE((*engine)->Start().ok());
  std::vector<std::shared_ptr<Collector>> sinks;
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestParams p;
    p.prompt = prompts[i];
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    if (i + 1 == prompts.size()) {
      p.sampling.temperature = temperature_of_last;
      p.sampling.seed = 7;
    }
    sinks.push_back(std::make_shared<Collector>());
    EXPECT_TRUE((*engine)->Submit(p, sinks.back()).ok());
  }
  for (auto& s : sinks) {
    s->Wait();
    EXPECT_EQ(s->reason, FinishReason::kLength) << s->status.ToString();
    res.outputs.push_back(s->ids);
  }
  for (int i = 0; i < 10000 && (*engine)->Stats().requests_finished < static_cast<int64_t>(prompts.size()); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  res.stats = (*engine)->Stats();
  (*engine)->Stop();
  return res;
}

EngineOptions Opts(bool spec, bool overlap, bool prefix_cache) {
  EngineOptions eo;
  eo.max_num_seqs = 4;
  eo.kv_page_tokens = 4;
  eo.max_num_batched_tokens = 64;
  eo.overlap_steps = overlap;
  eo.enable_prefix_caching = prefix_cache;
  eo.prefix_cache_checkpoint_interval_blocks = 2;
  if (spec) {
    eo.speculative.method = "ngram";
    eo.speculative.num_speculative_tokens = 3;
    eo.speculative.prompt_lookup_max = 4;
    eo.speculative.prompt_lookup_min = 2;
  }
  return eo;
}

// Greedy outputs with n-gram speculation equal plain decoding, in one ragged batch with other
// sequences (a random prompt whose drafts are rejected, a seeded sampled request that does not
// speculate), with and without overlapped steps and the prefix cache.
TEST_P(SpecOnFixture, GreedyOutputsEqualPlainDecoding) {
  const int64_t kMaxTokens = 24;
  std::vector<int32_t> rep;
  const std::vector<int32_t> unit = Ids(5, 21);
  for (int i = 0; i < 5; ++i) rep.insert(rep.end(), unit.begin(), unit.end());  // a repetitive prompt
  const std::vector<int32_t> random = Ids(19, 22), sampled = Ids(9, 23);
  // An echo prompt: a random prompt X, the model's own greedy continuation Y of it, then X again,
  // so the lookup proposes Y (random fixtures rarely repeat themselves otherwise).
  const RunOut first = RunAll(*model_, GetParam().backend, Opts(false, false, false), {random}, kMaxTokens);
  ASSERT_EQ(first.outputs.size(), 1u);
  std::vector<int32_t> echo = random;
  echo.insert(echo.end(), first.outputs[0].begin(), first.outputs[0].end());
  echo.insert(echo.end(), random.begin(), random.end());
  const std::vector<std::vector<int32_t>> prompts = {rep, random, echo, sampled};
  const RunOut plain = RunAll(*model_, GetParam().backend, Opts(false, true, false), prompts, kMaxTokens, 0.8f);
  EXPECT_EQ(plain.stats.spec_draft_tokens, 0);
  int64_t accepted = 0, rejected = 0;
  std::map<int64_t, std::vector<int32_t>> sampled_out;
  for (int64_t lookup_min : {2, 1}) {
    for (bool overlap : {true, false}) {
      for (bool cache : {false, true}) {
        EngineOptions eo = Opts(true, overlap, cache);
        eo.speculative.prompt_lookup_min = lookup_min;
        const RunOut spec = RunAll(*model_, GetParam().backend, eo, prompts, kMaxTokens, 0.8f);
        ASSERT_EQ(spec.outputs.size(), prompts.size());
        // The greedy requests: token-identical to plain decoding.
        for (size_t q = 0; q + 1 < prompts.size(); ++q)
          EXPECT_EQ(spec.outputs[q], plain.outputs[q])
              << "prompt " << q << " min " << lookup_min << " overlap " << overlap << " cache " << cache;
        // The seeded sampled request speculates too (rejection sampling: the same distribution,
        // not the same draws as plain sampling): reproducible for its seed and drafts, whatever
        // the overlap, the cache and the batch around it.
        std::vector<int32_t>& ref = sampled_out[lookup_min];
        if (ref.empty()) ref = spec.outputs.back();
        EXPECT_EQ(spec.outputs.back(), ref) << "sampled, min " << lookup_min << " overlap " << overlap << " cache " << cache;
        EXPECT_EQ(spec.outputs.back().size(), static_cast<size_t>(kMaxTokens));
        if (lookup_min == 1) {
          EXPECT_GT(spec.stats.spec_verify_pieces, 0);
        }
        EXPECT_LE(spec.stats.spec_accepted_tokens, spec.stats.spec_draft_tokens);
        EXPECT_EQ(spec.stats.kv_pages_used, 0);
        EXPECT_EQ(spec.stats.kda_slots_used, 0);
        accepted += spec.stats.spec_accepted_tokens;
        rejected += spec.stats.spec_draft_tokens - spec.stats.spec_accepted_tokens;
        std::printf("[ spec ] %s min=%d overlap=%d cache=%d: %lld verify pieces, %lld/%lld drafts accepted\n",
                    (GetParam().fixture + "/" + GetParam().backend).c_str(), static_cast<int>(lookup_min), overlap, cache,
                    static_cast<long long>(spec.stats.spec_verify_pieces),
                    static_cast<long long>(spec.stats.spec_accepted_tokens),
                    static_cast<long long>(spec.stats.spec_draft_tokens));
      }
    }
  }
  // glm5_tiny's random weights never continue a pattern (its drafts are all rejected: the rollback
  // path); the other fixtures accept some.
  if (GetParam().fixture != "glm5_tiny") {
    EXPECT_GT(accepted, 0) << "no draft accepted on the repetitive or echo prompt";
  }
  EXPECT_GT(rejected, 0) << "no draft was rejected: the rollback path went untested";
  // A sampled request alone speculates (its verify rows are drawn by rejection sampling).
  EngineOptions eo = Opts(true, true, false);
  eo.speculative.prompt_lookup_min = 1;
  const RunOut alone = RunAll(*model_, GetParam().backend, eo, {echo}, kMaxTokens, 0.8f);
  EXPECT_GT(alone.stats.spec_verify_pieces, 0) << "the sampled request did not speculate";
}

// Pearson chi-square of `counts` against probabilities `prob` (same order) over n draws, cells
// pooled in order until each expects >= 5; false when it exceeds the p = 1e-4 critical value
// (Wilson–Hilferty), with the statistic and degrees of freedom in *why.
bool ChiSquareFits(const std::vector<int64_t>& counts, const std::vector<double>& prob, int64_t n, std::string* why) {
  double stat = 0, e = 0, o = 0;
  int cells = 0;
  for (size_t i = 0; i < prob.size(); ++i) {
    e += prob[i] * static_cast<double>(n);
    o += static_cast<double>(counts[i]);
    if (e >= 5 || i + 1 == prob.size()) {
      if (e > 0) stat += (o - e) * (o - e) / e;
      ++cells;
      e = o = 0;
    }
  }
  const double df = std::max(1, cells - 1), z = 3.719;  // one-sided p = 1e-4
  const double crit = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
  *why = "chi2 " + std::to_string(stat) + " df " + std::to_string(static_cast<int>(df)) + " critical " +
         std::to_string(crit);
  return stat <= crit;
}

// Rejection sampling against a deterministic draft keeps the sampler's distribution, for drafts
// that are likely, unlikely and outside the kept set, and returns the draft as often as its
// probability says (it is part of that distribution).
TEST(SpeculativeSampling, KeepsTheDistributionWhateverTheDraft) {
  const std::vector<float> logits = {2.0f, 1.5f, 1.5f, 0.3f, -0.2f, 3.1f, -4.0f, 0.9f, 0.0f, -1.0f, 2.4f, -9.0f};
  const int64_t kDraws = 40000;
  for (const ops::SamplingParams& p :
       {ops::SamplingParams{0.8f, 0, 1.0f, 0.0f, 3}, ops::SamplingParams{1.3f, 6, 0.9f, 0.0f, 4},
        ops::SamplingParams{1.0f, 0, 1.0f, 0.1f, 5}}) {
    const ops::SampleSupport sup = ops::SamplingSupport(logits, p);
    std::vector<char> kept(logits.size(), 0);
    for (int32_t id : sup.ids) kept[id] = 1;
    std::vector<int32_t> drafts = {sup.ids[0], sup.ids[sup.ids.size() / 2], sup.ids.back()};
    for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i)
      if (!kept[i]) {
        drafts.push_back(i);
        break;
      }
    for (int32_t draft : drafts) {
      std::vector<int64_t> counts(sup.ids.size(), 0);
      int64_t outside = 0;
      for (int64_t k = 0; k < kDraws; ++k) {
        const int32_t id = SampleSpeculativeKeyed(logits, p, static_cast<uint64_t>(k), draft);
        const auto it = std::find(sup.ids.begin(), sup.ids.end(), id);
        if (it == sup.ids.end()) ++outside;
        else ++counts[it - sup.ids.begin()];
      }
      std::string why;
      EXPECT_EQ(outside, 0) << "draft " << draft;
      EXPECT_TRUE(ChiSquareFits(counts, sup.prob, kDraws, &why)) << "T " << p.temperature << " draft " << draft << ": " << why;
    }
  }
  // The test can fail: accepting every draft is not the distribution.
  const ops::SamplingParams p{1.0f, 0, 1.0f, 0.0f, 9};
  const ops::SampleSupport sup = ops::SamplingSupport(logits, p);
  std::vector<int64_t> counts(sup.ids.size(), 0);
  for (int64_t k = 0; k < kDraws; ++k) {
    const int32_t id = k % 2 ? sup.ids[1] : SampleSpeculativeKeyed(logits, p, static_cast<uint64_t>(k), sup.ids[1]);
    ++counts[std::find(sup.ids.begin(), sup.ids.end(), id) - sup.ids.begin()];
  }
  std::string why;
  EXPECT_FALSE(ChiSquareFits(counts, sup.prob, kDraws, &why)) << why;
  // Greedy: the argmax, whatever the draft.
  EXPECT_EQ(SampleSpeculativeKeyed(logits, ops::SamplingParams{}, 0, 3), 5);
}

// On the runner (CPU, and the device sampler on CUDA): the first row of a sampled verify piece
// [known, draft] is distributed as plain sampling of that position, over many seeds.
TEST_P(SpecOnFixture, SampledVerifyRowKeepsTheDistribution) {
  auto runner = Runner(1);
  ASSERT_TRUE(runner);
  const int64_t kP = 9, V = model_->config().vocab_size;
  const std::vector<int32_t> prompt = Ids(kP, 31), next = Ids(1, 32);
  std::vector<PageId> pages;
  for (PageId p = 0; p < 8; ++p) pages.push_back(p);
  StepPiece pre;
  pre.slot = 0;
  pre.pages = pages;
  pre.ids = prompt;
  ASSERT_TRUE(runner->Step(std::span<const StepPiece>(&pre, 1), nullptr).ok());
  // The logits at the known token's position, and the sampler's distribution there.
  StepPiece one;
  one.slot = 0;
  one.pages = pages;
  one.start = kP;
  one.ids = next;
  one.speculative = true;
  one.sample.enabled = true;
  std::vector<float> lg;
  std::vector<SampledToken> out;
  ASSERT_TRUE(runner->Step(std::span<const StepPiece>(&one, 1), &out, &lg).ok());
  ASSERT_TRUE(runner->CommitSpeculative(0, 0).ok());
  ops::SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 8;
  const ops::SampleSupport sup = ops::SamplingSupport(std::span<const float>(lg.data(), V), sp);
  ASSERT_GE(sup.ids.size(), 2u);
  const std::vector<int32_t> piece = {next[0], sup.ids[1]};  // the draft: the second most likely token
  const int64_t kDraws = Cuda() ? 4000 : 2000;
  std::vector<int64_t> counts(sup.ids.size(), 0);
  int64_t outside = 0, drafted = 0;
  for (int64_t k = 0; k < kDraws; ++k) {
    StepPiece v = one;
    v.ids = piece;
    v.sample.params = sp;
    v.sample.params.seed = static_cast<uint64_t>(1000 + k);
    v.sample.offset = static_cast<uint64_t>(k % 7);
    ASSERT_TRUE(runner->Step(std::span<const StepPiece>(&v, 1), &out).ok());
    ASSERT_TRUE(runner->CommitSpeculative(0, 0).ok());  // nothing kept: the next draw sees the same state
    ASSERT_EQ(out[0].rows.size(), 2u);
    const int32_t id = out[0].rows[0].first;
    drafted += id == piece[1];
    const auto it = std::find(sup.ids.begin(), sup.ids.end(), id);
    if (it == sup.ids.end()) ++outside;
    else ++counts[it - sup.ids.begin()];
  }
  std::string why;
  EXPECT_EQ(outside, 0);
  EXPECT_TRUE(ChiSquareFits(counts, sup.prob, kDraws, &why)) << why;
  std::printf("[ spec ] %s/%s sampled verify row: draft p %.3f, returned %.3f; %s\n", GetParam().fixture.c_str(),
              GetParam().backend.c_str(), sup.prob[1], double(drafted) / kDraws, why.c_str());
}

// A runner that commits every speculative token (accepting what verification rejected) must
// change the output: the identity test above can fail.
class CommitAll final : public ModelRunner {
 public:
  explicit CommitAll(ModelRunner& inner) : inner_(inner) {}
  const ModelConfig& config() const override { return inner_.config(); }
  RunnerCapacity capacity() const override { return inner_.capacity(); }
  std::string backend() const override { return inner_.backend(); }
  Status Launch(std::span<const StepPiece> p, bool w) override {
    for (const StepPiece& q : p)
      if (q.speculative) last_ = static_cast<int64_t>(q.ids.size());
    return inner_.Launch(p, w);
  }
  Status Collect(std::vector<SampledToken>* o, std::vector<float>* l) override { return inner_.Collect(o, l); }
  Status ReserveCheckpoints(int64_t n) override { return inner_.ReserveCheckpoints(n); }
  Status SaveState(SlotId s, CheckpointId c) override { return inner_.SaveState(s, c); }
  Status RestoreState(CheckpointId c, SlotId s, int64_t n) override { return inner_.RestoreState(c, s, n); }
  Status ReadPages(std::span<const PageId> p, std::span<std::byte> d) override { return inner_.ReadPages(p, d); }
  Status WritePages(std::span<const PageId> p, std::span<const std::byte> s) override { return inner_.WritePages(p, s); }
  Status ReadSlotState(SlotId s, std::span<std::byte> d) override { return inner_.ReadSlotState(s, d); }
  Status WriteSlotState(SlotId s, std::span<const std::byte> b, int64_t n) override {
    return inner_.WriteSlotState(s, b, n);
  }
  Status CommitSpeculative(SlotId s, int64_t n) override {
    wrong += n != last_;
    return inner_.CommitSpeculative(s, last_);
  }
  int64_t wrong = 0;

 private:
  ModelRunner& inner_;
  int64_t last_ = 0;
};

TEST_P(SpecOnFixture, AWrongCommitChangesTheOutput) {
  const int64_t kMaxTokens = 24;
  const std::vector<int32_t> random = Ids(19, 22);
  std::vector<int32_t> rep;
  const std::vector<int32_t> unit = Ids(5, 21);
  for (int i = 0; i < 5; ++i) rep.insert(rep.end(), unit.begin(), unit.end());
  const RunOut plain = RunAll(*model_, GetParam().backend, Opts(false, false, false), {rep, random}, kMaxTokens);
  auto inner = Runner(4);
  // Engine over the decorator (one request at a time: the decorator tracks one pending piece).
  for (const auto& prompt : {rep, random}) {
    CommitAll bad(*inner);
    EngineOptions eo = Opts(true, false, false);
    eo.max_num_seqs = 1;
    eo.speculative.prompt_lookup_min = 1;  // drafts on every fixture
    auto engine = Engine::Create(bad, eo);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    ASSERT_TRUE((*engine)->Start().ok());
    auto sink = std::make_shared<Collector>();
    RequestParams p;
    p.prompt = prompt;
    p.max_tokens = kMaxTokens;
    p.ignore_eos = true;
    ASSERT_TRUE((*engine)->Submit(p, sink).ok());
    sink->Wait();
    (*engine)->Stop();
    if (bad.wrong == 0) continue;  // every draft accepted anyway: nothing to catch here
    const auto& want = prompt == rep ? plain.outputs[0] : plain.outputs[1];
    EXPECT_NE(sink->ids, want) << "a commit of rejected tokens went unnoticed";
    return;
  }
  GTEST_SKIP() << "no draft was rejected on this fixture";
}

// A runner of `backend` over `model` that drafts up to `k` MTP tokens (and verifies up to 4).
std::unique_ptr<ModelRunner> MakeMtpRunner(const Model& model, const std::string& backend, int64_t slots, int64_t k) {
  return MakeSpecRunner(model, backend, slots, k);
}

std::vector<std::string> Backends() {
  std::vector<std::string> b = {"cpu"};
#ifdef GYRE_CUDA
  b.push_back("cuda");
#endif
  return b;
}

class MtpSpeculation : public ::testing::TestWithParam<std::string> {};

// MTP drafts (method "mtp") on the trained glm5_mini, on each backend: greedy outputs equal plain
// decoding on that backend for k = 1 and 3, with and without overlap and the prefix cache, in a
// batch with a sampled request that speculates too; the trained MTP layer's drafts are accepted
// far above chance (its first-draft acceptance on held-out text is about 60%, `gyre eval`; random
// drafts from 4k tokens would be accepted well under 1% of the time).
TEST_P(MtpSpeculation, TrainedModelGreedyOutputsEqualPlainDecoding) {
  const std::string backend = GetParam();
  auto m = Model::Load(Fixture("glm5_mini"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Model& model = **m;
  ASSERT_TRUE(model.has_mtp());
  // Prompts of the fixture's own tokens (held-out text through its tokenizer is the eval's job;
  // these are its greedy continuations of a few seed tokens, which the MTP has learnt to guess).
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t s0 : {11, 523, 1777}) {
    std::vector<int32_t> p = {s0, static_cast<int32_t>(s0 + 7), static_cast<int32_t>(s0 + 19)};
    prompts.push_back(p);
  }
  prompts.push_back({5, 6, 7, 8});  // the sampled one
  const int64_t kMaxTokens = 32;
  const RunOut plain = RunAll(model, backend, Opts(false, true, false), prompts, kMaxTokens, 0.8f);
  ASSERT_EQ(plain.outputs.size(), prompts.size());
  for (int64_t k : {1, 3}) {
    std::vector<int32_t> sampled_ref;
    for (bool overlap : {true, false}) {
      for (bool cache : {false, true}) {
        EngineOptions eo = Opts(false, overlap, cache);
        eo.speculative.method = "mtp";
        eo.speculative.num_speculative_tokens = k;
        std::unique_ptr<ModelRunner> runner = MakeMtpRunner(model, backend, eo.max_num_seqs, k);
        ASSERT_TRUE(runner);
        ASSERT_EQ(runner->capacity().mtp_drafts, k);
        RunOut spec = RunAllOn(*runner, eo, prompts, kMaxTokens, 0.8f);
        ASSERT_EQ(spec.outputs.size(), prompts.size());
        for (size_t q = 0; q + 1 < prompts.size(); ++q)
          EXPECT_EQ(spec.outputs[q], plain.outputs[q]) << "prompt " << q << " k " << k << " overlap " << overlap
                                                       << " cache " << cache;
        if (sampled_ref.empty()) sampled_ref = spec.outputs.back();
        EXPECT_EQ(spec.outputs.back(), sampled_ref) << "sampled, k " << k << " overlap " << overlap << " cache " << cache;
        EXPECT_GT(spec.stats.spec_verify_pieces, 0);
        EXPECT_GT(spec.stats.spec_accepted_tokens * 20, spec.stats.spec_draft_tokens * (k == 1 ? 8 : 3))
            << "MTP drafts accepted " << spec.stats.spec_accepted_tokens << " of " << spec.stats.spec_draft_tokens;
        EXPECT_EQ(spec.stats.kv_pages_used, 0);
        EXPECT_EQ(spec.stats.kda_slots_used, 0);
        // Per draft position: position 0 is drafted once per verify piece; a draft is accepted only
        // after its predecessors, so acceptance never rises with the position; the sums are the totals.
        ASSERT_EQ(spec.stats.spec_drafts_per_pos.size(), static_cast<size_t>(k));
        ASSERT_EQ(spec.stats.spec_accepted_per_pos.size(), static_cast<size_t>(k));
        EXPECT_EQ(spec.stats.spec_drafts_per_pos[0], spec.stats.spec_verify_pieces);
        int64_t drafted = 0, accepted_sum = 0;
        for (int64_t j = 0; j < k; ++j) {
          drafted += spec.stats.spec_drafts_per_pos[j];
          accepted_sum += spec.stats.spec_accepted_per_pos[j];
          EXPECT_LE(spec.stats.spec_accepted_per_pos[j], spec.stats.spec_drafts_per_pos[j]);
          if (j > 0) EXPECT_LE(spec.stats.spec_accepted_per_pos[j], spec.stats.spec_accepted_per_pos[j - 1]);
        }
        EXPECT_EQ(drafted, spec.stats.spec_draft_tokens);
        EXPECT_EQ(accepted_sum, spec.stats.spec_accepted_tokens);
        std::printf("[ mtp ] %s k=%d overlap=%d cache=%d: %lld verify pieces, %lld/%lld drafts accepted\n",
                    backend.c_str(), static_cast<int>(k), overlap, cache,
                    static_cast<long long>(spec.stats.spec_verify_pieces),
                    static_cast<long long>(spec.stats.spec_accepted_tokens),
                    static_cast<long long>(spec.stats.spec_draft_tokens));
      }
    }
  }
}

// Small models with an MTP layer in shapes the CUDA kernels take (mla_cuda.h CheckMlaDims: nope
// and kv LoRA multiples of 16, v of 8): glm5 with q LoRA, 3 heads, mHC over 2 streams, no rope;
// kimi with a direct q_proj, a rope part and MoE.
constexpr const char* kGlm5MtpGpu = R"({
  "model_type": "glm5_next", "vocab_size": 61, "hidden_size": 48, "intermediate_size": 56,
  "moe_intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 3, "num_key_value_heads": 3,
  "q_lora_rank": 40, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "v_head_dim": 16, "qk_rope_head_dim": 0,
  "index_n_heads": 2, "index_head_dim": 8, "index_topk": 8, "index_kpool": 4,
  "linear_num_heads": 2, "linear_head_dim": 8, "hc_mult": 2, "swiglu_limit": 1.5,
  "layer_types": ["linear_attention", "deepseek_sparse_attention"], "mlp_layer_types": ["dense", "dense"],
  "num_nextn_predict_layers": 1})";
constexpr const char* kKimiMtpGpu = R"({
  "model_type": "kimi_linear", "vocab_size": 53, "hidden_size": 32, "intermediate_size": 40,
  "moe_intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
  "q_lora_rank": null, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 8,
  "num_experts": 4, "num_experts_per_token": 2, "num_shared_experts": 1,
  "linear_attn_config": {"kda_layers": [1], "full_attn_layers": [2], "head_dim": 8, "num_heads": 2,
                         "short_conv_kernel_size": 4},
  "num_nextn_predict_layers": 1})";

// The CUDA model's drafts are the CPU runner's (the reference: Model::MtpStep) on the same
// pieces: a prompt with a chain of 3, then decode rows (their keys written by the piece pass),
// then a speculative piece whose drafts are partly rejected (the chain restarts from the device's
// acceptance), then one with every draft accepted, across page boundaries (4-token pages). On the
// trained glm5_mini and on random glm5 (odd sizes, q LoRA, mHC) and kimi (q_proj, a rope part)
// models with an MTP layer. fp32 on both: the MTP logits differ by reassociation only, so a draft
// may differ only at a near tie; per model the drafts vectors are asserted equal on at least 90%
// of the steps, and the first step's exactly.
TEST_P(MtpSpeculation, DraftsMatchTheCpuRunner) {
  std::vector<std::pair<std::string, std::unique_ptr<Model>>> models;
  {
    auto m = Model::Load(Fixture("glm5_mini"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    models.emplace_back("glm5_mini", std::move(*m));
  }
  models.emplace_back("glm5_random", RandomModel(kGlm5MtpGpu, 3));
  models.emplace_back("kimi_random", RandomModel(kKimiMtpGpu, 4));
  for (const auto& [name, mp] : models) ASSERT_TRUE(mp && mp->has_mtp()) << name;
  if (GetParam() != "cuda") GTEST_SKIP() << "compares the CUDA model with the CPU runner (the models load)";
  const int64_t k = 3;
  for (const auto& named : models) {
    // Not a structured binding: clang 14 (the fuzz/sanitizer build) cannot capture one in a lambda.
    const std::string& name = named.first;
    const std::unique_ptr<Model>& mp = named.second;
    ASSERT_TRUE(mp) << name;
    const Model& model = *mp;
    const int32_t V = static_cast<int32_t>(model.config().vocab_size);
    std::unique_ptr<ModelRunner> cpu = MakeMtpRunner(model, "cpu", 2, k), gpu = MakeMtpRunner(model, "cuda", 2, k);
    ASSERT_TRUE(cpu && gpu) << name;
    int64_t steps = 0, equal = 0;
    for (int32_t s0 : {11, 523, 1777, 3001}) {
      std::vector<int32_t> prompt;
      for (int32_t d : {0, 7, 19, 3, 1}) prompt.push_back((s0 + d) % V);
      std::vector<PageId> pages;
      for (PageId p = 0; p < 16; ++p) pages.push_back(p);
      std::vector<int32_t> seq = prompt;
      std::vector<SampledToken> out_c, out_g;
      auto run = [&](int64_t start, std::span<const int32_t> ids, bool speculative) {
        StepPiece p;
        p.slot = 0;
        p.pages = pages;
        p.start = start;
        p.ids = ids;
        p.speculative = speculative;
        p.sample.enabled = true;
        p.mtp = static_cast<int32_t>(k);
        for (ModelRunner* r : {cpu.get(), gpu.get()}) {
          ASSERT_TRUE(r->Launch(std::span<const StepPiece>(&p, 1)).ok());
          ASSERT_TRUE(r->Collect(r == cpu.get() ? &out_c : &out_g).ok());
        }
        ASSERT_EQ(out_c.size(), 1u);
        ASSERT_EQ(out_g.size(), 1u);
        ASSERT_EQ(out_g[0].drafts.size(), static_cast<size_t>(k));
        ++steps;
        if (out_c[0].drafts == out_g[0].drafts) {
          ++equal;
        } else {
          std::printf("[ mtp ] %s prompt %d at %lld: cpu drafts differ from cuda\n", name.c_str(), s0,
                      static_cast<long long>(start));
        }
      };
      run(0, prompt, false);
      ASSERT_EQ(out_c[0].drafts, out_g[0].drafts) << name << " prompt " << s0;
      ASSERT_EQ(out_c[0].id, out_g[0].id) << name;
      // Decode rows: the token just sampled, each with a chain.
      for (int i = 0; i < 4; ++i) {
        seq.push_back(out_c[0].id);
        run(static_cast<int64_t>(seq.size()) - 1, std::span<const int32_t>(&seq.back(), 1), false);
        ASSERT_EQ(out_c[0].id, out_g[0].id) << name;
      }
      // A speculative piece: the sampled token, then the drafts with the second one wrong; then
      // one with the drafts as they came.
      for (bool wrong : {true, false}) {
        std::vector<int32_t> piece = {out_c[0].id};
        for (int32_t d : out_c[0].drafts) piece.push_back(d);
        if (wrong) piece[2] = (piece[2] + 1) % V;
        const int64_t start = static_cast<int64_t>(seq.size());
        run(start, piece, true);
        ASSERT_EQ(out_c[0].rows.size(), piece.size());
        int64_t a = 1;  // accepted tokens of the piece (its first is the previous sample)
        while (a < static_cast<int64_t>(piece.size()) && out_c[0].rows[a - 1].first == piece[a]) ++a;
        for (int64_t j = 0; j < a; ++j) seq.push_back(piece[j]);
        ASSERT_TRUE(cpu->CommitSpeculative(0, a).ok());
        ASSERT_TRUE(gpu->CommitSpeculative(0, a).ok());
        out_c[0].id = out_c[0].rows[a - 1].first;
        // The next decode row continues from the bonus token.
        seq.push_back(out_c[0].id);
        run(static_cast<int64_t>(seq.size()) - 1, std::span<const int32_t>(&seq.back(), 1), false);
      }
    }
    std::printf("[ mtp ] %s: cuda drafts equal the cpu runner's on %lld of %lld steps\n", name.c_str(),
                static_cast<long long>(equal), static_cast<long long>(steps));
    EXPECT_GE(equal * 10, steps * 9) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, MtpSpeculation, ::testing::ValuesIn(Backends()),
                         [](const auto& info) { return info.param; });

TEST(MtpRefusals, RefusedWhereNoMtpRuns) {
  EngineOptions eo = Opts(false, false, false);
  eo.speculative.method = "mtp";
  eo.speculative.num_speculative_tokens = 2;
  auto tiny = Model::Load(Fixture("glm5_tiny"));  // no MTP layer
  ASSERT_TRUE(tiny.ok());
  auto e = Engine::Create(**tiny, eo);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("MTP layer"), std::string::npos) << e.status().ToString();
  auto mini = Model::Load(Fixture("glm5_mini"));
  ASSERT_TRUE(mini.ok());
  auto runner = MakeSpecRunner(**mini, "cpu", 2);  // a runner without MTP drafts
  auto e2 = Engine::Create(*runner, eo);
  ASSERT_FALSE(e2.ok());
  EXPECT_NE(e2.status().message().find("MTP drafts are not available"), std::string::npos) << e2.status().ToString();
  CpuRunnerOptions ro;
  ro.num_pages = 16;
  ro.mtp_drafts = 1;  // fewer than asked
  auto small = CpuRunner::Create(**mini, ro);
  ASSERT_TRUE(small.ok());
  auto e3 = Engine::Create(**small, eo);
  ASSERT_FALSE(e3.ok());
  EXPECT_NE(e3.status().message().find("at most 1"), std::string::npos) << e3.status().ToString();
  auto e4 = Engine::Create(**mini, eo);  // the model's own runner is built with them
  ASSERT_TRUE(e4.ok()) << e4.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SpecOnFixture, ::testing::ValuesIn(SpecCases()),
                         [](const auto& info) { return info.param.fixture + "_" + info.param.backend; });

}  // namespace
}  // namespace gyre
