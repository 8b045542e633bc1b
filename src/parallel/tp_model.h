// Tensor parallelism of a whole model: one rank's shard of the config and the weights, as the
// CUDA model runs it (runtime/cuda_model.h CudaTpOptions; docs/parallel.md "TP on the CUDA model").
//
// Rank r of n keeps:
//   * KDA layers: heads Split(linear_num_heads, n, r): q/k/v, f_b, g_b, dt_bias rows of its
//     channels, b and A_log of its heads, conv rows of its q, k and v channels; f_a, g_a and the
//     output norm replicated; o_proj columns of its channels (a partial sum: all-reduce).
//   * MLA / DSA layers: heads Split(num_attention_heads, n, r): q_b (or q_proj) rows and kv_b rows
//     of its heads, o_proj columns (partial sum: all-reduce); q_a, kv_a, their norms and the DSA
//     indexer replicated (every rank holds the whole latent cache and makes the same selection).
//   * MLP (with shard_mlp): the dense SwiGLU, every routed expert and the shared expert split over
//     their intermediate width (gate/up rows, down columns; partial sum: all-reduce); the router
//     replicated. Without shard_mlp the MLP is replicated and needs no collective.
//   * With expert_parallel instead: the routed experts Split(n_routed_experts, n, r), each whole
//     (the rank computes only the (token, slot) pairs routed to its experts: every rank holds every
//     token, as the attention is TP), the shared expert and the dense MLP split by width, the router
//     replicated; one all-reduce sums the routed and shared partial outputs. This is EP with TP
//     attention (the seeds' layout inside a node), combining by all-reduce rather than all-to-all.
//   * LM head: vocabulary rows [r·Vp, min(V, (r+1)·Vp)), Vp = ceil(V / n), padded with zero rows to
//     Vp so every rank's logits block has the same width (all-gather, then the padding dropped).
//   * Embedding, norms, hyper-connections: replicated.
// The shard's config is the model's with linear_num_heads, num_attention_heads and (with
// shard_mlp) intermediate_size / moe_intermediate_size set to this rank's counts; vocab_size stays
// the model's (the embedding is whole). The MTP layer is dropped (the CUDA model does not run it).
//
// Errors: InvalidArgument when n < 1, r outside [0, n), or a dimension it splits has fewer items
// than ranks; Unimplemented for quantized weights (W8A8 checkpoints are not sharded yet).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "model/config.h"
#include "model/weights.h"

namespace gyre::parallel {

struct TpShardOptions {
  bool shard_mlp = true;         // split the MLP width (else replicate the MLP)
  bool expert_parallel = false;  // split the routed experts by expert (implies the MLP is sharded)
};

struct TpModelShard {
  ModelConfig config;     // this rank's (heads and, with shard_mlp, intermediate widths)
  ModelWeights weights;   // this rank's
  int64_t vocab_rows = 0; // Vp = ceil(V / n): rows of weights.lm_head (zero rows past the vocabulary)
  // expert_parallel: this rank's routed experts [expert_begin, expert_begin + weights' count).
  int64_t expert_begin = 0, expert_count = 0;
};

Result<TpModelShard> ShardModelForTp(const ModelConfig& config, const ModelWeights& weights, int size, int rank,
                                     const TpShardOptions& opts = {});

// Layer split (pipeline parallelism): stage r of n keeps layers Split(num_hidden_layers, n, r)
// whole (config.num_hidden_layers and the per-layer type lists cut to them) and the embedding,
// final norm and LM head (replicated: the first stage embeds, the last one samples; the others'
// copies are unused). vocab_rows = V. Errors: InvalidArgument (n < 1, r outside [0, n), fewer
// layers than stages), Unimplemented (a stage that would start with a DSA layer sharing the
// indexer selection of a layer on an earlier stage).
Result<TpModelShard> ShardModelForPp(const ModelConfig& config, const ModelWeights& weights, int size, int rank);

}  // namespace gyre::parallel
