// A vision tower of random weights for tests and benchmarks (test_vision_gpu, gyre_vision_bench):
// matrices normal / sqrt(fan-in), so activations keep their scale through the blocks; norm weights
// 1 + norm_sd·normal, biases bias_sd·normal. Deterministic for a seed.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "model/vision_weights.h"

namespace gyre {

inline VisionWeights RandomVisionWeights(const VisionConfig& c, uint32_t seed, float norm_sd = 0.1f,
                                         float bias_sd = 0.1f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto mat = [&](int64_t rows, int64_t cols) {
    Matrix m;
    m.rows = rows;
    m.cols = cols;
    m.data.resize(static_cast<size_t>(rows * cols));
    const float s = 1.0f / std::sqrt(static_cast<float>(cols));
    for (float& x : m.data) x = s * nd(rng);
    return m;
  };
  auto vec = [&](int64_t n, float mean, float sd) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = mean + sd * nd(rng);
    return v;
  };
  const int64_t D = c.hidden_size, I = c.intermediate_size, O = c.out_hidden_size, PI = c.projection_intermediate_size;
  const int64_t hd = c.head_dim(), m2 = c.spatial_merge_size * c.spatial_merge_size;
  VisionWeights w;
  w.patch_embed = mat(D, c.patch_elems());
  w.patch_embed_bias = vec(D, 0, bias_sd);
  for (int64_t l = 0; l < c.depth; ++l) {
    VisionBlockWeights b;
    b.norm1 = vec(D, 1, norm_sd);
    b.norm2 = vec(D, 1, norm_sd);
    b.qkv = mat(3 * D, D);
    b.qkv_bias = vec(3 * D, 0, bias_sd);
    b.q_norm = vec(hd, 1, norm_sd);
    b.k_norm = vec(hd, 1, norm_sd);
    b.proj = mat(D, D);
    b.proj_bias = vec(D, 0, bias_sd);
    b.gate = mat(I, D);
    b.up = mat(I, D);
    b.down = mat(D, I);
    b.gate_bias = vec(I, 0, bias_sd);
    b.up_bias = vec(I, 0, bias_sd);
    b.down_bias = vec(D, 0, bias_sd);
    w.blocks.push_back(std::move(b));
  }
  w.post_norm = vec(D, 1, norm_sd);
  w.downsample = mat(O, m2 * D);
  w.downsample_bias = vec(O, 0, bias_sd);
  w.merger_proj = mat(O, O);
  w.merger_norm_w = vec(O, 1, norm_sd);
  w.merger_norm_b = vec(O, 0, bias_sd);
  w.merger_gate = mat(PI, O);
  w.merger_up = mat(PI, O);
  w.merger_down = mat(O, PI);
  return w;
}

}  // namespace gyre
