// Scenario gate files: the format, and its parser/validator. A gate is data (bench/gates/*.json):
// a set of scenarios the engine runs repeatedly, and predicates over their metrics that must
// hold, decided with statistics that account for run-to-run noise. gate.h runs them.
//
// ---- Format ---------------------------------------------------------------------------------
// {
//   "name": "cpu-engine",            REQUIRED string
//   "description": "...",            optional string ("comment" is also accepted and ignored)
//   "repeats": 5,                    optional int >= 1 (default 5): measured rounds
//   "warmup": 1,                     optional int >= 0 (default 0): rounds run first and discarded
//   "alpha": 0.05,                   optional, in (0,1): Mann–Whitney level for "compare"
//   "confidence": 0.95,              optional, in (0,1): bootstrap CI level for bounds and ratios
//   "bootstrap_resamples": 2000,     optional int >= 100
//   "scenarios": {                   REQUIRED, non-empty
//     "<scenario>": {"kind": "<kind>", ...params}   name matches [A-Za-z0-9_-]+; the object must
//   },                                              have a string "kind"; the rest is opaque here
//                                                   and handed to the runner as-is.
//   "predicates": [ <predicate>, ... ]              REQUIRED, non-empty
// }
// A metric reference is "<scenario>.<metric>" (split at the first '.'): the scenario must be
// declared; the metric must be one the runner reports for it (checked after running, since
// metric names belong to the scenario kinds).
//
// Every predicate has "id" (REQUIRED, unique string), optional "description"/"comment", "op"
// (one of "<", "<=", ">", ">="), and exactly one of these three forms:
//   bound:   {"metric": "<ref>", "stat": "median", "op": ">", "value": 100}
//            stat: "median" (default) | "mean" | "min" | "max" | "p<q>" with 0 <= q <= 100
//            ("p90", "p99.9"; numpy-linear quantile). Decided on a percentile-bootstrap CI of
//            the stat: PASS if the whole CI satisfies `stat op value`, FAIL if the whole CI
//            violates it, otherwise INCONCLUSIVE.
//   ratio:   {"expr": {"ratio": ["<num ref>", "<den ref>"]}, "stat"?: "median", "op", "value"}
//            Same rule on a bootstrap CI of stat(num) / stat(den) (num and den resampled
//            independently; default: ratio of medians).
//   compare: {"compare": ["<ref a>", "<ref b>"], "op": ">=", "test"?: "mannwhitney",
//             "min_effect_pct"?: 0, "alpha"?: <gate alpha>}
//            Two-sided Mann–Whitney U on the two sample sets, and the Hodges–Lehmann shift of a
//            relative to b as a percent of median(b) (the "effect"). A difference is detected
//            when p < alpha and |effect| > min_effect_pct.
//              ">" / "<":   PASS if a detected difference points the right way; FAIL if it
//                           points the wrong way; INCONCLUSIVE if none is detected.
//              ">=" / "<=": FAIL if a detected difference points the wrong way; else PASS
//                           ("not detectably worse").
//            Either way INCONCLUSIVE when the sample counts cannot reach p < alpha at all
//            (2 / C(n_a + n_b, n_a) >= alpha, e.g. 3 vs 3 at alpha 0.05).
// Unknown keys in the top level or in a predicate are errors (they are usually typos).
//
// Thread safety: pure functions.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gyre::feedback {

enum class CompareOp { kLess, kLessEqual, kGreater, kGreaterEqual };
const char* CompareOpName(CompareOp op);  // "<", "<=", ">", ">="
bool Holds(double lhs, CompareOp op, double rhs);

struct MetricRef {
  std::string scenario;
  std::string metric;
  std::string Full() const { return scenario + "." + metric; }
};

enum class PredicateKind { kBound, kRatio, kCompare };
const char* PredicateKindName(PredicateKind k);  // "bound" | "ratio" | "compare"

struct PredicateSpec {
  std::string id;
  std::string description;
  PredicateKind kind = PredicateKind::kBound;
  MetricRef a;               // bound: the metric; ratio: numerator; compare: left side
  MetricRef b;               // ratio: denominator; compare: right side; unused for bounds
  std::string stat = "median";  // bound and ratio
  CompareOp op = CompareOp::kLess;
  double value = 0;          // bound and ratio
  double min_effect_pct = 0; // compare
  double alpha = 0.05;       // compare (the gate's alpha unless overridden)

  // e.g. "p90(decode.step_ms) < 500", "median(a.x) / median(b.y) < 1",
  // "mixed.tok_s >= decode.tok_s (Mann-Whitney)".
  std::string Expression() const;
};

struct GateSpec {
  std::string name;
  std::string description;
  int repeats = 5;
  int warmup = 0;
  double alpha = 0.05;
  double confidence = 0.95;
  int bootstrap_resamples = 2000;
  std::vector<std::pair<std::string, nlohmann::json>> scenarios;  // sorted by name
  std::vector<PredicateSpec> predicates;                           // file order
};

// Validates a gate. InvalidArgument on the first problem, naming the predicate (by id, or by
// position when it has none) or the top-level field.
Result<GateSpec> ParseGate(const nlohmann::json& gate);

// Reads a gate file as JSON (not validated; RunGate validates). NotFound if unreadable,
// InvalidArgument if not JSON; the message starts with the path.
Result<nlohmann::json> ReadGateFile(const std::string& path);

// Applies a validated stat name ("median", "mean", "min", "max", "p<q>") to samples.
// REQUIRES: IsValidStat(stat), !x.empty().
double ApplyStat(const std::string& stat, std::span<const double> x);
bool IsValidStat(const std::string& stat);

}  // namespace gyre::feedback
