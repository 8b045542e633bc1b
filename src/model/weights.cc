// Weight binding. Sections: tensor fetch helpers; per-part binders; BindWeights.
#include "model/weights.h"

#include <cstring>

#include "quant/quant.h"

namespace gyre {

namespace {

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

class Binder {
 public:
  Binder(TensorSource& src, std::string prefix, const BindOptions& o) : src_(src), prefix_(std::move(prefix)), opts_(o) {}

  // Fetches `prefix + name` with exactly `shape`, as fp32. `keep_f32`: never rounded to bf16.
  Status Get(const std::string& name, const std::vector<int64_t>& shape, std::vector<float>* out,
             bool keep_f32 = false, bool absolute = false) {
    const std::string full = absolute ? name : prefix_ + name;
    GYRE_RETURN_IF_ERROR(src_.Fetch(full, shape, keep_f32, out));
    last_quant_ = src_.Quantized(full);
    // A quantized weight keeps its dequantized values exactly: they are what W8A8 multiplies.
    if (opts_.round_to_bf16 && !keep_f32 && !last_quant_) RoundBf16InPlace(*out);
    num_params_ += static_cast<int64_t>(out->size());
    ++num_used_;
    return Status();
  }
  Status Mat(const std::string& name, int64_t rows, int64_t cols, Matrix* m, bool keep_f32 = false) {
    m->rows = rows;
    m->cols = cols;
    GYRE_RETURN_IF_ERROR(Get(name, {rows, cols}, &m->data, keep_f32));
    m->quant = last_quant_;
    return Status();
  }
  // The quantized storage of the tensor the last Get fetched (nullptr when stored unquantized).
  std::shared_ptr<const QuantizedWeight> last_quant() const { return last_quant_; }
  Status Vec(const std::string& name, int64_t n, std::vector<float>* v, bool keep_f32 = false) {
    return Get(name, {n}, v, keep_f32);
  }
  int64_t num_params() const { return num_params_; }
  int64_t num_used() const { return num_used_; }

