// Kimi Delta Attention (KDA) CPU ops (docs/model-kda-kimi-linear.md §1.2–1.5).
//
// Per sequence and head, with fp32 state S[K, V] (K-first: row k, column v):
//   S ← diag(exp(g_t))·S ;  δ = β_t (v_t − Sᵀk_t) ;  S ← S + k_t δᵀ ;  o_t = Sᵀ q̃_t
// where q̃ = l2norm(q)·K^{-1/2} and k = l2norm(k) (eps 1e-6 inside the sqrt).
// KdaChunked computes the same function with the 64-token chunked (WY / UT-transform) form used for
// prefill; KdaRecurrent is the one-token-at-a-time form used for decode. Both read and update the
// state in place and may be mixed freely on one sequence.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "ops/numerics.h"

namespace gyre::ops {

struct KdaShape {
  int64_t num_heads = 0;  // H
  int64_t head_dim = 0;   // K = V
};

// Depthwise causal conv1d + SiLU over `channels` channels with kernel width W.
//   x     [T, channels]   pre-conv inputs of this call
//   w     [channels, W]   w[c, W-1] multiplies the current token
//   state [W-1, channels] the W-1 inputs before x (oldest first); zeros for a new sequence.
//                         Updated to the last W-1 inputs of [state; x].
//   y     [T, channels]   silu(conv), rounded by `num`.
void CausalConv1dSilu(const float* x, int64_t t, int64_t channels, const float* w, int64_t width, float* state,
                      float* y, const Numerics& num);

// Forget gate from the low-rank projection f [T, H*K] (already f_b(f_a(x))):
//   z = f + dt_bias ;  lower bound lb set:  g = lb · σ(exp(A_log[h]) · z)
//                      lb unset (softplus): g = −exp(A_log[h]) · (z > 20 ? z : log(1 + exp(z)))
// Writes g [T, H*K] in fp32 (never rounded).
void KdaGate(const float* f, int64_t t, KdaShape s, std::span<const float> dt_bias, std::span<const float> a_log,
             std::optional<float> lower_bound, float* g);

// Chunked KDA (prefill). q, k, v, g: [T, H, K] (q, k not yet normalized); beta [T, H];
// state [H, K, V] fp32 in/out; o [T, H, V] written (fp32, caller rounds). chunk: 64.
void KdaChunked(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t t,
                KdaShape s, float* state, float* o, int64_t chunk = 64);

// The UT transform of one chunk: A = (I + L)⁻¹ with L[i,j] = β_i Σ_d k_i[d] k_j[d] e^{G_i[d] − G_j[d]}
// (i > j), by forward substitution. k, G: [c, K] (k normalized, G the in-chunk cumulative gate);
// A: [c, ld] written, unit lower triangular, zero above the diagonal. `decay` [c, ld, K] holds
// e^{G_i − G_j} for j <= i when the caller already has it; null computes it inline.
void KdaChunkUtTransform(const float* k, const float* G, const float* beta, int64_t c, int64_t K, int64_t ld,
                         const float* decay, float* A);

// Recurrent KDA (decode), same arguments; processes tokens one by one.
void KdaRecurrent(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t t,
                  KdaShape s, float* state, float* o);

// ReplaySSM fold (speculative decoding, docs/engine.md "Speculative decoding"): advances `state`
// by t tokens whose inputs k, v, g [T, H, K] (k not yet normalized) and beta [T, H] were kept
// while the tokens ran speculatively: exactly the state update of KdaRecurrent over the same
// inputs (bit for bit in fp32), without the query or the output. t == 0 leaves the state as is.
void KdaFold(const float* k, const float* v, const float* g, const float* beta, int64_t t, KdaShape s, float* state);

// The conv-tail part of the fold: `state` [W-1, channels] ← the last W-1 inputs of [state; x]
// (x [T, channels] the pre-conv inputs of t tokens), exactly as CausalConv1dSilu leaves it.
void CausalConvShift(const float* x, int64_t t, int64_t channels, int64_t width, float* state);

// Gated RMSNorm per head over V, entirely fp32: y = w ⊙ o·rsqrt(mean(o²) + eps) ⊙ σ(z).
// o, z, y: [T, H, V]; w [V] shared by heads. y rounded by `num` once.
void GatedRmsNorm(const float* o, const float* z, int64_t t, KdaShape s, std::span<const float> w, float eps,
                  float* y, const Numerics& num);

}  // namespace gyre::ops
