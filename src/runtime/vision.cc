// Vision tower, CPU fp32. Sections: positions; tower; merge.
#include "runtime/vision.h"

#include <algorithm>
#include <cmath>

#include "ops/basic.h"
#include "ops/vision.h"

namespace gyre {

// ---- positions ------------------------------------------------------------------------

std::vector<std::pair<int32_t, int32_t>> VisionPatchPositions(const ImageGrid& g, int64_t merge) {
  std::vector<std::pair<int32_t, int32_t>> pos;
  pos.reserve(g.t * g.h * g.w);
  for (int64_t t = 0; t < g.t; ++t) {
    for (int64_t bh = 0; bh < g.h / merge; ++bh) {
      for (int64_t bw = 0; bw < g.w / merge; ++bw) {
        for (int64_t a = 0; a < merge; ++a) {
          for (int64_t b = 0; b < merge; ++b) {
            pos.emplace_back(static_cast<int32_t>(bh * merge + a), static_cast<int32_t>(bw * merge + b));
          }
        }
      }
    }
  }
  return pos;
}

namespace {

void AddBias(float* y, int64_t n, std::span<const float> bias) {
  if (bias.empty()) return;
  const int64_t d = static_cast<int64_t>(bias.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) y[i * d + j] += bias[j];
  }
}

void LinearBias(const float* x, int64_t n, const Matrix& w, std::span<const float> bias, std::vector<float>* y) {
  y->resize(n * w.rows);
  ops::LinearF32(x, n, w, y->data());
  AddBias(y->data(), n, bias);
}

// Per-block scratch, named from the math ([N, width] row-major).
struct BlockScratch {
  std::vector<float> normed;           // RMSNorm1 / RMSNorm2 output [N, D]
  std::vector<float> qkv;              // [N, 3D]
  std::vector<float> q, k, v;          // [N, D] = [N, H, hd]
  std::vector<float> attn, attn_proj;  // [N, D]
  std::vector<float> gate, up, act;    // [N, I]
  std::vector<float> mlp_out;          // [N, D]
};

// One pre-norm block over x [N, D] in place (§7.3). `segments`: the attention segments.
void RunBlock(const VisionConfig& c, const VisionBlockWeights& b, std::span<const float> cos,
              std::span<const float> sin, std::span<const int64_t> segments, std::vector<float>& x,
              BlockScratch& s) {
  const int64_t D = c.hidden_size, H = c.num_heads, hd = c.head_dim(), I = c.intermediate_size;
  const int64_t N = static_cast<int64_t>(x.size()) / D;
  const Numerics f32;
  s.normed.resize(N * D);
  ops::RmsNorm(x.data(), N, D, b.norm1, c.rms_norm_eps, s.normed.data(), f32);
  LinearBias(s.normed.data(), N, b.qkv, b.qkv_bias, &s.qkv);
  s.q.resize(N * D);
  s.k.resize(N * D);
  s.v.resize(N * D);
  for (int64_t r = 0; r < N; ++r) {  // qkv row layout [q | k | v], heads contiguous in each
    std::copy_n(&s.qkv[r * 3 * D], D, &s.q[r * D]);
    std::copy_n(&s.qkv[r * 3 * D + D], D, &s.k[r * D]);
    std::copy_n(&s.qkv[r * 3 * D + 2 * D], D, &s.v[r * D]);
  }
  ops::RmsNorm(s.q.data(), N * H, hd, b.q_norm, c.rms_norm_eps, s.q.data(), f32);
  ops::RmsNorm(s.k.data(), N * H, hd, b.k_norm, c.rms_norm_eps, s.k.data(), f32);
  ops::ApplyVisionRope(s.q.data(), D, N, H, hd, cos, sin);
  ops::ApplyVisionRope(s.k.data(), D, N, H, hd, cos, sin);
  s.attn.resize(N * D);
  ops::VisionAttention(s.q.data(), s.k.data(), s.v.data(), D, segments, H, hd, s.attn.data());
  LinearBias(s.attn.data(), N, b.proj, b.proj_bias, &s.attn_proj);
  for (int64_t i = 0; i < N * D; ++i) x[i] += s.attn_proj[i];

  ops::RmsNorm(x.data(), N, D, b.norm2, c.rms_norm_eps, s.normed.data(), f32);
  LinearBias(s.normed.data(), N, b.gate, b.gate_bias, &s.gate);
  LinearBias(s.normed.data(), N, b.up, b.up_bias, &s.up);
  s.act.resize(N * I);
  ops::SwiGlu(s.gate.data(), I, s.up.data(), I, N, I, c.swiglu_limit, s.act.data(), f32);
  LinearBias(s.act.data(), N, b.down, b.down_bias, &s.mlp_out);
  for (int64_t i = 0; i < N * D; ++i) x[i] += s.mlp_out[i];
}

// Merger over the downsampled rows ds [M, O] (§7.4): proj → LayerNorm → GELU(erf) → clamped
// SwiGLU. Writes out [M, O].
void RunMerger(const VisionConfig& c, const VisionWeights& w, std::span<const float> ds, std::vector<float>* out) {
  const int64_t O = c.out_hidden_size, PI = c.projection_intermediate_size;
  const int64_t M = static_cast<int64_t>(ds.size()) / O;
  const Numerics f32;
  std::vector<float> proj(M * O), normed(M * O), gate(M * PI), up(M * PI), act(M * PI);
  ops::LinearF32(ds.data(), M, w.merger_proj, proj.data());
  ops::LayerNorm(proj.data(), M, O, w.merger_norm_w, w.merger_norm_b, 1e-5f, normed.data(), f32);
  ops::GeluErf(normed);
  ops::LinearF32(normed.data(), M, w.merger_gate, gate.data());
  ops::LinearF32(normed.data(), M, w.merger_up, up.data());
  ops::SwiGlu(gate.data(), PI, up.data(), PI, M, PI, c.swiglu_limit, act.data(), f32);
  out->resize(M * O);
  ops::LinearF32(act.data(), M, w.merger_down, out->data());
}

}  // namespace