 private:
  TensorSource& src_;
  std::string prefix_;
  BindOptions opts_;
  int64_t num_params_ = 0, num_used_ = 0;
  std::shared_ptr<const QuantizedWeight> last_quant_;
};

// On-disk FFN naming: glm5_next uses `mlp.` with gate/up/down_proj everywhere; kimi_linear puts
// both the dense MLP and the MoE under `block_sparse_moe.` and names routed experts w1 (gate),
// w3 (up), w2 (down).
std::string FfnPrefix(const ModelConfig& c) {
  return c.model_type == ModelType::kKimiLinear ? "block_sparse_moe." : "mlp.";
}
struct MlpNames {
  const char* gate;
  const char* up;
  const char* down;
};
constexpr MlpNames kProjNames{"gate_proj.weight", "up_proj.weight", "down_proj.weight"};
constexpr MlpNames kKimiExpertNames{"w1.weight", "w3.weight", "w2.weight"};

Status BindHc(Binder& b, const std::string& p, const ModelConfig& c, HcWeights* w) {
  const int64_t n = c.hc_mult, mix = (2 + n) * n;
  GYRE_RETURN_IF_ERROR(b.Mat(p + "_fn", mix, n * c.hidden_size, &w->fn));
  GYRE_RETURN_IF_ERROR(b.Vec(p + "_base", mix, &w->base));
  return b.Vec(p + "_scale", 3, &w->scale);
}

Status BindKda(Binder& b, const std::string& p, const ModelConfig& c, KdaWeights* w) {
  const int64_t D = c.hidden_size, H = c.linear_num_heads, K = c.linear_head_dim, P = H * K,
                W = c.linear_conv_kernel_dim;
  GYRE_RETURN_IF_ERROR(b.Mat(p + "q_proj.weight", P, D, &w->q));
  GYRE_RETURN_IF_ERROR(b.Mat(p + "k_proj.weight", P, D, &w->k));
  GYRE_RETURN_IF_ERROR(b.Mat(p + "v_proj.weight", P, D, &w->v));
  w->conv.rows = 3 * P;
  w->conv.cols = W;
  w->conv.data.clear();
  for (const char* name : {"q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"}) {
    std::vector<float> part;
    GYRE_RETURN_IF_ERROR(b.Get(p + name, {P, 1, W}, &part, /*keep_f32=*/true));
    w->conv.data.insert(w->conv.data.end(), part.begin(), part.end());
  }
  GYRE_RETURN_IF_ERROR(b.Mat(p + "f_a_proj.weight", K, D, &w->f_a));
  GYRE_RETURN_IF_ERROR(b.Mat(p + "f_b_proj.weight", P, K, &w->f_b));
  GYRE_RETURN_IF_ERROR(b.Vec(p + "dt_bias", P, &w->dt_bias, true));
  if (c.model_type == ModelType::kKimiLinear) {
    GYRE_RETURN_IF_ERROR(b.Get(p + "A_log", {1, 1, H, 1}, &w->a_log, true));
  } else {
    GYRE_RETURN_IF_ERROR(b.Vec(p + "A_log", H, &w->a_log, true));
  }
  GYRE_RETURN_IF_ERROR(b.Mat(p + "b_proj.weight", H, D, &w->b));
  GYRE_RETURN_IF_ERROR(b.Mat(p + "g_a_proj.weight", K, D, &w->g_a));
  GYRE_RETURN_IF_ERROR(b.Mat(p + "g_b_proj.weight", P, K, &w->g_b));
  GYRE_RETURN_IF_ERROR(b.Vec(p + "o_norm.weight", K, &w->o_norm));
  return b.Mat(p + "o_proj.weight", D, P, &w->o);
}

Status BindMla(Binder& b, const std::string& p, const ModelConfig& c, bool indexer, MlaWeights* w) {
  const int64_t D = c.hidden_size, H = c.num_attention_heads, qk = c.qk_head_dim();
  if (c.q_lora_rank > 0) {
    GYRE_RETURN_IF_ERROR(b.Mat(p + "q_a_proj.weight", c.q_lora_rank, D, &w->q_a));
    GYRE_RETURN_IF_ERROR(b.Vec(p + "q_a_layernorm.weight", c.q_lora_rank, &w->q_a_norm));
    GYRE_RETURN_IF_ERROR(b.Mat(p + "q_b_proj.weight", H * qk, c.q_lora_rank, &w->q_b));
  } else {
    GYRE_RETURN_IF_ERROR(b.Mat(p + "q_proj.weight", H * qk, D, &w->q_proj));
  }
  GYRE_RETURN_IF_ERROR(b.Mat(p + "kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_head_dim, D, &w->kv_a));
  GYRE_RETURN_IF_ERROR(b.Vec(p + "kv_a_layernorm.weight", c.kv_lora_rank, &w->kv_a_norm));
  GYRE_RETURN_IF_ERROR(
      b.Mat(p + "kv_b_proj.weight", H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank, &w->kv_b));
  GYRE_RETURN_IF_ERROR(b.Mat(p + "o_proj.weight", D, H * c.v_head_dim, &w->o));
  w->has_indexer = indexer;
  if (indexer) {
    const std::string q = p + "indexer.";
    const int64_t Hi = c.index_n_heads, d = c.index_head_dim;
    IndexerWeights& iw = w->indexer;
    GYRE_RETURN_IF_ERROR(b.Mat(q + "wq_b.weight", Hi * d, c.q_lora_rank, &iw.wq_b));
    GYRE_RETURN_IF_ERROR(b.Mat(q + "wk.weight", d, D, &iw.wk));
    GYRE_RETURN_IF_ERROR(b.Vec(q + "k_norm.weight", d, &iw.k_norm_w));
    GYRE_RETURN_IF_ERROR(b.Vec(q + "k_norm.bias", d, &iw.k_norm_b));
    GYRE_RETURN_IF_ERROR(b.Mat(q + "weights_proj.weight", Hi, D, &iw.weights_proj));
    GYRE_RETURN_IF_ERROR(b.Mat(q + "index_kpool_compress_ape", c.index_kpool, d, &iw.ape));
    GYRE_RETURN_IF_ERROR(b.Mat(q + "index_kpool_compress_gate", d, D, &iw.compress_gate));
  }
  return Status();
}

Status BindMlp(Binder& b, const std::string& p, int64_t D, int64_t I, MlpWeights* w,
               const MlpNames& n = kProjNames) {
  GYRE_RETURN_IF_ERROR(b.Mat(p + n.gate, I, D, &w->gate));
  GYRE_RETURN_IF_ERROR(b.Mat(p + n.up, I, D, &w->up));
  return b.Mat(p + n.down, D, I, &w->down);
}

Status BindMoe(Binder& b, const std::string& p, const ModelConfig& c, MoeWeights* w) {
  const int64_t D = c.hidden_size, E = c.n_routed_experts, I = c.moe_intermediate_size;
  GYRE_RETURN_IF_ERROR(b.Mat(p + "gate.weight", E, D, &w->router));
  GYRE_RETURN_IF_ERROR(b.Vec(p + "gate.e_score_correction_bias", E, &w->bias, true));
  w->experts.resize(E);
  for (int64_t e = 0; e < E; ++e) {
    GYRE_RETURN_IF_ERROR(BindMlp(b, p + "experts." + std::to_string(e) + ".", D, I, &w->experts[e],
                                 c.model_type == ModelType::kKimiLinear ? kKimiExpertNames : kProjNames));
  }
  w->has_shared = c.n_shared_experts > 0;
  if (w->has_shared) GYRE_RETURN_IF_ERROR(BindMlp(b, p + "shared_experts.", D, I * c.n_shared_experts, &w->shared));
  return Status();
}

// The MTP layer's tensors (DeepSeek-V3 / GLM-4.5 layout). Its FFN is always `mlp.` gate/up/down.
Status BindMtp(Binder& b, const std::string& p, const ModelConfig& c, MtpWeights* w) {
  const int64_t D = c.hidden_size;
  GYRE_RETURN_IF_ERROR(b.Vec(p + "enorm.weight", D, &w->enorm));
  GYRE_RETURN_IF_ERROR(b.Vec(p + "hnorm.weight", D, &w->hnorm));
  GYRE_RETURN_IF_ERROR(b.Mat(p + "eh_proj.weight", D, 2 * D, &w->eh_proj));
  GYRE_RETURN_IF_ERROR(b.Vec(p + "input_layernorm.weight", D, &w->input_norm));
  GYRE_RETURN_IF_ERROR(b.Vec(p + "post_attention_layernorm.weight", D, &w->post_norm));
  GYRE_RETURN_IF_ERROR(BindMla(b, p + "self_attn.", c, /*indexer=*/false, &w->mla));
  GYRE_RETURN_IF_ERROR(BindMlp(b, p + "mlp.", D, c.intermediate_size, &w->mlp));
  GYRE_RETURN_IF_ERROR(b.Vec(p + "shared_head.norm.weight", D, &w->head_norm));
  return b.Mat(p + "shared_head.head.weight", c.vocab_size, D, &w->head);
}

// ---- sources ---------------------------------------------------------------------------------

class FileSource : public TensorSource {
 public:
  FileSource(const WeightFiles& f, const QuantConfig& q) : files_(f), quant_(q) {}
  Status Fetch(const std::string& full, const std::vector<int64_t>& shape, bool, std::vector<float>* out) override {
    last_.reset();
    const TensorView* t = files_.Find(full);
    if (!t) return Status::NotFound("missing tensor '" + full + "'");
    if (t->shape != shape) {
      return Status::InvalidArgument("tensor '" + full + "': expected shape " + ShapeStr(shape) + ", found " +
                                     ShapeStr(t->shape));
    }
    const bool fp8_blocks = t->dtype == DType::kF8E4M3 && files_.Find(full + "_scale_inv");
    if (fp8_blocks || t->dtype == DType::kI8) {
      GYRE_ASSIGN_OR_RETURN(QuantizedWeight qw, LoadQuantized(full, *t));
      *out = Dequantize(qw);
      last_ = std::make_shared<const QuantizedWeight>(std::move(qw));
      ++num_scales_;
      return Status();
    }
    switch (t->dtype) {
      case DType::kF32: case DType::kBF16: case DType::kF16: case DType::kF8E4M3: case DType::kF8E5M2: break;
      default:
        return Status::InvalidArgument("tensor '" + full + "': unsupported dtype " + std::string(DTypeName(t->dtype)) +
                                       " (expected F32, BF16, F16, F8_E4M3, F8_E5M2, or I8 with a weight_scale)");
    }
    out->resize(t->numel());
    ConvertToF32(t->dtype, t->data, out->size(), out->data());
    return Status();
  }
  std::shared_ptr<const QuantizedWeight> Quantized(const std::string&) override { return last_; }
  // Scale tensors read (one per quantized weight).
  int64_t num_scales() const { return num_scales_; }

 private:
  // An F8_E4M3 weight with `name`_scale_inv [ceil(N/bn), ceil(K/bk)] (bn, bk from the config's
  // weight_block_size, 128 by default), or an I8 weight with `name`_scale [N, 1] or [N].
  Result<QuantizedWeight> LoadQuantized(const std::string& name, const TensorView& t) {
    if (t.shape.size() != 2) return Status::InvalidArgument("quantized tensor '" + name + "' is not 2-D");
    QuantizedWeight qw;
    qw.rows = t.shape[0];
    qw.cols = t.shape[1];
    std::string scale_name;
    std::vector<int64_t> want;
    if (t.dtype == DType::kF8E4M3) {
      qw.scheme = QuantScheme::kFp8Block;
      qw.block_n = quant_.block_n;
      qw.block_k = quant_.block_k;
      scale_name = name + "_scale_inv";
      want = {qw.scale_rows(), qw.scale_cols()};
    } else {
      qw.scheme = QuantScheme::kInt8Channel;
      scale_name = name + "_scale";
      want = {qw.rows, 1};
    }
    const TensorView* s = files_.Find(scale_name);
    if (!s) return Status::NotFound("quantized tensor '" + name + "' has no '" + scale_name + "'");
    const bool shape_ok = s->shape == want || (qw.scheme == QuantScheme::kInt8Channel && s->shape == std::vector{qw.rows});
    if (!shape_ok) {
      return Status::InvalidArgument("tensor '" + scale_name + "': expected shape " + ShapeStr(want) + ", found " +
                                     ShapeStr(s->shape) + " (weight_block_size [" + std::to_string(quant_.block_n) +
                                     ", " + std::to_string(quant_.block_k) + "])");
    }
    if (s->dtype != DType::kF32 && s->dtype != DType::kBF16 && s->dtype != DType::kF16) {
      return Status::InvalidArgument("tensor '" + scale_name + "': scales must be F32, BF16 or F16");
    }
    qw.q.assign(t.data, t.data + t.nbytes);
    qw.scale.resize(s->numel());
    ConvertToF32(s->dtype, s->data, qw.scale.size(), qw.scale.data());
    return qw;
  }

  const WeightFiles& files_;
  QuantConfig quant_;
  std::shared_ptr<const QuantizedWeight> last_;
  int64_t num_scales_ = 0;
};

}  // namespace

std::string WeightPrefix(const ModelConfig& c) {
  return c.model_type == ModelType::kKimiLinear ? "model." : "model.language_model.";
}

Result<ModelWeights> BindWeightsFrom(const ModelConfig& c, TensorSource& src, const std::string& prefix,
                                     const BindOptions& opts) {
  ModelWeights mw;
  mw.prefix = prefix;
  Binder b(src, mw.prefix, opts);
  const int64_t D = c.hidden_size, V = c.vocab_size;
  GYRE_RETURN_IF_ERROR(b.Mat("embed_tokens.weight", V, D, &mw.embed));
  GYRE_RETURN_IF_ERROR(b.Vec("norm.weight", D, &mw.final_norm));
  if (c.tie_word_embeddings) {
    mw.lm_head = mw.embed;
  } else {
    mw.lm_head.rows = V;
    mw.lm_head.cols = D;
    GYRE_RETURN_IF_ERROR(b.Get("lm_head.weight", {V, D}, &mw.lm_head.data, false, /*absolute=*/true));
    mw.lm_head.quant = b.last_quant();
  }
  mw.layers.resize(c.num_hidden_layers);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& L = mw.layers[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    L.attn = c.layer_types[i];
    L.mlp = c.mlp_layer_types[i];
    Status s = b.Vec(p + "input_layernorm.weight", D, &L.input_norm);
    if (s.ok()) s = b.Vec(p + "post_attention_layernorm.weight", D, &L.post_norm);
    if (s.ok() && c.hc_mult > 0) s = BindHc(b, p + "hc_attn", c, &L.attn_hc);
    if (s.ok() && c.hc_mult > 0) s = BindHc(b, p + "hc_ffn", c, &L.ffn_hc);
    if (s.ok()) {
      s = L.attn == AttnKind::kKda
              ? BindKda(b, p + "self_attn.", c, &L.kda)
              : BindMla(b, p + "self_attn.", c,
                        L.attn == AttnKind::kDsa && c.indexer_types[i] == IndexerKind::kFull, &L.mla);
    }
    if (s.ok()) {
      s = L.mlp == MlpKind::kDense ? BindMlp(b, p + FfnPrefix(c), D, c.intermediate_size, &L.dense)
                                   : BindMoe(b, p + FfnPrefix(c), c, &L.moe);
    }
    if (!s.ok()) return s.WithContext("layer " + std::to_string(i) + " (" + AttnKindName(L.attn) + ")");
  }
  if (c.num_nextn_predict_layers == 1) {
    const std::string n = std::to_string(c.num_hidden_layers);
    Status s = BindMtp(b, "layers." + n + ".", c, &mw.mtp);
    if (!s.ok()) return s.WithContext("MTP layer " + n + " (num_nextn_predict_layers = 1)");
    mw.has_mtp = true;
  }
  mw.num_params = b.num_params();
  mw.num_tensors_used = b.num_used();
  return mw;
}

Result<ModelWeights> BindWeights(const ModelConfig& c, const WeightFiles& files, const BindOptions& opts) {
  // Prefix: glm5_next writes model.language_model.*, kimi_linear model.*; accept either.
  std::string prefix;
  for (const char* p : {"model.language_model.", "model."}) {
    if (files.Find(std::string(p) + "embed_tokens.weight")) {
      prefix = p;
      break;
    }
  }
  if (prefix.empty()) return Status::NotFound("missing tensor '" + WeightPrefix(c) + "embed_tokens.weight'");
  FileSource src(files, c.quant);
  GYRE_ASSIGN_OR_RETURN(ModelWeights mw, BindWeightsFrom(c, src, prefix, opts));
  mw.num_tensors_ignored = static_cast<int64_t>(files.Names().size()) - mw.num_tensors_used - src.num_scales();
  return mw;
}

}  // namespace gyre
