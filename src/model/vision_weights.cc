// Vision config parsing and weight binding. Sections: config; weights.
#include "model/vision_weights.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/json_depth.h"

namespace gyre {

using json = nlohmann::json;

namespace {

// ---- config ----------------------------------------------------------------------------------

Status ReadInt(const json& j, const char* name, int64_t* out) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return Status();
  if (!it->is_number_integer()) return Status::InvalidArgument(std::string("vision_config.") + name + " must be an integer");
  *out = it->get<int64_t>();
  return Status();
}

Status ReadFloat(const json& j, const char* name, float* out) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return Status();
  if (!it->is_number()) return Status::InvalidArgument(std::string("vision_config.") + name + " must be a number");
  *out = it->get<float>();
  return Status();
}

Status ReadId(const json& j, const char* name, int32_t* out) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return Status();
  if (!it->is_number_integer()) return Status::InvalidArgument(std::string(name) + " must be an integer");
  *out = it->get<int32_t>();
  return Status();
}

}  // namespace

Result<std::optional<VisionConfig>> ParseVisionConfig(const std::string& json_text) {
  GYRE_RETURN_IF_ERROR(CheckJsonDepth(json_text, "config.json"));
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("config.json is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return Status::InvalidArgument("config.json must hold a JSON object");
  auto vit = j.find("vision_config");
  if (vit == j.end() || vit->is_null()) return std::optional<VisionConfig>();
  if (!vit->is_object()) return Status::InvalidArgument("vision_config must be an object");
  const json& v = *vit;
  VisionConfig c;
  for (auto [name, field] : {std::pair{"depth", &c.depth}, {"hidden_size", &c.hidden_size}, {"num_heads", &c.num_heads},
                             {"intermediate_size", &c.intermediate_size}, {"in_channels", &c.in_channels},
                             {"patch_size", &c.patch_size}, {"temporal_patch_size", &c.temporal_patch_size},
                             {"spatial_merge_size", &c.spatial_merge_size}, {"out_hidden_size", &c.out_hidden_size},
                             {"projection_intermediate_size", &c.projection_intermediate_size}}) {
    GYRE_RETURN_IF_ERROR(ReadInt(v, name, field));
  }
  GYRE_RETURN_IF_ERROR(ReadInt(v, "num_attention_heads", &c.num_heads));  // attribute alias
  GYRE_RETURN_IF_ERROR(ReadFloat(v, "rms_norm_eps", &c.rms_norm_eps));
  GYRE_RETURN_IF_ERROR(ReadFloat(v, "swiglu_limit", &c.swiglu_limit));
  if (auto it = v.find("attention_bias"); it != v.end() && !it->is_null()) {
    if (!it->is_boolean()) return Status::InvalidArgument("vision_config.attention_bias must be a boolean");
    c.attention_bias = it->get<bool>();
  }
  if (auto it = v.find("hidden_act"); it != v.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>() != "silu") {
      return Status::InvalidArgument("vision_config.hidden_act: only \"silu\" is supported, found " + it->dump());
    }
  }
  if (auto it = v.find("rope_parameters"); it != v.end() && it->is_object()) {
    auto rt = it->find("rope_type");
    if (rt != it->end() && !(rt->is_string() && rt->get<std::string>() == "axial")) {
      return Status::InvalidArgument("vision_config.rope_parameters.rope_type: only \"axial\" is supported, found " +
                                     rt->dump());
    }
    GYRE_RETURN_IF_ERROR(ReadFloat(*it, "rope_theta", &c.rope_theta));
  }
  for (auto [name, field] : {std::pair{"image_token_id", &c.image_token_id}, {"image_start_token_id", &c.image_start_token_id},
                             {"image_end_token_id", &c.image_end_token_id}, {"video_start_token_id", &c.video_start_token_id},
                             {"video_end_token_id", &c.video_end_token_id}}) {
    GYRE_RETURN_IF_ERROR(ReadId(j, name, field));
  }
  if (c.depth < 0 || c.hidden_size <= 0 || c.num_heads <= 0 || c.hidden_size % c.num_heads != 0) {
    return Status::InvalidArgument("vision_config: hidden_size " + std::to_string(c.hidden_size) +
                                   " must be a positive multiple of num_heads " + std::to_string(c.num_heads));
  }
  if (c.head_dim() % 4 != 0) {
    return Status::InvalidArgument("vision_config: head dim " + std::to_string(c.head_dim()) +
                                   " must be a multiple of 4 (axial RoPE)");
  }
  for (int64_t x : {c.intermediate_size, c.in_channels, c.patch_size, c.temporal_patch_size, c.spatial_merge_size,
                    c.out_hidden_size, c.projection_intermediate_size}) {
    if (x <= 0) return Status::InvalidArgument("vision_config: sizes must be positive");
  }
  return std::optional<VisionConfig>(c);
}

Result<std::optional<VisionConfig>> LoadVisionConfig(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto c = ParseVisionConfig(ss.str());
  if (!c) return c.error().WithContext(path);
  return c;
}

// ---- weights ---------------------------------------------------------------------------------

namespace {

class VisionBinder {
 public:
  explicit VisionBinder(const WeightFiles& f) : files_(f) {}

