#include "feedback/gate.h"
#include "feedback/compare.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

namespace gyre::feedback {
namespace {

using nlohmann::json;

const double kJitter[] = {0.1, -0.3, 0.7, -0.9, 0.2, 0.5, -0.6, 0.0, 0.9, -0.5};

// A fake engine: each scenario's metrics are `center * (1 + noise * jitter[repeat])`.
struct FakeMetric {
  double center;
  double noise;
};
using FakeScenario = std::map<std::string, FakeMetric>;

struct FakeEngine {
  std::map<std::string, FakeScenario> scenarios;
  std::vector<std::pair<std::string, int>> calls;

  ScenarioRunner Runner() {
    return [this](const std::string& name, const json& spec,
                  int repeat) -> Result<std::map<std::string, double>> {
      calls.push_back({name, repeat});
      EXPECT_TRUE(spec.contains("kind"));
      std::map<std::string, double> out;
      const double j = kJitter[(repeat + 10) % 10];
      for (const auto& [metric, m] : scenarios.at(name)) out[metric] = m.center * (1 + m.noise * j);
      return out;
    };
  }
};

FakeEngine HealthyEngine() {
  FakeEngine e;
  e.scenarios["prefill"] = {{"tok_s", {1600, 0.03}}, {"ms", {160, 0.03}}, {"ttft_ms", {160, 0.03}}};
  e.scenarios["decode"] = {{"tok_s", {1600, 0.03}}, {"ms", {200, 0.03}}, {"step_ms", {5, 0.03}}};
  e.scenarios["mixed"] = {{"tok_s", {2400, 0.03}}, {"ms", {300, 0.03}}, {"step_ms", {9, 0.03}}};
  e.scenarios["borderline"] = {{"tok_s", {100, 0.15}}};
  return e;
}

json Gate(json predicates) {
  return {{"name", "test-gate"},
          {"repeats", 5},
          {"scenarios",
           {{"prefill", {{"kind", "prefill"}, {"prompt_len", 256}, {"batch", 1}}},
            {"decode", {{"kind", "decode"}, {"context_len", 64}, {"batch", 8}, {"steps", 32}}},
            {"mixed", {{"kind", "mixed"}, {"batch", 8}, {"prompt_len", 256}, {"steps", 32}}},
            {"borderline", {{"kind", "decode"}, {"batch", 1}}}}},
          {"predicates", std::move(predicates)}};
}

const json kSatisfiable = json::parse(R"([
  {"id": "decode-faster-per-token-than-prefill-step", "expr": {"ratio": ["decode.step_ms", "prefill.ms"]}, "op": "<", "value": 1.0},
  {"id": "prefill-throughput-floor", "metric": "prefill.tok_s", "stat": "median", "op": ">", "value": 100},
  {"id": "p90-bound", "metric": "decode.step_ms", "stat": "p90", "op": "<", "value": 500},
  {"id": "mixed-not-slower", "compare": ["mixed.tok_s", "decode.tok_s"], "op": ">=", "test": "mannwhitney"}
])");

GateReport MustRun(const json& gate, FakeEngine& engine, GateOptions opt = {}) {
  Result<GateReport> r = RunGate(gate, engine.Runner(), opt);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : GateReport{};
}

const PredicateResult& Find(const GateReport& r, const std::string& id) {
  for (const PredicateResult& p : r.predicates) {
    if (p.id == id) return p;
  }
  ADD_FAILURE() << "no predicate " << id;
  static PredicateResult none;
  return none;
}

TEST(GateTest, SatisfiableGatePasses) {
  FakeEngine engine = HealthyEngine();
  const GateReport r = MustRun(Gate(kSatisfiable), engine);
  for (const PredicateResult& p : r.predicates) {
    EXPECT_EQ(p.verdict, GateVerdict::kPass) << p.id << ": " << p.reason;
  }
  EXPECT_TRUE(r.Passed());
  EXPECT_EQ(r.ExitCode(), 0);
  EXPECT_EQ(engine.calls.size(), 4u * 5u);
  EXPECT_EQ(r.samples.at("prefill.tok_s").size(), 5u);

  const PredicateResult& ratio = Find(r, "decode-faster-per-token-than-prefill-step");
  EXPECT_NEAR(ratio.estimate, 5.0 / 160, 1e-3);
  EXPECT_LT(*ratio.ci_hi, 1.0);
  const PredicateResult& mixed = Find(r, "mixed-not-slower");
  EXPECT_LT(*mixed.p_value, 0.05);  // mixed is clearly faster: detected, right way
  EXPECT_GT(mixed.estimate, 40);

  const json j = r.Json();
  EXPECT_EQ(j["summary"]["pass"], 4);
  EXPECT_EQ(j["exit_code"], 0);
  EXPECT_EQ(j["metrics"]["decode.step_ms"].size(), 5u);
  EXPECT_EQ(j["predicates"][1]["evidence"]["ci"].size(), 2u);
  EXPECT_NE(r.Human().find("result: PASS (4 pass, 0 fail, 0 inconclusive)"), std::string::npos);
}

TEST(GateTest, ImpossiblePredicateFails) {
  FakeEngine engine = HealthyEngine();
  const json preds = json::parse(R"([
    {"id": "absurd-throughput", "metric": "prefill.tok_s", "op": ">", "value": 1e12},
    {"id": "absurd-ratio", "expr": {"ratio": ["decode.step_ms", "prefill.ms"]}, "op": "<", "value": 0.001},
    {"id": "ok", "metric": "prefill.ttft_ms", "stat": "max", "op": "<=", "value": 1000}
  ])");
  const GateReport r = MustRun(Gate(preds), engine);
  EXPECT_EQ(Find(r, "absurd-throughput").verdict, GateVerdict::kFail);
  EXPECT_EQ(Find(r, "absurd-ratio").verdict, GateVerdict::kFail);
  EXPECT_EQ(Find(r, "ok").verdict, GateVerdict::kPass);
  EXPECT_EQ(r.ExitCode(), 1);
  EXPECT_NE(r.Human().find("FAIL          absurd-throughput"), std::string::npos);
}

