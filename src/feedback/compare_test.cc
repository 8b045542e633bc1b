#include "feedback/compare.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace gyre::feedback {
namespace {

using nlohmann::json;

// Deterministic "noise": ten fixed offsets in [-1, 1], mean ~0.
const double kJitter[] = {0.1, -0.3, 0.7, -0.9, 0.2, 0.5, -0.6, 0.0, 0.9, -0.5};

json Samples(double center, double rel_noise, int n = 10) {
  json a = json::array();
  for (int i = 0; i < n; ++i) a.push_back(center * (1 + rel_noise * kJitter[i % 10]));
  return a;
}

std::string WriteTemp(const std::string& name, const json& j) {
  const std::string path = testing::TempDir() + "/" + name;
  std::ofstream(path) << j.dump();
  return path;
}

const MetricComparison& Find(const CompareReport& r, const std::string& name) {
  for (const MetricComparison& m : r.metrics) {
    if (m.name == name) return m;
  }
  ADD_FAILURE() << "no metric " << name;
  static MetricComparison none;
  return none;
}

RunResult Parse(const json& j) {
  Result<RunResult> r = ParseRunResult(j);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : RunResult{};
}

TEST(CompareTest, DirectionFromNameConventions) {
  EXPECT_EQ(DirectionFromName("prefill.tok_s"), Direction::kHigherIsBetter);
  EXPECT_EQ(DirectionFromName("decode.step_ms"), Direction::kLowerIsBetter);
  EXPECT_EQ(DirectionFromName("ttft_ms"), Direction::kLowerIsBetter);
  EXPECT_EQ(DirectionFromName("e2e_latency"), Direction::kLowerIsBetter);
  EXPECT_EQ(DirectionFromName("BM_Gemm/64.real_time_ns"), Direction::kLowerIsBetter);
  EXPECT_EQ(DirectionFromName("BM_Gemm/64.items_per_second"), Direction::kHigherIsBetter);
  EXPECT_EQ(DirectionFromName("serve.goodput"), Direction::kHigherIsBetter);
  EXPECT_EQ(DirectionFromName("decode_throughput"), Direction::kHigherIsBetter);
  EXPECT_EQ(DirectionFromName("wall_s"), Direction::kLowerIsBetter);
  EXPECT_EQ(DirectionFromName("time_per_step_ms"), Direction::kLowerIsBetter);
  EXPECT_EQ(DirectionFromName("num_warps"), Direction::kUnknown);
  EXPECT_EQ(DirectionFromName("acceptance_rate"), Direction::kUnknown);
}

TEST(CompareTest, IdenticalRunsShowNoChange) {
  const json run = {{"meta", {{"commit", "abc"}}},
                    {"metrics", {{"decode.step_ms", Samples(4.0, 0.02)},
                                 {"prefill.tok_s", Samples(1500, 0.02)},
                                 {"model_bytes", 123456}}}};
  const CompareReport r = CompareRuns(Parse(run), Parse(run));
  ASSERT_EQ(r.metrics.size(), 3u);
  for (const MetricComparison& m : r.metrics) {
    EXPECT_EQ(m.verdict, Verdict::kNoChange) << m.name;
    EXPECT_EQ(*m.change_pct, 0.0);
  }
  EXPECT_DOUBLE_EQ(*Find(r, "decode.step_ms").p_value, 1.0);
  EXPECT_EQ(Find(r, "model_bytes").note, "(no samples: threshold only)");
  EXPECT_EQ(r.Count(Verdict::kNoChange), 3);
}

TEST(CompareTest, TenPercentSlowerWithTightSamplesIsWorse) {
  const json a = {{"metrics", {{"decode.step_ms", Samples(4.0, 0.01)}, {"decode.tok_s", Samples(2000, 0.01)}}}};
  const json b = {{"metrics", {{"decode.step_ms", Samples(4.4, 0.01)}, {"decode.tok_s", Samples(1800, 0.01)}}}};
  const CompareReport r = CompareRuns(Parse(a), Parse(b));
  const MetricComparison& step = Find(r, "decode.step_ms");
  EXPECT_EQ(step.verdict, Verdict::kWorse);
  EXPECT_NEAR(*step.change_pct, 10.0, 0.5);
  EXPECT_LT(*step.p_value, 0.001);
  ASSERT_TRUE(step.change_ci_lo_pct.has_value());
  EXPECT_GT(*step.change_ci_lo_pct, 5.0);
  EXPECT_LT(*step.change_ci_hi_pct, 15.0);
  EXPECT_EQ(Find(r, "decode.tok_s").verdict, Verdict::kWorse);
  // And the other way round it is better.
  const CompareReport back = CompareRuns(Parse(b), Parse(a));
  EXPECT_EQ(Find(back, "decode.step_ms").verdict, Verdict::kBetter);
  EXPECT_EQ(Find(back, "decode.tok_s").verdict, Verdict::kBetter);
  EXPECT_EQ(back.Count(Verdict::kBetter), 2);
}

TEST(CompareTest, NoisyOverlapIsNoDetectableChange) {
  // 5% shift under +-30% noise: the distributions overlap and the test cannot tell.
  const json a = {{"metrics", {{"e2e_ms", Samples(100, 0.3)}}}};
  json b_samples = Samples(105, 0.3);
  std::reverse(b_samples.begin(), b_samples.end());
  const json b = {{"metrics", {{"e2e_ms", b_samples}}}};
  const MetricComparison m = CompareRuns(Parse(a), Parse(b)).metrics.at(0);
  EXPECT_EQ(m.verdict, Verdict::kNoChange);
  EXPECT_GT(*m.p_value, 0.05);
}

TEST(CompareTest, SignificantButBelowThresholdIsNoDetectableChange) {
  const json a = {{"metrics", {{"step_ms", Samples(100, 0.001)}}}};
  const json b = {{"metrics", {{"step_ms", Samples(101, 0.001)}}}};
  CompareOptions opt;
  const MetricComparison m = CompareRuns(Parse(a), Parse(b), opt).metrics.at(0);
  EXPECT_LT(*m.p_value, 0.05);
  EXPECT_EQ(m.verdict, Verdict::kNoChange);
  opt.threshold_pct = 0.5;
  EXPECT_EQ(CompareRuns(Parse(a), Parse(b), opt).metrics.at(0).verdict, Verdict::kWorse);
}

TEST(CompareTest, ScalarsUseThresholdOnly) {
  const json a = {{"metrics", {{"prefill.tok_s", 1000.0}, {"decode.tok_s", 500.0}, {"x", 1.0}}}};
  const json b = {{"metrics", {{"prefill.tok_s", 1100.0}, {"decode.tok_s", 505.0}, {"x", 2.0}}}};
  const CompareReport r = CompareRuns(Parse(a), Parse(b));
  EXPECT_EQ(Find(r, "prefill.tok_s").verdict, Verdict::kBetter);
  EXPECT_EQ(Find(r, "prefill.tok_s").note, "(no samples: threshold only)");
  EXPECT_FALSE(Find(r, "prefill.tok_s").p_value.has_value());
  EXPECT_EQ(Find(r, "decode.tok_s").verdict, Verdict::kNoChange);
  EXPECT_EQ(Find(r, "x").verdict, Verdict::kChanged);  // no direction known for "x"
}

TEST(CompareTest, DeclaredDirectionsOverrideConvention) {
  const json a = {{"metrics", {{"acceptance_rate", 0.8}, {"queue_ms", 10.0}}},
                  {"directions", {{"acceptance_rate", "higher"}, {"queue_ms", "higher"}}}};
  const json b = {{"metrics", {{"acceptance_rate", 0.6}, {"queue_ms", 12.0}}}};
  const CompareReport r = CompareRuns(Parse(a), Parse(b));
  EXPECT_EQ(Find(r, "acceptance_rate").verdict, Verdict::kWorse);
  EXPECT_EQ(Find(r, "queue_ms").verdict, Verdict::kBetter);
}

TEST(CompareTest, TooFewSamplesAreFlagged) {
  const json a = {{"metrics", {{"step_ms", {1.0, 1.01, 0.99}}}}};
  const json b = {{"metrics", {{"step_ms", {2.0, 2.01, 1.99}}}}};
  const MetricComparison m = CompareRuns(Parse(a), Parse(b)).metrics.at(0);
  EXPECT_EQ(m.verdict, Verdict::kNoChange);  // min p for 3 vs 3 is 0.1
  EXPECT_NE(m.note.find("too few samples"), std::string::npos);
}

json GbenchEntry(const std::string& name, double real, double cpu, const std::string& unit,
                 const std::string& run_type = "iteration", const std::string& agg = "") {
  json e = {{"name", name}, {"run_name", name}, {"run_type", run_type}, {"iterations", 1000},
            {"real_time", real}, {"cpu_time", cpu}, {"time_unit", unit}};
  if (!agg.empty()) {
    e["name"] = name + "_" + agg;
    e["aggregate_name"] = agg;
  }
  return e;
}

TEST(CompareTest, ParsesGoogleBenchmarkJson) {
  json benchmarks = json::array();
  for (int i = 0; i < 9; ++i) {
    json e = GbenchEntry("BM_Gemm/64", 10.0 + 0.1 * kJitter[i], 9.9, "us");
    e["repetition_index"] = i;
    e["items_per_second"] = 1e6;
    benchmarks.push_back(e);
  }
  benchmarks.push_back(GbenchEntry("BM_Gemm/64", 10.0, 9.9, "us", "aggregate", "mean"));
  benchmarks.push_back(GbenchEntry("BM_Gemm/64", 10.0, 9.9, "us", "aggregate", "median"));
  // Aggregates only (--benchmark_report_aggregates_only): the median becomes a scalar.
  benchmarks.push_back(GbenchEntry("BM_Softmax", 2.0, 2.0, "ms", "aggregate", "mean"));
  benchmarks.push_back(GbenchEntry("BM_Softmax", 3.0, 3.0, "ms", "aggregate", "median"));
  json err = GbenchEntry("BM_Broken", 0, 0, "ns");
  err["error_occurred"] = true;
  err["error_message"] = "out of memory";
  benchmarks.push_back(err);
  const json j = {{"context", {{"host_name", "x"}, {"num_cpus", 2}}}, {"benchmarks", benchmarks}};

  const RunResult r = Parse(j);
  EXPECT_EQ(r.format, "google-benchmark");
  EXPECT_EQ(r.meta["num_cpus"], 2);
  ASSERT_TRUE(r.metrics.count("BM_Gemm/64.real_time_ns"));
  const Metric& gemm = r.metrics.at("BM_Gemm/64.real_time_ns");
  EXPECT_EQ(gemm.samples.size(), 9u);  // aggregates are not samples
  EXPECT_NEAR(gemm.samples[0], 10010.0, 1e-6);  // us -> ns
  EXPECT_EQ(gemm.direction, Direction::kLowerIsBetter);
  EXPECT_EQ(r.metrics.at("BM_Gemm/64.items_per_second").direction, Direction::kHigherIsBetter);
  ASSERT_TRUE(r.metrics.count("BM_Softmax.real_time_ns"));
  EXPECT_EQ(r.metrics.at("BM_Softmax.real_time_ns").samples, std::vector<double>{3e6});
  EXPECT_FALSE(r.metrics.count("BM_Broken.real_time_ns"));
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("out of memory"), std::string::npos);

