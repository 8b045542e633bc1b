// Microbenchmarks and model benchmarks (numbers, never assertions).
//   BenchOp: one registered op at a shape — warm-up, repeated samples, inputs rotated over
//     several sets so caches do not flatter the result; median and IQR; % of roofline against
//     ceilings measured in the same run; Google-Benchmark-compatible JSON.
//   BenchModel: prefill tokens/s and decode tokens/s at several batch sizes of a Model, with a
//     trace-based per-op breakdown; gyre result JSON ({meta, metrics, directions}) that
//     `gyre compare` reads.
//   RunScenario: one repeat of a gate scenario kind (prefill, decode, mixed, long_context; and
//     engine_load, which drives the engine: feedback/engine_scenario.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "feedback/ceilings.h"
#include "ops/registry.h"
#include "runtime/model.h"

namespace gyre::feedback {

struct BenchOpOptions {
  int repeats = 10;
  double min_time_s = 0.5;  // total measured time target
  uint64_t seed = 1;
};
Result<nlohmann::json> BenchOp(const ops::OpSpec& op, const ops::OpShape& shape, ops::Backend backend,
                               const BenchOpOptions& opts, const Ceilings& ceilings);

struct BenchModelOptions {
  int64_t prompt_len = 256;
  std::vector<int64_t> decode_batches = {1, 4, 16};
  int64_t decode_context = 128;
  int64_t decode_steps = 16;
  int repeats = 3;
  uint64_t seed = 1;
  std::string trace_path;  // when set, the last repeat's trace is written there
};
Result<nlohmann::json> BenchModel(const Model& model, const BenchModelOptions& opts, const Ceilings& ceilings,
                                  const nlohmann::json& config_meta);

// Cost of a GYRE_SPAN: ns per span with recording off and on (measured over `n` spans).
struct SpanOverhead {
  double off_ns = 0, on_ns = 0, baseline_ns = 0;
};
SpanOverhead MeasureSpanOverhead(int64_t n = 2000000);

// Metrics of one repeat of scenario `spec` (kind + params): tok_s, ms, step_ms, ttft_ms (prefill).
Result<std::map<std::string, double>> RunScenario(const Model& model, const nlohmann::json& spec, int repeat);

}  // namespace gyre::feedback
