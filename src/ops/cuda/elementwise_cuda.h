// Token-wise CUDA kernels of the text model: embedding, norms, activations, the KDA gate and short
// conv, hyper-connections, stream mean, casts and sampling. Each computes exactly the function of
// the CPU op named beside it (src/ops/*.h) in fp32 with fp32 accumulation (no rounding: the GPU
// path runs fp32 activations; bf16 exists only as GEMM operands, see CastF32ToBf16).
//
// Conventions (all functions): pointers are device pointers; every call validates its sizes
// (InvalidArgument before any launch), enqueues on `stream`, checks the launch
// (cudaGetLastError) and never synchronizes. Row counts may be 0 (nothing is launched). Every
// function here is CUDA-graph capturable: no host sync, no allocation, sizes fixed at the call.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"
#include "ops/cuda/dmat.h"

namespace gyre::cuda {

// ops::Embedding: y[n, d] = table rows ids[n] (table [vocab, d], fp32 or bf16 → fp32 out).
// Ids outside [0, vocab) produce a zero row (the host validates ids before upload).
Status Embedding(const int32_t* ids, int64_t n, const DMat& table, float* y, cudaStream_t stream);

// ops::RmsNorm (fp32): y = w ⊙ x·rsqrt(mean(x²) + eps); `w` may be null (unweighted).
// x rows have stride ldx, y rows stride ldy (elements), both >= d.
Status RmsNorm(const float* x, int64_t n, int64_t d, int64_t ldx, const float* w, float eps, float* y, int64_t ldy,
               cudaStream_t stream);

// ops::LayerNorm: y = (x − mean)/sqrt(var + eps)·w + b, rows contiguous [n, d].
Status LayerNorm(const float* x, int64_t n, int64_t d, const float* w, const float* b, float eps, float* y,
                 cudaStream_t stream);

// ops::SwiGlu: a[n, width] = silu(min(g, limit))·clamp(u, ±limit) (no clamp when limit <= 0).
Status SwiGlu(const float* g, int64_t ldg, const float* u, int64_t ldu, int64_t n, int64_t width, float limit,
              float* a, cudaStream_t stream);

// y = σ(x) elementwise, n values (KDA β).
Status Sigmoid(const float* x, int64_t n, float* y, cudaStream_t stream);

// x[i] += a[i], n values (kimi_linear residual adds).
Status AddInPlace(float* x, const float* a, int64_t n, cudaStream_t stream);

// ops::KdaGate over f [n, h*k] → g [n, h*k]; has_lower_bound selects lb·σ(exp(A_log)·z) over the
// softplus form.
Status KdaGate(const float* f, int64_t n, int64_t h, int64_t k, const float* dt_bias, const float* a_log,
               bool has_lower_bound, float lower_bound, float* g, cudaStream_t stream);

// ops::GatedRmsNorm: per head over V: y = w ⊙ o·rsqrt(mean(o²) + eps) ⊙ σ(z); o, z, y [n, h, v].
Status GatedRmsNorm(const float* o, const float* z, int64_t n, int64_t h, int64_t v, const float* w, float eps,
                    float* y, cudaStream_t stream);

// ops::CausalConv1dSilu for a ragged batch of sequences (prefill pieces and decode tokens alike).
//   x [num_tokens, channels]: the new tokens of all sequences, sequence b owning rows
//     [cu_seqlens[b], cu_seqlens[b+1]);
//   w [channels, width]; state pool [num_slots, width-1, channels] (oldest first), sequence b's
//     tail at slots[b] (a negative slot: padding sequence, its rows are skipped and y is 0);
//   y [num_tokens, channels] = silu(conv).
// The state tails are updated to the last width-1 inputs of [tail; x] after all reads (two
// kernels). cu_seqlens and slots are device arrays (graph-friendly).
struct ConvParams {
  const float* x = nullptr;
  const float* w = nullptr;
  float* state = nullptr;
  float* y = nullptr;
  const int32_t* cu_seqlens = nullptr;  // [num_seqs + 1]
  const int32_t* slots = nullptr;       // [num_seqs]
  int64_t num_tokens = 0, num_seqs = 0, channels = 0, width = 0, num_slots = 0;
  // Optional split output (KDA: q | k | v): when split > 0, y is not written and output channel c
  // of token i goes to parts[c / split][i * split + c % split]; requires channels == 3 · split.
  int64_t split = 0;
  float* parts[3] = {nullptr, nullptr, nullptr};
  // Optional, device [num_seqs]: the slot whose tail takes sequence b's inputs (phase 2); < 0
  // leaves the tail as it was (ReplaySSM speculation: outputs from the tail, the tail untouched).
  // Null: `slots`.
  const int32_t* tail_slots = nullptr;
};
Status CausalConv1dSilu(const ConvParams& p, cudaStream_t stream);

// ops::HcPre for t tokens: x [t, n, d]; fn [(2+n)·n, n·d] fp32; base [(2+n)·n]; scale [3].
// Writes post [t, n], comb [t, n, n], y [t, d]. Sinkhorn iterations fused in the kernel.
struct HcDims {
  int64_t n = 4, d = 0;
  float norm_eps = 1e-5f, hc_eps = 1e-6f;
  int64_t sinkhorn_iters = 20;
};
Status HcPre(const float* x, int64_t t, const float* fn, const float* base, const float* scale, const HcDims& p,
             float* post, float* comb, float* y, cudaStream_t stream);

// ops::HcPost, in place on x [t, n, d]; a [t, d] the sublayer output.
Status HcPost(float* x, int64_t t, const float* a, const float* post, const float* comb, const HcDims& p,
              cudaStream_t stream);

// y[r, d] = mean over the n streams of x[rows[r], :, :] (x [t, n, d]); rows null = 0..r-1.
Status StreamMean(const float* x, int64_t n, int64_t d, const int32_t* rows, int64_t r, float* y,
                  cudaStream_t stream);

// Gathers rows: y[r, d] = x[rows[r], :] (x rows of stride d).
Status GatherRows(const float* x, int64_t d, const int32_t* rows, int64_t r, float* y, cudaStream_t stream);

// y (bf16, __nv_bfloat16 bits) = round-to-nearest-even(x), n values. GEMM operands for bf16 weights.
Status CastF32ToBf16(const float* x, int64_t n, void* y, cudaStream_t stream);

// Greedy sampling: ids[r] = argmax over v of logits[r, :] (ties: lowest index, as ops::Sample).
Status Argmax(const float* logits, int64_t r, int64_t v, int32_t* ids, cudaStream_t stream);

}  // namespace gyre::cuda
