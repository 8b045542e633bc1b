// Tensor parallelism (TP): three plans, each a function one rank runs with only its shard of the
// weights, exchanging through a Communicator (docs/parallel.md has the plan → op table).
//
//   KDA heads  rank r owns heads Split(H, n, r): q/k/v, f_b, g_b, b column-parallel by head
//              (f_a, g_a replicated), conv over its channels, KDA core and gated norm over its
//              heads, o_proj row-parallel + AllReduceSum.
//   MLA heads  q_a (+ norm), kv_a (+ norm) and the DSA indexer replicated; q_b (or q_proj)
//              column-parallel by head, kv_b rows of its heads, attention over its heads,
//              o_proj row-parallel + AllReduceSum.
//   LM head    rank r owns vocabulary rows Split(V, n, r): local logits, AllGather; greedy token
//              by a sharded argmax (local max + index, then the max over ranks).
//
// Every plan is for a fresh sequence (no cached state), fp32 activations. The traces keep each
// op's output so verify_parallel can compare them with the unsharded reference
// (parallel/reference.h); a rank's trace holds only its heads / vocabulary slice.
#pragma once

#include <cstdint>
#include <vector>

#include "core/matrix.h"
#include "core/status.h"
#include "model/config.h"
#include "model/weights.h"
#include "parallel/communicator.h"
#include "parallel/shard.h"

namespace gyre::parallel {

// ---- KDA over heads --------------------------------------------------------------------------

struct KdaTpShard {
  Range heads;                     // global heads [begin, end) of this rank; Hl = heads.size()
  Matrix q, k, v;                  // [Hl·K, D]
  Matrix f_a, g_a;                 // [K, D] replicated
  Matrix f_b, g_b;                 // [Hl·K, K]
  std::vector<float> dt_bias;      // [Hl·K]
  std::vector<float> a_log;        // [Hl]
  Matrix b;                        // [Hl, D]
  Matrix conv;                     // [3·Hl·K, W]: this rank's q, then k, then v channels
  std::vector<float> o_norm;       // [K] replicated
  Matrix o;                        // [D, Hl·K] (columns of the full o_proj)
};
KdaTpShard ShardKda(const KdaWeights& w, const ModelConfig& c, int size, int rank);

// Outputs of every op of a KDA layer. For a TP rank: its heads only (Hp = Hl·K); for the
// reference: all heads.
struct KdaLayerTrace {
  std::vector<float> u;      // kda.proj  [N, 3·Hp] pre-conv q | k | v
  std::vector<float> g, z;   // kda.proj  [N, Hp] forget gate, output gate
  std::vector<float> beta;   // kda.proj  [N, Hl]
  std::vector<float> conv;   // kda.conv  [N, 3·Hp]
  std::vector<float> o;      // kda.core  [N, Hl, K]
  std::vector<float> state;  // kda.core  [Hl, K, K] final recurrent state
  std::vector<float> out;    // kda.out   [N, D] (after the all-reduce: the full layer output)
};

// x [n, D]: the layer input (after input_layernorm), replicated on every rank.
Status KdaTpForward(Communicator& comm, const KdaTpShard& w, const ModelConfig& c, const float* x, int64_t n,
                    KdaLayerTrace* t);

// ---- MLA over heads --------------------------------------------------------------------------

struct MlaTpShard {
  Range heads;
  Matrix q_a;                      // [q_lora, D] replicated (empty on the q_proj path)
  std::vector<float> q_a_norm;
  Matrix q_b;                      // [Hl·qk, q_lora] (or q_proj [Hl·qk, D])
  Matrix kv_a;                     // [kv_lora + rope, D] replicated
  std::vector<float> kv_a_norm;
  Matrix kv_b;                     // [Hl·(nope + v), kv_lora]
  Matrix o;                        // [D, Hl·v]
  bool dsa = false;                // select keys with the indexer (replicated) instead of causal
  IndexerWeights indexer;          // replicated
};
// REQUIRES: a DSA layer with its own indexer, or a plain MLA layer.
MlaTpShard ShardMla(const LayerWeights& w, const ModelConfig& c, int size, int rank);

struct MlaLayerTrace {
  std::vector<float> q;            // mla.proj     [N, Hl, qk]
  std::vector<float> latent;       // mla.proj     [N, kv_lora] (replicated)
  std::vector<float> selection;    // mla.indexer  selected key positions (CSR, as floats; replicated)
  std::vector<float> attn;         // mla.attn     [N, Hl·v]
  std::vector<float> out;          // mla.out      [N, D]
};

Status MlaTpForward(Communicator& comm, const MlaTpShard& w, const ModelConfig& c, const float* x, int64_t n,
                    MlaLayerTrace* t);

// ---- LM head over the vocabulary -------------------------------------------------------------

struct LmHeadTpShard {
  Range vocab;
  Matrix w;                        // [Vl, D]
};
// REQUIRES: vocab_size % size == 0 (AllGather takes equal blocks).
LmHeadTpShard ShardLmHead(const Matrix& lm_head, int size, int rank);

struct LmHeadTrace {
  std::vector<float> logits;       // lm_head.logits  [R, V] after the all-gather
  std::vector<float> argmax;       // lm_head.argmax  [R] greedy token ids (as floats)
};

// h [r, D]: final-norm outputs, replicated. InvalidArgument when the vocabulary is not split
// evenly.
Status LmHeadTpForward(Communicator& comm, const LmHeadTpShard& w, int64_t vocab, const float* h, int64_t r,
                       LmHeadTrace* t);

}  // namespace gyre::parallel