TEST(GateTest, NoisyBorderlineIsInconclusive) {
  FakeEngine engine = HealthyEngine();
  const json preds = json::parse(R"([
    {"id": "borderline-floor", "metric": "borderline.tok_s", "op": ">", "value": 100}
  ])");
  const GateReport r = MustRun(Gate(preds), engine);
  const PredicateResult& p = Find(r, "borderline-floor");
  EXPECT_EQ(p.verdict, GateVerdict::kInconclusive) << p.reason;
  EXPECT_LT(*p.ci_lo, 100);
  EXPECT_GT(*p.ci_hi, 100);
  EXPECT_EQ(r.ExitCode(), 1);  // inconclusive counts as failure...
  const std::string human = r.Human();
  EXPECT_NE(human.find("INCONCLUSIVE"), std::string::npos);  // ...but is printed distinctly
  EXPECT_NE(human.find("inconclusive counts as failure"), std::string::npos);
  EXPECT_EQ(r.Json()["predicates"][0]["verdict"], "INCONCLUSIVE");
}

TEST(GateTest, CompareVerdicts) {
  FakeEngine engine = HealthyEngine();
  engine.scenarios["slow"] = {{"tok_s", {1000, 0.03}}};
  engine.scenarios["same"] = {{"tok_s", {1600, 0.03}}};
  json gate = Gate(json::parse(R"([
    {"id": "slow-not-slower", "compare": ["slow.tok_s", "decode.tok_s"], "op": ">="},
    {"id": "same-faster", "compare": ["same.tok_s", "decode.tok_s"], "op": ">"},
    {"id": "same-not-slower", "compare": ["same.tok_s", "decode.tok_s"], "op": ">="},
    {"id": "slow-is-slower", "compare": ["slow.tok_s", "decode.tok_s"], "op": "<"},
    {"id": "slow-within-50pct", "compare": ["slow.tok_s", "decode.tok_s"], "op": ">=", "min_effect_pct": 50}
  ])"));
  gate["scenarios"]["slow"] = {{"kind", "decode"}};
  gate["scenarios"]["same"] = {{"kind", "decode"}};
  const GateReport r = MustRun(gate, engine);
  EXPECT_EQ(Find(r, "slow-not-slower").verdict, GateVerdict::kFail);
  EXPECT_EQ(Find(r, "same-faster").verdict, GateVerdict::kInconclusive);
  EXPECT_EQ(Find(r, "same-not-slower").verdict, GateVerdict::kPass);
  EXPECT_EQ(Find(r, "slow-is-slower").verdict, GateVerdict::kPass);
  EXPECT_EQ(Find(r, "slow-within-50pct").verdict, GateVerdict::kPass);  // -37.5% < 50% margin
  EXPECT_NEAR(Find(r, "slow-not-slower").estimate, -37.5, 3);
}

