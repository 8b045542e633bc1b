// config.json parsing. Sections: helpers; glm5_next; kimi_linear; entry points.
#include "model/config.h"

#include <fstream>
#include <initializer_list>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/json_depth.h"

namespace gyre {

using json = nlohmann::json;

const char* AttnKindName(AttnKind k) {
  switch (k) {
    case AttnKind::kKda: return "kda";
    case AttnKind::kDsa: return "dsa";
    case AttnKind::kMla: return "mla";
  }
  return "?";
}

int64_t ModelConfig::NumLayers(AttnKind k) const {
  int64_t n = 0;
  for (auto t : layer_types) n += (t == k);
  return n;
}

namespace {

// ---- helpers ---------------------------------------------------------------------------------

// Reads a field by any of its names (transformers attribute aliases); `*found` tells whether one
// was present and not null. Type errors become InvalidArgument naming the field.
class Fields {
 public:
  explicit Fields(const json& j) : j_(j) {}

  const json* Get(std::initializer_list<const char*> names) const {
    for (const char* n : names) {
      auto it = j_.find(n);
      if (it != j_.end() && !it->is_null()) return &*it;
    }
    return nullptr;
  }
  bool IsExplicitNull(const char* name) const {
    auto it = j_.find(name);
    return it != j_.end() && it->is_null();
  }
  Status Int(std::initializer_list<const char*> names, int64_t* out) const {
    const json* v = Get(names);
    if (!v) return Status();
    if (!v->is_number_integer()) return Bad(names, "an integer");
    *out = v->get<int64_t>();
    return Status();
  }
  Status Float(std::initializer_list<const char*> names, float* out) const {
    const json* v = Get(names);
    if (!v) return Status();
    if (!v->is_number()) return Bad(names, "a number");
    *out = v->get<float>();
    return Status();
  }
  Status Bool(std::initializer_list<const char*> names, bool* out) const {
    const json* v = Get(names);
    if (!v) return Status();
    if (!v->is_boolean()) return Bad(names, "a boolean");
    *out = v->get<bool>();
    return Status();
  }
  Status StringList(const char* name, std::vector<std::string>* out, bool* found) const {
    *found = false;
    const json* v = Get({name});
    if (!v) return Status();
    if (!v->is_array()) return Bad({name}, "a list of strings");
    out->clear();
    for (const auto& e : *v) {
      if (!e.is_string()) return Bad({name}, "a list of strings");
      out->push_back(e.get<std::string>());
    }
    *found = true;
    return Status();
  }

