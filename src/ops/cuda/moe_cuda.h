// MoE on the GPU (docs/model-glm5-next.md §6): routing, and the routed experts as one grouped
// computation — (token, slot) pairs permuted by expert, one grouped GEMM launch for gate/up and
// one for down, weighted combine per token. Computes exactly ops::Route and the routed part of the
// CPU MoE layer (runtime/model.cc MlpLayer, without the shared expert), fp32 accumulation.
//
// Conventions: device pointers; sizes validated before any launch (InvalidArgument); enqueue on
// `stream`, launches checked, no synchronization, no allocation: graph capturable (the per-expert
// counts stay on the device; grids are sized for the worst case).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "ops/cuda/dmat.h"

namespace gyre::cuda {

struct RouteDims {
  int64_t num_experts = 0, top_k = 0, n_group = 1, topk_group = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
};

// ops::Route: logits [n, E] fp32, bias [E] (null = none) → idx [n, top_k] (by rank), w [n, top_k].
Status MoeRoute(const float* logits, int64_t n, const float* bias, const RouteDims& d, int32_t* idx, float* w,
                cudaStream_t stream);

// Routed expert weights, all experts in two tensors (same dtype):
//   gate_up [E, 2I, D]: rows [0, I) the gate projection, [I, 2I) the up projection of expert e;
//   down    [E, D, I].
struct MoeExpertWeights {
  const void* gate_up = nullptr;
  const void* down = nullptr;
  bool bf16 = false;
  int64_t num_experts = 0, hidden = 0, inter = 0;
};

size_t MoeExpertsWorkspaceBytes(const MoeExpertWeights& w, int64_t max_tokens, int64_t top_k);

// out[t] = Σ_j w[t, j] · down_e(swiglu(gate_e x_t, up_e x_t)) with e = idx[t, j]; x [n, D] fp32,
// out [n, D] fp32 (overwritten). swiglu_limit as ops::SwiGlu (<= 0: no clamp). Rows whose idx
// entries are negative contribute nothing (padding tokens).
Status MoeExperts(const float* x, int64_t n, const int32_t* idx, const float* w, int64_t top_k,
                  const MoeExpertWeights& ew, float swiglu_limit, float* out, void* workspace, size_t workspace_bytes,
                  cudaStream_t stream);

}  // namespace gyre::cuda
