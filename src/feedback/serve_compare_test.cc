#include "feedback/serve_compare.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "feedback/stats.h"

namespace gyre::feedback {
namespace {

using nlohmann::json;

// A synthetic serving run: arrivals (Poisson at `rate` req/s, or all at once when rate is 0),
// log-normal TTFT around `ttft_ms`, `output_tokens - 1` log-normal gaps around `tpot_ms`.
struct Shape {
  int num_requests = 100;
  double rate = 20;
  double ttft_ms = 50, ttft_sigma = 0.5;
  double tpot_ms = 10, gap_sigma = 0.3;
  int output_tokens = 9;
  double slo_ttft_ms = 80;  // goodput is a headline metric
  int num_failed = 0;
  uint64_t arrival_seed = 0;  // bench serve's --seed: the same schedule in both runs of a pair
};

double Uniform(Rng& rng) { return (static_cast<double>(rng.Next() >> 11) + 0.5) * 0x1p-53; }
double Normal(Rng& rng) {
  return std::sqrt(-2 * std::log(Uniform(rng))) * std::cos(2 * M_PI * Uniform(rng));
}

json Config(const Shape& s) {
  return {{"url", "http://127.0.0.1:8000"}, {"model", "m"},  {"num_prompts", s.num_requests},
          {"request_rate", s.rate > 0 ? json(s.rate) : json("inf")},       {"arrival", "poisson"},
          {"input_len", 128}, {"output_len", s.output_tokens}, {"seed", 0}, {"slo_ttft_ms", s.slo_ttft_ms},
          {"slo_tpot_ms", 0}};
}

// `seed` draws the latencies; the arrival schedule comes from s.arrival_seed.
json MakeRun(const Shape& s, uint64_t seed) {
  Rng rng(seed), arrivals(s.arrival_seed);
  json requests = json::array();
  double t = 0, end = 0;
  for (int i = 0; i < s.num_requests; ++i) {
    if (s.rate > 0) t += -std::log(Uniform(arrivals)) / s.rate * 1e3;
    if (i < s.num_failed) {
      requests.push_back({{"ok", false}, {"start_ms", t}});
      continue;
    }
    const double ttft = s.ttft_ms * std::exp(s.ttft_sigma * Normal(rng));
    json itl = json::array();
    double e2e = ttft;
    for (int k = 1; k < s.output_tokens; ++k) {
      const double g = s.tpot_ms * std::exp(s.gap_sigma * Normal(rng));
      itl.push_back(g);
      e2e += g;
    }
    end = std::max(end, t + e2e);
    requests.push_back({{"ok", true}, {"start_ms", t}, {"ttft_ms", ttft}, {"e2e_ms", e2e}, {"itl_ms", itl},
                        {"prompt_tokens", 128}, {"output_tokens", s.output_tokens}});
  }
  return {{"meta", {{"tool", "gyre bench serve"}, {"machine", {{"cpu", "x"}}}, {"config", Config(s)}}},
          {"metrics", {{"duration_s", end / 1e3}}},
          {"requests", requests}};
}

ServeRun Parse(const json& j) {
  Result<ServeRun> r = ParseServeRun(j);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ServeRun{};
}

ServeCompareOptions Fast() {
  ServeCompareOptions o;
  o.resamples = 300;  // the standard error settles well before this
  return o;
}

const ServeMetricComparison& Row(const ServeCompareReport& r, const std::string& name) {
  for (const ServeMetricComparison& m : r.metrics) {
    if (m.name == name) return m;
  }
  ADD_FAILURE() << "no metric " << name;
  static ServeMetricComparison none;
  return none;
}

bool Names(const std::vector<std::string>& v, const std::string& name) {
  return std::find(v.begin(), v.end(), name) != v.end();
}

TEST(ServeCompareTest, StatisticsAreTheOnesBenchServePrints) {
  const json j = MakeRun(Shape{}, 7);
  const ServeRun run = Parse(j);
  std::vector<double> ttft, itl;
  for (const json& q : j["requests"]) {
    ttft.push_back(q["ttft_ms"].get<double>());
    for (const json& g : q["itl_ms"]) itl.push_back(g.get<double>());
  }
  const ServeCompareReport r = CompareServeRuns(run, run, Fast());
  EXPECT_DOUBLE_EQ(Row(r, "ttft_ms_p99").a, Quantile(ttft, 0.99));
  EXPECT_DOUBLE_EQ(Row(r, "ttft_ms_p50").a, Quantile(ttft, 0.5));
  EXPECT_DOUBLE_EQ(Row(r, "ttft_ms_mean").a, Mean(ttft));
  EXPECT_DOUBLE_EQ(Row(r, "itl_ms_p90").a, Quantile(itl, 0.9));
  // Output throughput is tokens / duration.
  const double tokens = 100.0 * Shape{}.output_tokens;
  EXPECT_NEAR(Row(r, "output_throughput").a, tokens / run.duration_s, 1e-9 * tokens);
  // A run against itself: nothing changes, and no warning.
  EXPECT_EQ(r.headline, Verdict::kNoChange);
  EXPECT_TRUE(r.warnings.empty());
  for (const ServeMetricComparison& m : r.metrics) EXPECT_EQ(m.verdict, Verdict::kNoChange) << m.name;
}

// Two runs drawn from one distribution (one arrival schedule, as two `bench serve` runs with one
// --seed have; TTFTs and gaps drawn afresh) must read "no detectable change" in at least 95% of
// trials. Deterministic: fixed seeds. `num_requests` 100 leaves the TTFT and TPOT p99s unjudged
// (too few requests); 600 judges every headline metric.
void ExpectQuietAaPairs(const Shape& shape, int num_trials) {
  int quiet = 0;
  std::map<std::string, int> alarms;
  for (int t = 0; t < num_trials; ++t) {
    Shape s = shape;
    s.arrival_seed = 77 + t;
    const ServeCompareReport r =
        CompareServeRuns(Parse(MakeRun(s, 1000 + 2 * t)), Parse(MakeRun(s, 1001 + 2 * t)), Fast());
    ASSERT_EQ(Row(r, "goodput").headline, true);
    quiet += r.headline == Verdict::kNoChange;
    for (const std::string& n : r.headline_worse) ++alarms[n];
    for (const std::string& n : r.headline_better) ++alarms[n];
  }
  std::string detail;
  for (const auto& [n, c] : alarms) detail += n + ":" + std::to_string(c) + " ";
  EXPECT_GE(quiet, num_trials * 95 / 100) << "false alarms by metric: " << detail;
  std::printf("A/A, %d requests: %d of %d trials quiet; false alarms by metric: %s\n", shape.num_requests, quiet,
              num_trials, detail.c_str());
}

TEST(ServeCompareTest, AaPairsAreQuietInAtLeast95PercentOfTrials) { ExpectQuietAaPairs(Shape{}, 200); }

TEST(ServeCompareTest, AaPairsWithEveryHeadlineMetricJudgedAreQuiet) {
  Shape s;
  s.num_requests = 600;
  s.rate = 60;
  const ServeCompareReport r = CompareServeRuns(Parse(MakeRun(s, 1)), Parse(MakeRun(s, 2)), Fast());
  for (const ServeMetricComparison& m : r.metrics) EXPECT_EQ(m.note, "") << m.name;
  ExpectQuietAaPairs(s, 60);
}

TEST(ServeCompareTest, AP99OfTooFewRequestsIsNotJudged) {
  const ServeCompareReport r = CompareServeRuns(Parse(MakeRun(Shape{}, 1)), Parse(MakeRun(Shape{}, 2)), Fast());
  EXPECT_NE(Row(r, "ttft_ms_p99").note.find("a p99 needs >= 500 per side"), std::string::npos)
      << Row(r, "ttft_ms_p99").note;
  EXPECT_EQ(Row(r, "ttft_ms_p50").note, "");
  EXPECT_EQ(Row(r, "itl_ms_p99").note, "");  // 800 gaps
  EXPECT_NE(r.HeadlineText().find("not judged (see the table): ttft_ms_p99, tpot_ms_p99"), std::string::npos)
      << r.HeadlineText();
}

TEST(ServeCompareTest, DoubledTtftIsNamedOnEverySeed) {
  Shape slow;
  slow.ttft_ms *= 2;
  slow.slo_ttft_ms = 0;  // the SLO would make goodput fall too; keep the test about TTFT
  Shape base;
  base.slo_ttft_ms = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const ServeCompareReport r = CompareServeRuns(Parse(MakeRun(base, seed)), Parse(MakeRun(slow, seed + 100)), Fast());
    EXPECT_EQ(r.headline, Verdict::kWorse) << seed;
    EXPECT_TRUE(Names(r.headline_worse, "ttft_ms_p50")) << seed << ": " << r.HeadlineText();
    EXPECT_FALSE(Names(r.headline_worse, "tpot_ms_p50")) << seed << ": " << r.HeadlineText();
    EXPECT_NE(r.HeadlineText().find("WORSE: ttft_ms_p50 +"), std::string::npos) << r.HeadlineText();
    const ServeMetricComparison& m = Row(r, "ttft_ms_p50");
    ASSERT_TRUE(m.ci_lo_pct && m.ci_hi_pct);
    EXPECT_LT(*m.ci_lo_pct, 100);  // the CI covers the true +100%, loosely
    EXPECT_GT(*m.ci_hi_pct, 100);
  }
}

// The failure the count-of-metrics summary had: TTFT ten times worse while decode got faster
// (more metrics "better" than "worse") must read as worse, with the improvement beside it.
TEST(ServeCompareTest, TenfoldTtftWithFasterDecodeIsNotAWin) {
  Shape a, b;
  a.rate = b.rate = 0;  // all at once: throughput follows decode speed
  a.num_requests = b.num_requests = 600;
  a.slo_ttft_ms = b.slo_ttft_ms = 0;
  b.ttft_ms *= 10;
  b.tpot_ms /= 2;
  const ServeCompareReport r = CompareServeRuns(Parse(MakeRun(a, 3)), Parse(MakeRun(b, 4)), Fast());
  EXPECT_EQ(r.headline, Verdict::kWorse);
  EXPECT_TRUE(Names(r.headline_worse, "ttft_ms_p99"));
  EXPECT_TRUE(Names(r.headline_better, "tpot_ms_p50"));
  EXPECT_TRUE(Names(r.headline_better, "itl_ms_p50"));
  EXPECT_EQ(r.HeadlineText().rfind("WORSE: ", 0), 0u) << r.HeadlineText();
  EXPECT_NE(r.HeadlineText().find("also better: "), std::string::npos);
}

TEST(ServeCompareTest, HalvedThroughputIsNamed) {
  Shape a, b;
  a.rate = b.rate = 0;
  a.slo_ttft_ms = b.slo_ttft_ms = 0;
  a.ttft_sigma = b.ttft_sigma = 0.1;
  b.tpot_ms *= 2.5;  // the run takes about twice as long
  const ServeCompareReport r = CompareServeRuns(Parse(MakeRun(a, 5)), Parse(MakeRun(b, 6)), Fast());
  EXPECT_TRUE(Names(r.headline_worse, "output_throughput")) << r.Human();
  EXPECT_EQ(Row(r, "output_throughput").direction, Direction::kHigherIsBetter);
  EXPECT_LT(*Row(r, "output_throughput").change_pct, -40);
}

TEST(ServeCompareTest, DifferentSettingsMachinesAndFailuresWarn) {
  Shape a, b;
  b.num_failed = 3;
  json ja = MakeRun(a, 1), jb = MakeRun(b, 2);
  jb["meta"]["config"]["input_len"] = 256;
  jb["meta"]["config"]["url"] = "http://other:9000";  // expected to differ: no warning
  jb["meta"]["machine"]["cpu"] = "y";
  const ServeCompareReport r = CompareServeRuns(Parse(ja), Parse(jb), Fast());
  std::string all;
  for (const std::string& w : r.warnings) all += w + "\n";
  EXPECT_NE(all.find("settings differ: input_len = 128 in A, 256 in B"), std::string::npos) << all;
  EXPECT_EQ(all.find("url"), std::string::npos) << all;
  EXPECT_NE(all.find("machines differ"), std::string::npos) << all;
  EXPECT_NE(all.find("failed requests differ: 0 of 100 in A, 3 of 100 in B"), std::string::npos) << all;
  EXPECT_NE(r.Human().find("warning: settings differ: input_len"), std::string::npos);
  // Different SLOs: goodput is left out, and said so.
  jb = MakeRun(a, 2);
  jb["meta"]["config"]["slo_ttft_ms"] = 50;
  const ServeCompareReport r2 = CompareServeRuns(Parse(ja), Parse(jb), Fast());
  EXPECT_FALSE(std::any_of(r2.metrics.begin(), r2.metrics.end(),
                           [](const ServeMetricComparison& m) { return m.name == "goodput"; }));
  EXPECT_NE(r2.HeadlineText().find("goodput: no common SLO"), std::string::npos);
}

TEST(ServeCompareTest, TooFewRequestsAreNotJudged) {
  Shape s;
  s.num_requests = 5;
  const ServeCompareReport r = CompareServeRuns(Parse(MakeRun(s, 1)), Parse(MakeRun(s, 2)), Fast());
  EXPECT_NE(Row(r, "ttft_ms_p50").note.find("not judged"), std::string::npos);
  EXPECT_EQ(Row(r, "ttft_ms_p50").verdict, Verdict::kNoChange);
}

TEST(ServeCompareTest, ParseNamesTheBadField) {
  json j = MakeRun(Shape{}, 1);
  json old = j;
  old.erase("requests");
  Result<ServeRun> r = ParseServeRun(old);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'requests'"), std::string::npos);
  json bad = j;
  bad["requests"][3]["itl_ms"] = "x";
  r = ParseServeRun(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("requests[3].itl_ms"), std::string::npos) << r.status().message();
  bad = j;
  bad["requests"][4]["ttft_ms"] = -1;
  r = ParseServeRun(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("requests[4].ttft_ms"), std::string::npos);
  json other = j;
  other["meta"]["tool"] = "gyre gate";
  EXPECT_FALSE(IsServeBenchJson(other));
  EXPECT_FALSE(ParseServeRun(other).ok());
}

std::string WriteTemp(const std::string& name, const json& j) {
  const std::string path = testing::TempDir() + "/" + name;
  std::ofstream(path) << j.dump();
  return path;
}

TEST(ServeCompareTest, CompareCliUsesTheRecordsAndFallsBackWithANote) {
  Shape slow;
  slow.ttft_ms *= 3;
  const std::string a = WriteTemp("serve_a.json", MakeRun(Shape{}, 1));
  const std::string b = WriteTemp("serve_b.json", MakeRun(slow, 2));
  std::ostringstream out, err;
  ASSERT_EQ(RunCompareCli(a, b, false, 2.0, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("headline: WORSE: ttft_ms_p50"), std::string::npos) << out.str();
  std::ostringstream jout;
  ASSERT_EQ(RunCompareCli(a, b, true, 2.0, jout, err), 0);
  const json j = json::parse(jout.str());
  EXPECT_EQ(j["kind"], "serve");
  EXPECT_EQ(j["headline"]["verdict"], "worse");
  // An older file (no records, but the summary metrics): the generic table, with a note.
  json old = MakeRun(Shape{}, 1);
  old.erase("requests");
  old["metrics"]["ttft_ms_p50"] = 50;
  json old_b = old;
  old_b["metrics"]["ttft_ms_p50"] = 51;
  std::ostringstream gout;
  ASSERT_EQ(RunCompareCli(WriteTemp("old_a.json", old), WriteTemp("old_b.json", old_b), false, 2.0, gout, err), 0);
  EXPECT_NE(gout.str().find("per-request comparison not possible"), std::string::npos) << gout.str();
}

}  // namespace
}  // namespace gyre::feedback
