// Basic CPU ops: linear (GEMM), embedding, norms, activations. fp32 math; outputs are rounded to
// the activation dtype by the caller's Numerics where the reference rounds.
//
// Shapes are row-major; `n` is the number of tokens (rows). All functions are safe to call from
// one thread at a time per output buffer; they parallelise internally (OpenBLAS / OpenMP).
#pragma once

#include <cstdint>
#include <span>

#include "core/matrix.h"
#include "ops/numerics.h"

namespace gyre::ops {

// y[n, w.rows] = x[n, w.cols] · wᵀ, then rounded by `num`. REQUIRES: x.size() == n * w.cols and
// y.size() == n * w.rows. `ldx`: row stride of x in elements (0 = w.cols).
// When `w.quant` is set the product is W8A8 (quant/quant.h LinearW8A8: x quantized on the fly).
void Linear(const float* x, int64_t n, const Matrix& w, float* y, const Numerics& num, int64_t ldx = 0);

// Same as Linear but always fp32, no rounding (router logits, mHC mix, indexer scores). Ignores
// `w.quant`: a quantized weight is used at its dequantized values.
void LinearF32(const float* x, int64_t n, const Matrix& w, float* y, int64_t ldx = 0);

// y[n, d] = rows `ids` of table[V, d]. REQUIRES: every id in [0, V).
void Embedding(std::span<const int32_t> ids, const Matrix& table, float* y);

// Text RMSNorm: y = w ⊙ round(x · rsqrt(mean(x²) + eps)); `w` may be empty (unweighted).
// In bf16 mode the normalized value is rounded before the weight product and the product again.
void RmsNorm(const float* x, int64_t n, int64_t d, std::span<const float> w, float eps, float* y,
             const Numerics& num);

// LayerNorm with weight and bias (indexer k_norm): y = (x - mean) / sqrt(var + eps) · w + b.
void LayerNorm(const float* x, int64_t n, int64_t d, std::span<const float> w, std::span<const float> b,
               float eps, float* y, const Numerics& num);

inline float Sigmoid(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }
inline float Silu(float x) { return x / (1.0f + __builtin_expf(-x)); }

// SwiGLU activation for gate/up halves: a = round(silu(min(g, limit))) · clamp(u, ±limit) (no clamp
// when limit <= 0 — kimi). Writes a[n, width]; g and u have row strides ldg/ldu.
void SwiGlu(const float* g, int64_t ldg, const float* u, int64_t ldu, int64_t n, int64_t width, float limit,
            float* a, const Numerics& num);

// Rel-L2 distance ||a-b|| / max(||b||, tiny) and max-abs difference.
struct Diff {
  double rel_l2 = 0, max_abs = 0;
  int64_t worst_index = -1;
};
Diff Compare(std::span<const float> a, std::span<const float> b);

}  // namespace gyre::ops
