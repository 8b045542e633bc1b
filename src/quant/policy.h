// Which checkpoint tensors `gyre quantize` quantizes (docs/quantization.md "What stays in high
// precision").
//
// Quantized: the 2-D `.weight` of every projection that runs as a GEMM on token activations —
// attention q/k/v/o and the MLA LoRA projections (q_a, q_b, kv_a_proj_with_mqa, kv_b),
// the DSA indexer's wq_b and wk, dense and expert MLPs (gate/up/down, kimi w1/w2/w3), shared
// experts, and the MTP layer's eh_proj and projections.
// Kept: embeddings, lm_head and the MTP shared_head, the MoE router (`mlp.gate.weight`) and its
// bias, every norm, hyper-connection parameters (hc_*), the KDA gate path (f_a/f_b, b_proj,
// g_a/g_b, A_log, dt_bias, conv1d), the indexer's weights_proj / compress gate / ape, and
// anything that is not a text-model 2-D weight (vision tower).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gyre {

bool ShouldQuantize(const std::string& name, const std::vector<int64_t>& shape);

}  // namespace gyre
