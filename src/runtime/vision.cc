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

}  // namespace

// ---- tower -----------------------------------------------------------------------------------

Status VisionForward(const VisionConfig& c, const VisionWeights& w, std::span<const float> pixel_values,
                     std::span<const ImageGrid> grids, std::vector<float>* image_embeds, VisionTrace* trace) {
  const int64_t m = c.spatial_merge_size, D = c.hidden_size, H = c.num_heads, hd = c.head_dim(),
                I = c.intermediate_size, O = c.out_hidden_size, PI = c.projection_intermediate_size;
  if (grids.empty()) return Status::InvalidArgument("vision: no images");
  std::vector<std::pair<int32_t, int32_t>> pos;
  std::vector<int64_t> seg_len;  // one attention segment per temporal slice of every image
  for (const ImageGrid& g : grids) {
    if (g.t <= 0 || g.h <= 0 || g.w <= 0 || g.h % m != 0 || g.w % m != 0) {
      return Status::InvalidArgument("vision: grid [" + std::to_string(g.t) + ", " + std::to_string(g.h) + ", " +
                                     std::to_string(g.w) + "] must be positive with h and w multiples of " +
                                     std::to_string(m));
    }
    auto p = VisionPatchPositions(g, m);
    pos.insert(pos.end(), p.begin(), p.end());
    for (int64_t t = 0; t < g.t; ++t) seg_len.push_back(g.h * g.w);
  }
  const int64_t N = static_cast<int64_t>(pos.size());
  if (static_cast<int64_t>(pixel_values.size()) != N * c.patch_elems()) {
    return Status::InvalidArgument("vision: pixel_values has " + std::to_string(pixel_values.size()) +
                                   " values, the grids need " + std::to_string(N) + " × " +
                                   std::to_string(c.patch_elems()));
  }
  const Numerics f32;

  // Patch embedding: the Conv3d with kernel = stride is a GEMM over the flattened patch rows.
  std::vector<float> x;
  LinearBias(pixel_values.data(), N, w.patch_embed, w.patch_embed_bias, &x);
  if (trace) trace->patch_embed = x;

  std::vector<float> cos, sin;
  ops::VisionRopeTables(pos, hd, c.rope_theta, &cos, &sin);

  std::vector<float> xn(N * D), qkv, q(N * D), k(N * D), v(N * D), attn(N * D), proj, g, u, a(N * I), down;
  for (size_t bi = 0; bi < w.blocks.size(); ++bi) {
    const VisionBlockWeights& B = w.blocks[bi];
    ops::RmsNorm(x.data(), N, D, B.norm1, c.rms_norm_eps, xn.data(), f32);
    LinearBias(xn.data(), N, B.qkv, B.qkv_bias, &qkv);
    for (int64_t r = 0; r < N; ++r) {
      std::copy_n(&qkv[r * 3 * D], D, &q[r * D]);
      std::copy_n(&qkv[r * 3 * D + D], D, &k[r * D]);
      std::copy_n(&qkv[r * 3 * D + 2 * D], D, &v[r * D]);
    }
    ops::RmsNorm(q.data(), N * H, hd, B.q_norm, c.rms_norm_eps, q.data(), f32);
    ops::RmsNorm(k.data(), N * H, hd, B.k_norm, c.rms_norm_eps, k.data(), f32);
    ops::ApplyVisionRope(q.data(), D, N, H, hd, cos, sin);
    ops::ApplyVisionRope(k.data(), D, N, H, hd, cos, sin);
    ops::VisionAttention(q.data(), k.data(), v.data(), D, seg_len, H, hd, attn.data());
    LinearBias(attn.data(), N, B.proj, B.proj_bias, &proj);
    for (int64_t i = 0; i < N * D; ++i) x[i] += proj[i];

    ops::RmsNorm(x.data(), N, D, B.norm2, c.rms_norm_eps, xn.data(), f32);
    LinearBias(xn.data(), N, B.gate, B.gate_bias, &g);
    LinearBias(xn.data(), N, B.up, B.up_bias, &u);
    ops::SwiGlu(g.data(), I, u.data(), I, N, I, c.swiglu_limit, a.data(), f32);
    LinearBias(a.data(), N, B.down, B.down_bias, &down);
    for (int64_t i = 0; i < N * D; ++i) x[i] += down[i];
    if (trace && bi == 0) trace->block0 = x;
  }

  ops::RmsNorm(x.data(), N, D, w.post_norm, c.rms_norm_eps, x.data(), f32);
  if (trace) trace->post_layernorm = x;

  // Downsample: each merge block's m² rows are contiguous, so the Conv2d is a GEMM on [N/m², m²·D].
  const int64_t M = N / (m * m);
  std::vector<float> ds;
  LinearBias(x.data(), M, w.downsample, w.downsample_bias, &ds);
  if (trace) trace->downsample = ds;

  // Merger: proj → LayerNorm → GELU(erf) → clamped SwiGLU.
  std::vector<float> mp(M * O), mn(M * O), mg(M * PI), mu(M * PI), ma(M * PI);
  ops::LinearF32(ds.data(), M, w.merger_proj, mp.data());
  ops::LayerNorm(mp.data(), M, O, w.merger_norm_w, w.merger_norm_b, 1e-5f, mn.data(), f32);
  ops::GeluErf(mn);
  ops::LinearF32(mn.data(), M, w.merger_gate, mg.data());
  ops::LinearF32(mn.data(), M, w.merger_up, mu.data());
  ops::SwiGlu(mg.data(), PI, mu.data(), PI, M, PI, c.swiglu_limit, ma.data(), f32);
  image_embeds->resize(M * O);
  ops::LinearF32(ma.data(), M, w.merger_down, image_embeds->data());
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
