// `gyre compare A.json B.json` on two `gyre bench serve` files: did serving get better, worse, or
// not detectably different, judged on the per-request records and not on the summary numbers?
//
// Input: the JSON `gyre bench serve --json` writes (serve/loadgen.h ReportJson): "meta.tool" is
// "gyre bench serve", "meta.config" the workload settings, "metrics.duration_s", and "requests":
// one record per request sent, {"ok", "start_ms", "ttft_ms", "e2e_ms", "itl_ms": [gaps],
// "prompt_tokens", "output_tokens"}. Files written before the records existed have no "requests";
// ParseServeRun refuses them and `gyre compare` falls back to the generic comparison with a note.
//
// Noise model, per metric (B relative to A):
//   - latency metrics ({ttft,tpot,itl,e2e}_ms_{p50,p90,p99,mean}): a cluster bootstrap over the
//     successful requests of each run, independently (ITL gaps move with their request, so the
//     gaps of one slow request are not counted as independent evidence). The statistic is the one
//     `bench serve` prints (numpy-linear percentile over requests, or over all gaps for ITL).
//   - rates (output_throughput, request_throughput, goodput): events (tokens, requests, good
//     requests) / duration, on the same resamples; a resample's duration is the run's duration
//     scaled by (last end among the drawn requests) / (last end of all), so the noise of the rates
//     is the noise of the latencies behind them. Two runs' arrival schedules are assumed equal
//     (same --seed and --request-rate, which the settings warnings check): run-to-run noise of
//     the schedule itself is not modelled.
//   For a latency metric the Mann–Whitney test of the per-request values (TTFT, TPOT, E2E, the
//   request's mean ITL) must also reject at alpha': under A/A those values are exchangeable, so
//   the pair of tests holds the level exactly, where the bootstrap's normal approximation alone
//   gave 1.5-3x the nominal false-alarm rate on synthetic A/A runs. The cost: a change confined to
//   the tail (a p99 moving while the bulk does not) must also shift the ranks to be named.
//   A quantile q is judged only when each run has >= min_tail / (1 - q) values (requests; gaps for
//   ITL): a p99 needs 500 requests at the default 5, a p90 50.
//   The change is judged on the log scale: d = log(stat_B / stat_A), se² = se_A² + se_B² with each
//   se the bootstrap standard deviation of log(stat) (on the linear scale when a statistic is
//   <= 0). A change is detected iff |d / se| > z(1 - alpha' / 2) AND |change| >= threshold_pct,
//   with alpha' = alpha / (number of headline metrics compared) (Bonferroni: the headline is quiet
//   on an A/A pair with probability >= 1 - alpha; exactly so for the latencies through the rank
//   test, approximately for the rates). The CI shown is at level 1 - alpha'.
//
// Headline: the metrics that decide are TTFT p50/p99, TPOT p50/p99, ITL p50/p99, output
// throughput and, when both runs used the same SLOs, goodput. The headline is "worse" when any of
// them got worse (naming each, with its change and CI, and any that got better), "better" when
// some got better and none worse, else "no detectable change". It is never a count of metrics.
//
// Warnings: every workload setting of meta.config that differs (the URL excepted), a different
// machine, and different numbers of failed requests.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "feedback/compare.h"

namespace gyre::feedback {

struct ServeRequestRecord {
  bool ok = false;
  double start_ms = 0, ttft_ms = 0, e2e_ms = 0;
  std::vector<double> itl_ms;
  int64_t prompt_tokens = 0, output_tokens = 0;
};

struct ServeRun {
  nlohmann::json config;   // meta.config (object, may be empty)
  nlohmann::json machine;  // meta.machine (null if absent)
  double duration_s = 0;   // metrics.duration_s, else the last request's end
  double slo_ttft_ms = 0, slo_tpot_ms = 0;  // from config; 0: none
  std::vector<ServeRequestRecord> requests;
};

// True when `j` was written by `gyre bench serve` (meta.tool == "gyre bench serve").
bool IsServeBenchJson(const nlohmann::json& j);
// InvalidArgument naming the field when the records are missing (an older file) or malformed
// (a negative or non-finite time, a non-array itl_ms).
Result<ServeRun> ParseServeRun(const nlohmann::json& j);

struct ServeCompareOptions {
  double threshold_pct = 2.0;  // minimum |change| that counts, >= 0
  double alpha = 0.05;         // family-wise level of the headline
  int resamples = 2000;        // bootstrap resamples per run, >= 20
  double min_tail = 5;         // values a judged quantile must have above it
  int min_requests = 8;        // fewer successful requests on a side: latency metrics not judged
  uint64_t seed = 0x67797265;
};

struct ServeMetricComparison {
  std::string name;            // the key of bench serve's metrics map, e.g. "ttft_ms_p99"
  Direction direction = Direction::kLowerIsBetter;
  bool headline = false;
  double a = 0, b = 0;         // the statistic on each run
  std::optional<double> change_pct;         // (b - a) / |a|; unset when a == 0 != b
  std::optional<double> ci_lo_pct, ci_hi_pct;  // CI of the change at level 1 - alpha'
  Verdict verdict = Verdict::kNoChange;
  std::string note;            // why a metric was not judged, if it was not
};

struct ServeCompareReport {
  std::string label_a, label_b;
  Verdict headline = Verdict::kNoChange;   // kWorse | kBetter | kNoChange
  std::vector<std::string> headline_worse, headline_better;  // metric names
  std::vector<ServeMetricComparison> metrics;  // headline metrics first, in a fixed order
  std::vector<std::string> warnings;
  ServeCompareOptions options;
  double metric_alpha = 0;  // alpha' used for every row

  // The headline line, e.g. "WORSE: ttft_ms_p99 +912% [+700%, +1104%]; also better: ...".
  std::string HeadlineText() const;
  // Headline, warnings, then a table of every metric.
  std::string Human() const;
  // {"kind": "serve", "a", "b", "headline": {"verdict", "worse": [...], "better": [...], "text"},
  //  "warnings": [...], "threshold_pct", "alpha", "metric_alpha", "metrics": [{name, headline,
  //  direction, a, b, change_pct, change_ci_pct: [lo, hi] | null, verdict, note}]}.
  nlohmann::json Json() const;
};

// Compares two runs. Never fails; metrics that cannot be judged carry a note.
ServeCompareReport CompareServeRuns(const ServeRun& a, const ServeRun& b,
                                    const ServeCompareOptions& options = {});

}  // namespace gyre::feedback