TEST(GateTest, CompareWithTooFewRepeatsIsInconclusive) {
  FakeEngine engine = HealthyEngine();
  GateOptions opt;
  opt.repeats = 3;  // 2 / C(6,3) = 0.1 >= alpha
  const GateReport r = MustRun(Gate(kSatisfiable), engine, opt);
  EXPECT_EQ(r.repeats, 3);
  const PredicateResult& p = Find(r, "mixed-not-slower");
  EXPECT_EQ(p.verdict, GateVerdict::kInconclusive);
  EXPECT_NE(p.reason.find("too few samples"), std::string::npos);
}

TEST(GateTest, InterleavingIsShuffledButDeterministicPerSeed) {
  const std::vector<std::string> names = {"a", "b", "c", "d", "e"};
  const auto s1 = InterleavedSchedule(names, 6, 7);
  const auto s2 = InterleavedSchedule(names, 6, 7);
  const auto s3 = InterleavedSchedule(names, 6, 8);
  EXPECT_EQ(s1, s2);
  EXPECT_NE(s1, s3);
  std::set<std::vector<std::string>> distinct(s1.begin(), s1.end());
  EXPECT_GT(distinct.size(), 1u);  // rounds are not all in the same order
  for (const auto& round : s1) {
    EXPECT_EQ(std::set<std::string>(round.begin(), round.end()),
              std::set<std::string>(names.begin(), names.end()));
  }

  // RunGate follows the schedule: warmup rounds first (negative indices, discarded), then
  // repeats; each round runs every scenario exactly once.
  FakeEngine e1 = HealthyEngine(), e2 = HealthyEngine();
  json gate = Gate(kSatisfiable);
  gate["warmup"] = 1;
  GateOptions opt;
  opt.seed = 42;
  const GateReport r1 = MustRun(gate, e1, opt), r2 = MustRun(gate, e2, opt);
  EXPECT_EQ(e1.calls, e2.calls);
  EXPECT_EQ(r1.schedule, r2.schedule);
  ASSERT_EQ(e1.calls.size(), 4u * 6u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(e1.calls[i].second, -1);
  for (size_t i = 4; i < e1.calls.size(); ++i) EXPECT_EQ(e1.calls[i].second, static_cast<int>((i - 4) / 4));
  EXPECT_EQ(r1.samples.at("decode.tok_s").size(), 5u);
  ASSERT_EQ(r1.schedule.size(), 5u);
  for (size_t round = 0; round < 5; ++round) {
    for (size_t k = 0; k < 4; ++k) EXPECT_EQ(r1.schedule[round][k], e1.calls[4 + round * 4 + k].first);
  }
  std::set<std::vector<std::string>> orders(r1.schedule.begin(), r1.schedule.end());
  EXPECT_GT(orders.size(), 1u);
  opt.seed = 43;
  FakeEngine e3 = HealthyEngine();
  EXPECT_NE(MustRun(gate, e3, opt).schedule, r1.schedule);
  // Same data, same seed: identical verdicts and intervals.
  EXPECT_EQ(r1.Json()["predicates"], r2.Json()["predicates"]);
}

Status GateError(const json& gate) {
  FakeEngine engine = HealthyEngine();
  Result<GateReport> r = RunGate(gate, engine.Runner());
  return r.ok() ? Status::Ok() : r.status();
}

void ExpectInvalid(const json& preds, const std::string& needle) {
  const Status s = GateError(Gate(preds));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << needle;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(GateTest, ValidationErrorsNameThePredicate) {
  ExpectInvalid(json::parse(R"([{"id": "typo", "metric": "decod.step_ms", "op": "<", "value": 1}])"),
                "predicate 'typo': metric 'decod.step_ms' names unknown scenario 'decod'");
  ExpectInvalid(json::parse(R"([{"id": "bad-op", "metric": "decode.step_ms", "op": "=<", "value": 1}])"),
                "predicate 'bad-op': unknown op '=<'");
  ExpectInvalid(json::parse(R"([{"id": "no-value", "metric": "decode.step_ms", "op": "<"}])"),
                "predicate 'no-value': missing 'value'");
  ExpectInvalid(json::parse(R"([{"id": "key", "metric": "decode.step_ms", "op": "<", "vlaue": 1}])"),
                "predicate 'key': unknown key 'vlaue'");
  ExpectInvalid(json::parse(R"([{"id": "st", "metric": "decode.step_ms", "stat": "p101", "op": "<", "value": 1}])"),
                "predicate 'st': unknown stat 'p101'");
  ExpectInvalid(json::parse(R"([{"id": "two", "metric": "decode.step_ms", "compare": ["a.b", "c.d"], "op": "<"}])"),
                "predicate 'two': needs exactly one of");
  ExpectInvalid(json::parse(R"([{"id": "t", "compare": ["mixed.tok_s", "decode.tok_s"], "op": ">=", "test": "ttest"}])"),
                "predicate 't': unknown test");
  ExpectInvalid(json::parse(R"([{"id": "r", "expr": {"ratio": ["decode.step_ms"]}, "op": "<", "value": 1}])"),
                "predicate 'r': expected a list of two metric references");
  ExpectInvalid(json::parse(R"([{"id": "form", "metric": "decode", "op": "<", "value": 1}])"),
                "not of the form <scenario>.<metric>");
  ExpectInvalid(json::parse(R"([{"metric": "decode.step_ms", "op": "<", "value": 1}])"),
                "predicate #1: missing string 'id'");
  ExpectInvalid(json::parse(R"([{"id": "d", "metric": "decode.step_ms", "op": "<", "value": 1},
                                {"id": "d", "metric": "decode.step_ms", "op": "<", "value": 2}])"),
                "predicate 'd': duplicate id");
  // Known scenario, but the runner never reports that metric: caught after running.
  ExpectInvalid(json::parse(R"([{"id": "ghost", "metric": "decode.ttft_ms", "op": "<", "value": 1}])"),
                "predicate 'ghost': scenario 'decode' produced no metric 'ttft_ms' (it produced: ms, step_ms, tok_s)");

  json no_kind = Gate(kSatisfiable);
  no_kind["scenarios"]["decode"].erase("kind");
  EXPECT_NE(GateError(no_kind).message().find("scenario 'decode'"), std::string::npos);
  json bad_repeats = Gate(kSatisfiable);
  bad_repeats["repeats"] = 0;
  EXPECT_NE(GateError(bad_repeats).message().find("'repeats'"), std::string::npos);
  json dotted = Gate(kSatisfiable);
  dotted["scenarios"]["a.b"] = {{"kind", "x"}};
  EXPECT_EQ(GateError(dotted).code(), StatusCode::kInvalidArgument);
}

TEST(GateTest, RunnerErrorsPropagateWithContext) {
  int calls = 0;
  ScenarioRunner failing = [&calls](const std::string& name, const json&,
                                    int repeat) -> Result<std::map<std::string, double>> {
    ++calls;
    if (name == "mixed" && repeat == 2) return Status::ResourceExhausted("KV pool full");
    return std::map<std::string, double>{{"tok_s", 1.0}, {"ms", 1.0}, {"step_ms", 1.0}};
  };
  Result<GateReport> r = RunGate(Gate(kSatisfiable), failing);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("scenario 'mixed' (repeat 2): KV pool full"), std::string::npos)
      << r.status().message();

  ScenarioRunner nan_runner = [](const std::string&, const json&, int) -> Result<std::map<std::string, double>> {
    return std::map<std::string, double>{{"tok_s", std::nan("")}};
  };
  EXPECT_EQ(RunGate(Gate(kSatisfiable), nan_runner).status().code(), StatusCode::kInvalidArgument);
}

