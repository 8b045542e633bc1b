// Reference implementations: slow, plain, fp64 loops written from the definitions in
// docs/model-glm5-next.md and docs/model-kda-kimi-linear.md — independent of the optimized
// backends (no shared helpers beyond std). Used only by `gyre verify ops` and tests.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace gyre::ops::ref {

using Vec = std::vector<double>;

// y[n, out] = x[n, in] · w[out, in]ᵀ
Vec Linear(const std::vector<float>& x, int64_t n, const std::vector<float>& w, int64_t out, int64_t in);
// y = w ⊙ x / sqrt(mean(x²) + eps) per row of width d (w empty: unweighted)
Vec RmsNorm(const std::vector<float>& x, int64_t n, int64_t d, const std::vector<float>& w, double eps);
// a = silu(min(g, L)) · clamp(u, ±L) (L <= 0: no clamp)
Vec SwiGlu(const std::vector<float>& g, const std::vector<float>& u, double limit);
// Depthwise causal conv + SiLU with an explicit history (W-1 rows before x).
Vec Conv(const std::vector<float>& x, int64_t t, int64_t ch, const std::vector<float>& w, int64_t width,
         const std::vector<float>& history);
// Forget gate (both forms).
Vec Gate(const std::vector<float>& f, int64_t t, int64_t h, int64_t k, const std::vector<float>& dt_bias,
         const std::vector<float>& a_log, std::optional<double> lower_bound);
// KDA by the recurrence definition; state [H, K, V] updated in place (double).
Vec Kda(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
        const std::vector<float>& g, const std::vector<float>& beta, int64_t t, int64_t h, int64_t dk, Vec* state);
// Gated RMSNorm per head.
Vec GatedNorm(const std::vector<float>& o, const std::vector<float>& z, int64_t rows, int64_t v,
              const std::vector<float>& w, double eps);
// mHC pre: returns post [t, n], comb [t, n, n], y [t, d] concatenated in that order.
Vec HcPre(const std::vector<float>& x, int64_t t, int64_t n, int64_t d, const std::vector<float>& fn,
          const std::vector<float>& base, const std::vector<float>& scale, double norm_eps, double hc_eps, int iters);
// MLA attention with explicitly expanded K and V per head. sel: per query the attended key ids.
Vec Mla(const std::vector<float>& q, int64_t s, const std::vector<float>& latent, const std::vector<float>& krot,
        const std::vector<float>& kv_b, int64_t heads, int64_t nope, int64_t rope, int64_t vdim, int64_t lora,
        double scale, const std::vector<std::vector<int32_t>>& sel);
// Pooled indexer key for one pool.
Vec PoolKey(const std::vector<float>& k, const std::vector<float>& gamma, const std::vector<float>& ape, int64_t m,
            int64_t d);
// Indexer selection by the definition (scores in fp64, full sort with the lower-index tie rule).
std::vector<std::vector<int32_t>> IndexerSelect(const std::vector<float>& q, const std::vector<float>& w, int64_t s,
                                                int64_t pos0, const std::vector<float>& pool_keys, int64_t p,
                                                int64_t heads, int64_t d, int64_t m, int64_t topk, bool tail);
// Router: returns idx [n, k] as doubles followed by weights [n, k].
Vec Route(const std::vector<float>& logits, int64_t n, int64_t e, const std::vector<float>& bias, int64_t k,
          int64_t groups, int64_t topk_group, bool renorm, double scale);
// Routed experts: out[t] = Σ_j w[t,j] · down_e(silu(min(g, L)) · clamp(u, ±L)), g/u = gate_up[e] rows
// [0, I) / [I, 2I) times x_t, e = idx[t, j]; entries outside [0, E) skipped. Returns out [n, d].
Vec MoeExperts(const std::vector<float>& x, int64_t n, const std::vector<int32_t>& idx, const std::vector<float>& w,
               int64_t k, const std::vector<float>& gate_up, const std::vector<float>& down, int64_t e, int64_t d,
               int64_t inter, double limit);

// Vision axial RoPE (docs/model-glm5-next.md §7.2): x [n, heads, hd], pos[r] = (h, w); channel j of
// a head turns by angle coord·theta^(−2(j mod hd/4)/(hd/2)), coord = h in the quarters 0 and 2, w in 1
// and 3, pairing j with j ± hd/2 (x'_j = x_j·cos − x_{j+hd/2}·sin for j < hd/2, x_j·cos + x_{j−hd/2}·sin
// otherwise). Returns [n, heads, hd].
Vec VisionRope(const std::vector<float>& x, int64_t n, int64_t heads, int64_t hd,
               const std::vector<std::pair<int32_t, int32_t>>& pos, double theta);

// Non-causal attention within segments (lengths summing to n): q, k, v [n, heads·hd]; row i attends
// to every row of its segment with softmax(q·k / sqrt(hd)). Returns [n, heads·hd].
Vec VisionAttention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v, int64_t n,
                    int64_t heads, int64_t hd, const std::vector<int64_t>& segments);

}  // namespace gyre::ops::ref

namespace gyre::ops::ref {
// mHC post: X'[t, s] = post[t, s]·a[t] + Σ_j comb[t, j, s]·X[t, j] for every stream s; x [t, n, d],
// a [t, d], post [t, n], comb [t, n, n] (row-major C[j, s]). Returns X' [t, n, d].
Vec HcPost(const std::vector<float>& x, int64_t t, int64_t n, int64_t d, const std::vector<float>& a,
           const std::vector<float>& post, const std::vector<float>& comb);

// Logit processing of one row (ops/penalties.h), written from the definitions: each logit plus
// the sum of its `bias` entries; −inf for `stop_ids` when `mask_stops`; then, for a token seen in
// the prompt (in_prompt[i] != 0) or the output (output_counts[i] > 0), the repetition penalty
// (divide a positive logit, multiply the rest); then − frequency·count − presence·[count > 0].
struct PenaltyRow {
  std::vector<std::pair<int32_t, double>> bias;
  std::vector<int32_t> stop_ids;
  bool mask_stops = false;
  std::vector<int32_t> output_counts;
  std::vector<uint8_t> in_prompt;
  double presence = 0, frequency = 0, repetition = 1;
};
Vec Penalties(const std::vector<float>& logits, const PenaltyRow& row);

// Vision axial RoPE (docs/model-glm5-next.md §7.2): x [n, heads, hd], pos[r] = (h, w); channel j of
// a head turns by angle coord·theta^(−2(j mod hd/4)/(hd/2)), coord = h in the quarters 0 and 2, w in 1
// and 3, pairing j with j ± hd/2 (x'_j = x_j·cos − x_{j+hd/2}·sin for j < hd/2, x_j·cos + x_{j−hd/2}·sin
// otherwise). Returns [n, heads, hd].
Vec VisionRope(const std::vector<float>& x, int64_t n, int64_t heads, int64_t hd,
               const std::vector<std::pair<int32_t, int32_t>>& pos, double theta);

// Non-causal attention within segments (lengths summing to n): q, k, v [n, heads·hd]; row i attends
// to every row of its segment with softmax(q·k / sqrt(hd)). Returns [n, heads·hd].
Vec VisionAttention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v, int64_t n,
                    int64_t heads, int64_t hd, const std::vector<int64_t>& segments);

}  // namespace gyre::ops::ref