 private:
  static Status Bad(std::initializer_list<const char*> names, const char* what) {
    return Status::InvalidArgument(std::string("config field '") + *names.begin() + "' must be " + what);
  }
  const json& j_;
};

Status ParseTokenIds(const json* v, const char* name, std::vector<int32_t>* out) {
  if (!v) return Status();
  out->clear();
  if (v->is_number_integer()) {
    out->push_back(v->get<int32_t>());
  } else if (v->is_array()) {
    for (const auto& e : *v) {
      if (!e.is_number_integer()) return Status::InvalidArgument(std::string(name) + " must hold integers");
      out->push_back(e.get<int32_t>());
    }
  } else {
    return Status::InvalidArgument(std::string(name) + " must be an integer or a list of integers");
  }
  return Status();
}

// Sizes read from a file are bounded before anything is allocated from them (a config with
// num_hidden_layers: 1e9 must be an error, not a bad_alloc). The bounds are far above any model
// of this family.
Status CheckBounds(const ModelConfig& c) {
  struct B {
    const char* name;
    int64_t v, hi;
  };
  for (const B& b : {B{"vocab_size", c.vocab_size, int64_t(1) << 24}, B{"hidden_size", c.hidden_size, 1 << 17},
                     B{"intermediate_size", c.intermediate_size, 1 << 20},
                     B{"moe_intermediate_size", c.moe_intermediate_size, 1 << 20},
                     B{"num_hidden_layers", c.num_hidden_layers, 4096},
                     B{"num_attention_heads", c.num_attention_heads, 4096}, B{"kv_lora_rank", c.kv_lora_rank, 1 << 16},
                     B{"q_lora_rank", c.q_lora_rank, 1 << 16}, B{"qk_nope_head_dim", c.qk_nope_head_dim, 1 << 14},
                     B{"qk_rope_head_dim", c.qk_rope_head_dim, 1 << 14}, B{"v_head_dim", c.v_head_dim, 1 << 14},
                     B{"n_routed_experts", c.n_routed_experts, 1 << 16}, B{"n_shared_experts", c.n_shared_experts, 1024},
                     B{"num_experts_per_tok", c.num_experts_per_tok, 1 << 16}, B{"n_group", c.n_group, 1 << 16},
                     B{"topk_group", c.topk_group, 1 << 16}, B{"linear_num_heads", c.linear_num_heads, 4096},
                     B{"linear_head_dim", c.linear_head_dim, 1 << 14},
                     B{"linear_conv_kernel_dim", c.linear_conv_kernel_dim, 1024},
                     B{"index_n_heads", c.index_n_heads, 4096}, B{"index_head_dim", c.index_head_dim, 1 << 14},
                     B{"index_topk", c.index_topk, int64_t(1) << 24}, B{"index_kpool", c.index_kpool, 1 << 16},
                     B{"hc_mult", c.hc_mult, 64}}) {
    if (b.v < -1 || b.v > b.hi) {
      return Status::InvalidArgument(std::string("config field '") + b.name + "' = " + std::to_string(b.v) +
                                     " is out of range (at most " + std::to_string(b.hi) + ")");
    }
  }
  return Status();
}

Status ParseCommon(const Fields& f, ModelConfig* c) {
  GYRE_RETURN_IF_ERROR(f.Int({"vocab_size"}, &c->vocab_size));
  GYRE_RETURN_IF_ERROR(f.Int({"hidden_size"}, &c->hidden_size));
  GYRE_RETURN_IF_ERROR(f.Int({"intermediate_size"}, &c->intermediate_size));
  GYRE_RETURN_IF_ERROR(f.Int({"moe_intermediate_size"}, &c->moe_intermediate_size));
  GYRE_RETURN_IF_ERROR(f.Int({"num_hidden_layers"}, &c->num_hidden_layers));
  GYRE_RETURN_IF_ERROR(f.Int({"num_attention_heads"}, &c->num_attention_heads));
  GYRE_RETURN_IF_ERROR(f.Float({"rms_norm_eps"}, &c->rms_norm_eps));
  GYRE_RETURN_IF_ERROR(f.Int({"kv_lora_rank"}, &c->kv_lora_rank));
  GYRE_RETURN_IF_ERROR(f.Int({"qk_nope_head_dim"}, &c->qk_nope_head_dim));
  GYRE_RETURN_IF_ERROR(f.Int({"qk_rope_head_dim"}, &c->qk_rope_head_dim));
  GYRE_RETURN_IF_ERROR(f.Int({"v_head_dim"}, &c->v_head_dim));
  GYRE_RETURN_IF_ERROR(f.Int({"n_routed_experts", "num_local_experts", "num_experts"}, &c->n_routed_experts));
  GYRE_RETURN_IF_ERROR(f.Int({"n_shared_experts", "num_shared_experts"}, &c->n_shared_experts));
  GYRE_RETURN_IF_ERROR(
      f.Int({"num_experts_per_tok", "num_experts_per_token"}, &c->num_experts_per_tok));
  GYRE_RETURN_IF_ERROR(f.Float({"routed_scaling_factor"}, &c->routed_scaling_factor));
  GYRE_RETURN_IF_ERROR(f.Int({"n_group", "num_expert_group"}, &c->n_group));
  GYRE_RETURN_IF_ERROR(f.Int({"topk_group"}, &c->topk_group));
  GYRE_RETURN_IF_ERROR(f.Bool({"norm_topk_prob", "moe_renormalize"}, &c->norm_topk_prob));
  GYRE_RETURN_IF_ERROR(f.Bool({"tie_word_embeddings"}, &c->tie_word_embeddings));
  GYRE_RETURN_IF_ERROR(f.Int({"num_nextn_predict_layers"}, &c->num_nextn_predict_layers));
  GYRE_RETURN_IF_ERROR(f.Int({"max_position_embeddings"}, &c->max_position_embeddings));
  if (c->max_position_embeddings < 0) return Status::InvalidArgument("max_position_embeddings must be >= 0");
  GYRE_RETURN_IF_ERROR(ParseTokenIds(f.Get({"eos_token_id"}), "eos_token_id", &c->eos_token_ids));
  int64_t v = -1;
  GYRE_RETURN_IF_ERROR(f.Int({"bos_token_id"}, &v));
  if (v >= 0) c->bos_token_id = static_cast<int32_t>(v);
  v = -1;
  GYRE_RETURN_IF_ERROR(f.Int({"pad_token_id"}, &v));
  if (v >= 0) c->pad_token_id = static_cast<int32_t>(v);
  if (const json* act = f.Get({"hidden_act"}); act && (!act->is_string() || *act != "silu")) {
    return Status::InvalidArgument("unsupported hidden_act (only \"silu\" is supported)");
  }
  int64_t kv_heads = c->num_attention_heads;
  GYRE_RETURN_IF_ERROR(f.Int({"num_key_value_heads"}, &kv_heads));
  if (kv_heads != c->num_attention_heads) {
    return Status::InvalidArgument("num_attention_heads (" + std::to_string(c->num_attention_heads) +
                                   ") must equal num_key_value_heads (" + std::to_string(kv_heads) + ")");
  }
  return Status();
}

// ---- glm5_next ---------------------------------------------------------------------------------

Status ParseGlm5Text(const json& text, ModelConfig* c) {
  Fields f(text);
  // Defaults of Glm5NextTextConfig.
  c->vocab_size = 154880;
  c->hidden_size = 4096;
  c->intermediate_size = 12288;
  c->moe_intermediate_size = 2048;
  c->num_hidden_layers = 45;
  c->num_attention_heads = 64;
  c->n_shared_experts = 1;
  c->n_routed_experts = 288;
  c->routed_scaling_factor = 2.5f;
  c->kv_lora_rank = 512;
  c->q_lora_rank = 1536;
  c->qk_rope_head_dim = 0;
  c->v_head_dim = 256;
  c->qk_nope_head_dim = 256;
  c->num_experts_per_tok = 8;
  c->pad_token_id = 154820;
  c->swiglu_limit = 10.0f;
  c->index_topk = 2048;
  c->index_head_dim = 128;
  c->index_n_heads = 32;
  c->linear_head_dim = 128;
  c->linear_num_heads = 64;
  c->linear_conv_kernel_dim = 4;
  c->linear_lower_bound = -5.0f;
  c->hc_mult = 4;
  c->hc_eps = 1e-6f;
  c->hc_sinkhorn_iters = 20;
  c->index_kpool = 16;
  c->index_kpool_always_select_tail = true;
  c->kda_beta_bf16 = true;

  GYRE_RETURN_IF_ERROR(ParseCommon(f, c));
  if (f.IsExplicitNull("q_lora_rank")) {
    return Status::InvalidArgument("glm5_next requires q_lora_rank (DSA layers need the q LoRA path)");
  }
  GYRE_RETURN_IF_ERROR(f.Int({"q_lora_rank"}, &c->q_lora_rank));
  float limit = *c->swiglu_limit;
  GYRE_RETURN_IF_ERROR(f.Float({"swiglu_limit"}, &limit));
  c->swiglu_limit = limit;
  GYRE_RETURN_IF_ERROR(f.Int({"index_topk"}, &c->index_topk));
  GYRE_RETURN_IF_ERROR(f.Int({"index_head_dim"}, &c->index_head_dim));
  GYRE_RETURN_IF_ERROR(f.Int({"index_n_heads"}, &c->index_n_heads));
  GYRE_RETURN_IF_ERROR(f.Int({"index_kpool"}, &c->index_kpool));
  GYRE_RETURN_IF_ERROR(f.Bool({"index_kpool_always_select_tail"}, &c->index_kpool_always_select_tail));
  GYRE_RETURN_IF_ERROR(f.Int({"linear_head_dim"}, &c->linear_head_dim));
  GYRE_RETURN_IF_ERROR(f.Int({"linear_num_heads"}, &c->linear_num_heads));
  GYRE_RETURN_IF_ERROR(f.Int({"linear_conv_kernel_dim"}, &c->linear_conv_kernel_dim));
  if (f.IsExplicitNull("linear_lower_bound")) {
    c->linear_lower_bound.reset();
  } else {
    float lb = *c->linear_lower_bound;
    GYRE_RETURN_IF_ERROR(f.Float({"linear_lower_bound"}, &lb));
    c->linear_lower_bound = lb;
  }
  GYRE_RETURN_IF_ERROR(f.Int({"hc_mult"}, &c->hc_mult));
  GYRE_RETURN_IF_ERROR(f.Float({"hc_eps"}, &c->hc_eps));
  GYRE_RETURN_IF_ERROR(f.Int({"hc_sinkhorn_iters"}, &c->hc_sinkhorn_iters));
  c->qa_norm_eps = c->rms_norm_eps;
  c->kva_norm_eps = c->rms_norm_eps;

  // linear_attn_config (Kimi-style dict), applied after the direct fields as transformers does.
  if (const json* la = f.Get({"linear_attn_config"})) {
    if (!la->is_object()) return Status::InvalidArgument("linear_attn_config must be an object");
    Fields lf(*la);
    GYRE_RETURN_IF_ERROR(lf.Int({"head_dim"}, &c->linear_head_dim));
    GYRE_RETURN_IF_ERROR(lf.Int({"num_heads"}, &c->linear_num_heads));
    GYRE_RETURN_IF_ERROR(lf.Int({"short_conv_kernel_size"}, &c->linear_conv_kernel_dim));
    if (lf.IsExplicitNull("gate_lower_bound")) {
      c->linear_lower_bound.reset();
    } else if (lf.Get({"gate_lower_bound"})) {
      float lb = 0;
      GYRE_RETURN_IF_ERROR(lf.Float({"gate_lower_bound"}, &lb));
      c->linear_lower_bound = lb;
    }
    bool safe_gate = true;
    GYRE_RETURN_IF_ERROR(lf.Bool({"safe_gate"}, &safe_gate));
    if (safe_gate && !c->linear_lower_bound) c->linear_lower_bound = -5.0f;
  }

  GYRE_RETURN_IF_ERROR(CheckBounds(*c));
  const int64_t L = c->num_hidden_layers;
  std::vector<std::string> names;
  bool found = false;
  // mlp_layer_types: 3 dense, then sparse.
  GYRE_RETURN_IF_ERROR(f.StringList("mlp_layer_types", &names, &found));
  if (!found) {
    names.clear();
    for (int64_t i = 0; i < L; ++i) names.push_back(i < 3 ? "dense" : "sparse");
  }
  for (const auto& n : names) {
    if (n == "dense") c->mlp_layer_types.push_back(MlpKind::kDense);
    else if (n == "sparse") c->mlp_layer_types.push_back(MlpKind::kMoe);
    else return Status::InvalidArgument("unknown mlp_layer_types entry '" + n + "'");
  }
  // layer_types: DSA iff i % 4 == 3.
  GYRE_RETURN_IF_ERROR(f.StringList("layer_types", &names, &found));
  if (!found) {
    names.clear();
    for (int64_t i = 0; i < L; ++i) names.push_back(i % 4 == 3 ? "deepseek_sparse_attention" : "linear_attention");
  }
  for (const auto& n : names) {
    if (n == "linear_attention") c->layer_types.push_back(AttnKind::kKda);
    else if (n == "deepseek_sparse_attention" || n == "full_attention") c->layer_types.push_back(AttnKind::kDsa);
    else return Status::InvalidArgument("unknown layer_types entry '" + n + "'");
  }
  // indexer_types: explicit list, else index_topk_pattern, else freq/offset schedule.
  GYRE_RETURN_IF_ERROR(f.StringList("indexer_types", &names, &found));
  if (!found) {
    names.clear();
    const json* pattern = f.Get({"index_topk_pattern"});
    if (pattern && pattern->is_string()) {
      for (char ch : pattern->get<std::string>()) {
        if (ch == 'F') names.push_back("full");
        else if (ch == 'S') names.push_back("shared");
        else return Status::InvalidArgument("index_topk_pattern may hold only 'F' and 'S'");
      }
    } else if (pattern) {
      GYRE_RETURN_IF_ERROR(f.StringList("index_topk_pattern", &names, &found));
    } else {
      int64_t freq = 1, offset = 2;
      GYRE_RETURN_IF_ERROR(f.Int({"index_topk_freq"}, &freq));
      GYRE_RETURN_IF_ERROR(f.Int({"index_skip_topk_offset"}, &offset));
      // Bounded so that i - offset + 1 cannot overflow (any |offset| > L gives the same schedule).
      constexpr int64_t kMaxOffset = int64_t{1} << 20;
      if (offset < -kMaxOffset || offset > kMaxOffset) {
        return Status::InvalidArgument("config field 'index_skip_topk_offset' = " + std::to_string(offset) +
                                       " is out of range [-" + std::to_string(kMaxOffset) + ", " +
                                       std::to_string(kMaxOffset) + "]");
      }
      freq = std::max<int64_t>(freq, 1);
      for (int64_t i = 0; i < L; ++i) {
        names.push_back(std::max<int64_t>(i - offset + 1, 0) % freq == 0 ? "full" : "shared");
      }
    }
  }
  for (const auto& n : names) {
    if (n == "full") c->indexer_types.push_back(IndexerKind::kFull);
    else if (n == "shared") c->indexer_types.push_back(IndexerKind::kShared);
    else return Status::InvalidArgument("unknown indexer_types entry '" + n + "'");
  }

  if (c->index_kpool < 1) return Status::InvalidArgument("index_kpool must be positive");
  if (c->index_topk % c->index_kpool != 0) {
    return Status::InvalidArgument("index_topk (" + std::to_string(c->index_topk) +
                                   ") must be divisible by index_kpool (" + std::to_string(c->index_kpool) + ")");
  }
  if (c->qk_rope_head_dim > 0) {
    return Status::InvalidArgument("glm5_next expects NoPE DSA layers, but qk_rope_head_dim = " +
                                   std::to_string(c->qk_rope_head_dim));
  }
  if (c->hc_mult < 1) return Status::InvalidArgument("hc_mult must be >= 1");
  return Status();
}

// ---- kimi_linear -------------------------------------------------------------------------------

Status ParseKimiLinear(const json& j, ModelConfig* c) {
  Fields f(j);
  c->vocab_size = 163840;
  c->hidden_size = 2304;
  c->intermediate_size = 9216;
  c->moe_intermediate_size = 1024;
  c->num_hidden_layers = 27;
  c->num_attention_heads = 32;
  c->n_shared_experts = 1;
  c->routed_scaling_factor = 2.446f;
  c->kv_lora_rank = 512;
  c->q_lora_rank = 0;
  c->qk_rope_head_dim = 64;
  c->v_head_dim = 128;
  c->qk_nope_head_dim = 128;
  c->num_experts_per_tok = 8;
  c->n_routed_experts = 256;
  c->pad_token_id = 163839;
  c->bos_token_id = 163584;
  c->eos_token_ids = {163586};
  c->linear_head_dim = 128;
  c->linear_num_heads = 32;
  c->linear_conv_kernel_dim = 4;
  c->linear_lower_bound.reset();  // softplus gate
  c->kda_beta_bf16 = true;        // transformers native: sigmoid of the model-dtype b_proj output
  c->hc_mult = 0;
  c->swiglu_limit.reset();
  GYRE_RETURN_IF_ERROR(ParseCommon(f, c));
  if (!f.IsExplicitNull("q_lora_rank")) GYRE_RETURN_IF_ERROR(f.Int({"q_lora_rank"}, &c->q_lora_rank));
  // transformers' KimiLinearRMSNorm default eps for q_a/kv_a norms.
  c->qa_norm_eps = 1e-6f;
  c->kva_norm_eps = 1e-6f;
  GYRE_RETURN_IF_ERROR(f.Int({"linear_head_dim"}, &c->linear_head_dim));
  GYRE_RETURN_IF_ERROR(f.Int({"linear_num_heads"}, &c->linear_num_heads));
  GYRE_RETURN_IF_ERROR(f.Int({"linear_conv_kernel_dim"}, &c->linear_conv_kernel_dim));

  GYRE_RETURN_IF_ERROR(CheckBounds(*c));
  const int64_t L = c->num_hidden_layers;
  const json* la = f.Get({"linear_attn_config"});
  if (la && !la->is_object()) return Status::InvalidArgument("linear_attn_config must be an object");
  if (la) {
    Fields lf(*la);
    GYRE_RETURN_IF_ERROR(lf.Int({"head_dim"}, &c->linear_head_dim));
    GYRE_RETURN_IF_ERROR(lf.Int({"num_heads"}, &c->linear_num_heads));
    GYRE_RETURN_IF_ERROR(lf.Int({"short_conv_kernel_size"}, &c->linear_conv_kernel_dim));
  }
  std::vector<std::string> names;
  bool found = false;
  GYRE_RETURN_IF_ERROR(f.StringList("layer_types", &names, &found));
  if (found) {
    for (const auto& n : names) {
      if (n == "linear_attention") c->layer_types.push_back(AttnKind::kKda);
      else if (n == "full_attention") c->layer_types.push_back(AttnKind::kMla);
      else return Status::InvalidArgument("unknown layer_types entry '" + n + "'");
    }
  } else if (la && la->contains("full_attn_layers") && la->contains("kda_layers")) {
    c->layer_types.assign(L, AttnKind::kKda);
    std::vector<bool> set(L, false);
    for (const char* key : {"full_attn_layers", "kda_layers"}) {
      const json& lst = (*la)[key];
      if (!lst.is_array()) return Status::InvalidArgument(std::string("linear_attn_config.") + key + " must be a list");
      for (const auto& e : lst) {
        if (!e.is_number_integer() || e.get<int64_t>() < 1 || e.get<int64_t>() > L) {
          return Status::InvalidArgument(std::string("linear_attn_config.") + key +
                                         " entries must be 1-based layer numbers in [1, num_hidden_layers]");
        }
        int64_t i = e.get<int64_t>() - 1;
        c->layer_types[i] = std::string(key) == "full_attn_layers" ? AttnKind::kMla : AttnKind::kKda;
        set[i] = true;
      }
    }
    for (int64_t i = 0; i < L; ++i) {
      if (!set[i]) return Status::InvalidArgument("layer " + std::to_string(i + 1) +
                                                  " is in neither kda_layers nor full_attn_layers");
    }
  } else {
    for (int64_t i = 0; i < L; ++i) c->layer_types.push_back(i && i % 4 == 0 ? AttnKind::kMla : AttnKind::kKda);
  }
  GYRE_RETURN_IF_ERROR(f.StringList("mlp_layer_types", &names, &found));
  if (found) {
    for (const auto& n : names) {
      if (n == "dense") c->mlp_layer_types.push_back(MlpKind::kDense);
      else if (n == "sparse") c->mlp_layer_types.push_back(MlpKind::kMoe);
      else return Status::InvalidArgument("unknown mlp_layer_types entry '" + n + "'");
    }
  } else {
    int64_t first_dense = 1;
    GYRE_RETURN_IF_ERROR(f.Int({"first_k_dense_replace"}, &first_dense));
    for (int64_t i = 0; i < L; ++i) c->mlp_layer_types.push_back(i < first_dense ? MlpKind::kDense : MlpKind::kMoe);
  }
  c->indexer_types.assign(L, IndexerKind::kFull);
  return Status();
}

Status Validate(const ModelConfig& c) {
  const int64_t L = c.num_hidden_layers;
  auto positive = [](int64_t v, const char* name) -> Status {
    if (v <= 0) return Status::InvalidArgument(std::string(name) + " must be positive");
    return Status();
  };
  GYRE_RETURN_IF_ERROR(positive(c.vocab_size, "vocab_size"));
  GYRE_RETURN_IF_ERROR(positive(c.hidden_size, "hidden_size"));
  GYRE_RETURN_IF_ERROR(positive(L, "num_hidden_layers"));
  if (static_cast<int64_t>(c.layer_types.size()) != L || static_cast<int64_t>(c.mlp_layer_types.size()) != L ||
      static_cast<int64_t>(c.indexer_types.size()) < L) {
    return Status::InvalidArgument("layer_types/mlp_layer_types/indexer_types must have num_hidden_layers (" +
                                   std::to_string(L) + ") entries");
  }
  if (c.NumLayers(AttnKind::kKda) > 0) {
    GYRE_RETURN_IF_ERROR(positive(c.linear_num_heads, "linear_num_heads"));
    GYRE_RETURN_IF_ERROR(positive(c.linear_head_dim, "linear_head_dim"));
    GYRE_RETURN_IF_ERROR(positive(c.linear_conv_kernel_dim, "linear_conv_kernel_dim"));
  }
  if (c.num_nextn_predict_layers < 0 || c.num_nextn_predict_layers > 1) {
    return Status::InvalidArgument("num_nextn_predict_layers = " + std::to_string(c.num_nextn_predict_layers) +
                                   " is not supported (gyre runs 0 or 1 MTP layer)");
  }
  if (c.num_nextn_predict_layers == 1) {  // the MTP layer: MLA attention + dense SwiGLU
    GYRE_RETURN_IF_ERROR(positive(c.num_attention_heads, "num_attention_heads (MTP layer)"));
    GYRE_RETURN_IF_ERROR(positive(c.kv_lora_rank, "kv_lora_rank (MTP layer)"));
    GYRE_RETURN_IF_ERROR(positive(c.intermediate_size, "intermediate_size (MTP layer)"));
  }
  bool any_moe = false;
  for (auto m : c.mlp_layer_types) any_moe |= (m == MlpKind::kMoe);
  if (any_moe) {
    GYRE_RETURN_IF_ERROR(positive(c.n_routed_experts, "n_routed_experts"));
    if (c.num_experts_per_tok <= 0 || c.num_experts_per_tok > c.n_routed_experts) {
      return Status::InvalidArgument("num_experts_per_tok must be in [1, n_routed_experts]");
    }
    if (c.n_group <= 0 || c.n_routed_experts % c.n_group != 0 || c.topk_group <= 0 || c.topk_group > c.n_group) {
      return Status::InvalidArgument("n_group must divide n_routed_experts and topk_group must be in [1, n_group]");
    }
    if (c.n_routed_experts / c.n_group < 2) {
      return Status::InvalidArgument("each expert group needs at least 2 experts (group score = top-2 sum)");
    }
  }
  return Status();
}

// ---- quantization_config -------------------------------------------------------------------------

// The top-level `quantization_config` (docs/quantization.md): absent or null → none.
Status ParseQuantConfig(const json& j, QuantConfig* q) {
  auto it = j.find("quantization_config");
  if (it == j.end() || it->is_null()) return Status();
  if (!it->is_object()) return Status::InvalidArgument("quantization_config must be an object");
  const json& qc = *it;
  auto m = qc.find("quant_method");
  if (m == qc.end() || !m->is_string()) return Status::InvalidArgument("quantization_config has no quant_method");
  q->quant_method = m->get<std::string>();
  if (q->quant_method == "fp8") {
    q->scheme = QuantScheme::kFp8Block;
    auto bs = qc.find("weight_block_size");
    if (bs == qc.end() || bs->is_null()) {
      return Status::Unimplemented("quantization_config: fp8 without weight_block_size (per-tensor FP8) is not supported");
    }
    if (!bs->is_array() || bs->size() != 2 || !(*bs)[0].is_number_integer() || !(*bs)[1].is_number_integer() ||
        (*bs)[0].get<int64_t>() < 1 || (*bs)[1].get<int64_t>() < 1 || (*bs)[0].get<int64_t>() > (1 << 16) ||
        (*bs)[1].get<int64_t>() > (1 << 16)) {
      return Status::InvalidArgument("quantization_config.weight_block_size must be two positive integers");
    }
    q->block_n = (*bs)[0].get<int64_t>();
    q->block_k = (*bs)[1].get<int64_t>();
  } else if (q->quant_method == "gyre-int8") {
    q->scheme = QuantScheme::kInt8Channel;
  } else {
    return Status::Unimplemented("quantization_config.quant_method '" + q->quant_method +
                                 "' is not supported (supported: fp8, gyre-int8)");
  }
  auto act = qc.find("activation_scheme");
  if (act != qc.end() && !act->is_null() && (!act->is_string() || *act != "dynamic")) {
    return Status::Unimplemented("quantization_config.activation_scheme must be \"dynamic\"");
  }
  return Status();
}

}  // namespace

Result<ModelConfig> ParseModelConfig(const std::string& json_text) {
  GYRE_RETURN_IF_ERROR(CheckJsonDepth(json_text, "config.json"));
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("config.json is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return Status::InvalidArgument("config.json must hold a JSON object");
  ModelConfig c;
  auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string()) return Status::InvalidArgument("config.json has no model_type");
  c.model_type_name = mt->get<std::string>();
  try {
    if (c.model_type_name == "glm5_next" || c.model_type_name == "glm5_next_text") {
      c.model_type = ModelType::kGlm5Next;
      auto tc = j.find("text_config");
      if (tc != j.end() && !tc->is_null()) {
        if (!tc->is_object()) return Status::InvalidArgument("text_config must be an object");
        json merged = *tc;
        // Token ids (and the MTP layer count) may live at the top level of the composite config.
        for (const char* k : {"eos_token_id", "bos_token_id", "pad_token_id", "num_nextn_predict_layers"}) {
          if (!merged.contains(k) && j.contains(k)) merged[k] = j[k];
        }
        GYRE_RETURN_IF_ERROR(ParseGlm5Text(merged, &c));
      } else {
        GYRE_RETURN_IF_ERROR(ParseGlm5Text(j, &c));
      }
    } else if (c.model_type_name == "kimi_linear") {
      c.model_type = ModelType::kKimiLinear;
      GYRE_RETURN_IF_ERROR(ParseKimiLinear(j, &c));
    } else {
      return Status::InvalidArgument("unsupported model_type '" + c.model_type_name +
                                     "' (supported: glm5_next, kimi_linear)");
    }
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("config.json: ") + e.what());
  }
  GYRE_RETURN_IF_ERROR(Validate(c));
  GYRE_RETURN_IF_ERROR(ParseQuantConfig(j, &c.quant));
  return c;
}

