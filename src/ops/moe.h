// MoE routing (sigmoid router with selection-only correction bias and group-limited top-k) and the
// routed-expert combine (docs/model-glm5-next.md §6).
#pragma once

#include <cstdint>
#include <span>

namespace gyre::ops {

struct RouterParams {
  int64_t num_experts = 0, top_k = 0, n_group = 1, topk_group = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
};

// logits [n, E] fp32 (router GEMM output); bias [E] (may be empty).
// s = σ(logits); choice = s + bias; per group the sum of its top-2 choices ranks the groups and
// only the best topk_group groups stay; idx = top_k of choice; w = s[idx] (unbiased),
// renormalised (sum + 1e-20) when norm_topk_prob, times routed_scaling_factor.
// Deterministic tie rule: larger value first, equal values → lower index first.
// Writes idx [n, top_k] (ascending by rank) and w [n, top_k].
void Route(const float* logits, int64_t n, std::span<const float> bias, const RouterParams& p, int32_t* idx,
           float* w);

}  // namespace gyre::ops
