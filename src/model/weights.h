// ModelWeights: every text-model tensor of a glm5_next / kimi_linear checkpoint, bound by its
// on-disk name (the names `save_pretrained` writes), shape-checked, and converted to fp32 for the
// CPU backend. Vision-tower tensors are ignored; the MTP layer (layers.{num_hidden_layers}.*,
// docs/engine.md "MTP layer") is bound iff num_nextn_predict_layers is 1 and ignored when it is 0.
//
// Errors from BindWeights name the tensor: NotFound "missing tensor 'X'", InvalidArgument
// "tensor 'X': expected shape [a, b], found [c, d]" or an unsupported dtype. With
// num_nextn_predict_layers = 1 every MTP tensor must be present (the first missing one is named).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/matrix.h"
#include "core/status.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace gyre {

struct HcWeights {
  Matrix fn;  // [(2+n)n, n·D]
  std::vector<float> base, scale;
};

struct KdaWeights {
  Matrix q, k, v;           // [P, D]
  Matrix conv;              // [3P, W] (q, k, v channels concatenated)
  Matrix f_a, f_b;          // [K, D], [P, K]
  std::vector<float> dt_bias, a_log;
  Matrix b;                 // [H, D]
  Matrix g_a, g_b;          // [K, D], [P, K]
  std::vector<float> o_norm;  // [K]
  Matrix o;                 // [D, P]
};

struct IndexerWeights {
  Matrix wq_b;  // [Hi·d, q_lora]
  Matrix wk;    // [d, D]
  std::vector<float> k_norm_w, k_norm_b;
  Matrix weights_proj;   // [Hi, D]
  Matrix ape;            // [m, d]
  Matrix compress_gate;  // [d, D]
};

struct MlaWeights {
  Matrix q_a;  // [q_lora, D] (q LoRA path) — empty when q_proj is used
  std::vector<float> q_a_norm;
  Matrix q_b;     // [H·qk, q_lora]
  Matrix q_proj;  // [H·qk, D] (direct path)
  Matrix kv_a;    // [kv_lora + rope, D]
  std::vector<float> kv_a_norm;
  Matrix kv_b;  // [H·(nope+v), kv_lora]
  Matrix o;     // [D, H·v]
  bool has_indexer = false;
  IndexerWeights indexer;
};

struct MlpWeights {
  Matrix gate, up, down;
};

struct MoeWeights {
  Matrix router;             // [E, D]
  std::vector<float> bias;   // [E] e_score_correction_bias
  std::vector<MlpWeights> experts;
  MlpWeights shared;
  bool has_shared = false;
};

struct LayerWeights {
  AttnKind attn = AttnKind::kKda;
  MlpKind mlp = MlpKind::kDense;
  std::vector<float> input_norm, post_norm;
  HcWeights attn_hc, ffn_hc;  // glm5 only
  KdaWeights kda;
  MlaWeights mla;
  MlpWeights dense;
  MoeWeights moe;
};

// The multi-token-prediction layer: no hyper-connections, no indexer; its embedding is the main
// model's embed_tokens.
struct MtpWeights {
  std::vector<float> enorm, hnorm;           // [D]: RMSNorm of the next token's embedding / the hidden state
  Matrix eh_proj;                            // [D, 2D]: input columns [embedding part | hidden part]
  std::vector<float> input_norm, post_norm;  // [D]
  MlaWeights mla;                            // the model's MLA projections (has_indexer false)
  MlpWeights mlp;                            // dense SwiGLU, [intermediate_size, D]
  std::vector<float> head_norm;              // shared_head.norm [D]
  Matrix head;                               // shared_head.head [V, D]
};

struct ModelWeights {
  Matrix embed;  // [V, D]
  std::vector<float> final_norm;
  Matrix lm_head;  // [V, D]
  std::vector<LayerWeights> layers;
  bool has_mtp = false;  // num_nextn_predict_layers == 1
  MtpWeights mtp;
  std::string prefix;  // detected name prefix, e.g. "model.language_model."
  int64_t num_params = 0;
  int64_t num_tensors_used = 0, num_tensors_ignored = 0;
};

struct BindOptions {
  // Round every tensor the bf16 reference keeps in bf16 to bf16 (tensors stored as F32 on disk);
  // A_log, dt_bias, conv and e_score_correction_bias stay fp32 as in the reference.
  bool round_to_bf16 = false;
};

// Binds from the checkpoint files of a model folder (prefix detected from embed_tokens).
Result<ModelWeights> BindWeights(const ModelConfig& config, const WeightFiles& files, const BindOptions& opts = {});

// Where BindWeightsFrom gets each tensor: `Fetch` fills `out` with the fp32 values of tensor
// `name`, which must have exactly `shape` (NotFound / InvalidArgument naming the tensor otherwise).
// `keep_f32` marks the tensors the reference keeps in fp32.
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual Status Fetch(const std::string& name, const std::vector<int64_t>& shape, bool keep_f32,
                       std::vector<float>* out) = 0;
  // The quantized storage of tensor `name` when the source holds it quantized (FP8 blocks with
  // `name`_scale_inv, INT8 with `name`_scale), else nullptr: most sources hold none. Called after
  // a successful Fetch of the same name, whose values are then the dequantized ones.
  virtual std::shared_ptr<const QuantizedWeight> Quantized(const std::string& name) { return nullptr; }
};
Result<ModelWeights> BindWeightsFrom(const ModelConfig& config, TensorSource& src, const std::string& prefix,
                                     const BindOptions& opts = {});
// The name prefix save_pretrained writes: "model.language_model." (glm5_next), "model." (kimi).
std::string WeightPrefix(const ModelConfig& config);

}  // namespace gyre
