// Scenario gates: run a gate file's scenarios repeatedly, interleaved, and decide each predicate
// PASS / FAIL / INCONCLUSIVE with noise-aware statistics. The file format and the decision rule
// of each predicate form are specified in gate_spec.h.
//
// Running: the caller supplies a ScenarioRunner that knows the scenario kinds (the engine's
// business, not this file's). RunGate calls it once per scenario per round:
//   - `warmup` rounds first, with repeat_index = -1, -2, ...; their metrics are discarded.
//   - then `repeats` rounds with repeat_index = 0, 1, .... Every round runs every scenario once,
//     in an order shuffled with the seed (a fresh permutation each round), so slow drift (thermal,
//     other tenants, page cache) spreads over all scenarios instead of biasing one of them. The
//     schedule depends only on the seed and the scenario names.
// Each metric "<scenario>.<metric>" collects one sample per round in which the runner reported it.
// With 5 repeats a 95% percentile-bootstrap CI of a median spans about min..max of the samples
// (the distribution-free interval for n = 5), so a bound PASSes only if every repeat is on the
// right side; with 1 repeat the CI is the point itself and the decision ignores noise.
//
// Exit code: 0 only when every predicate PASSes; INCONCLUSIVE counts as failure (exit 1) but is
// printed distinctly, since the cure is more repeats or a quieter machine, not a code change.
//
// Thread safety: RunGate calls the runner sequentially on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "feedback/gate_spec.h"

namespace gyre::feedback {

// Runs one scenario once and returns its metrics (name -> value, e.g. "tok_s", "step_ms").
// Metric names must not contain '.'. An error aborts the gate with that error.
using ScenarioRunner = std::function<Result<std::map<std::string, double>>(
    const std::string& scenario_name, const nlohmann::json& scenario_spec, int repeat_index)>;

struct GateOptions {
  int repeats = 0;     // > 0 overrides the file's "repeats"
  int warmup = -1;     // >= 0 overrides the file's "warmup"
  uint64_t seed = 1;   // scenario order and bootstrap resampling
  // Called after each round with a line saying where the run is ("gate NAME: round 3/12
  // (warmup 1/2), 4.1 s"); empty: nothing. `gyre gate` prints it on stderr.
  std::function<void(const std::string&)> progress;
};

enum class GateVerdict { kPass, kFail, kInconclusive };
const char* GateVerdictName(GateVerdict v);  // "PASS" | "FAIL" | "INCONCLUSIVE"

struct PredicateResult {
  std::string id;
  PredicateKind kind = PredicateKind::kBound;
  std::string expression;  // PredicateSpec::Expression()
  std::string stat;        // bound and ratio: the statistic applied to the samples
  GateVerdict verdict = GateVerdict::kInconclusive;
  // Evidence. "a" is the bound's metric, the ratio's numerator, the comparison's left side.
  size_t num_a = 0, num_b = 0;          // num_b = 0 for bounds
  double median_a = 0;
  std::optional<double> median_b;       // ratio and compare
  double estimate = 0;                  // bound: stat; ratio: stat ratio; compare: effect in %
  std::optional<double> ci_lo, ci_hi;   // bound and ratio: bootstrap CI of `estimate`
  double confidence = 0.95;
  std::optional<double> p_value;        // compare
  std::string reason;                   // one line: why this verdict
};

struct GateReport {
  std::string name;
  int repeats = 0, warmup = 0;
  uint64_t seed = 0;
  double wall_s = 0;                                   // whole run, including warmup
  std::vector<std::vector<std::string>> schedule;      // [round] -> scenario order (measured rounds)
  std::map<std::string, std::vector<double>> samples;  // "<scenario>.<metric>" -> [per round]
  std::vector<PredicateResult> predicates;             // file order

  int Count(GateVerdict v) const;
  bool Passed() const { return Count(GateVerdict::kPass) == static_cast<int>(predicates.size()); }
  int ExitCode() const { return Passed() ? 0 : 1; }
  // Per predicate: verdict, id, expression, then an evidence line; a result line at the end.
  std::string Human() const;
  // {"meta": {"gate", "repeats", "warmup", "seed", "wall_s", "schedule"},
  //  "metrics": {"<scenario>.<metric>": [samples]},        <- gyre result JSON: `gyre compare`
  //  "predicates": [{id, kind, expr, verdict, reason,           can diff two gate reports
  //                  evidence: {n_a, n_b?, median_a, median_b?, estimate, ci?: [lo, hi],
  //                             confidence?, p_value?}}],
  //  "summary": {"pass", "fail", "inconclusive", "passed"}, "exit_code"}
  nlohmann::json Json() const;
};

// Validates `gate` (ParseGate), runs it, evaluates every predicate.
// Errors: InvalidArgument for an invalid gate file (names the predicate or field), for a
// predicate whose metric the runner never reported for that scenario (names the predicate and
// lists the metrics it did report), or for a non-finite metric value; any runner error is
// returned with "scenario '<name>' (repeat <i>)" context. FAIL/INCONCLUSIVE are not errors.
Result<GateReport> RunGate(const nlohmann::json& gate, const ScenarioRunner& runner,
                           const GateOptions& options = {});

// The `gyre gate FILE` command body: reads the file, runs it, prints Human() (or Json()) to
// `out`. Returns 0 when every predicate passes, 1 when any fails or is inconclusive, 2 when the
// file is unreadable or invalid or the runner fails (message on `err`).
int RunGateCli(const std::string& gate_path, const ScenarioRunner& runner, const GateOptions& options,
               bool json, std::ostream& out, std::ostream& err);
// Same, on std::cout / std::cerr.
int RunGateCli(const std::string& gate_path, const ScenarioRunner& runner, const GateOptions& options,
               bool json);

// Deterministic interleaved schedule: `rounds` permutations of `scenarios`, from `seed`.
// RunGate uses it (warmup rounds first, then the measured ones). Exposed for tests.
std::vector<std::vector<std::string>> InterleavedSchedule(const std::vector<std::string>& scenarios,
                                                          int rounds, uint64_t seed);

}  // namespace gyre::feedback
