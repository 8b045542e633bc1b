// W8A8 on the GPU (docs/quantization.md "GPU"): dynamic activation quantization, the FP8
// block-scaled GEMM and the INT8 GEMM on mma.sync m16n8k32 tensor cores, their grouped (MoE)
// variants, and the routed experts of a quantized MoE layer. The math is the CPU reference's
// (quant/quant.h):
//
//   FP8:  qa = e4m3(x / sa) with sa = max(amax, 1e-4) / 448 per token and 128-channel group;
//         y[m, n] = Σ_g sa[m, g] · sw[n, g] · (Σ_{k ∈ g} qa[m, k] · qw[n, k]), each group's inner
//         sum in fp32 registers (the mma accumulators), the scaled partials summed in fp32.
//   INT8: qa = clamp(round_half_even(x / sa), ±127) with sa = max(amax, 1e-8) / 127 per token;
//         y[m, n] = sa[m] · sw[n] · Σ_k qa[m, k] · qw[n, k], the sum exact in int32.
//
// The activation encoders are bit-exact with the CPU's (saturating e4m3 round-to-nearest-even,
// the fp32 quotient x / s). Device weight scales are kept PER ROW: fp8 [N, ceil(K/128)] (the
// checkpoint's [ceil(N/128), ceil(K/128)] block scales expanded by rows), int8 [N]. Rows of
// several checkpoint tensors can then be fused into one matrix at any row offset.
//
// Conventions: device pointers; sizes checked before any launch (InvalidArgument); enqueued on
// `stream`, no synchronization, no allocation (graph capturable). The activation group is 128
// (weight_block_size [*, 128]); any K works (partial last group), as does any M and N.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace gyre::cuda {

inline constexpr int64_t kQuantGroup = 128;

enum class W8A8 : int { kFp8 = 1, kInt8 = 2 };

inline int64_t QuantGroups(int64_t k) { return (k + kQuantGroup - 1) / kQuantGroup; }
// Floats of activation scales per token: fp8 ceil(k/128), int8 1.
inline int64_t ActScaleCols(W8A8 s, int64_t k) { return s == W8A8::kFp8 ? QuantGroups(k) : 1; }

// x [n, k] fp32 (row stride ldx, 0 = k) → q [n, k] (e4m3 bytes or int8), s [n, ActScaleCols].
// `src_rows` (may be null): output row r quantizes x row src_rows[r] / src_div (the MoE gather);
// `num_rows` (may be null): a device count; rows r >= *num_rows are skipped.
struct ActQuantArgs {
  const float* x = nullptr;
  int64_t n = 0, k = 0, ldx = 0;
  void* q = nullptr;
  float* s = nullptr;
  const int32_t* src_rows = nullptr;
  int32_t src_div = 1;
  const int32_t* num_rows = nullptr;
};
Status QuantizeActivations(W8A8 scheme, const ActQuantArgs& a, cudaStream_t stream);

// A quantized weight on the device: q [groups, N, K] bytes, scale [groups, N, scale_cols]
// (per row, see above). groups = 1 for a dense weight.
struct QWeight {
  W8A8 scheme = W8A8::kFp8;
  const void* q = nullptr;
  const float* scale = nullptr;
  int64_t rows = 0, cols = 0;  // N, K (per group)
  int64_t scale_cols() const { return ActScaleCols(scheme, cols); }
};

// y[m, N] (row stride ldy, 0 = N) = the W8A8 product of qa [m, K], sa (as QuantizeActivations
// writes them) and w. REQUIRES: w.cols == K.
Status GemmW8A8(const void* qa, const float* sa, int64_t m, const QWeight& w, float* y, int64_t ldy,
                cudaStream_t stream);

// Grouped: rows [offsets[g], offsets[g+1]) of qa / y use group g's weight (w.q + g·N·K,
// w.scale + g·N·scale_cols). offsets [groups + 1] is a device array; `tiles` and `num_tiles` are
// written by GroupedTiles (the device tile table, so the launch is sized for the worst case:
// max_rows rows). y [max_rows, N] (dense).
int GroupedBlockM(int64_t avg_rows_per_group);
int64_t GroupedMaxTiles(int64_t max_rows, int64_t groups, int block_m);
Status GroupedTiles(const int32_t* offsets, int64_t groups, int block_m, int4* tiles, int32_t* num_tiles,
                    int64_t max_tiles, cudaStream_t stream);
Status GemmW8A8Grouped(const void* qa, const float* sa, const QWeight& w, int64_t groups, const int4* tiles,
                       const int32_t* num_tiles, int64_t max_tiles, int block_m, int64_t max_rows, float* y,
                       cudaStream_t stream);

// The routed experts of a quantized MoE layer, computed as the CPU's MoE layer does it
// (runtime/model.cc MlpLayer without the shared expert): each (token, slot) pair sorted by expert;
// x quantized per pair row; gate_up grouped GEMM; SwiGLU (limit as ops::SwiGlu); the activation
// quantized again; down grouped GEMM; out[t] = Σ over t's experts in ascending id of w · y.
// gate_up: [E, 2I, D] (rows [0, I) gate, [I, 2I) up), down: [E, D, I], with per-row scales.
struct QMoeWeights {
  QWeight gate_up, down;
  int64_t num_experts = 0, hidden = 0, inter = 0;
};
size_t MoeW8A8WorkspaceBytes(const QMoeWeights& w, int64_t max_tokens, int64_t top_k);
Status MoeExpertsW8A8(const float* x, int64_t n, const int32_t* idx, const float* wts, int64_t top_k,
                      const QMoeWeights& w, float swiglu_limit, float* out, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream);

}  // namespace gyre::cuda
