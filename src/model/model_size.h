// Parameter counts and cache / state sizes of a ModelConfig, by component, computed from the
// config alone (no weights). One source for `gyre inspect` (runtime/model.h Summarize) and the
// memory planner (parallel/memory_plan.h), so the two cannot disagree.
//
// Counts follow docs/model-glm5-next.md §1.5 (matched there by a meta-device count in
// transformers): the text model only — no vision tower, no MTP layer.
//
// Per-head pieces are kept apart from replicated ones because tensor parallelism splits the
// former (docs/parallel.md "Plan → op mapping"): `kda_per_head × linear_num_heads` is the part of
// a KDA layer that TP over KDA heads divides; `mla_per_head × num_attention_heads` the part of an
// MLA/DSA layer that TP over MLA heads divides.
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "model/config.h"

namespace gyre {

// Element counts of one decoder layer. Every field is 0 for components the layer does not have.
// Each fits in int64 under ParseModelConfig's bounds; sums over layers may not (use 128 bits).
struct LayerParams {
  int64_t kda_per_head = 0;    // q/k/v rows + conv, f_b, g_b, dt_bias, A_log, b_proj row, o_proj columns of one head
  int64_t kda_replicated = 0;  // f_a, g_a (low rank, K×D each), o_norm (K)
  int64_t mla_per_head = 0;    // q_b rows, kv_b rows (W_UK, W_UV), o_proj columns of one head
  int64_t mla_replicated = 0;  // q_a + q_a_norm (or nothing with a direct q_proj), kv_a + kv_a_norm
  int64_t indexer = 0;         // DSA indexer with its own weights ("full"); 0 for "shared" / MLA / KDA
  int64_t dense_mlp = 0;       // gate, up, down of a dense SwiGLU layer
  int64_t router = 0;          // router weight (E×D)
  int64_t routed_per_expert = 0;  // gate, up, down of one routed expert
  int64_t num_routed_experts = 0;
  int64_t shared_experts = 0;  // all shared experts of the layer
  int64_t norms_hc = 0;        // two RMSNorms and the two hyper-connection mixers

  int64_t num_kda_heads = 0, num_mla_heads = 0;  // the head counts the per-head fields multiply

  int64_t kda() const { return kda_per_head * num_kda_heads + kda_replicated; }
  int64_t mla() const { return mla_per_head * num_mla_heads + mla_replicated; }
  int64_t routed() const { return routed_per_expert * num_routed_experts; }
  int64_t total() const { return kda() + mla() + indexer + dense_mlp + router + routed() + shared_experts + norms_hc; }
};

// REQUIRES: 0 <= layer < c.num_hidden_layers and c came from ParseModelConfig.
LayerParams ComputeLayerParams(const ModelConfig& c, int64_t layer);

// Elements outside the decoder layers.
struct OuterParams {
  int64_t embedding = 0;   // V×D
  int64_t lm_head = 0;     // V×D, 0 when tied to the embedding
  int64_t final_norm = 0;  // D
};
OuterParams ComputeOuterParams(const ModelConfig& c);

// Per-token elements of one DSA/MLA layer's cache, by part (the reference packing: latent c,
// shared k_rot, and for a full-indexer DSA layer the indexer key k_I and the pool gate logits γ).
// All 0 for a KDA layer.
struct AttnCacheElems {
  int64_t latent = 0, krot = 0, index_key = 0, index_gamma = 0;
  int64_t total() const { return latent + krot + index_key + index_gamma; }
};
AttnCacheElems ComputeAttnCacheElems(const ModelConfig& c, int64_t layer);

// Per-sequence elements of one KDA layer's state (0 for other layers): the short-conv tails of
// q, k and v ((W−1)·3·P) and the recurrent state (H·K·K).
struct KdaStateElems {
  int64_t conv_tail = 0, recurrent = 0;
};
KdaStateElems ComputeKdaStateElems(const ModelConfig& c, int64_t layer);

}  // namespace gyre