TEST(GateTest, CliExitCodes) {
  const std::string dir = testing::TempDir();
  std::ofstream(dir + "/pass.json") << Gate(kSatisfiable).dump();
  std::ofstream(dir + "/fail.json")
      << Gate(json::parse(R"([{"id": "absurd", "metric": "prefill.tok_s", "op": ">", "value": 1e12}])")).dump();
  std::ofstream(dir + "/bad.json")
      << Gate(json::parse(R"([{"id": "bad-op", "metric": "prefill.tok_s", "op": "~", "value": 1}])")).dump();
  FakeEngine engine = HealthyEngine();
  std::ostringstream out, err;
  EXPECT_EQ(RunGateCli(dir + "/pass.json", engine.Runner(), {}, false, out, err), 0);
  EXPECT_NE(out.str().find("result: PASS"), std::string::npos);
  // A progress line per round on stderr (the last one says how many rounds there were).
  const json pass_spec = Gate(kSatisfiable);
  const int rounds = pass_spec.value("repeats", 5) + pass_spec.value("warmup", 0);
  EXPECT_NE(err.str().find("round " + std::to_string(rounds) + "/" + std::to_string(rounds) + ","), std::string::npos)
      << err.str();
  EXPECT_NE(err.str().find("round 1/"), std::string::npos) << err.str();
  std::ostringstream jout;
  EXPECT_EQ(RunGateCli(dir + "/fail.json", engine.Runner(), {}, true, jout, err), 1);
  EXPECT_EQ(json::parse(jout.str())["summary"]["fail"], 1);
  std::ostringstream e2, e3;
  EXPECT_EQ(RunGateCli(dir + "/bad.json", engine.Runner(), {}, false, out, e2), 2);
  EXPECT_NE(e2.str().find("predicate 'bad-op': unknown op '~'"), std::string::npos) << e2.str();
  EXPECT_EQ(RunGateCli(dir + "/none.json", engine.Runner(), {}, false, out, e3), 2);
  EXPECT_NE(e3.str().find("none.json"), std::string::npos);
}

