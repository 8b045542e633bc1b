// Vision-tower kernels on the device (ops/vision.h is the CPU contract; runtime/cuda_vision.h
// composes them into the tower). fp32 throughout; math in the CPU ops' expression order.
//
//   VisionQkvSplit: qkv [n, 3D] (rows [q | k | v], heads contiguous) → q, k, v [n, D], with q and
//       k normalised per head (RMSNorm over head_dim with q_norm / k_norm) and rotated by the axial
//       RoPE tables (cos / sin [n, head_dim], ops::VisionRopeTables).
//   VisionRope: the rotation alone, in place on x [n, heads, head_dim] (row stride ld).
//   VisionAttention: non-causal attention within segments through cuBLAS strided-batched SGEMM
//       (heads as the batch; FP32 compute, no TF32): S = scale·Q·Kᵀ per head for a chunk of query
//       rows, a row softmax (max subtracted; the sum in fp32 by a block reduction, where the CPU op
//       sums in double), then O = P·V. The score workspace bounds the chunk: rows · keys · heads.
//       Optionally with bf16 operands on the tensor cores (VisionAttentionBf16; fp32 accumulate).
//   AddBias, AddBiasResidual, GeluErf: element-wise epilogues of the tower's linear layers.
// Errors: InvalidArgument for bad sizes, Internal (file:line) for a CUDA or cuBLAS error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "core/status.h"

struct cublasContext;

namespace gyre::cuda {

// y[n, d] += bias[d] (bias may be null: nothing to do).
Status AddBias(float* y, int64_t n, int64_t d, const float* bias, cudaStream_t stream);

// x[n, d] += y[n, d] + bias[d] (bias may be null).
Status AddBiasResidual(float* x, const float* y, int64_t n, int64_t d, const float* bias, cudaStream_t stream);

// x = 0.5·x·(1 + erf(x/√2)), n values in place.
Status GeluErf(float* x, int64_t n, cudaStream_t stream);

// See the file comment. q_norm / k_norm [head_dim]; cos / sin [n, head_dim]. REQUIRES: head_dim
// even, head_dim <= 1024.
Status VisionQkvSplit(const float* qkv, int64_t n, int64_t heads, int64_t head_dim, const float* q_norm,
                      const float* k_norm, float eps, const float* cos, const float* sin, float* q, float* k, float* v,
                      cudaStream_t stream);

// In place on x [n, heads, head_dim] with row stride ld (elements).
Status VisionRope(float* x, int64_t ld, int64_t n, int64_t heads, int64_t head_dim, const float* cos, const float* sin,
                  cudaStream_t stream);

// bf16 operands of the attention (tensor cores): q, k, v as bf16 copies [n, heads·head_dim], and
// `p`, a workspace of score_floats bf16 values for the probabilities. Scores, the softmax and the
// output stay fp32 (GEMMs accumulate in fp32).
struct VisionAttentionBf16 {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* p = nullptr;
};

// q, k, v [n, heads·head_dim] (dense rows), out [n, heads·head_dim]; `segments` (host) sum to n.
// `scores`: a device workspace of score_floats floats, at least heads · max segment length (one
// query row per chunk at worst). `handle`: a cuBLAS handle (its stream is set to `stream`).
// `bf16` non-null: the GEMMs take its bf16 operands instead of q, k, v (which are then unread).
Status VisionAttention(cublasContext* handle, const float* q, const float* k, const float* v,
                       std::span<const int64_t> segments, int64_t heads, int64_t head_dim, float* out, float* scores,
                       int64_t score_floats, cudaStream_t stream, const VisionAttentionBf16* bf16 = nullptr);

// The registry's host-memory entry points (VisionRopeOnDevice, VisionAttentionOnDevice) are in
// ops_cuda.h.

}  // namespace gyre::cuda
