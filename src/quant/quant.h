// W8A8 quantization on the CPU: weight formats, dynamic activation quantization, and the
// reference GEMMs that define the math the engine's quantized layers compute
// (docs/quantization.md).
//
// FP8 block scheme (DeepSeek-V3 / GLM-4.5-FP8 layout):
//   weight q [N, K] float8_e4m3fn, scale_inv [ceil(N/bn), ceil(K/bk)] fp32 with
//   scale_inv = max(amax(block), 1e-4) / 448 and q = e4m3(w / scale_inv) (saturating);
//   W ≈ q · scale_inv. Activations: per token and per bk-channel group, s = max(amax, 1e-4) / 448,
//   qa = e4m3(x / s). GEMM (DeepGEMM's definition):
//     y[m, n] = Σ_g sa[m, g] · sw[n / bn, g] · (Σ_{k ∈ g} qa[m, k] · q[n, k]),
//   each group's inner sum accumulated in fp32, the scaled partials accumulated in fp32.
// INT8 channel scheme (gyre-int8):
//   weight q [N, K] int8 in [-127, 127], scale [N] fp32 = max(amax(row), 1e-8) / 127,
//   q = round_half_even(w / scale); activations per token likewise (s [M]); GEMM
//     y[m, n] = sa[m] · sw[n] · Σ_k qa[m, k] · q[n, k]   with the sum exact in int32.
//   The int32 sum is exact while K · 127² < 2³¹ (K < 133143), far above any model width.
//
// Thread safety: a QuantizedWeight is immutable once built; all functions are pure and may run
// concurrently. They parallelise internally with OpenMP.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/matrix.h"
#include "quant/scheme.h"

namespace gyre {

struct QuantizedWeight {
  QuantScheme scheme = QuantScheme::kNone;
  int64_t rows = 0, cols = 0;            // N (out), K (in)
  int64_t block_n = 128, block_k = 128;  // fp8 only
  std::vector<uint8_t> q;  // [N, K]: e4m3 bytes (fp8) or int8 two's complement (int8)
  std::vector<float> scale;  // fp8: scale_inv [ceil(N/bn), ceil(K/bk)]; int8: [N]
  int64_t scale_rows() const;  // fp8: ceil(N/bn); int8: N
  int64_t scale_cols() const;  // fp8: ceil(K/bk); int8: 1
  int64_t num_groups() const { return (cols + block_k - 1) / block_k; }
  size_t bytes() const { return q.size() + scale.size() * sizeof(float); }
};

// Quantizes w[rows, cols] (row-major fp32). REQUIRES: bn, bk >= 1; finite inputs (a NaN/inf
// block gets a NaN/inf scale).
QuantizedWeight QuantizeFp8Block(const float* w, int64_t rows, int64_t cols, int64_t bn = 128, int64_t bk = 128);
QuantizedWeight QuantizeInt8Channel(const float* w, int64_t rows, int64_t cols);
// Dequantized values [rows, cols] (q · scale, computed in fp32).
std::vector<float> Dequantize(const QuantizedWeight& w);
Matrix DequantizedMatrix(const QuantizedWeight& w);
// The weight scales repeated per row, as the GPU kernels take them (ops/cuda/quant_cuda.h):
// fp8 [rows, ceil(cols/block_k)] (row i holds block row i / block_n), int8 [rows].
std::vector<float> ScalesPerRow(const QuantizedWeight& w);

// Dynamic activation quantization of x[n, k] (row stride ldx, 0 = k).
// FP8: q [n, k] e4m3, s [n, ceil(k/group)]. INT8: q [n, k], s [n].
void QuantizeActFp8(const float* x, int64_t n, int64_t k, int64_t group, uint8_t* q, float* s, int64_t ldx = 0);
void QuantizeActInt8(const float* x, int64_t n, int64_t k, int8_t* q, float* s, int64_t ldx = 0);

// Reference GEMMs on already-quantized operands (the formulas above, loop order as written):
// y [m, w.rows]. REQUIRES: w.scheme matches; qa/sa shaped as the activation quantizers write them
// with group == w.block_k.
void GemmFp8BlockRef(const uint8_t* qa, const float* sa, int64_t m, const QuantizedWeight& w, float* y);
void GemmInt8Ref(const int8_t* qa, const float* sa, int64_t m, const QuantizedWeight& w, float* y);

}  // namespace gyre
