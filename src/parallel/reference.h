// Unsharded references for verify_parallel: one layer piece computed on one process with the full
// weights, composed from src/ops exactly as runtime/model.cc composes them (fp32 activations,
// fresh sequence), but keeping every op's output so each sharded op has something to be compared
// with. verify_parallel also compares the sharded layer output with Model::Forward itself, so a
// drift between these references and the engine shows up as a failed "engine.*" check.
#pragma once

#include <cstdint>
#include <vector>

#include "core/matrix.h"
#include "model/config.h"
#include "model/weights.h"
#include "ops/attention.h"
#include "ops/moe.h"
#include "parallel/tensor_parallel.h"

namespace gyre::parallel {

// KDA layer (model.cc KdaLayer) over n tokens of one new sequence.
KdaLayerTrace KdaLayerReference(const KdaWeights& w, const ModelConfig& c, const float* x, int64_t n);

// The DSA indexer's selection for n tokens of one new sequence (model.cc AttnLayer). Replicated
// under TP: every rank calls this with the same inputs. x [n, D]; q_resid [n, q_lora].
ops::Selection DsaSelect(const IndexerWeights& w, const ModelConfig& c, const float* x, const float* q_resid,
                         int64_t n);
// Flattens a selection into floats for comparison: offsets, then indices.
std::vector<float> FlattenSelection(const ops::Selection& s);

// MLA / DSA layer (model.cc AttnLayer). REQUIRES: a DSA layer with its own indexer, or MLA.
MlaLayerTrace MlaLayerReference(const LayerWeights& w, const ModelConfig& c, const float* x, int64_t n);

// LM head: logits and greedy tokens (ops::Argmax, ties → lowest id).
LmHeadTrace LmHeadReference(const Matrix& lm_head, const float* h, int64_t r);

// MoE layer (model.cc MlpLayer) and the intermediate views EP is compared on.
struct MoeTrace {
  std::vector<float> route;        // moe.route     [N, k] expert ids, then [N, k] weights
  // moe.dispatch: the (expert, token) pairs each expert receives, ordered by expert, then token.
  std::vector<int32_t> pair_expert, pair_token;  // [m]
  std::vector<float> pair_x;       // moe.dispatch  [m, D] the token rows
  std::vector<float> pair_y;       // moe.experts   [m, D] the expert outputs
  std::vector<float> out;          // moe.combine   [N, D] routed sum + shared expert
};
ops::RouterParams RouterParamsOf(const ModelConfig& c);
// SwiGLU MLP (model.cc SwiGluMlp): out [n, D].
void SwiGluMlp(const MlpWeights& w, const float* x, int64_t n, float limit, float* out);
MoeTrace MoeLayerReference(const MoeWeights& w, const ModelConfig& c, const float* x, int64_t n);

}  // namespace gyre::parallel
