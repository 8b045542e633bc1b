// Engine: continuous batching gives the same greedy tokens as standalone generation, under
// preemption and chunked prefill; every request ends exactly once; pools return to empty; seeded
// sampling does not depend on the batch. The runner tests run on every backend built (CPU always;
// the CUDA model in CUDA builds, on a GPU: `test_engine --gtest_filter='*cuda*'`).
#include "engine/engine.h"
#include "engine/test_collector.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <algorithm>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "model/random_weights.h"
#include "ops/reference.h"
#include "engine/test_backends.h"
#include "runtime/cpu_runner.h"
#include "runtime/generate.h"
#include "runtime/model.h"

namespace gyre {
namespace {

const char* kConfig = R"({
  "model_type": "glm5_next", "vocab_size": 97, "hidden_size": 32, "intermediate_size": 48,
  "moe_intermediate_size": 16, "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 2,
  "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "v_head_dim": 8, "qk_rope_head_dim": 0,
  "index_n_heads": 4, "index_head_dim": 8, "index_topk": 16, "index_kpool": 4,
  "linear_num_heads": 2, "linear_head_dim": 8, "n_routed_experts": 8, "num_experts_per_tok": 2,
  "eos_token_id": 96})";

std::unique_ptr<Model> MakeModel() {
  auto cfg = ParseModelConfig(kConfig);
  auto w = RandomWeights(*cfg, 9);
  return Model::FromWeights(*cfg, std::move(*w));
}

using gyre::testing::Collector;

std::vector<int32_t> Ids(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(rng() % 96);
  return v;
}

// A backend: builds a runner over `model` with `slots` state slots and `pages` pages.
using testing::Backend;
using testing::Backends;

class EngineOnRunner : public ::testing::TestWithParam<Backend> {};

int64_t PagesFor(const EngineOptions& eo) {
  return CpuRunner::PagesForBytes(*ParseModelConfig(kConfig), eo.kv_page_tokens, eo.kv_memory_bytes);
}

// Submits `reqs` together to an engine over a fresh runner of `be` and waits for them all.
std::vector<std::shared_ptr<Collector>> RunTogether(const Backend& be, const Model& model, const EngineOptions& eo,
                                                    const std::vector<RequestParams>& reqs) {
  auto r = be.make(model, eo.max_num_seqs, eo.kv_page_tokens, PagesFor(eo));
  EXPECT_TRUE(r.ok());
  if (!r.ok()) return {};
  auto engine = Engine::Create(**r, eo);
  EXPECT_TRUE(engine.ok());
  if (!engine.ok()) return {};
  EXPECT_TRUE((*engine)->Start().ok());
  std::vector<std::shared_ptr<Collector>> sinks;
  for (const RequestParams& p : reqs) {
    sinks.push_back(std::make_shared<Collector>());
    EXPECT_TRUE((*engine)->Submit(p, sinks.back()).ok());
  }
  for (auto& s : sinks) s->Wait();
  (*engine)->Stop();
  return sinks;
}

// Standalone generation on a fresh runner of the same backend (one sequence, enough pages).
std::vector<int32_t> Standalone(const Backend& be, const Model& model, const std::vector<int32_t>& prompt,
                                const GenerateOptions& go) {
  auto r = be.make(model, 1, 16, (static_cast<int64_t>(prompt.size()) + go.max_tokens) / 16 + 2);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  auto res = Generate(**r, {prompt}, go);
  EXPECT_TRUE(res.ok()) << res.status().ToString();
  return res.ok() ? (*res)[0].ids : std::vector<int32_t>{};
}

void ExpectMatchesStandalone(const Backend& be, const EngineOptions& eo, int num_requests, bool expect_preemption) {
  auto model = MakeModel();
  auto runner = be.make(*model, eo.max_num_seqs, eo.kv_page_tokens, PagesFor(eo));
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  auto engine = Engine::Create(**runner, eo);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  ASSERT_TRUE((*engine)->Start().ok());
  std::vector<std::shared_ptr<Collector>> sinks;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < num_requests; ++i) {
    prompts.push_back(Ids(5 + 13 * i % 60, 100 + i));
    RequestParams p;
    p.prompt = prompts.back();
    p.max_tokens = 10;
    p.ignore_eos = true;
    p.top_logprobs = 2;
    sinks.push_back(std::make_shared<Collector>());
    ASSERT_TRUE((*engine)->Submit(p, sinks.back()).ok());
  }
  for (auto& s : sinks) s->Wait();
  GenerateOptions go;
  go.max_tokens = 10;
  go.ignore_eos = true;
  for (int i = 0; i < num_requests; ++i) {
    EXPECT_EQ(sinks[i]->ids, Standalone(be, *model, prompts[i], go)) << "request " << i;
    EXPECT_EQ(sinks[i]->num_finish, 1);
    EXPECT_EQ(sinks[i]->reason, FinishReason::kLength);
    EXPECT_EQ(sinks[i]->usage.prompt_tokens, static_cast<int64_t>(prompts[i].size()));
    EXPECT_EQ(sinks[i]->usage.completion_tokens, 10);
    for (float lp : sinks[i]->logprobs) EXPECT_LE(lp, 0.0f);
    for (size_t t : sinks[i]->tops) EXPECT_EQ(t, 2u);
  }
  // Give the engine thread a moment to publish its last stats.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const EngineStats st = (*engine)->Stats();
  EXPECT_EQ(st.kv_pages_used, 0);
  EXPECT_EQ(st.kda_slots_used, 0);
  EXPECT_EQ(st.num_running, 0);
  EXPECT_EQ(st.requests_finished, num_requests);
  if (expect_preemption) {
    EXPECT_GT(st.num_preemptions, 0);
  }
  (*engine)->Stop();
}

