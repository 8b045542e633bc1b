// Trace recording → Chrome trace export → reading back → analyze.
#include <gtest/gtest.h>

#include <cstdio>
#include <atomic>
#include <map>
#include <thread>

#include "core/trace.h"
#include "feedback/analyze.h"
#include "feedback/trace_export.h"
#include "runtime/generate.h"
#include "runtime/model.h"

namespace gyre::feedback {
namespace {

std::string Fixture(const std::string& n) { return std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/" + n; }

TEST(Trace, GenerationTraceIsValidChromeTrace) {
  auto model = Model::Load(Fixture("glm5_tiny"));
  ASSERT_TRUE(model.ok());
  trace::Clear();
  trace::Enable(true);
  GenerateOptions o;
  o.max_tokens = 4;
  o.ignore_eos = true;
  ASSERT_TRUE(Generate(**model, {{1, 2, 3, 4, 5, 6, 7, 8}}, o).ok());
  trace::Enable(false);
  const auto spans = trace::Collect();
  ASSERT_FALSE(spans.empty());
  const std::string path = ::testing::TempDir() + "/gyre_trace.json";
  ASSERT_TRUE(WriteChromeTrace(path, spans).ok());
  auto ev = ReadChromeTrace(path);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  // Per track: monotonic start times, non-negative durations, properly nested ("balanced").
  std::map<uint32_t, std::vector<const TraceEvent*>> tracks;
  for (const auto& e : *ev)
    if (e.dur_us >= 0) tracks[e.tid].push_back(&e);
  size_t steps = 0, layers = 0, ops = 0;
  for (auto& [tid, list] : tracks) {
    std::vector<double> open_ends;
    double last_ts = -1;
    for (const TraceEvent* e : list) {
      EXPECT_GE(e->ts_us, last_ts) << "non-monotonic start on track " << tid;
      last_ts = e->ts_us;
      EXPECT_GE(e->dur_us, 0);
      while (!open_ends.empty() && open_ends.back() <= e->ts_us) open_ends.pop_back();
      if (!open_ends.empty()) EXPECT_LE(e->ts_us + e->dur_us, open_ends.back() + 1e-3) << e->name << " escapes its parent";
      open_ends.push_back(e->ts_us + e->dur_us);
      steps += e->cat == "step";
      layers += e->cat == "layer";
      ops += e->cat == "op";
    }
  }
  EXPECT_EQ(steps, 4u);           // 1 prefill + 3 decode steps
  EXPECT_EQ(layers, 4u * 8);      // 8 layers per step
  EXPECT_GT(ops, layers);
  const AnalyzeReport rep = Analyze(*ev, Ceilings{20, 100, "test"}, std::make_pair("op", "layer"));
  ASSERT_FALSE(rep.ops.empty());
  double self_total = 0;
  for (const auto& o : rep.ops) self_total += o.excl_us;
  EXPECT_NEAR(self_total, rep.wall_us, rep.wall_us * 0.05 + 50);  // self times partition the wall time
  // Every op runs inside a layer span except the LM head: op time exposed outside layers is
  // exactly the lm_head time.
  double lm_head_us = 0;
  for (const auto& o : rep.ops)
    if (o.name == "lm_head") lm_head_us = o.incl_us;
  EXPECT_GT(lm_head_us, 0);
  EXPECT_NEAR(rep.overlap->exposed_a_us, lm_head_us, lm_head_us * 0.01 + 1.0);
  trace::Clear();
}

TEST(Analyze, SyntheticTraceNumbers) {
  // Track 0: step [0,100) with op A [10,40) and op B [50,90); then a gap and step [150,200).
  // Track 1: transfer [20,120).
  std::vector<TraceEvent> ev = {
      {"step", "step", 0, 100, 0, {}},   {"A", "op", 10, 30, 0, {{"flops", 3e6}}},
      {"B", "op", 50, 40, 0, {{"bytes", 4e5}}}, {"step", "step", 150, 50, 0, {}},
      {"xfer", "transfer", 20, 100, 1, {}},
  };
  const AnalyzeReport r = Analyze(ev, Ceilings{10, 1, "t"}, std::make_pair("op", "transfer"));
  std::map<std::string, OpTime> by;
  for (const auto& o : r.ops) by[o.name] = o;
  EXPECT_DOUBLE_EQ(by["step"].excl_us, 100 - 30 - 40 + 50);
  EXPECT_DOUBLE_EQ(by["A"].excl_us, 30);
  EXPECT_DOUBLE_EQ(r.wall_us, 200);
  // A: 3e6 flops at 1 GFLOP/s = 3 ms bound vs 30 µs measured → roofline 10000% (synthetic).
  EXPECT_NEAR(by["A"].roofline_pct, 100.0 * 3e-3 / 30e-6, 1e-6);
  // B: 4e5 bytes at 10 GB/s = 40 µs bound over 40 µs → 100%.
  EXPECT_NEAR(by["B"].roofline_pct, 100.0, 1e-9);
  // Gaps on track 0: one of 50 µs.
  for (const auto& t : r.tracks)
    if (t.tid == 0) {
      EXPECT_EQ(t.num_gaps, 1);
      EXPECT_DOUBLE_EQ(t.idle_us, 50);
    }
  // Overlap of op (A ∪ B = 70 µs) with transfer [20,120): A∩ = 20, B∩ = 40 → 60/70.
  EXPECT_NEAR(r.overlap->ratio, 60.0 / 70.0, 1e-9);
  EXPECT_NEAR(r.overlap->exposed_a_us, 10.0, 1e-9);
}

// A server opens and closes trace windows while its threads record: Collect and Clear must be safe
// against concurrent Record (each buffer is locked). Under ASan a race on a buffer's reallocation is
// a heap-use-after-free; here the count must also add up once the writers stop.
TEST(Trace, CollectAndClearWhileThreadsRecord) {
  trace::Clear();
  trace::Enable(true);
  constexpr int kThreads = 4, kSpans = 20000;
  std::atomic<int> done{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t)
    writers.emplace_back([&] {
      for (int i = 0; i < kSpans; ++i) trace::Record({"w", "test", trace::NowNs(), 1, trace::ThreadId(), {}});
      done.fetch_add(1);
    });
  size_t seen = 0;
  while (done.load() < kThreads) {
    seen += trace::Collect().size();
    trace::Clear();
  }
  for (auto& w : writers) w.join();
  EXPECT_LE(trace::Collect().size(), static_cast<size_t>(kThreads) * kSpans);
  // Collect alone (no Clear) while threads record loses nothing.
  trace::Clear();
  writers.clear();
  done = 0;
  for (int t = 0; t < kThreads; ++t)
    writers.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) trace::Record({"w2", "test", trace::NowNs(), 1, trace::ThreadId(), {}});
      done.fetch_add(1);
    });
  while (done.load() < kThreads) seen += trace::Collect().size();
  (void)seen;  // what the concurrent Collects saw depends on timing; only the end count is asserted
  for (auto& w : writers) w.join();
  trace::Enable(false);
  EXPECT_EQ(trace::Collect().size(), static_cast<size_t>(kThreads) * 1000);
  trace::Clear();
}

TEST(Trace, RecordingOffRecordsNothing) {
  trace::Clear();
  trace::Enable(false);
  { GYRE_SPAN("x", "op"); }
  EXPECT_TRUE(trace::Collect().empty());
}

}  // namespace
}  // namespace gyre::feedback