namespace {
Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

Result<ModelConfig> LoadModelConfig(const std::string& dir) {
  GYRE_ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/config.json"));
  auto cfg = ParseModelConfig(text);
  if (!cfg) return cfg.error().WithContext(dir + "/config.json");
  GYRE_ASSIGN_OR_RETURN(GenerationConfig gen, LoadGenerationConfig(dir));
  for (int32_t id : gen.eos_token_ids) {
    if (std::find(cfg->eos_token_ids.begin(), cfg->eos_token_ids.end(), id) == cfg->eos_token_ids.end()) {
      cfg->eos_token_ids.push_back(id);
    }
  }
  return cfg;
}

Result<GenerationConfig> LoadGenerationConfig(const std::string& dir) {
  GenerationConfig g;
  auto text = ReadFile(dir + "/generation_config.json");
  if (!text) return g;
  GYRE_RETURN_IF_ERROR(CheckJsonDepth(*text, "generation_config.json"));
  try {
    json j = json::parse(*text);
    if (!j.is_object()) return Status::InvalidArgument("generation_config.json must hold an object");
    Fields f(j);
    GYRE_RETURN_IF_ERROR(ParseTokenIds(f.Get({"eos_token_id"}), "eos_token_id", &g.eos_token_ids));
    float v = 0;
    if (f.Get({"temperature"})) {
      GYRE_RETURN_IF_ERROR(f.Float({"temperature"}, &v));
      g.temperature = v;
    }
    if (f.Get({"top_p"})) {
      GYRE_RETURN_IF_ERROR(f.Float({"top_p"}, &v));
      g.top_p = v;
    }
    int64_t i = 0;
    if (f.Get({"top_k"})) {
      GYRE_RETURN_IF_ERROR(f.Int({"top_k"}, &i));
      g.top_k = i;
    }
    if (f.Get({"max_new_tokens"})) {
      GYRE_RETURN_IF_ERROR(f.Int({"max_new_tokens"}, &i));
      g.max_new_tokens = i;
    }
    GYRE_RETURN_IF_ERROR(f.Bool({"do_sample"}, &g.do_sample));
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("generation_config.json: ") + e.what());
  }
  return g;
}

}  // namespace gyre