// The gate report is a gyre result file: `gyre compare` can diff two gate runs.
TEST(GateTest, ReportJsonIsCompareInput) {
  FakeEngine engine = HealthyEngine();
  const GateReport r = MustRun(Gate(kSatisfiable), engine);
  const json j = r.Json();
  ASSERT_TRUE(j["metrics"].is_object());
  for (const auto& [name, v] : j["metrics"].items()) {
    EXPECT_TRUE(v.is_array()) << name;
    EXPECT_EQ(v.size(), 5u) << name;
  }
  EXPECT_EQ(j["meta"]["schedule"].size(), 5u);
  Result<RunResult> run = ParseRunResult(j);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->format, "gyre");
  EXPECT_EQ(run->metrics.at("decode.step_ms").samples.size(), 5u);
  const CompareReport same = CompareRuns(*run, *run);
  EXPECT_EQ(same.Count(Verdict::kNoChange), static_cast<int>(same.metrics.size()));
}

// The checked-in gate must parse, reference only the metrics RunScenario reports (tok_s, ms,
// step_ms, ttft_ms; long_context adds decode_step_ms, decode_tok_s), and pass on an engine with
// plausible tiny-model numbers.
TEST(GateTest, CpuEngineGateFileIsValid) {
  const std::string path = std::string(GYRE_SOURCE_DIR) + "/bench/gates/cpu_engine.json";
  Result<json> gate = ReadGateFile(path);
  ASSERT_TRUE(gate.ok()) << gate.status().ToString();
  Result<GateSpec> spec = ParseGate(*gate);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_LE(spec->repeats * spec->scenarios.size(), 40u);

  const std::set<std::string> promised = {"tok_s", "ms", "step_ms", "ttft_ms", "decode_step_ms",
                                          "decode_tok_s"};
  for (const PredicateSpec& p : spec->predicates) {
    EXPECT_TRUE(promised.count(p.a.metric)) << p.id << ": " << p.a.metric;
    if (p.kind != PredicateKind::kBound) {
      EXPECT_TRUE(promised.count(p.b.metric)) << p.id;
    }
  }
  // Rough quiet-machine numbers from RunScenario on tests/fixtures/glm5_tiny, 2 cores. (An early
  // run found batch-8 decode ~3x below batch 1: small OpenMP regions stalling on the shared
  // cores; fixed by fanning out only for large work.)
  FakeEngine engine;
  engine.scenarios["prefill"] = {{"tok_s", {1100, 0.05}}, {"ms", {230, 0.05}}, {"step_ms", {230, 0.05}},
                                 {"ttft_ms", {230, 0.05}}};
  engine.scenarios["decode"] = {{"tok_s", {2500, 0.05}}, {"ms", {100, 0.05}}, {"step_ms", {1.2, 0.05}}};
  engine.scenarios["decode_b1"] = {{"tok_s", {2300, 0.05}}, {"ms", {14, 0.05}}, {"step_ms", {0.17, 0.05}}};
  engine.scenarios["prefill64"] = {{"tok_s", {2500, 0.05}}, {"ms", {25.6, 0.05}}, {"step_ms", {25.6, 0.05}},
                                   {"ttft_ms", {25.6, 0.05}}};
  engine.scenarios["mixed"] = {{"tok_s", {2700, 0.05}}, {"ms", {1100, 0.05}}, {"step_ms", {65, 0.05}}};
  engine.scenarios["long_context"] = {{"tok_s", {1000, 0.05}}, {"ms", {2000, 0.05}}, {"step_ms", {2000, 0.05}},
                                      {"ttft_ms", {2000, 0.05}}, {"decode_step_ms", {0.32, 0.05}},
                                      {"decode_tok_s", {150, 0.05}}};
  for (const auto& [name, s] : spec->scenarios) ASSERT_TRUE(engine.scenarios.count(name)) << name;
  const GateReport r = MustRun(*gate, engine);
  for (const PredicateResult& p : r.predicates) {
    EXPECT_EQ(p.verdict, GateVerdict::kPass) << p.id << ": " << p.reason;
  }
}

}  // namespace
}  // namespace gyre::feedback
