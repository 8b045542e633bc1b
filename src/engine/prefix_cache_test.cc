// Prefix caching: the bookkeeping (PrefixCache) on its own, then the engine with the cache on the
// fixtures: greedy outputs equal those without the cache across hits at every block offset,
// chunked prefills, preemption and eviction; pools return to empty; a multi-turn conversation
// prefills only each turn's new tokens; a runner that restores the wrong state is caught.
// The engine tests run on every backend built (CUDA: `test_engine --gtest_filter='*cuda*'`, a
// GPU test).
#include "engine/prefix_cache.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/test_collector.h"
#include "engine/test_backends.h"
#include "runtime/cpu_runner.h"
#include "runtime/generate.h"
#include "runtime/model.h"

namespace gyre {
namespace {

// ---- PrefixCache bookkeeping --------------------------------------------------------------------

std::vector<int32_t> Seq(std::initializer_list<int32_t> v) { return v; }

TEST(PrefixCache, PublishedChainIsFoundUpToTheDeepestCheckpoint) {
  IdPool pages(16, "pages");
  PrefixCache cache(&pages, 2, 4, /*needs_state=*/true);
  const std::vector<int32_t> toks = Seq({1, 2, 3, 4, 5, 6, 7});
  auto table = *pages.Allocate(4);
  PrefixCache::Seq a;
  cache.Acquire(toks, 6, &a);  // empty cache: a miss
  cache.Publish(&a, toks, table, 3);
  ASSERT_EQ(a.refs.size(), 3u);
  // No checkpoint yet: nothing is restorable.
  PrefixCache::Seq b;
  EXPECT_EQ(cache.Acquire(toks, 6, &b).tokens, 0);
  const CheckpointId c = cache.NewCheckpoint();
  ASSERT_GE(c, 0);
  cache.Attach(a, 1, c);  // state after block 1 (4 tokens)
  auto m = cache.Acquire(toks, 6, &b);
  EXPECT_EQ(m.tokens, 4);
  EXPECT_EQ(m.checkpoint, c);
  EXPECT_EQ(m.pages, std::vector<PageId>(table.begin(), table.begin() + 2));
  // A different second block: only the first block matches, and it has no checkpoint.
  PrefixCache::Seq d;
  EXPECT_EQ(cache.Acquire(Seq({1, 2, 9, 9, 5, 6, 7}), 6, &d).tokens, 0);
  // The limit cuts the match (a hit leaves the last token to run).
  PrefixCache::Seq e;
  EXPECT_EQ(cache.Acquire(toks, 3, &e).tokens, 0);
  cache.Release(&b);
  cache.Release(&d);
  cache.Release(&e);
  // The owner releases: its blocks become evictable, not free.
  for (PageId p : table) if (!cache.IsCached(p)) pages.Release(p);
  cache.Release(&a);
  EXPECT_EQ(cache.stats().evictable_blocks, 3);
  EXPECT_EQ(pages.num_free(), 16 - 3);
  // Eviction frees pages (deepest first) and the checkpoint with its block.
  EXPECT_TRUE(cache.MakeFree(16));
  EXPECT_EQ(cache.stats().cached_blocks, 0);
  EXPECT_EQ(cache.stats().checkpoints_used, 0);
  EXPECT_EQ(cache.stats().block_evictions, 3);
}

// Checkpoints compete for a small budget: one shadowed by a deeper checkpoint of its chain is
// evicted before any chain's deepest, even a deepest one used longer ago (plain LRU would evict
// chain A's deepest, the oldest, and lose A's next turn).
TEST(PrefixCache, ShadowedCheckpointsAreEvictedBeforeAChainsDeepest) {
  IdPool pages(32, "pages");
  PrefixCache cache(&pages, 2, 5, /*needs_state=*/true);
  const std::vector<int32_t> ta = Seq({1, 1, 2, 2, 3, 3, 9}), tb = Seq({7, 7, 8, 8, 9, 9, 1});
  auto table_a = *pages.Allocate(4), table_b = *pages.Allocate(4);
  PrefixCache::Seq a, b;
  cache.Acquire(ta, 6, &a);
  cache.Publish(&a, ta, table_a, 3);
  for (int64_t j = 0; j < 3; ++j) cache.Attach(a, j, cache.NewCheckpoint());  // A0, A1, then A2 (deepest)
  cache.Acquire(tb, 6, &b);
  cache.Publish(&b, tb, table_b, 2);
  for (int64_t j = 0; j < 2; ++j) cache.Attach(b, j, cache.NewCheckpoint());  // B0, then B1
  EXPECT_EQ(cache.stats().checkpoints_used, 5);
  // Three more checkpoints (the budget is 5): the shadowed A0, A1, B0 go, A2 and B1 stay.
  std::vector<CheckpointId> extra;
  for (int i = 0; i < 3; ++i) {
    extra.push_back(cache.NewCheckpoint());
    ASSERT_GE(extra.back(), 0);
  }
  EXPECT_EQ(cache.stats().checkpoint_evictions, 3);
  PrefixCache::Seq a2, b2;
  EXPECT_EQ(cache.Acquire(ta, 6, &a2).tokens, 6);  // A's deepest (3 blocks) survived
  EXPECT_EQ(cache.Acquire(tb, 6, &b2).tokens, 4);  // so did B's
  for (CheckpointId c : extra) cache.FreeCheckpoint(c);
  cache.Release(&a2);
  cache.Release(&b2);
}

TEST(PrefixCache, ReferencedBlocksAreNeverEvictedAndDuplicatesShareTheCachedBlock) {
  IdPool pages(8, "pages");
  PrefixCache cache(&pages, 2, 2, true);
  const std::vector<int32_t> toks = Seq({4, 4, 5, 5, 6, 6});
  auto ta = *pages.Allocate(3);
  auto tb = *pages.Allocate(3);
  PrefixCache::Seq a, b;
  cache.Acquire(toks, 5, &a);
  cache.Acquire(toks, 5, &b);
  cache.Publish(&a, toks, ta, 3);
  cache.Publish(&b, toks, tb, 3);  // the same tokens: b references a's blocks
  EXPECT_EQ(b.refs, a.refs);
  EXPECT_FALSE(cache.IsCached(tb[0]));
  for (PageId p : tb) pages.Release(p);
  cache.Release(&b);
  EXPECT_FALSE(cache.MakeFree(8));  // a still holds its chain
  EXPECT_EQ(cache.stats().cached_blocks, 3);
  cache.Release(&a);
  EXPECT_TRUE(cache.MakeFree(8));
}

TEST(PrefixCache, CheckpointsAreEvictedLeastRecentlyUsedFirst) {
  IdPool pages(8, "pages");
  PrefixCache cache(&pages, 1, 2, true);
  const std::vector<int32_t> toks = Seq({1, 2, 3, 4});
  auto t = *pages.Allocate(4);
  PrefixCache::Seq a;
  cache.Acquire(toks, 3, &a);
  cache.Publish(&a, toks, t, 3);
  const CheckpointId c0 = cache.NewCheckpoint(), c1 = cache.NewCheckpoint();
  cache.Attach(a, 0, c0);
  cache.Attach(a, 1, c1);
  EXPECT_GE(cache.CheckpointOf(a, 0), 0);  // block 0's checkpoint is now the most recent
  const CheckpointId c2 = cache.NewCheckpoint();  // evicts block 1's
  EXPECT_EQ(c2, c1);
  EXPECT_EQ(cache.CheckpointOf(a, 1), -1);
  EXPECT_EQ(cache.CheckpointOf(a, 0), c0);
  EXPECT_EQ(cache.stats().checkpoint_evictions, 1);
  cache.Attach(a, 2, c2);
  // Clear forgets everything; referenced blocks go back to the pool on release.
  cache.Clear();
  EXPECT_EQ(cache.stats().cached_blocks, 0);
  EXPECT_EQ(cache.stats().checkpoints_used, 0);
  pages.Release(t[3]);
  cache.Release(&a);
  EXPECT_EQ(pages.num_free(), 8);
}

// ---- the engine with the cache ------------------------------------------------------------------

std::string Fixture(const std::string& name) { return std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/" + name; }

using gyre::testing::Collector;

// A runner decorator whose restore is wrong in a chosen way (so the identity tests can fail), and
// whose steps can be held back (Hold / Open) while a test submits a wave of requests, so that the
// engine sees them together however the threads are scheduled.
class FaultyRestore final : public ModelRunner {
 public:
  FaultyRestore(ModelRunner& inner, bool zero_state) : inner_(inner), zero_state_(zero_state) {}
  void Hold() {
    std::lock_guard<std::mutex> l(gate_mu_);
    held_ = true;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> l(gate_mu_);
      held_ = false;
    }
    gate_cv_.notify_all();
  }
  const ModelConfig& config() const override { return inner_.config(); }
  RunnerCapacity capacity() const override { return inner_.capacity(); }
  std::string backend() const override { return inner_.backend(); }
  Status Launch(std::span<const StepPiece> p, bool w) override {
    {
      std::unique_lock<std::mutex> l(gate_mu_);
      gate_cv_.wait(l, [&] { return !held_; });
    }
    return inner_.Launch(p, w);
  }
  Status Collect(std::vector<SampledToken>* o, std::vector<float>* l) override { return inner_.Collect(o, l); }
  Status ReserveCheckpoints(int64_t n) override { return inner_.ReserveCheckpoints(n); }
  Status SaveState(SlotId s, CheckpointId c) override { return inner_.SaveState(s, c); }
  Status ReadPages(std::span<const PageId> p, std::span<std::byte> d) override { return inner_.ReadPages(p, d); }
  Status WritePages(std::span<const PageId> p, std::span<const std::byte> s) override { return inner_.WritePages(p, s); }
  Status ReadSlotState(SlotId s, std::span<std::byte> d) override { return inner_.ReadSlotState(s, d); }
  Status WriteSlotState(SlotId s, std::span<const std::byte> b, int64_t n) override {
    return inner_.WriteSlotState(s, b, n);
  }
  Status RestoreState(CheckpointId c, SlotId s, int64_t n) override {
    ++restores;
    if (!zero_state_) return inner_.RestoreState(c, s, n);
    // Another checkpoint's state (another position, or one never saved).
    return inner_.RestoreState(c == 0 ? 1 : 0, s, n);
  }
  int64_t restores = 0;

 private:
  ModelRunner& inner_;
  bool zero_state_;
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool held_ = false;
};

using testing::Backend;
using testing::Backends;

struct Case {
  std::string fixture;
  Backend backend;
};

std::vector<Case> Cases() {
  std::vector<Case> c;
  for (const Backend& b : Backends())
    for (const char* f : {"glm5_tiny", "kimi_tiny", "glm5_mini"}) c.push_back({f, b});
  return c;
}

class PrefixCacheOnFixture : public ::testing::TestWithParam<Case> {
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
  // Greedy tokens of a standalone sequence (no engine, no cache).
  std::vector<int32_t> Standalone(const std::vector<int32_t>& prompt, int64_t max_tokens) {
    auto r = GetParam().backend.make(*model_, 1, 16, (static_cast<int64_t>(prompt.size()) + max_tokens) / 16 + 2);
    EXPECT_TRUE(r.ok());
    GenerateOptions go;
    go.max_tokens = max_tokens;
    go.ignore_eos = true;
    auto res = Generate(**r, {prompt}, go);
    EXPECT_TRUE(res.ok()) << res.status().ToString();
    return res.ok() ? (*res)[0].ids : std::vector<int32_t>{};
  }
  int64_t RowBytes() const { return AttnRowLayout(model_->config()).row_floats * 4; }