  Status Get(const std::string& name, const std::vector<int64_t>& shape, std::vector<float>* out) {
    const std::string full = "model.visual." + name;
    const TensorView* t = files_.Find(full);
    if (!t) return Status::NotFound("missing tensor '" + full + "'");
    if (t->shape != shape) {
      TensorView want;
      want.shape = shape;
      return Status::InvalidArgument("tensor '" + full + "': expected shape " + want.ShapeString() + ", found " +
                                     t->ShapeString());
    }
    if (t->dtype != DType::kF32 && t->dtype != DType::kBF16 && t->dtype != DType::kF16) {
      return Status::InvalidArgument("tensor '" + full + "': unsupported dtype " + std::string(DTypeName(t->dtype)) +
                                     " (expected F32, BF16 or F16)");
    }
    out->resize(t->numel());
    ConvertToF32(t->dtype, t->data, out->size(), out->data());
    ++used_;
    return Status();
  }
  Status Mat(const std::string& name, int64_t rows, int64_t cols, Matrix* m) {
    m->rows = rows;
    m->cols = cols;
    return Get(name, {rows, cols}, &m->data);
  }
  int64_t used() const { return used_; }

 private:
  const WeightFiles& files_;
  int64_t used_ = 0;
};

Status BindBlock(VisionBinder& b, const std::string& p, const VisionConfig& c, VisionBlockWeights* w) {
  const int64_t D = c.hidden_size, I = c.intermediate_size, hd = c.head_dim();
  GYRE_RETURN_IF_ERROR(b.Get(p + "norm1.weight", {D}, &w->norm1));
  GYRE_RETURN_IF_ERROR(b.Get(p + "norm2.weight", {D}, &w->norm2));
  GYRE_RETURN_IF_ERROR(b.Mat(p + "attn.qkv.weight", 3 * D, D, &w->qkv));
  GYRE_RETURN_IF_ERROR(b.Get(p + "attn.q_norm.weight", {hd}, &w->q_norm));
  GYRE_RETURN_IF_ERROR(b.Get(p + "attn.k_norm.weight", {hd}, &w->k_norm));
  GYRE_RETURN_IF_ERROR(b.Mat(p + "attn.proj.weight", D, D, &w->proj));
  GYRE_RETURN_IF_ERROR(b.Mat(p + "mlp.gate_proj.weight", I, D, &w->gate));
  GYRE_RETURN_IF_ERROR(b.Mat(p + "mlp.up_proj.weight", I, D, &w->up));
  GYRE_RETURN_IF_ERROR(b.Mat(p + "mlp.down_proj.weight", D, I, &w->down));
  if (c.attention_bias) {  // the block MLP's biases follow attention_bias too
    GYRE_RETURN_IF_ERROR(b.Get(p + "attn.qkv.bias", {3 * D}, &w->qkv_bias));
    GYRE_RETURN_IF_ERROR(b.Get(p + "attn.proj.bias", {D}, &w->proj_bias));
    GYRE_RETURN_IF_ERROR(b.Get(p + "mlp.gate_proj.bias", {I}, &w->gate_bias));
    GYRE_RETURN_IF_ERROR(b.Get(p + "mlp.up_proj.bias", {I}, &w->up_bias));
    GYRE_RETURN_IF_ERROR(b.Get(p + "mlp.down_proj.bias", {D}, &w->down_bias));
  }
  return Status();
}

}  // namespace

Result<VisionWeights> BindVisionWeights(const VisionConfig& c, const WeightFiles& files) {
  VisionBinder b(files);
  VisionWeights w;
  const int64_t D = c.hidden_size, O = c.out_hidden_size, PI = c.projection_intermediate_size,
                m = c.spatial_merge_size;
  GYRE_RETURN_IF_ERROR(b.Get("patch_embed.proj.weight",
                             {D, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size},
                             &w.patch_embed.data));
  w.patch_embed.rows = D;
  w.patch_embed.cols = c.patch_elems();
  GYRE_RETURN_IF_ERROR(b.Get("patch_embed.proj.bias", {D}, &w.patch_embed_bias));
  w.blocks.resize(c.depth);
  for (int64_t i = 0; i < c.depth; ++i) {
    GYRE_RETURN_IF_ERROR(BindBlock(b, "blocks." + std::to_string(i) + ".", c, &w.blocks[i]));
  }
  GYRE_RETURN_IF_ERROR(b.Get("post_layernorm.weight", {D}, &w.post_norm));
  // Conv2d [O, D, m, m] → [O, m·m·D]: the m·m patch rows of one merge block are contiguous in the
  // tower's block-major order, so the conv is a Linear over [N/(m·m), m·m·D].
  std::vector<float> conv;
  GYRE_RETURN_IF_ERROR(b.Get("downsample.weight", {O, D, m, m}, &conv));
  w.downsample.rows = O;
  w.downsample.cols = m * m * D;
  w.downsample.data.resize(O * m * m * D);
  for (int64_t o = 0; o < O; ++o) {
    for (int64_t ch = 0; ch < D; ++ch) {
      for (int64_t s = 0; s < m * m; ++s) w.downsample.data[(o * m * m + s) * D + ch] = conv[(o * D + ch) * m * m + s];
    }
  }
  GYRE_RETURN_IF_ERROR(b.Get("downsample.bias", {O}, &w.downsample_bias));
  GYRE_RETURN_IF_ERROR(b.Mat("merger.proj.weight", O, O, &w.merger_proj));
  GYRE_RETURN_IF_ERROR(b.Get("merger.post_projection_norm.weight", {O}, &w.merger_norm_w));
  GYRE_RETURN_IF_ERROR(b.Get("merger.post_projection_norm.bias", {O}, &w.merger_norm_b));
  GYRE_RETURN_IF_ERROR(b.Mat("merger.gate_proj.weight", PI, O, &w.merger_gate));
  GYRE_RETURN_IF_ERROR(b.Mat("merger.up_proj.weight", PI, O, &w.merger_up));
  GYRE_RETURN_IF_ERROR(b.Mat("merger.down_proj.weight", O, PI, &w.merger_down));
  w.num_tensors_used = b.used();
  return w;
}

}  // namespace gyre