TEST_P(EngineOnRunner, ContinuousBatchingMatchesStandaloneGreedy) {
  EngineOptions eo;
  eo.max_num_seqs = 4;
  eo.max_num_batched_tokens = 32;  // forces chunked prefill of the longer prompts
  ExpectMatchesStandalone(GetParam(), eo, 10, false);
}

TEST_P(EngineOnRunner, PreemptionUnderMemoryPressureKeepsResults) {
  EngineOptions eo;
  eo.max_num_seqs = 4;
  eo.kv_page_tokens = 4;
  eo.max_num_batched_tokens = 64;
  const AttnRowLayout lay(*ParseModelConfig(kConfig));
  eo.kv_memory_bytes = 40 * eo.kv_page_tokens * lay.row_floats * 4;  // 40 pages = 160 tokens for 4 sequences
  ExpectMatchesStandalone(GetParam(), eo, 8, true);
}

// A seeded sampled request gives the same tokens alone, beside other requests, and under
// preemption; two seeds give different tokens (so the test can fail).
TEST_P(EngineOnRunner, SeededSamplingDoesNotDependOnTheBatch) {
  auto model = MakeModel();
  RequestParams p;
  p.prompt = Ids(23, 7);
  p.max_tokens = 24;
  p.ignore_eos = true;
  p.sampling.temperature = 0.9f;
  p.sampling.top_p = 0.95f;
  p.sampling.top_k = 40;
  p.sampling.seed = 1234;
  auto run = [&](const EngineOptions& eo, int others, uint64_t seed) {
    auto runner = GetParam().make(*model, eo.max_num_seqs, eo.kv_page_tokens, PagesFor(eo));
    EXPECT_TRUE(runner.ok());
    auto engine = Engine::Create(**runner, eo);
    EXPECT_TRUE(engine.ok());
    EXPECT_TRUE((*engine)->Start().ok());
    std::vector<std::shared_ptr<Collector>> sinks;
    for (int i = 0; i < others; ++i) {  // submitted first: the seeded request joins a running batch
      RequestParams q = p;
      q.prompt = Ids(9 + 7 * i, 300 + i);
      q.sampling.seed = 99 + i;
      sinks.push_back(std::make_shared<Collector>());
      EXPECT_TRUE((*engine)->Submit(q, sinks.back()).ok());
    }
    RequestParams mine = p;
    mine.sampling.seed = seed;
    auto sink = std::make_shared<Collector>();
    EXPECT_TRUE((*engine)->Submit(mine, sink).ok());
    sink->Wait();
    for (auto& s : sinks) s->Wait();
    (*engine)->Stop();
    return sink->ids;
  };
  EngineOptions alone;
  alone.max_num_seqs = 4;
  const std::vector<int32_t> a = run(alone, 0, 1234);
  ASSERT_EQ(a.size(), 24u);
  EngineOptions crowded = alone;
  crowded.max_num_batched_tokens = 16;  // chunked prefill beside decodes
  EXPECT_EQ(run(crowded, 3, 1234), a);
  EngineOptions tight = crowded;  // preemption: 30 pages of 4 tokens for 4 sequences of ~50 tokens
  tight.kv_page_tokens = 4;
  const AttnRowLayout lay(*ParseModelConfig(kConfig));
  tight.kv_memory_bytes = 30 * tight.kv_page_tokens * lay.row_floats * 4;
  EXPECT_EQ(run(tight, 3, 1234), a);
  EXPECT_NE(run(alone, 0, 4321), a);
}

// One step at a time gives the same tokens as overlapped steps.
TEST_P(EngineOnRunner, WithoutOverlapMatchesStandaloneToo) {
  EngineOptions eo;
  eo.max_num_seqs = 4;
  eo.max_num_batched_tokens = 32;
  eo.overlap_steps = false;
  ExpectMatchesStandalone(GetParam(), eo, 6, false);
}

// A runner decorator that records how the engine drives it.
class WatchingRunner final : public ModelRunner {
 public:
  explicit WatchingRunner(ModelRunner& inner) : inner_(inner) {}
  const ModelConfig& config() const override { return inner_.config(); }
  RunnerCapacity capacity() const override { return inner_.capacity(); }
  std::string backend() const override { return "watch:" + inner_.backend(); }
  Status Launch(std::span<const StepPiece> pieces, bool want_logits) override {
    if (before_launch) before_launch();
    int64_t step_tokens = 0;
    steps.emplace_back();
    for (const StepPiece& p : pieces) steps.back().push_back(static_cast<int64_t>(p.ids.size()));
    for (const StepPiece& p : pieces) {
      step_tokens += static_cast<int64_t>(p.ids.size());
      const bool prev = p.ids.size() == 1 && p.ids[0] == kPrevToken;
      prev_pieces += prev;
      masked_pieces += !p.sample.allowed.empty();
      masked_prev_pieces += prev && !p.sample.allowed.empty();
    }
    max_step_tokens = std::max(max_step_tokens, step_tokens);
    GYRE_RETURN_IF_ERROR(inner_.Launch(pieces, want_logits));
    max_outstanding = std::max(max_outstanding, ++outstanding);
    return Status::Ok();
  }
  Status Collect(std::vector<SampledToken>* out, std::vector<float>* logits) override {
    --outstanding;
    return inner_.Collect(out, logits);
  }
  Status ReserveCheckpoints(int64_t count) override { return inner_.ReserveCheckpoints(count); }
  Status ReadPages(std::span<const PageId> p, std::span<std::byte> d) override { return inner_.ReadPages(p, d); }
  Status WritePages(std::span<const PageId> p, std::span<const std::byte> s) override { return inner_.WritePages(p, s); }
  Status ReadSlotState(SlotId s, std::span<std::byte> d) override { return inner_.ReadSlotState(s, d); }
  Status WriteSlotState(SlotId s, std::span<const std::byte> b, int64_t n) override {
    return inner_.WriteSlotState(s, b, n);
  }
  Status SaveState(SlotId slot, CheckpointId ckpt) override {
    ++saves;
    return inner_.SaveState(slot, ckpt);
  }
  Status RestoreState(CheckpointId ckpt, SlotId slot, int64_t num_tokens) override {
    ++restores;
    return inner_.RestoreState(ckpt, slot, num_tokens);
  }
  int64_t saves = 0, restores = 0;
  int outstanding = 0, max_outstanding = 0;
  std::function<void()> before_launch;  // called first in Launch (on the engine thread)
  std::vector<std::vector<int64_t>> steps;  // tokens per piece of every step, in launch order
  int64_t prev_pieces = 0, masked_pieces = 0, masked_prev_pieces = 0;
  int64_t max_step_tokens = 0;  // the most tokens (ids of all pieces) one Launch carried

