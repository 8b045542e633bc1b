// Expert parallelism (EP) for a MoE layer: rank r owns routed experts Split(E, n, r) and the
// tokens Split(N, n, r) (the usual EP layout, where attention ran data-parallel). Per rank:
//
//   moe.route     router GEMM + Route on its own tokens (router weights replicated)
//   moe.dispatch  every (token, slot) pair goes to the rank owning its expert: AllToAllV of
//                 [expert, token id, x row] records
//   moe.experts   each owned expert runs once over the rows it received (ordered by token)
//   moe.combine   expert outputs return with a second AllToAllV (the reverse counts); the source
//                 rank sums them with the routing weights in ascending expert order (the
//                 reference's order), then adds the replicated shared expert
//
// fp32 activations, no capacity limit (no token is dropped), no load balancing.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "model/weights.h"
#include "parallel/communicator.h"
#include "parallel/shard.h"

namespace gyre::parallel {

struct MoeEpShard {
  Range experts;                   // owned routed experts
  Matrix router;                   // [E, D] replicated
  std::vector<float> bias;         // [E] replicated
  std::vector<MlpWeights> owned;   // owned[i] is expert experts.begin + i
  MlpWeights shared;               // replicated
  bool has_shared = false;
};
MoeEpShard ShardMoe(const MoeWeights& w, const ModelConfig& c, int size, int rank);

struct MoeEpTrace {
  std::vector<float> route;                      // moe.route  [Nl, k] expert ids, then [Nl, k] weights
  std::vector<int32_t> pair_expert, pair_token;  // received pairs, by expert then global token id
  std::vector<float> pair_x;                     // moe.dispatch  [m, D] rows received
  std::vector<float> pair_y;                     // moe.experts   [m, D] their expert outputs
  std::vector<float> out;                        // moe.combine   [Nl, D] this rank's tokens
};

// x [n_local, D]: this rank's tokens, whose global ids are token0 .. token0 + n_local - 1.
Status MoeEpForward(Communicator& comm, const MoeEpShard& w, const ModelConfig& c, const float* x, int64_t n_local,
                    int64_t token0, MoeEpTrace* t);

}  // namespace gyre::parallel
