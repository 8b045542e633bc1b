#include "model/model_size.h"

namespace gyre {

LayerParams ComputeLayerParams(const ModelConfig& c, int64_t layer) {
  LayerParams p;
  const int64_t D = c.hidden_size;
  if (c.hc_mult > 0) {
    const int64_t n = c.hc_mult, mix = (2 + n) * n;  // pre (n) + post (n) + residual (n×n) mix rows
    p.norms_hc = 2 * D + 2 * (mix * n * D + mix + 3);
  } else {
    p.norms_hc = 2 * D;
  }
  switch (c.layer_types[layer]) {
    case AttnKind::kKda: {
      const int64_t K = c.linear_head_dim, W = c.linear_conv_kernel_dim;
      p.num_kda_heads = c.linear_num_heads;
      // q, k, v rows (3·K·D), conv rows (3·K·W), f_b and g_b rows (2·K·K), dt_bias (K), A_log (1),
      // b_proj row (D), o_proj columns (D·K).
      p.kda_per_head = 3 * K * D + 3 * K * W + 2 * K * K + K + 1 + D + D * K;
      p.kda_replicated = 2 * K * D + K;
      break;
    }
    case AttnKind::kDsa:
    case AttnKind::kMla: {
      const int64_t qk = c.qk_head_dim(), R = c.kv_lora_rank;
      p.num_mla_heads = c.num_attention_heads;
      p.mla_per_head = (c.q_lora_rank > 0 ? qk * c.q_lora_rank : qk * D) + (c.qk_nope_head_dim + c.v_head_dim) * R +
                       D * c.v_head_dim;
      p.mla_replicated = (c.q_lora_rank > 0 ? c.q_lora_rank * D + c.q_lora_rank : 0) + (R + c.qk_rope_head_dim) * D + R;
      if (c.layer_types[layer] == AttnKind::kDsa && c.indexer_types[layer] == IndexerKind::kFull) {
        const int64_t Hi = c.index_n_heads, d = c.index_head_dim;
        // wq_b, wk, k_norm (w + b), weights_proj, APE, compress_gate.
        p.indexer = Hi * d * c.q_lora_rank + d * D + 2 * d + Hi * D + c.index_kpool * d + d * D;
      }
      break;
    }
  }
  if (c.mlp_layer_types[layer] == MlpKind::kDense) {
    p.dense_mlp = 3 * D * c.intermediate_size;
  } else {
    const int64_t I = c.moe_intermediate_size;
    p.router = c.n_routed_experts * D;
    p.routed_per_expert = 3 * D * I;
    p.num_routed_experts = c.n_routed_experts;
    p.shared_experts = c.n_shared_experts * 3 * D * I;
  }
  return p;
}

OuterParams ComputeOuterParams(const ModelConfig& c) {
  OuterParams o;
  o.embedding = c.vocab_size * c.hidden_size;
  o.lm_head = c.tie_word_embeddings ? 0 : c.vocab_size * c.hidden_size;
  o.final_norm = c.hidden_size;
  return o;
}

AttnCacheElems ComputeAttnCacheElems(const ModelConfig& c, int64_t layer) {
  AttnCacheElems e;
  if (c.layer_types[layer] == AttnKind::kKda) return e;
  e.latent = c.kv_lora_rank;
  e.krot = c.qk_rope_head_dim;
  if (c.layer_types[layer] == AttnKind::kDsa && c.indexer_types[layer] == IndexerKind::kFull) {
    e.index_key = c.index_head_dim;
    e.index_gamma = c.index_head_dim;
  }
  return e;
}

KdaStateElems ComputeKdaStateElems(const ModelConfig& c, int64_t layer) {
  KdaStateElems e;
  if (c.layer_types[layer] != AttnKind::kKda) return e;
  const int64_t K = c.linear_head_dim, P = c.linear_num_heads * K;
  e.conv_tail = (c.linear_conv_kernel_dim - 1) * 3 * P;
  e.recurrent = c.linear_num_heads * K * K;
  return e;
}

}  // namespace gyre