 private:
  ModelRunner& inner_;
};

// An engine over a WatchingRunner over the backend's runner for `model`, started (`status` says
// why not). Members go in reverse order: the engine before the runners it drives.
struct WatchedEngine {
  WatchedEngine(const Backend& backend, const Model& model, const EngineOptions& eo) {
    auto r = backend.make(model, eo.max_num_seqs, eo.kv_page_tokens, PagesFor(eo));
    if (!r.ok()) {
      status = r.status();
      return;
    }
    inner = std::move(*r);
    watch = std::make_unique<WatchingRunner>(*inner);
    auto e = Engine::Create(*watch, eo);
    if (!e.ok()) {
      status = e.status();
      return;
    }
    engine = std::move(*e);
    status = engine->Start();
  }
  Status status;
  std::unique_ptr<ModelRunner> inner;
  std::unique_ptr<WatchingRunner> watch;
  std::unique_ptr<Engine> engine;
};

// Holds the engine thread in its first Launch until Release(): requests submitted between
// WaitEntered() and Release() arrive while the first step's pieces are scheduled.
class FirstLaunchGate {
 public:
  explicit FirstLaunchGate(WatchingRunner& w) {
    w.before_launch = [this] {
      std::unique_lock<std::mutex> l(mu_);
      if (entered_) return;
      entered_ = true;
      cv_.notify_all();
      cv_.wait(l, [&] { return release_; });
    };
  }
  bool WaitEntered() {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(60), [&] { return entered_; });
  }
  void Release() {
    {
      std::lock_guard<std::mutex> l(mu_);
      release_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false, release_ = false;
};

// Overlap is real: the engine launches step n+1 before collecting step n, feeding decodes the
// in-flight token (kPrevToken); switched off, it never does. Both give the standalone tokens.
TEST_P(EngineOnRunner, OverlapLaunchesAheadWithInFlightTokens) {
  auto model = MakeModel();
  for (bool overlap : {true, false}) {
    EngineOptions eo;
    eo.max_num_seqs = 4;
    eo.overlap_steps = overlap;
    WatchedEngine w(GetParam(), *model, eo);
    ASSERT_TRUE(w.status.ok()) << w.status.ToString();
    WatchingRunner& watch = *w.watch;
    Engine* engine = w.engine.get();
    std::vector<std::shared_ptr<Collector>> sinks;
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 3; ++i) {
      prompts.push_back(Ids(11 + 5 * i, 700 + i));
      RequestParams p;
      p.prompt = prompts.back();
      p.max_tokens = 12;
      p.ignore_eos = true;
      sinks.push_back(std::make_shared<Collector>());
      ASSERT_TRUE(engine->Submit(p, sinks.back()).ok());
    }
    for (auto& s : sinks) s->Wait();
    engine->Stop();
    GenerateOptions go;
    go.max_tokens = 12;
    go.ignore_eos = true;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(sinks[i]->ids, Standalone(GetParam(), *model, prompts[i], go)) << i;
    EXPECT_EQ(watch.outstanding, 0);
    if (overlap) {
      EXPECT_EQ(watch.max_outstanding, 2);
      EXPECT_GT(watch.prev_pieces, 0);
    } else {
      EXPECT_EQ(watch.max_outstanding, 1);
      EXPECT_EQ(watch.prev_pieces, 0);
    }
  }
}

// The step's token budget (max_num_batched_tokens) holds for running pieces and admissions
// together: a burst of prompts is chunked over several steps, never run in one oversized step.
// (tools/mutate.py engine_admit_budget: admissions not charged to the budget passed every other
// engine test and the cpu_engine_load gate.)
TEST_P(EngineOnRunner, StepsStayWithinTheTokenBudget) {
  auto model = MakeModel();
  EngineOptions eo;
  eo.max_num_seqs = 4;
  eo.max_num_batched_tokens = 16;
  WatchedEngine w(GetParam(), *model, eo);
  ASSERT_TRUE(w.status.ok()) << w.status.ToString();
  WatchingRunner& watch = *w.watch;
  Engine* engine = w.engine.get();
  std::vector<std::shared_ptr<Collector>> sinks;
  for (int i = 0; i < 4; ++i) {  // 4 × 30 prompt tokens: at least 8 steps' worth of budget
    RequestParams p;
    p.prompt = Ids(30, 800 + i);
    p.max_tokens = 4;
    p.ignore_eos = true;
    sinks.push_back(std::make_shared<Collector>());
    ASSERT_TRUE(engine->Submit(p, sinks.back()).ok());
  }
  for (auto& s : sinks) s->Wait();
  engine->Stop();
  for (auto& s : sinks) EXPECT_EQ(s->ids.size(), 4u);
  EXPECT_EQ(watch.max_step_tokens, 16);  // full steps while prompts wait, none above the budget
}