  // A slower candidate is flagged worse.
  json slower = j;
  for (json& e : slower["benchmarks"]) e["real_time"] = e["real_time"].get<double>() * 1.2;
  const CompareReport c = CompareRuns(r, Parse(slower));
  EXPECT_EQ(Find(c, "BM_Gemm/64.real_time_ns").verdict, Verdict::kWorse);
  EXPECT_EQ(Find(c, "BM_Gemm/64.cpu_time_ns").verdict, Verdict::kNoChange);
  EXPECT_EQ(Find(c, "BM_Softmax.real_time_ns").verdict, Verdict::kWorse);
  EXPECT_EQ(Find(c, "BM_Softmax.real_time_ns").note, "(no samples: threshold only)");
}

TEST(CompareTest, RejectsMalformedInput) {
  EXPECT_EQ(ParseRunResult(json{{"foo", 1}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseRunResult(json{{"metrics", {{"x", "fast"}}}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseRunResult(json{{"metrics", {{"x", json::array()}}}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseRunResult(json{{"metrics", {{"x", 1}}}, {"directions", {{"x", "up"}}}}).status().code(),
            StatusCode::kInvalidArgument);
  const Status s = ParseRunResult(json{{"benchmarks", {{{"name", "b"}, {"real_time", 1}, {"time_unit", "fortnights"}}}}}).status();
  EXPECT_NE(s.message().find("fortnights"), std::string::npos);
}

TEST(CompareTest, CliExitCodesAndOutputs) {
  const std::string a = WriteTemp("cmp_a.json", {{"metrics", {{"decode.step_ms", Samples(4.0, 0.01)}}}});
  const std::string b = WriteTemp("cmp_b.json", {{"metrics", {{"decode.step_ms", Samples(4.4, 0.01)}}}});
  std::ostringstream out, err;
  EXPECT_EQ(RunCompareCli(a, b, /*json=*/true, 2.0, out, err), 0);
  const json j = json::parse(out.str());
  EXPECT_EQ(j["summary"]["worse"], 1);
  EXPECT_EQ(j["summary"]["better"], 0);
  EXPECT_EQ(j["summary"]["unchanged"], 0);
  EXPECT_EQ(j["metrics"][0]["verdict"], "worse");
  EXPECT_TRUE(j["metrics"][0]["p_value"].is_number());

  std::ostringstream human;
  EXPECT_EQ(RunCompareCli(a, b, false, 2.0, human, err), 0);
  EXPECT_NE(human.str().find("decode.step_ms"), std::string::npos);
  EXPECT_NE(human.str().find("summary: 0 better, 1 worse, 0 no detectable change"), std::string::npos);

  std::ostringstream e1, e2, e3;
  EXPECT_EQ(RunCompareCli(a, testing::TempDir() + "/missing.json", false, 2.0, out, e1), 2);
  EXPECT_NE(e1.str().find("missing.json"), std::string::npos);
  const std::string bad = testing::TempDir() + "/bad.json";
  std::ofstream(bad) << "{not json";
  EXPECT_EQ(RunCompareCli(bad, b, false, 2.0, out, e2), 2);
  EXPECT_NE(e2.str().find("not valid JSON"), std::string::npos);
  EXPECT_EQ(RunCompareCli(a, b, false, -1.0, out, e3), 2);
}

// Runs made with different settings are compared, with a warning naming each difference; what
// differs from run to run by nature (dates, commits, wall time) is not a setting.
TEST(Compare, WarnsWhenTheRunsUsedDifferentSettings) {
  const json ma = {{"tool", "gyre bench serve"}, {"date", "2026-12-01"}, {"commit", "abc"},
                   {"config", {{"request_rate", 4}, {"input_len", 128}}}, {"machine", {{"cpus", 2}}}};
  json mb = ma;
  mb["date"] = "2026-12-02";
  mb["commit"] = "def";
  EXPECT_TRUE(SettingsThatDiffer(ma, mb).empty());
  mb["config"]["request_rate"] = 8;
  mb["machine"].erase("cpus");
  mb["extra"] = true;
  const auto d = SettingsThatDiffer(ma, mb);
  EXPECT_EQ(d, (std::vector<std::string>{"config.request_rate: 4 vs 8", "machine.cpus: 2 vs (absent)",
                                         "extra: (absent) vs true"}));
  EXPECT_TRUE(SettingsThatDiffer(ma, json()).empty());  // a run without meta: nothing to say

  RunResult a, b;
  a.meta = ma;
  b.meta = mb;
  a.metrics["x"] = Metric{{1.0}, Direction::kLowerIsBetter};
  b.metrics["x"] = Metric{{1.0}, Direction::kLowerIsBetter};
  const CompareReport r = CompareRuns(a, b);
  EXPECT_EQ(r.settings_differ, d);
  EXPECT_NE(r.Human().find("warning: the runs used different settings"), std::string::npos) << r.Human();
  EXPECT_NE(r.Human().find("config.request_rate: 4 vs 8"), std::string::npos);
  EXPECT_EQ(r.Json()["settings_differ"].size(), 3u);
  b.meta = ma;
  EXPECT_EQ(CompareRuns(a, b).Human().find("warning"), std::string::npos);
}

}  // namespace
}  // namespace gyre::feedback