  std::unique_ptr<Model> model_;
};

// The stats once `finished` requests are counted (they are published after the step that ended
// the last one).
EngineStats StatsAfter(const Engine& engine, int64_t finished) {
  for (int i = 0; i < 10000 && engine.Stats().requests_finished < finished; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return engine.Stats();
}

struct RunResult {
  std::vector<std::vector<int32_t>> outputs;
  EngineStats stats;
  int64_t restores = 0;
};

// Runs `waves` of requests (each wave submitted together, waves one after another) on a fresh
// engine over `runner`; returns every output and the final stats.
// `gate` (may be null): held while each wave is submitted, so the engine schedules it as one.
RunResult RunWaves(ModelRunner& runner, const EngineOptions& eo, const std::vector<std::vector<std::vector<int32_t>>>& waves,
                   int64_t max_tokens, FaultyRestore* gate = nullptr) {
  RunResult res;
  auto engine = Engine::Create(runner, eo);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return res;
  EXPECT_TRUE((*engine)->Start().ok());
  for (const auto& wave : waves) {
    std::vector<std::shared_ptr<Collector>> sinks;
    if (gate) gate->Hold();
    for (const auto& prompt : wave) {
      RequestParams p;
      p.prompt = prompt;
      p.max_tokens = max_tokens;
      p.ignore_eos = true;
      sinks.push_back(std::make_shared<Collector>());
      EXPECT_TRUE((*engine)->Submit(p, sinks.back()).ok());
    }
    if (gate) gate->Open();
    for (auto& s : sinks) {
      s->Wait();
      EXPECT_EQ(s->reason, FinishReason::kLength) << s->status.ToString();
      res.outputs.push_back(s->ids);
    }
  }
  res.stats = StatsAfter(**engine, static_cast<int64_t>(res.outputs.size()));
  (*engine)->Stop();
  return res;
}

// Prompts sharing a base prefix, cut at every offset of a block (page_tokens 4), plus the base
// itself first so that the later waves hit.
std::vector<std::vector<std::vector<int32_t>>> OffsetWaves(const PrefixCacheOnFixture& t,
                                                           const std::function<std::vector<int32_t>(int64_t, uint64_t)>& ids) {
  const std::vector<int32_t> base = ids(37, 11);
  std::vector<std::vector<std::vector<int32_t>>> waves(2);
  waves[0].push_back(base);
  for (int64_t cut = 20; cut < 28; ++cut) {  // common prefix 20..27: every offset in a block of 4
    std::vector<int32_t> p(base.begin(), base.begin() + cut);
    const std::vector<int32_t> tail = ids(1 + cut % 5, 100 + cut);  // 1..5 new tokens
    p.insert(p.end(), tail.begin(), tail.end());
    waves[1].push_back(p);
  }
  waves[1].push_back(base);  // the whole base again: hit up to its last block
  (void)t;
  return waves;
}

// 4 sequences, blocks of 4 tokens, a checkpoint every 2 blocks, the cache on.
EngineOptions OffsetOptions() {
  EngineOptions eo;
  eo.max_num_seqs = 4;
  eo.kv_page_tokens = 4;
  eo.max_num_batched_tokens = 64;
  eo.enable_prefix_caching = true;
  eo.prefix_cache_checkpoint_interval_blocks = 2;
  return eo;
}

TEST_P(PrefixCacheOnFixture, GreedyOutputsEqualWithoutCacheAtEveryBlockOffset) {
  const int64_t kMaxTokens = 6;
  const EngineOptions eo = OffsetOptions();
  auto waves = OffsetWaves(*this, [&](int64_t n, uint64_t s) { return Ids(n, s); });
  auto runner = GetParam().backend.make(*model_, eo.max_num_seqs, eo.kv_page_tokens, 200);
  ASSERT_TRUE(runner.ok());
  FaultyRestore watch(**runner, false);
  RunResult on = RunWaves(watch, eo, waves, kMaxTokens);
  size_t k = 0;
  for (const auto& wave : waves)
    for (const auto& prompt : wave) EXPECT_EQ(on.outputs[k++], Standalone(prompt, kMaxTokens)) << "request " << k - 1;
  EXPECT_GT(on.stats.prefix_cache_hit_tokens, 0);
  EXPECT_GT(watch.restores, 0);
  EXPECT_EQ(on.stats.kv_pages_used, 0);
  EXPECT_EQ(on.stats.kda_slots_used, 0);
  EXPECT_EQ(on.stats.prefix_cache_evictable_blocks, on.stats.prefix_cache_blocks);  // nothing referenced
  EXPECT_LE(on.stats.kda_checkpoints_used, on.stats.prefix_cache_blocks);
  // Cache off: no hit, and more prefill computed.
  EngineOptions off = eo;
  off.enable_prefix_caching = false;
  auto runner2 = GetParam().backend.make(*model_, eo.max_num_seqs, eo.kv_page_tokens, 200);
  RunResult no = RunWaves(**runner2, off, waves, kMaxTokens);
  EXPECT_EQ(no.outputs, on.outputs);
  EXPECT_EQ(no.stats.prefix_cache_hit_tokens, 0);
  EXPECT_EQ(on.stats.prefill_tokens_computed + on.stats.prefix_cache_hit_tokens, no.stats.prefill_tokens_computed);
}

// Chunked prefills (8-token budget, checkpoints every block), preemption (few pages) and
// eviction of blocks and checkpoints (2 checkpoints) give the same greedy tokens.
TEST_P(PrefixCacheOnFixture, ChunkingPreemptionAndEvictionKeepOutputs) {
  const int64_t kMaxTokens = 8;
  EngineOptions eo;
  eo.max_num_seqs = 4;
  eo.kv_page_tokens = 4;
  eo.max_num_batched_tokens = 8;
  eo.enable_prefix_caching = true;
  eo.prefix_cache_checkpoint_interval_blocks = 1;
  auto probe = GetParam().backend.make(*model_, 1, 4, 1);
  ASSERT_TRUE(probe.ok());
  eo.prefix_cache_checkpoint_bytes = 2 * (*probe)->capacity().bytes_per_slot;
  auto waves = OffsetWaves(*this, [&](int64_t n, uint64_t s) { return Ids(n, s); });
  auto runner = GetParam().backend.make(*model_, eo.max_num_seqs, eo.kv_page_tokens, 30);  // 120 tokens
  ASSERT_TRUE(runner.ok());
  FaultyRestore gate(**runner, false);  // (a correct restore; the gate makes the preemption certain)
  RunResult on = RunWaves(gate, eo, waves, kMaxTokens, &gate);
  size_t k = 0;
  for (const auto& wave : waves)
    for (const auto& prompt : wave) EXPECT_EQ(on.outputs[k++], Standalone(prompt, kMaxTokens)) << "request " << k - 1;
  EXPECT_GT(on.stats.num_preemptions, 0);
  EXPECT_GT(on.stats.prefix_cache_block_evictions, 0);
  EXPECT_GT(on.stats.kda_checkpoint_evictions, 0);
  EXPECT_GT(on.stats.prefix_cache_hit_tokens, 0);
  EXPECT_EQ(on.stats.kv_pages_used, 0);
  EXPECT_EQ(on.stats.kda_slots_used, 0);
  EXPECT_EQ(on.stats.prefix_cache_evictable_blocks, on.stats.prefix_cache_blocks);
  EXPECT_LE(on.stats.kda_checkpoints_used, 2);
}

// Turn k's prompt is turn k-1's prompt, its answer and new tokens: with the cache its prefill
// runs only the new tokens (plus less than a block of alignment and the last answer token).
TEST_P(PrefixCacheOnFixture, MultiTurnPrefillsOnlyTheNewTokens) {
  const int64_t kMaxTokens = 7, kNew = 9;
  for (bool overlap : {true, false}) {
    EngineOptions eo;
    eo.max_num_seqs = 2;
    eo.kv_page_tokens = 4;
    eo.enable_prefix_caching = true;
    eo.overlap_steps = overlap;
    auto runner = GetParam().backend.make(*model_, eo.max_num_seqs, eo.kv_page_tokens, 200);
    ASSERT_TRUE(runner.ok());
    auto engine = Engine::Create(**runner, eo);
    ASSERT_TRUE(engine.ok());
    ASSERT_TRUE((*engine)->Start().ok());
    std::vector<int32_t> convo = Ids(kNew + 4, 5);
    int64_t computed_before = 0;
    for (int turn = 0; turn < 4; ++turn) {
      RequestParams p;
      p.prompt = convo;
      p.max_tokens = kMaxTokens;
      p.ignore_eos = true;
      auto sink = std::make_shared<Collector>();
      ASSERT_TRUE((*engine)->Submit(p, sink).ok());
      sink->Wait();
      EXPECT_EQ(sink->ids, Standalone(convo, kMaxTokens)) << "turn " << turn;
      const int64_t computed = StatsAfter(**engine, turn + 1).prefill_tokens_computed - computed_before;
      computed_before += computed;
      if (turn == 0) {
        EXPECT_EQ(computed, static_cast<int64_t>(convo.size()));
      } else {
        // New tokens + the previous answer's last token (never fed) + alignment (< a block).
        EXPECT_LE(computed, kNew + 1 + eo.kv_page_tokens - 1) << "turn " << turn << " overlap " << overlap;
        EXPECT_GE(computed, kNew);
      }
      convo.insert(convo.end(), sink->ids.begin(), sink->ids.end());
      const std::vector<int32_t> more = Ids(kNew, 50 + turn);
      convo.insert(convo.end(), more.begin(), more.end());
    }
    (*engine)->Stop();
  }
}

// The identity tests can fail: a runner that restores another checkpoint's state gives
// different tokens.
TEST_P(PrefixCacheOnFixture, AWrongRestoreIsCaught) {
  const int64_t kMaxTokens = 6;
  const EngineOptions eo = OffsetOptions();
  auto waves = OffsetWaves(*this, [&](int64_t n, uint64_t s) { return Ids(n, s); });
  auto runner = GetParam().backend.make(*model_, eo.max_num_seqs, eo.kv_page_tokens, 200);
  ASSERT_TRUE(runner.ok());
  FaultyRestore bad(**runner, true);
  RunResult r = RunWaves(bad, eo, waves, kMaxTokens);
  ASSERT_GT(bad.restores, 0);
  int differ = 0;
  size_t k = 0;
  for (const auto& wave : waves)
    for (const auto& prompt : wave) differ += r.outputs[k++] != Standalone(prompt, kMaxTokens);
  EXPECT_GT(differ, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PrefixCacheOnFixture, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.backend.name + "_" + info.param.fixture; });

TEST(PrefixCacheEngine, RefusesWhatItCannotDo) {
  auto m = Model::Load(Fixture("glm5_tiny"));
  ASSERT_TRUE(m.ok());
  CpuRunnerOptions ro;
  ro.num_slots = 2;
  ro.num_pages = 10;
  auto runner = CpuRunner::Create(**m, ro);
  ASSERT_TRUE(runner.ok());
  EngineOptions eo;
  eo.enable_prefix_caching = true;
  eo.prefix_cache_checkpoint_bytes = (*runner)->capacity().bytes_per_slot - 1;
  auto e = Engine::Create(**runner, eo);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("holds no KDA state checkpoint"), std::string::npos) << e.status().ToString();
  eo.prefix_cache_checkpoint_bytes = -1;
  EXPECT_FALSE(Engine::Create(**runner, eo).ok());
}

}  // namespace
}  // namespace gyre