// A request that arrives during a long chunked prefill starts at the next step when
// long_prefill_token_threshold caps the running prefill's pieces while it waits; with the cap off
// it waits for the whole prefill (what the 1M-token serving run showed on the H200: a 64-token
// request sent 5 s into the long prefill was answered 268 s later). A 20-token short prompt does
// not fit the first step's leftover budget (16 - 4): once admitted it is itself a running prefill,
// and the cap must stay on while two requests prefill, or it waits behind the older long one.
// With two long prefills and the threshold at half the budget (gyre serve's default), the two
// capped pieces fill the step: the running prefills must leave `threshold` tokens for admission
// while a request waits (what 4 concurrent long requests on an H100 showed: a 64-token request
// waited 38 s, bench/results/gpu_check_1bfb276/).
TEST_P(EngineOnRunner, AWaitingRequestStartsDuringALongPrefill) {
  auto model = MakeModel();
  struct Case {
    int64_t threshold;
    int short_len, longs;
  };
  for (const Case& k : {Case{4, 5, 1}, Case{4, 20, 1}, Case{8, 5, 2}, Case{0, 5, 1}}) {
    const int64_t threshold = k.threshold;
    const int short_len = k.short_len;
    SCOPED_TRACE("threshold " + std::to_string(threshold) + ", short prompt " + std::to_string(short_len) + ", " +
                 std::to_string(k.longs) + " long prompts");
    EngineOptions eo;
    eo.max_num_seqs = 3;
    eo.max_num_batched_tokens = 16;
    eo.long_prefill_token_threshold = threshold;
    WatchedEngine w(GetParam(), *model, eo);
    ASSERT_TRUE(w.status.ok()) << w.status.ToString();
    // The engine thread waits in its first Launch (the long request's first piece) until the
    // short request is queued, so the short one arrives during the long prefill on every run.
    FirstLaunchGate gate(*w.watch);
    struct Ordered : Collector {
      std::atomic<int>* counter = nullptr;
      int rank = -1;
      void OnFinish(FinishReason r, const Status& st, const Usage& u) override {
        rank = (*counter)++;
        Collector::OnFinish(r, st, u);
      }
    };
    std::atomic<int> finished{0};
    auto long_sink = std::make_shared<Ordered>(), long2_sink = std::make_shared<Ordered>();
    auto short_sink = std::make_shared<Ordered>();
    long_sink->counter = long2_sink->counter = short_sink->counter = &finished;
    RequestParams lp;
    lp.prompt = Ids(600, 41);  // 38 steps of 16 tokens
    lp.max_tokens = 1;
    lp.ignore_eos = true;
    ASSERT_TRUE(w.engine->Submit(lp, long_sink).ok());
    ASSERT_TRUE(gate.WaitEntered());
    if (k.longs == 2) {
      lp.prompt = Ids(600, 43);
      ASSERT_TRUE(w.engine->Submit(lp, long2_sink).ok());
    }
    RequestParams sp;
    sp.prompt = Ids(short_len, 42);
    sp.max_tokens = 2;
    sp.ignore_eos = true;
    ASSERT_TRUE(w.engine->Submit(sp, short_sink).ok());
    gate.Release();
    long_sink->Wait();
    short_sink->Wait();
    if (k.longs == 2) long2_sink->Wait();
    w.engine->Stop();
    EXPECT_EQ(long_sink->ids.size(), 1u);
    EXPECT_EQ(short_sink->ids.size(), 2u);
    std::string trace;
    for (size_t i = 0; i < std::min<size_t>(w.watch->steps.size(), 6); ++i) {
      trace += " [";
      for (int64_t n : w.watch->steps[i]) trace += std::to_string(n) + " ";
      trace += "]";
    }
    SCOPED_TRACE("first steps:" + trace);
    if (threshold > 0) {
      EXPECT_EQ(short_sink->rank, 0) << "the short request waited for the long prefill";
    } else {
      EXPECT_EQ(long_sink->rank, 0) << "without the cap the long prefill keeps the whole budget";
    }
  }
}

