// ModelConfig: the text-model architecture of a glm5_next or kimi_linear checkpoint, read from
// config.json with the defaults and derived fields exactly as transformers 5.17 derives them
// (docs/model-glm5-next.md §1, docs/model-kda-kimi-linear.md §2).
//
// Both layouts of glm5_next are accepted: nested (`text_config` dict) and flat text-only (text
// fields at the top level). kimi_linear's `linear_attn_config` layer lists are 1-based.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "quant/scheme.h"

namespace gyre {

enum class ModelType { kGlm5Next, kKimiLinear };
enum class AttnKind { kKda, kDsa, kMla };  // KDA linear; DSA (MLA + indexer, glm5); plain causal MLA (kimi)
enum class MlpKind { kDense, kMoe };
enum class IndexerKind { kFull, kShared };

const char* AttnKindName(AttnKind k);

struct ModelConfig {
  ModelType model_type = ModelType::kGlm5Next;
  std::string model_type_name;  // as in config.json

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;      // dense SwiGLU width
  int64_t moe_intermediate_size = 0;  // per routed expert
  int64_t num_hidden_layers = 0;
  float rms_norm_eps = 1e-5f;
  float qa_norm_eps = 1e-5f;   // q_a_layernorm (glm5: rms_norm_eps; kimi: 1e-6)
  float kva_norm_eps = 1e-5f;  // kv_a_layernorm (glm5: rms_norm_eps; kimi: 1e-6)
  std::optional<float> swiglu_limit;  // glm5: 10.0; kimi: none
  bool tie_word_embeddings = false;

  // MLA / DSA.
  int64_t num_attention_heads = 0;
  int64_t q_lora_rank = 0;  // 0: direct q_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;  // shared "k_rot" width (never rotated: NoPE)
  int64_t v_head_dim = 0;
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }

  // DSA indexer (glm5 only).
  int64_t index_topk = 0;
  int64_t index_kpool = 1;
  bool index_kpool_always_select_tail = true;
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;

  // KDA.
  int64_t linear_num_heads = 0;
  int64_t linear_head_dim = 0;
  int64_t linear_conv_kernel_dim = 4;
  std::optional<float> linear_lower_bound;  // set: safe gate lb*sigmoid(..); unset: softplus gate
  bool kda_beta_bf16 = true;                // glm5 rounds b_proj output to bf16 before sigmoid

  // MoE.
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  float routed_scaling_factor = 1.0f;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = true;

  // Hyper-connections (glm5 only; 0 means plain residual).
  int64_t hc_mult = 0;
  float hc_eps = 1e-6f;
  int64_t hc_sinkhorn_iters = 20;

  // Multi-token prediction (docs/engine.md "MTP layer"): 0 or 1 MTP layer, stored as layer
  // index num_hidden_layers under the main layers' prefix.
  int64_t num_nextn_predict_layers = 0;

  std::vector<AttnKind> layer_types;
  std::vector<MlpKind> mlp_layer_types;
  std::vector<IndexerKind> indexer_types;

  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> bos_token_id, pad_token_id;
  // The longest context the checkpoint was trained for (config.json max_position_embeddings);
  // 0 when the file does not say. `gyre serve` caps --max-model-len by it.
  int64_t max_position_embeddings = 0;

  // config.json `quantization_config` (top level); scheme kNone when absent. Supported:
  // {quant_method: "fp8", weight_block_size: [bn, bk], activation_scheme: "dynamic"} and
  // {quant_method: "gyre-int8", activation_scheme: "dynamic"} (docs/quantization.md).
  QuantConfig quant;

  int64_t NumLayers(AttnKind k) const;
};

// Parses config.json text. Errors: InvalidArgument for malformed JSON, an unsupported model_type
// (message lists the supported ones), wrong field types, or a config transformers would reject
// (num_attention_heads != num_key_value_heads, index_topk % index_kpool != 0, rope dim > 0 for
// glm5, list lengths != num_hidden_layers, unknown layer type names, num_nextn_predict_layers
// other than 0 or 1), and an unsupported quantization_config (Unimplemented for a quant_method or
// activation_scheme gyre does not run, InvalidArgument for a malformed one).
Result<ModelConfig> ParseModelConfig(const std::string& json_text);
// Reads `dir`/config.json (NotFound if absent) and parses it; merges eos ids from
// `dir`/generation_config.json when present.
Result<ModelConfig> LoadModelConfig(const std::string& dir);

// generation_config.json: the fields gyre uses.
struct GenerationConfig {
  std::vector<int32_t> eos_token_ids;
  std::optional<float> temperature, top_p;
  std::optional<int64_t> top_k, max_new_tokens;
  bool do_sample = false;
};
// Missing file → defaults (OK). Malformed → InvalidArgument.
Result<GenerationConfig> LoadGenerationConfig(const std::string& dir);

}  // namespace gyre
