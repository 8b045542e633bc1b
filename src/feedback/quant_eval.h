// The accuracy of a quantized model against its unquantized reference on a text
// (`gyre quantize-eval`, docs/quantization.md "Accuracy").
//
// Windows as `gyre eval` makes them (feedback/text_eval.h): window k is ids[k·ctx, k·ctx + ctx + 1);
// both models prefill the window's first L-1 tokens as a fresh sequence with all-position logits
// (CPU Model::Forward). Per scored position, from a stable log-softmax in double:
//   NLL of the next token under each model; KL(p_ref ‖ p_test); whether the argmaxes agree (ties
//   → lower id). Figures are also split by position within the window (buckets [0, 16), [16, 64),
//   [64, 256), [256, 1024), [1024, ∞)) so a drift that grows with context shows.
//
// Thread safety: the models are only read; one call at a time per model is the efficient use.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "runtime/model.h"

namespace gyre::feedback {

struct LogitCompareOptions {
  int64_t ctx = 256;         // context tokens per window (>= 1)
  int64_t max_tokens = 0;    // > 0: only the first max_tokens ids
};

struct PositionBucket {
  int64_t lo = 0, hi = 0;  // window positions [lo, hi); hi = -1: unbounded
  int64_t num_positions = 0, num_top1_agree = 0;
  double kl_sum = 0;
};

struct LogitCompareReport {
  int64_t num_positions = 0;
  int64_t num_windows = 0;
  double nll_ref = 0, nll_test = 0;  // sums, nats
  double kl_sum = 0, kl_max = 0;     // KL(p_ref ‖ p_test), nats
  int64_t num_top1_agree = 0;
  std::vector<PositionBucket> buckets;
  double wall_s = 0;  // the tested model's forwards

  double ppl_ref() const;
  double ppl_test() const;
  double mean_kl() const;
  double top1_agreement() const;
  nlohmann::json Json() const;
};

// One report per model of `tests`, in order; the reference runs once per window.
// REQUIRES: no null pointer in `tests`.
// Errors: InvalidArgument for ctx < 1, fewer than 2 ids, an id outside the vocabulary, or models
// whose vocabularies differ; the models' Forward errors.
Result<std::vector<LogitCompareReport>> CompareLogits(const Model& ref, std::span<const Model* const> tests,
                                                      std::span<const int32_t> ids, const LogitCompareOptions& opts);

}  // namespace gyre::feedback