// EngineStats::max_request_stall_s (gyre_request_max_stall_seconds): a request queued behind a
// long prefill (one slot) shows its wait at least as long as the test held it; with nothing left
// to run it reads 0. Lower bounds set by the test's own sleep, not timings of the engine.
TEST_P(EngineOnRunner, StallGaugeShowsAQueuedRequest) {
  auto model = MakeModel();
  EngineOptions eo;
  eo.max_num_seqs = 1;
  eo.max_num_batched_tokens = 16;
  WatchedEngine w(GetParam(), *model, eo);
  ASSERT_TRUE(w.status.ok()) << w.status.ToString();
  FirstLaunchGate gate(*w.watch);
  auto a = std::make_shared<Collector>(), b = std::make_shared<Collector>();
  RequestParams lp;
  lp.prompt = Ids(400, 51);  // 25 steps of 16 tokens, B waiting for the only slot
  lp.max_tokens = 1;
  lp.ignore_eos = true;
  ASSERT_TRUE(w.engine->Submit(lp, a).ok());
  ASSERT_TRUE(gate.WaitEntered());
  RequestParams sp;
  sp.prompt = Ids(5, 52);
  sp.max_tokens = 1;
  ASSERT_TRUE(w.engine->Submit(sp, b).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  gate.Release();
  double seen = 0;
  for (int i = 0; i < 2000 && seen < 0.08; ++i) {
    seen = std::max(seen, w.engine->Stats().max_request_stall_s);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GE(seen, 0.08) << "the queued request's wait does not show";
  a->Wait();
  b->Wait();
  EngineStats st = w.engine->Stats();
  for (int i = 0; i < 500 && (st.num_running != 0 || st.num_waiting != 0 || st.max_request_stall_s != 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    st = w.engine->Stats();
  }
  EXPECT_EQ(st.max_request_stall_s, 0.0);
  w.engine->Stop();
}

// A constraint whose allowed set depends on the previous token: after token t only
// {(t + 1) % 96, (t + 7) % 96, (t + 30) % 96} (the first token: anything below 48); complete after
// `length` tokens. It records every token it accepts.
class StepConstraint final : public TokenConstraint {
 public:
  explicit StepConstraint(int length) : length_(length) {}
  bool Allowed(int32_t id) const {
    if (accepted.empty()) return id >= 0 && id < 48;
    const int32_t t = accepted.back();
    return id == (t + 1) % 96 || id == (t + 7) % 96 || id == (t + 30) % 96;
  }
  bool FillMask(std::span<uint32_t> words) override {
    std::fill(words.begin(), words.end(), 0u);
    for (int32_t id = 0; id < 97; ++id)
      if (Allowed(id)) words[id / 32] |= 1u << (id % 32);
    return true;
  }
  Status Accept(int32_t id) override {
    if (!Allowed(id)) {
      ++refused;
      return Status::InvalidArgument("not allowed");
    }
    accepted.push_back(id);
    return Status::Ok();
  }
  bool Complete() const override { return static_cast<int>(accepted.size()) >= length_; }
  std::vector<int32_t> accepted;
  int refused = 0;

 private:
  int length_;
};

// Constrained requests among unconstrained ones, overlap on: every constrained token obeys its
// mask, a constrained piece is never launched ahead with kPrevToken (its mask needs the token),
// the others still are, and a constraint that completes ends its request with stop.
TEST_P(EngineOnRunner, ConstrainedRequestsAreNeverLaunchedAhead) {
  auto model = MakeModel();
  EngineOptions eo;
  eo.max_num_seqs = 6;
  WatchedEngine w(GetParam(), *model, eo);
  ASSERT_TRUE(w.status.ok()) << w.status.ToString();
  WatchingRunner& watch = *w.watch;
  Engine* engine = w.engine.get();
  std::vector<std::shared_ptr<Collector>> sinks;
  std::vector<std::shared_ptr<StepConstraint>> cons;
  for (int i = 0; i < 6; ++i) {
    RequestParams p;
    p.prompt = Ids(9 + 3 * i, 900 + i);
    p.max_tokens = 20;
    p.ignore_eos = true;
    p.sampling.temperature = i % 3 == 0 ? 0.0f : 1.0f;
    p.sampling.seed = 50 + i;
    if (i % 2 == 0) {
      cons.push_back(std::make_shared<StepConstraint>(6 + i));
      p.constraint = cons.back();
    }
    sinks.push_back(std::make_shared<Collector>());
    ASSERT_TRUE(engine->Submit(p, sinks.back()).ok());
  }
  for (auto& s : sinks) s->Wait();
  engine->Stop();
  for (int i = 0; i < 6; ++i) {
    if (i % 2 == 0) {
      const StepConstraint& c = *cons[i / 2];
      EXPECT_EQ(c.refused, 0) << i;
      EXPECT_EQ(sinks[i]->ids, c.accepted) << i;
      EXPECT_EQ(static_cast<int>(sinks[i]->ids.size()), 6 + i) << i;
      EXPECT_EQ(sinks[i]->reason, FinishReason::kStop) << i;
    } else {
      EXPECT_EQ(sinks[i]->ids.size(), 20u) << i;
      EXPECT_EQ(sinks[i]->reason, FinishReason::kLength) << i;
    }
  }
  EXPECT_GT(watch.masked_pieces, 0);
  EXPECT_EQ(watch.masked_prev_pieces, 0);
  EXPECT_GT(watch.prev_pieces, 0);  // the unconstrained requests still overlap
}

// Greedy under a mask: the backend's tokens equal the CPU runner's (on CUDA the mask is applied
// on the device; run with `test_engine --gtest_filter='*cuda*'` on a GPU).
TEST_P(EngineOnRunner, MaskedGreedyMatchesTheCpuRunner) {
  auto model = MakeModel();
  auto run = [&](const Backend& be) {
    EngineOptions eo;
    eo.max_num_seqs = 3;
    std::vector<RequestParams> reqs;
    for (int i = 0; i < 3; ++i) {
      RequestParams p;
      p.prompt = Ids(7 + 5 * i, 300 + i);
      p.max_tokens = 16;
      p.ignore_eos = true;
      p.constraint = std::make_shared<StepConstraint>(14);
      reqs.push_back(p);
    }
    std::vector<std::vector<int32_t>> out;
    for (const auto& s : RunTogether(be, *model, eo, reqs)) {
      EXPECT_EQ(s->reason, FinishReason::kStop);
      out.push_back(s->ids);
    }
    return out;
  };
  EXPECT_EQ(run(GetParam()), run(Backends()[0]));
}


// Penalties, logit_bias and min_tokens on a seeded sampled request: the same tokens alone, beside
// other requests (chunked prefill, overlapped steps), under preemption (the runner recounts the
// recomputed tokens) and after a prefix-cache hit (the first piece brings the history); without
// the penalties the tokens differ (so the test can fail).
RequestParams PenalizedRequest() {
  RequestParams p;
  p.prompt = Ids(37, 7);
  p.max_tokens = 24;
  p.sampling.temperature = 0.8f;
  p.sampling.top_k = 30;
  p.sampling.seed = 1234;
  p.sampling.repetition_penalty = 1.6f;
  p.sampling.frequency_penalty = 0.7f;
  p.sampling.presence_penalty = 0.4f;
  p.sampling.min_tokens = 6;
  p.logit_bias = {{5, 3.0f}, {11, -100.0f}};
  return p;
}

TEST_P(EngineOnRunner, SeededPenaltiesDoNotDependOnTheBatch) {
  auto model = MakeModel();
  auto run = [&](const EngineOptions& eo, int others, const RequestParams& mine, bool warm_cache) {
    auto runner = GetParam().make(*model, eo.max_num_seqs, eo.kv_page_tokens, PagesFor(eo));
    EXPECT_TRUE(runner.ok());
    auto engine = Engine::Create(**runner, eo);
    EXPECT_TRUE(engine.ok());
    EXPECT_TRUE((*engine)->Start().ok());
    if (warm_cache) {  // the same prompt first: the request below restores a checkpoint
      auto first = std::make_shared<Collector>();
      RequestParams q = mine;
      q.max_tokens = 2;
      q.sampling.min_tokens = 0;
      EXPECT_TRUE((*engine)->Submit(q, first).ok());
      first->Wait();
    }
    std::vector<std::shared_ptr<Collector>> sinks;
    for (int i = 0; i < others; ++i) {
      RequestParams q = mine;
      q.prompt = Ids(9 + 7 * i, 300 + i);
      q.sampling.seed = 99 + i;
      q.sampling.repetition_penalty = 1.0f + 0.2f * i;
      sinks.push_back(std::make_shared<Collector>());
      EXPECT_TRUE((*engine)->Submit(q, sinks.back()).ok());
    }
    auto sink = std::make_shared<Collector>();
    EXPECT_TRUE((*engine)->Submit(mine, sink).ok());
    sink->Wait();
    for (auto& s : sinks) s->Wait();
    const EngineStats st = (*engine)->Stats();
    (*engine)->Stop();
    if (warm_cache) {
      EXPECT_GT(st.prefix_cache_hit_tokens, 0);
    }
    return sink->ids;
  };
  const RequestParams p = PenalizedRequest();
  EngineOptions alone;
  alone.max_num_seqs = 4;
  const std::vector<int32_t> a = run(alone, 0, p, false);
  ASSERT_GE(a.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_NE(a[i], 96) << "EOS before min_tokens";
  EXPECT_EQ(std::count(a.begin(), a.end(), 11), 0) << "a token biased by -100";
  EngineOptions crowded = alone;
  crowded.max_num_batched_tokens = 16;
  EXPECT_EQ(run(crowded, 3, p, false), a);
  EngineOptions tight = crowded;
  tight.kv_page_tokens = 4;
  const AttnRowLayout lay(*ParseModelConfig(kConfig));
  tight.kv_memory_bytes = 34 * tight.kv_page_tokens * lay.row_floats * 4;
  EXPECT_EQ(run(tight, 3, p, false), a);
  EngineOptions cached = alone;
  cached.enable_prefix_caching = true;
  EXPECT_EQ(run(cached, 0, p, true), a);
  RequestParams plain = p;
  plain.sampling.repetition_penalty = 1.0f;
  plain.sampling.frequency_penalty = plain.sampling.presence_penalty = 0.0f;
  EXPECT_NE(run(alone, 0, plain, false), a);
}

// Greedy with penalties on the backend equals the CPU runner's tokens (on CUDA the counts live
// and the processing runs on the device: `test_engine --gtest_filter='*Penal*cuda*'` on a GPU).
TEST_P(EngineOnRunner, PenalizedGreedyMatchesTheCpuRunner) {
  auto model = MakeModel();
  auto run = [&](const Backend& be) {
    EngineOptions eo;
    eo.max_num_seqs = 3;
    eo.max_num_batched_tokens = 16;
    std::vector<RequestParams> reqs;
    for (int i = 0; i < 3; ++i) {
      RequestParams p = PenalizedRequest();
      p.prompt = Ids(7 + 9 * i, 300 + i);
      p.sampling.temperature = 0.0f;
      p.sampling.repetition_penalty = 1.2f + 0.3f * i;
      reqs.push_back(p);
    }
    std::vector<std::vector<int32_t>> out;
    for (const auto& s : RunTogether(be, *model, eo, reqs)) out.push_back(s->ids);
    return out;
  };
  EXPECT_EQ(run(GetParam()), run(Backends()[0]));
}

INSTANTIATE_TEST_SUITE_P(Backends, EngineOnRunner, ::testing::ValuesIn(Backends()),
                         [](const ::testing::TestParamInfo<Backend>& i) { return i.param.name; });

// Greedy decoding with penalties, logit_bias and min_tokens through the engine equals a plain
// loop over the model's raw logits with the fp64 reference processing (ops/reference.h) and an
// argmax; and it differs from greedy decoding without them.
TEST(Engine, PenalizedGreedyMatchesAReferenceLoop) {
  auto model = MakeModel();
  RequestParams p = PenalizedRequest();
  p.sampling.temperature = 0.0f;
  p.max_tokens = 20;
  p.stop_ids = {7};
  EngineOptions eo;
  eo.max_num_seqs = 2;
  auto engine = Engine::Create(*model, eo);
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->Start().ok());
  auto sink = std::make_shared<Collector>();
  ASSERT_TRUE((*engine)->Submit(p, sink).ok());
  auto plain_sink = std::make_shared<Collector>();
  RequestParams plain;
  plain.prompt = p.prompt;
  plain.max_tokens = p.max_tokens;
  plain.stop_ids = p.stop_ids;
  ASSERT_TRUE((*engine)->Submit(plain, plain_sink).ok());
  sink->Wait();
  plain_sink->Wait();
  (*engine)->Stop();

  CpuRunnerOptions ro;
  ro.num_slots = 1;
  ro.num_pages = 16;
  auto runner = CpuRunner::Create(*model, ro);
  ASSERT_TRUE(runner.ok());
  RunnerSession session(**runner);
  const int seq = *session.NewSequence();
  const int64_t V = model->config().vocab_size;
  ops::ref::PenaltyRow row;
  for (const ops::LogitBias& b : p.logit_bias) row.bias.emplace_back(b.id, b.bias);
  row.stop_ids = {7, 96};
  row.output_counts.assign(V, 0);
  row.in_prompt.assign(V, 0);
  for (int32_t id : p.prompt) row.in_prompt[id] = 1;
  row.presence = p.sampling.presence_penalty;
  row.frequency = p.sampling.frequency_penalty;
  row.repetition = p.sampling.repetition_penalty;
  std::vector<int32_t> want, feed = p.prompt;
  while (static_cast<int64_t>(want.size()) < p.max_tokens) {
    RunnerSession::Input in;
    in.seq = seq;
    in.ids = feed;
    std::vector<SampledToken> out;
    std::vector<float> logits;
    ASSERT_TRUE(session.Step({&in, 1}, &out, &logits).ok());
    row.mask_stops = static_cast<int64_t>(want.size()) < p.sampling.min_tokens;
    const std::vector<double> y = ops::ref::Penalties(logits, row);
    const int32_t next = static_cast<int32_t>(std::max_element(y.begin(), y.end()) - y.begin());
    want.push_back(next);
    ++row.output_counts[next];
    if (next == 7 || next == 96) break;
    feed = {next};
  }
  EXPECT_EQ(sink->ids, want);
  EXPECT_NE(plain_sink->ids, want);
}

TEST(Engine, CancelFreesMemoryAndEndsOnce) {
  auto model = MakeModel();
  EngineOptions eo;
  auto engine = Engine::Create(*model, eo);
  ASSERT_TRUE((*engine)->Start().ok());
  RequestParams p;
  p.prompt = Ids(20, 1);
  p.max_tokens = 100000 - 21;
  p.ignore_eos = true;
  auto sink = std::make_shared<Collector>();
  auto id = (*engine)->Submit(p, sink);
  ASSERT_TRUE(id.ok());
  while (true) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard<std::mutex> l(sink->mu);
    if (sink->ids.size() >= 3) break;
  }
  (*engine)->Cancel(*id);
  sink->Wait();
  EXPECT_EQ(sink->reason, FinishReason::kCancelled);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ((*engine)->Stats().kv_pages_used, 0);
  EXPECT_EQ((*engine)->Stats().kda_slots_used, 0);
  EXPECT_EQ(sink->num_finish, 1);
  (*engine)->Stop();
}

// Cancel is called from any thread, many at once (an HTTP server cancels from its I/O threads):
// the engine's queue of cancellations takes every call. 4 client threads flood Cancel (their
// requests' ids among ids that do not exist) while the engine thread drains the queue; every
// request must end cancelled, once, and the pools must drain. Without the engine lock in Cancel
// the concurrent appends lose ids or corrupt the queue (tools/mutate.py engine_cancel_unlocked).
TEST(Engine, ConcurrentCancelsFromManyThreadsAllLand) {
  auto model = MakeModel();
  EngineOptions eo;
  auto engine = Engine::Create(*model, eo);
  ASSERT_TRUE((*engine)->Start().ok());
  constexpr int kThreads = 4, kPerThread = 2;
  std::vector<std::shared_ptr<Collector>> sinks;
  std::vector<RequestId> ids;
  for (int i = 0; i < kThreads * kPerThread; ++i) {
    RequestParams p;
    p.prompt = Ids(8, 300 + i);
    p.max_tokens = 100000 - 9;  // never ends by itself within the test
    p.ignore_eos = true;
    sinks.push_back(std::make_shared<Collector>());
    auto id = (*engine)->Submit(p, sinks.back());
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      for (int rep = 0; rep < 20000; ++rep) {
        (*engine)->Cancel(1000000 + rep);  // no such request: a no-op for the engine
        if (rep % 5000 == 4999) (*engine)->Cancel(ids[th * kPerThread + rep / 5000 % kPerThread]);
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (size_t i = 0; i < sinks.size(); ++i) {
    std::unique_lock<std::mutex> l(sinks[i]->mu);
    ASSERT_TRUE(sinks[i]->cv.wait_until(l, deadline, [&] { return sinks[i]->num_finish > 0; }))
        << "request " << ids[i] << " was never cancelled";
    EXPECT_EQ(sinks[i]->reason, FinishReason::kCancelled);
  }
  (*engine)->Stop();
  for (auto& s : sinks) EXPECT_EQ(s->num_finish, 1);
  EXPECT_EQ((*engine)->Stats().kv_pages_used, 0);
}

TEST(Engine, SubmitErrors) {
  auto model = MakeModel();
  EngineOptions eo;
  eo.max_model_len = 64;
  eo.max_waiting = 1;
  auto engine = Engine::Create(*model, eo);
  ASSERT_TRUE(engine.ok());
  RequestParams p;
  p.prompt = Ids(10, 2);
  p.max_tokens = 8;
  // Not started: unavailable.
  EXPECT_EQ((*engine)->Submit(p, std::make_shared<Collector>()).status().code(), StatusCode::kUnavailable);
  ASSERT_TRUE((*engine)->Start().ok());
  RequestParams big = p;
  big.max_tokens = 60;
  auto s = (*engine)->Submit(big, std::make_shared<Collector>()).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("maximum context length is 64 tokens"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("70 tokens (10 in the prompt, 60 in the completion)"), std::string::npos);
  RequestParams empty = p;
  empty.prompt.clear();
  EXPECT_EQ((*engine)->Submit(empty, std::make_shared<Collector>()).status().code(), StatusCode::kInvalidArgument);
  RequestParams oov = p;
  oov.prompt[0] = 97;
  EXPECT_EQ((*engine)->Submit(oov, std::make_shared<Collector>()).status().code(), StatusCode::kInvalidArgument);
  (*engine)->Stop();
  EXPECT_EQ((*engine)->Submit(p, std::make_shared<Collector>()).status().code(), StatusCode::kUnavailable);
  EngineOptions tiny;
  tiny.kv_memory_bytes = 8;
  EXPECT_EQ(Engine::Create(*model, tiny).status().code(), StatusCode::kResourceExhausted);
}

TEST(Engine, QueueFullIsResourceExhaustedAndStopEndsEverything) {
  auto model = MakeModel();
  EngineOptions eo;
  eo.max_waiting = 2;
  eo.max_num_seqs = 1;
  auto engine = Engine::Create(*model, eo);
  ASSERT_TRUE((*engine)->Start().ok());
  std::vector<std::shared_ptr<Collector>> sinks;
  int exhausted = 0;
  for (int i = 0; i < 20; ++i) {
    RequestParams p;
    p.prompt = Ids(8, 50 + i);
    p.max_tokens = 200;
    p.ignore_eos = true;
    auto s = std::make_shared<Collector>();
    auto r = (*engine)->Submit(p, s);
    if (r.ok()) {
      sinks.push_back(s);
    } else {
      EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
      ++exhausted;
    }
  }
  EXPECT_GT(exhausted, 0);
  (*engine)->Stop();
  for (auto& s : sinks) {
    EXPECT_EQ(s->num_finish, 1);
  }
}

// max_model_len_cap bounds the length derived from the KV budget, never an explicit one.
TEST(Engine, MaxModelLenCapBoundsTheDerivedLength) {
  auto model = MakeModel();
  auto max_len = [&](const EngineOptions& eo) -> int64_t {
    auto engine = Engine::Create(*model, eo);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    if (!engine.ok() || !(*engine)->Start().ok()) return -1;
    const int64_t n = (*engine)->Stats().max_model_len;  // published at Start
    (*engine)->Stop();
    return n;
  };
  EngineOptions eo;
  const int64_t budget = max_len(eo);
  ASSERT_GT(budget, 100);
  eo.max_model_len_cap = 100;
  EXPECT_EQ(max_len(eo), 100);
  eo.max_model_len_cap = budget + 1;
  EXPECT_EQ(max_len(eo), budget);
  eo.max_model_len_cap = 100;
  eo.max_model_len = 200;
  EXPECT_EQ(max_len(eo), 200);
}

// Usage carries the phase times /metrics histograms: a request that ran has a prefill time and,
// with more than one token, a decode time; one token means no decode phase; a request that never
// left the queue has only a queue time.
TEST(Engine, UsageReportsPhaseTimes) {
  auto model = MakeModel();
  EngineOptions eo;
  eo.max_num_seqs = 1;
  auto engine = Engine::Create(*model, eo);
  ASSERT_TRUE((*engine)->Start().ok());
  auto submit = [&](int64_t max_tokens, uint64_t seed) {
    RequestParams p;
    p.prompt = Ids(8, seed);
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    auto s = std::make_shared<Collector>();
    EXPECT_TRUE((*engine)->Submit(p, s).ok());
    return s;
  };
  auto several = submit(6, 70);
  several->Wait();
  EXPECT_EQ(several->usage.completion_tokens, 6);
  EXPECT_GE(several->usage.queue_s, 0);
  EXPECT_GT(several->usage.prefill_s, 0);
  EXPECT_GT(several->usage.decode_s, 0);
  auto one = submit(1, 71);
  one->Wait();
  EXPECT_EQ(one->usage.completion_tokens, 1);
  EXPECT_GT(one->usage.prefill_s, 0);
  EXPECT_EQ(one->usage.decode_s, 0);
  // One slot: the second request waits behind a long one and is ended by Stop while queued.
  auto running = submit(100000 - 9, 72);
  auto queued = submit(4, 73);
  while (true) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard<std::mutex> l(running->mu);
    if (!running->ids.empty()) break;
  }
  (*engine)->Stop();
  ASSERT_EQ(queued->num_finish, 1);
  EXPECT_EQ(queued->usage.completion_tokens, 0);
  EXPECT_GT(queued->usage.queue_s, 0);
  EXPECT_EQ(queued->usage.prefill_s, 0);
  EXPECT_EQ(queued->usage.decode_s, 0);
}

}  // namespace
}  // namespace gyre
