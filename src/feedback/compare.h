// `gyre compare A.json B.json`: is B better, worse, or not detectably different from A?
//
// Inputs (detected by shape, see ParseRunResult):
//   (a) Google Benchmark JSON: {"context": {...}, "benchmarks": [{"name", "run_name"?, "run_type"?
//       ("iteration" | "aggregate"), "aggregate_name"?, "real_time", "cpu_time", "time_unit"?,
//       "items_per_second"?, "bytes_per_second"?, "error_occurred"?}, ...]}.
//       Each benchmark (keyed by run_name, else name) yields metrics "<run>.real_time_ns",
//       "<run>.cpu_time_ns" (lower is better, converted to ns) and, when present,
//       "<run>.items_per_second" / "<run>.bytes_per_second" (higher is better). Iteration entries
//       (one per repetition) are the samples; a benchmark with only aggregates contributes its
//       "median" aggregate (else "mean") as a scalar. Errored entries are skipped with a note.
//   (b) gyre result JSON: {"meta": {...}, "metrics": {"name": number | [numbers...]},
//       "directions"?: {"name": "lower" | "higher"}}. An array is the run-to-run distribution
//       (one value per repeat); a number has no distribution. A GateReport's Json() has this shape.
//
// Decision per metric present in both files (B relative to A; a and b are medians, or the
// scalars):
//   change_pct = (b - a) / |a| * 100 (undefined when a == 0 and b != 0).
//   With >= 2 samples on both sides: "detected" iff Mann–Whitney p < alpha AND |change_pct| >=
//   threshold_pct. Also reported: a percentile-bootstrap CI of the change of medians.
//   Otherwise: "detected" iff |change_pct| >= threshold_pct, noted "(no samples: threshold only)".
//   A detected change is "better" or "worse" by the metric's direction: the file's "directions"
//   (A's, then B's), else the name convention of DirectionFromName; with no direction it is
//   "changed". Anything not detected is "no detectable change".
//
// Thread safety: all functions are pure except the file reads in Load*/RunCompareCli.
#pragma once

#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gyre::feedback {

enum class Direction { kUnknown, kLowerIsBetter, kHigherIsBetter };
const char* DirectionName(Direction d);  // "unknown" | "lower" | "higher"

// Direction by name convention, on the lower-cased name split into tokens at . _ / - : and space.
// Higher is better when a token is "throughput", "goodput", "tflops", "gflops", "gbps", "qps",
// "rps", "tps" or "bandwidth", or when "per", "tok(en(s))", "items", "bytes" or "req(uests)" is
// followed by "s", "sec" or "second" ("prefill.tok_s", "items_per_second"). Otherwise lower is
// better when a token is "latency", "time", "duration", "ms", "us", "ns", "s", "sec", "ttft",
// "tpot", "itl" or "e2el" ("decode.step_ms", "real_time_ns"). Otherwise kUnknown.
Direction DirectionFromName(std::string_view name);

struct Metric {
  std::vector<double> samples;             // never empty; size 1 means a scalar
  Direction direction = Direction::kUnknown;  // as declared by the file; kUnknown if not declared
  bool HasDistribution() const { return samples.size() >= 2; }
};

struct RunResult {
  std::string format;    // "google-benchmark" | "gyre"
  nlohmann::json meta;   // gbench "context" or gyre "meta" (null if absent)
  std::map<std::string, Metric> metrics;
  std::vector<std::string> notes;  // entries skipped while parsing, with the reason
};

// Parses either input format. InvalidArgument (naming the offending benchmark or metric) when
// the JSON is neither format or a value has the wrong type or is not finite.
Result<RunResult> ParseRunResult(const nlohmann::json& j);
// Reads and parses a file. NotFound if it cannot be opened, InvalidArgument if it is not JSON
// or not a supported format; the message starts with the path.
Result<RunResult> LoadRunResult(const std::string& path);

