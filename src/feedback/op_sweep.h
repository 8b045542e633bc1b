// The op sweep: every registered op timed at many shapes, and a comparison against a baseline
// sweep that names the (op, shape) pairs that got slower with statistical evidence.
//
//   SweepShapes: the shapes to time — each op's own registry shapes (the verify shapes, small)
//     and, given a model config, the shapes one layer of that model runs in decode (T = 1 over a
//     `context`) and in prefill (T = `tokens`), named after the layer part (e.g. "decode:kda.qkv").
//     Shapes whose inputs would exceed `max_bytes` are listed as skipped with the reason.
//   RunOpSweep: per shape, `repeats` samples of the op's CPU backend (inputs rotated over several
//     sets as `gyre bench op` does), taken in rounds over groups of shapes (SweepRunOptions::
//     interleave); the samples are kept in the result, so a later comparison has the distribution,
//     not a summary.
//   CompareOpSweeps: per (op, shape, source) present in both files, the median ratio B/A, its
//     bootstrap 95% interval, and the two-sided Mann–Whitney p-value (with extra runs of the
//     baseline: a t test against the between-run variance instead; SweepCompareOptions). A change is named only when
//     (1) Holm's step-down procedure over all compared shapes keeps the family-wise error at
//     `alpha`, (2) the ratio exceeds 1 ± `threshold` (a practical effect, since runs on a shared
//     machine drift), and (3) the bootstrap interval excludes 1. The geometric mean ratio over
//     all shapes is reported as the machine's drift; when its magnitude exceeds the threshold the
//     report says so, because then every op moved together and the cause is likely the machine.
//
// Timing is CPU only: the registry's CUDA backends are timed by the GPU microbenchmarks
// (gyre_cuda_bench and friends in scripts/gpu_check.sh), not through host copies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "feedback/ceilings.h"
#include "model/config.h"
#include "ops/registry.h"

namespace gyre::feedback {

struct SweepShape {
  const ops::OpSpec* op = nullptr;
  ops::OpShape shape;
  std::string source;  // "registry", or "<phase>:<layer part>" for model-derived shapes
  std::string skip;    // non-empty: not timed, and why
};

struct SweepShapeOptions {
  bool registry_shapes = true;
  const ModelConfig* model = nullptr;  // adds the model's per-layer shapes
  int64_t tokens = 512;                // prefill tokens per step for the model shapes
  int64_t context = 4096;              // decode context for the model shapes
  double max_bytes = 1.0 * (1 << 30);  // inputs of one set (fp32) above this are skipped
  std::vector<std::string> only_ops;   // empty: every op
};

// REQUIRES: every op in `registry` outlives the result.
std::vector<SweepShape> SweepShapes(const std::vector<ops::OpSpec>& registry, const SweepShapeOptions& o);

struct SweepRunOptions {
  int repeats = 10;
  double sample_s = 0.02;  // target duration of one sample (iterations per sample are calibrated)
  uint64_t seed = 1;
  bool progress = false;   // a line per shape on stderr
  // Samples in rounds over groups of shapes whose inputs fit group_bytes together (each shape's
  // samples span its group's timing window); false: one shape's samples back to back (the old way).
  bool interleave = true;
  double group_bytes = 2.0 * (1 << 30);
};

// {"kind": "gyre_op_sweep", "meta": {...}, "entries": [...], "skipped": [...]}.
Result<nlohmann::json> RunOpSweep(const std::vector<SweepShape>& shapes, const SweepRunOptions& o,
                                  const Ceilings& ceilings, const nlohmann::json& meta_extra);

bool IsOpSweepJson(const nlohmann::json& j);

struct SweepCompareOptions {
  double threshold = 0.10;  // practical effect: |ratio - 1| must exceed this
  double alpha = 0.05;      // family-wise error over all compared shapes (Holm)
  uint64_t seed = 1;        // bootstrap
  // More runs of the baseline build (each an op sweep; not owned). With at least one, the noise
  // that decides is the variation *between runs*, which on a shared machine dwarfs the spread of
  // one run's samples (docs/feedback.md "The op sweep"): per shape the baseline is the mean of
  // the runs' log medians, and the log ratio of B's median to it is tested with Student's t
  // against the between-run variance of log medians pooled over the shapes of the same op and
  // phase (registry / decode / prefill), scaled by 1 + 1/R for R baseline runs; the interval is
  // that t interval. Holm, the threshold and the interval rule are as without them.
  std::vector<const nlohmann::json*> extra_baselines;
};

struct SweepChange {
  std::string op, shape, source;
  double median_a_ns = 0, median_b_ns = 0, ratio = 1, ci_lo = 1, ci_hi = 1, p_value = 1;
  int baseline_runs = 1;     // runs behind median_a_ns (the geometric mean of their medians when > 1)
  double between_sd = 0;     // extra baselines: the pooled between-run sd of log medians used
  std::string verdict;  // "slower", "faster", "no detectable change", "too few samples"
};

struct SweepCompareReport {
  std::vector<SweepChange> changes;  // every compared shape, in file A's order
  std::vector<std::string> only_in_a, only_in_b, notes;
  double drift = 1;  // geometric mean of the ratios
  int num_slower = 0, num_faster = 0;
  nlohmann::json Json() const;
  std::string Human() const;
};

// InvalidArgument when either file is not an op sweep.
Result<SweepCompareReport> CompareOpSweeps(const nlohmann::json& a, const nlohmann::json& b,
                                           const SweepCompareOptions& o);

}  // namespace gyre::feedback
