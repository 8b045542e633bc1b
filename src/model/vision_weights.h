// VisionConfig and VisionWeights: the glm5_next vision tower (docs/model-glm5-next.md §1.2, §7),
// read from config.json's `vision_config` (defaults as transformers 5.17) and bound from the
// `model.visual.*` tensors of the checkpoint, converted to fp32 for the CPU backend.
//
// The model's text loader (weights.h) ignores these tensors; BindVisionWeights is separate so a
// text-only deployment never pays for the tower.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/matrix.h"
#include "core/status.h"
#include "model/safetensors.h"

namespace gyre {

struct VisionConfig {
  int64_t depth = 24;
  int64_t hidden_size = 1024;
  int64_t num_heads = 16;
  int64_t intermediate_size = 4096;
  int64_t in_channels = 3;
  int64_t patch_size = 14;
  int64_t temporal_patch_size = 2;
  int64_t spatial_merge_size = 2;
  int64_t out_hidden_size = 1536;
  int64_t projection_intermediate_size = 10240;
  float rms_norm_eps = 1e-5f;
  float swiglu_limit = 10.0f;
  float rope_theta = 10000.0f;
  bool attention_bias = true;

  // Top-level placeholder ids (Glm5NextConfig).
  int32_t image_token_id = 154854;
  int32_t image_start_token_id = 154830;
  int32_t image_end_token_id = 154831;
  int32_t video_start_token_id = 154832;
  int32_t video_end_token_id = 154833;

  int64_t head_dim() const { return hidden_size / num_heads; }
  // Elements of one flattened patch row of pixel_values: C·T·P·P (1176 for the defaults).
  int64_t patch_elems() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
};

// Parses the top-level config.json text of a glm5_next checkpoint. Returns nullopt (OK) when the
// file has no `vision_config` (text-only checkpoints). Errors: InvalidArgument for malformed JSON,
// wrong field types, hidden_act other than "silu", a rope_type other than "axial", hidden_size not
// divisible by num_heads or a head dim not divisible by 4 (the axial RoPE splits it in quarters).
Result<std::optional<VisionConfig>> ParseVisionConfig(const std::string& json_text);
// Reads `dir`/config.json (NotFound if absent) and parses it.
Result<std::optional<VisionConfig>> LoadVisionConfig(const std::string& dir);

struct VisionBlockWeights {
  std::vector<float> norm1, norm2;        // [D]
  Matrix qkv;                             // [3D, D], rows [q | k | v], heads contiguous in each
  std::vector<float> qkv_bias;            // [3D] (empty without attention_bias)
  std::vector<float> q_norm, k_norm;      // [head_dim]
  Matrix proj;                            // [D, D]
  std::vector<float> proj_bias;           // [D]
  Matrix gate, up, down;                  // [I, D], [I, D], [D, I]
  std::vector<float> gate_bias, up_bias, down_bias;
};

struct VisionWeights {
  Matrix patch_embed;                  // [D, C·T·P·P]: the Conv3d kernel flattened in the patch-row order
  std::vector<float> patch_embed_bias; // [D]
  std::vector<VisionBlockWeights> blocks;
  std::vector<float> post_norm;        // [D]
  Matrix downsample;                   // [O, 4·D]: column (a·2 + b)·D + c holds conv weight [o, c, a, b]
  std::vector<float> downsample_bias;  // [O]
  Matrix merger_proj;                  // [O, O]
  std::vector<float> merger_norm_w, merger_norm_b;  // [O] LayerNorm
  Matrix merger_gate, merger_up, merger_down;       // [PI, O], [PI, O], [O, PI]
  int64_t num_tensors_used = 0;
};

// Binds `model.visual.*` from `files`. Errors name the tensor: NotFound "missing tensor 'X'",
// InvalidArgument for a wrong shape or an unsupported dtype (F32 / BF16 / F16 accepted).
Result<VisionWeights> BindVisionWeights(const VisionConfig& config, const WeightFiles& files);

}  // namespace gyre