// ---- tower -----------------------------------------------------------------------------------

Status PlanVisionInputs(const VisionConfig& c, size_t num_pixel_values, std::span<const ImageGrid> grids,
                        std::vector<std::pair<int32_t, int32_t>>* pos, std::vector<int64_t>* segments) {
  const int64_t m = c.spatial_merge_size;
  if (grids.empty()) return Status::InvalidArgument("vision: no images");
  pos->clear();
  segments->clear();
  for (const ImageGrid& g : grids) {
    if (g.t <= 0 || g.h <= 0 || g.w <= 0 || g.h % m != 0 || g.w % m != 0) {
      return Status::InvalidArgument("vision: grid [" + std::to_string(g.t) + ", " + std::to_string(g.h) + ", " +
                                     std::to_string(g.w) + "] must be positive with h and w multiples of " +
                                     std::to_string(m));
    }
    auto p = VisionPatchPositions(g, m);
    pos->insert(pos->end(), p.begin(), p.end());
    for (int64_t t = 0; t < g.t; ++t) segments->push_back(g.h * g.w);
  }
  const int64_t N = static_cast<int64_t>(pos->size());
  if (static_cast<int64_t>(num_pixel_values) != N * c.patch_elems()) {
    return Status::InvalidArgument("vision: pixel_values has " + std::to_string(num_pixel_values) +
                                   " values, the grids need " + std::to_string(N) + " × " +
                                   std::to_string(c.patch_elems()));
  }
  return Status();
}

Status VisionForward(const VisionConfig& c, const VisionWeights& w, std::span<const float> pixel_values,
                     std::span<const ImageGrid> grids, std::vector<float>* image_embeds, VisionTrace* trace) {
  const int64_t m = c.spatial_merge_size, D = c.hidden_size;
  std::vector<std::pair<int32_t, int32_t>> pos;
  std::vector<int64_t> segments;  // one attention segment per temporal slice of every image
  GYRE_RETURN_IF_ERROR(PlanVisionInputs(c, pixel_values.size(), grids, &pos, &segments));
  const int64_t N = static_cast<int64_t>(pos.size());

  // Patch embedding: the Conv3d with kernel = stride is a GEMM over the flattened patch rows.
  std::vector<float> x;
  LinearBias(pixel_values.data(), N, w.patch_embed, w.patch_embed_bias, &x);
  if (trace) trace->patch_embed = x;

  std::vector<float> cos, sin;
  ops::VisionRopeTables(pos, c.head_dim(), c.rope_theta, &cos, &sin);
  BlockScratch scratch;
  for (size_t i = 0; i < w.blocks.size(); ++i) {
    RunBlock(c, w.blocks[i], cos, sin, segments, x, scratch);
    if (trace && i == 0) trace->block0 = x;
  }
  ops::RmsNorm(x.data(), N, D, w.post_norm, c.rms_norm_eps, x.data(), Numerics{});
  if (trace) trace->post_layernorm = x;

  // Downsample: each merge block's m² rows are contiguous, so the Conv2d is a GEMM on [N/m², m²·D].
  std::vector<float> ds;
  LinearBias(x.data(), N / (m * m), w.downsample, w.downsample_bias, &ds);
  if (trace) trace->downsample = ds;
  RunMerger(c, w, ds, image_embeds);
  return Status();
}

// ---- merge -----------------------------------------------------------------------------------

Status MergeImageEmbeddings(std::span<const int32_t> ids, const VisionConfig& c, std::span<const float> image_embeds,
                            int64_t D, std::span<float> embeds) {
  if (D <= 0 || image_embeds.size() % D != 0 || embeds.size() != ids.size() * D) {
    return Status::InvalidArgument("vision merge: embedding sizes do not match D = " + std::to_string(D));
  }
  const int64_t rows = static_cast<int64_t>(image_embeds.size()) / D;
  std::vector<int64_t> where;
  int64_t video_depth = 0;  // cumsum(video_start) - cumsum(video_end)
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == c.video_start_token_id) ++video_depth;
    if (ids[i] == c.video_end_token_id) --video_depth;
    if (ids[i] == c.image_token_id && video_depth <= 0) where.push_back(static_cast<int64_t>(i));
  }
  if (static_cast<int64_t>(where.size()) != rows) {
    return Status::InvalidArgument("Image features and image tokens do not match: " + std::to_string(where.size()) +
                                   " image tokens, " + std::to_string(rows) + " feature rows");
  }
  for (int64_t r = 0; r < rows; ++r) std::copy_n(&image_embeds[r * D], D, &embeds[where[r] * D]);
  return Status();
}

}  // namespace gyre
