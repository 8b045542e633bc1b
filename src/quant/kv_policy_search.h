// The mixed KV-cache policy, derived from measurements (issue 14 items 4-5; `gyre kv-policy-search`,
// docs/quantization.md "Policy search").
//
// Given a way to run the model under a policy and return its logits on a fixed evaluation text, the
// search measures what storing ONE attention layer's cache in each candidate dtype costs (every
// other layer in the base dtype), against a reference run (normally an fp32 cache):
//   cost(l, d) = mean over positions of KL(softmax(ref) || softmax(run)).
// Then it proposes: layers in ascending order of their cheapest candidate's cost are moved to that
// candidate one at a time, and the combined policy is measured after each move; a move is kept when
// the combined cost stays <= max_kl, else undone (the search goes on with the next layer, since
// costs need not add up). The result is a policy (the --kv-cache-policy format), every measurement
// behind it, and the final combined cost and top-1 agreement.
//
// Runs: 1 reference + (attention layers × candidates) singles + one per attempted move. Deterministic
// for a deterministic `run`.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "quant/kv_cache.h"

namespace gyre {

struct LogitDivergence {
  double mean_kl = 0;       // nats per position
  double top1 = 0;          // fraction of positions whose argmax agrees
  int64_t positions = 0;
};
// ref, got: [positions, vocab] row-major. InvalidArgument when the sizes differ or are not a
// multiple of vocab.
Result<LogitDivergence> CompareLogitRows(std::span<const float> ref, std::span<const float> got, int64_t vocab);

struct KvPolicySearchOptions {
  KvDtype reference = KvDtype::kF32;            // the reference run's dtype (every layer)
  KvDtype base = KvDtype::kBf16;                // layers not moved
  std::vector<KvDtype> candidates{KvDtype::kInt8, KvDtype::kFp8};
  double max_kl = 1e-5;                          // budget of the combined policy (nats per position)
};

struct KvLayerCost {
  int64_t layer = 0;
  KvDtype dtype = KvDtype::kF32;
  LogitDivergence alone;  // this layer in `dtype`, the others in `base`
};

struct KvPolicySearchResult {
  KvCachePolicy policy;                     // the proposal (KDA layers fp32)
  KvDtype base = KvDtype::kBf16;            // the dtype of the layers not moved
  LogitDivergence base_cost;                // every attention layer in `base`
  LogitDivergence final_cost;               // the proposal
  std::vector<KvLayerCost> singles;         // every (layer, candidate) measured
  std::vector<int64_t> moved, rejected;     // layers moved to their candidate / tried and undone
  int64_t runs = 0;
  std::string PolicyJson() const;           // {"default": base, "layers": {...}} for --kv-cache-policy
  nlohmann::json Report(int64_t bytes_per_token_base, int64_t bytes_per_token_final) const;
};

// run(policy) -> logits [positions, vocab] of the evaluation text under `policy` (one entry per layer).
using KvPolicyRun = std::function<Result<std::vector<float>>(const KvCachePolicy&)>;

Result<KvPolicySearchResult> SearchKvPolicy(const std::vector<bool>& is_attention, int64_t vocab,
                                            const KvPolicyRun& run, const KvPolicySearchOptions& o);

}  // namespace gyre
