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

struct ExpertDims {
  int64_t num_experts = 0, hidden = 0, inter = 0;  // E, D, I
};

// The routed experts of the MoE layer (runtime/model.cc MlpLayer without the shared expert), fp32,
// grouped by expert as the model does: out[t] = Σ_j w[t, j] · down_e(SwiGlu(gate_e·x_t, up_e·x_t))
// with e = idx[t, j]. x [n, D]; idx, w [n, top_k]; gate_up [E, 2I, D] (rows [0, I) gate, [I, 2I)
// up); down [E, D, I]; swiglu_limit as SwiGlu (<= 0: no clamp). Entries with idx outside [0, E)
// contribute nothing (padding). Writes out [n, D].
void MoeExperts(const float* x, int64_t n, const int32_t* idx, const float* w, int64_t top_k, const float* gate_up,
                const float* down, const ExpertDims& d, float swiglu_limit, float* out);

}  // namespace gyre::ops
