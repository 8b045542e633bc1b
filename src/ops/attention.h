// MLA attention (NoPE) over a latent cache, and the DSA indexer's pooled top-k selection
// (docs/model-glm5-next.md §5, docs/model-kda-kimi-linear.md §2.4).
//
// The attention runs in the absorbed form: for head h, q_lat = W_UKᵀ q_nope, scores against the
// cached latent c (plus the shared k_rot part for kimi_linear), o_lat = Σ p·c, o = W_UV·o_lat.
// This is algebraically exact (no RoPE) and differs from the reference, which expands K and V,
// only by rounding.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/matrix.h"
#include "ops/numerics.h"

namespace gyre::ops {

// Which keys each query attends: either all keys j <= pos (causal), or explicit lists (CSR).
struct Selection {
  bool causal = true;
  std::vector<int64_t> offsets;  // [S + 1] when !causal
  std::vector<int32_t> indices;  // key positions, ascending per query, no duplicates
};

// Token rows of one cached tensor, contiguous or paged: row j lives at
// base + (pages[j / page_tokens] * page_tokens + j % page_tokens) * row_stride + offset
// (contiguous when pages is null: base + j * row_stride + offset).
struct RowView {
  const float* base = nullptr;
  const int32_t* pages = nullptr;
  int64_t page_tokens = 1;
  int64_t row_stride = 0;
  int64_t offset = 0;
  const float* Row(int64_t j) const {
    if (!pages) return base + j * row_stride + offset;
    return base + (static_cast<int64_t>(pages[j / page_tokens]) * page_tokens + j % page_tokens) * row_stride + offset;
  }
};

struct MlaShape {
  int64_t num_heads = 0, nope = 0, rope = 0, v = 0, kv_lora = 0;
  float scale = 1.0f;  // qk_head_dim^{-1/2}
};

// q      [S, H, nope + rope]       queries of the S new tokens (absolute positions pos0 ...)
// latent rows [T, kv_lora]         cached c for every position (T >= pos0 + S)
// krot   rows [T, rope]            unused when rope == 0
// kv_b   [H*(nope+v), kv_lora]     kv_b_proj weight
// out    [S, H*v]                  rounded by `num`
void MlaAttention(const float* q, int64_t s, int64_t pos0, const RowView& latent, const RowView& krot,
                  const Matrix& kv_b, MlaShape shape, const Selection& sel, float* out, const Numerics& num);

struct IndexerShape {
  int64_t num_heads = 0, head_dim = 0;
  int64_t kpool = 1;     // m
  int64_t topk = 0;      // token budget K (K/m pools)
  bool tail = true;      // append the visible incomplete tail
};

// Pooled key of one complete pool: K̄[d] = Σ_r round(round(softmax_r(γ_r[d] + ape[r, d])) · k_r[d]).
// k, gamma: [m, d] rows of the pool's tokens; ape [m, d]; out [d].
void PoolKey(const float* k, const float* gamma, const float* ape, int64_t m, int64_t d, float* out,
             const Numerics& num);

// Selects keys for S queries at absolute positions pos0 ... pos0+S-1 of an unpadded sequence.
// q_idx [S, Hi, d] (indexer queries), w [S, Hi] (head weights incl. Hi^{-1/2}),
// pool_keys [P, d] for the complete pools 0..P-1 (pool p = tokens [p·m, p·m + m)).
// For each query t: candidates are pools with p·m + m − 1 <= t; the top min(K/m, #candidates) by
// score s = Σ_h w_h·relu(q_h·K̄_p·d^{-1/2}) are chosen. Deterministic tie rule: higher score first,
// equal scores → lower pool index first. Then the tail (t+1) mod m tokens after the last complete
// pool are added when `tail` is set. Indices are emitted ascending.
// If `scores_out` is non-null it receives the [S, P] scores (non-candidates −inf) for diagnostics.
void IndexerSelect(const float* q_idx, const float* w, int64_t s, int64_t pos0, const float* pool_keys, int64_t p,
                   IndexerShape shape, Selection* sel, std::vector<float>* scores_out = nullptr);

}  // namespace gyre::ops