enum class Verdict { kBetter, kWorse, kNoChange, kChanged };
const char* VerdictName(Verdict v);  // "better" | "worse" | "no detectable change" | "changed"

struct CompareOptions {
  double threshold_pct = 2.0;  // minimum |change| that counts, >= 0
  double alpha = 0.05;         // Mann–Whitney significance level
  int bootstrap_resamples = 2000;
  uint64_t seed = 0x67797265;
};

struct MetricComparison {
  std::string name;
  Direction direction = Direction::kUnknown;  // the one used for the verdict
  size_t num_a = 0, num_b = 0;                // sample counts
  double a = 0, b = 0;                        // medians (or the scalars)
  std::optional<double> change_pct;           // unset when a == 0 != b
  std::optional<double> change_ci_lo_pct;     // bootstrap CI of the change; samples only
  std::optional<double> change_ci_hi_pct;
  std::optional<double> p_value;              // Mann–Whitney; samples only
  Verdict verdict = Verdict::kNoChange;
  std::string note;                           // e.g. "(no samples: threshold only)"
};

struct CompareReport {
  std::string label_a, label_b;  // file names or formats, for the header line
  std::vector<MetricComparison> metrics;   // sorted by name
  std::vector<std::string> only_in_a, only_in_b;
  std::vector<std::string> notes;          // parse notes from both inputs
  // Settings the runs' meta disagree on ("config.request_rate: 4 vs 8"), see SettingsThatDiffer:
  // the comparison may not be like for like. Human() and the CLI warn about them.
  std::vector<std::string> settings_differ;
  CompareOptions options;

  int Count(Verdict v) const;
  // Fixed-width table, one line per metric, then a summary line and any notes.
  std::string Human() const;
  // {"a": label, "b": label, "threshold_pct", "alpha",
  //  "metrics": [{name, a, b, change_pct, change_ci_pct: [lo, hi] | null, p_value | null,
  //               verdict, direction, n_a, n_b, note}],
  //  "summary": {better, worse, unchanged, changed}, "only_in_a": [...], "only_in_b": [...],
  //  "notes": [...], "settings_differ": [...]}. Undefined numbers are null.
  nlohmann::json Json() const;
};

// The settings two runs' meta (RunResult::meta) disagree on, one "key: A vs B" each (nested
// objects flattened with '.', a key missing on one side shown as "(absent)"). Keys that differ
// from run to run by nature are skipped: dates and times, commits, load averages, the
// executable's path, wall time and the gate's interleaving schedule.
std::vector<std::string> SettingsThatDiffer(const nlohmann::json& meta_a, const nlohmann::json& meta_b);

// Compares every metric present in both runs. Never fails.
CompareReport CompareRuns(const RunResult& a, const RunResult& b,
                          const CompareOptions& options = {});

// The `gyre compare` command: loads both files, prints Human() (or Json() with json=true) to
// `out`. When both are `gyre bench serve` files with per-request records, the serving comparison
// of serve_compare.h is printed instead (headline verdict, settings warnings); when they are
// serve files without records, the generic comparison with a note saying so; when either is a
// `gyre bench ops` sweep, the per-(op, shape) comparison of op_sweep.h (threshold_pct is its
// practical effect; `baseline_runs`, more sweeps of A's build, switch it to the between-run test).
// Returns 0 when both files were read (verdicts are information, not failure), 2 when an input
// cannot be read or parsed, threshold_pct is negative, or baseline_runs are given for files that
// are not op sweeps (message on `err`).
int RunCompareCli(const std::string& a, const std::string& b, bool json, double threshold_pct,
                  std::ostream& out, std::ostream& err, const std::vector<std::string>& baseline_runs = {});
// Same, on std::cout / std::cerr.
int RunCompareCli(const std::string& a, const std::string& b, bool json, double threshold_pct,
                  const std::vector<std::string>& baseline_runs = {});

}  // namespace gyre::feedback
