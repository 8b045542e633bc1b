// Vision-tower ops, CPU fp32. Sections: RoPE; attention; GELU.
#include "ops/vision.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

namespace gyre::ops {

// ---- RoPE ------------------------------------------------------------------------------------

void VisionRopeTables(std::span<const std::pair<int32_t, int32_t>> pos, int64_t head_dim, float theta,
                      std::vector<float>* cos, std::vector<float>* sin) {
  const int64_t q = head_dim / 4, spatial = head_dim / 2;
  std::vector<float> inv(q);
  for (int64_t i = 0; i < q; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(spatial);
    inv[i] = 1.0f / std::pow(theta, e);
  }
  const int64_t n = static_cast<int64_t>(pos.size());
  cos->assign(n * head_dim, 0.0f);
  sin->assign(n * head_dim, 0.0f);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < head_dim; ++j) {
      const float coord = static_cast<float>((j / q) % 2 == 0 ? pos[r].first : pos[r].second);
      const float angle = coord * inv[j % q];
      (*cos)[r * head_dim + j] = std::cos(angle);
      (*sin)[r * head_dim + j] = std::sin(angle);
    }
  }
}

void ApplyVisionRope(float* x, int64_t ld, int64_t n, int64_t heads, int64_t head_dim, std::span<const float> cos,
                     std::span<const float> sin) {
  const int64_t half = head_dim / 2;
  std::vector<float> rot(head_dim);
  for (int64_t r = 0; r < n; ++r) {
    const float* c = &cos[r * head_dim];
    const float* s = &sin[r * head_dim];
    for (int64_t h = 0; h < heads; ++h) {
      float* xh = x + r * ld + h * head_dim;
      for (int64_t j = 0; j < head_dim; ++j) rot[j] = j < half ? -xh[j + half] : xh[j - half];
      for (int64_t j = 0; j < head_dim; ++j) xh[j] = xh[j] * c[j] + rot[j] * s[j];
    }
  }
}

// ---- attention -------------------------------------------------------------------------------

namespace {

void SegmentAttention(const float* q, const float* k, const float* v, int64_t ld, int64_t n, int64_t heads,
                      int64_t head_dim, float* out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int64_t D = heads * head_dim;
  std::vector<float> s(n * n);
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t o = h * head_dim;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(n),
                static_cast<int>(head_dim), scale, q + o, static_cast<int>(ld), k + o, static_cast<int>(ld), 0.0f,
                s.data(), static_cast<int>(n));
    for (int64_t i = 0; i < n; ++i) {
      float* row = s.data() + i * n;
      const float mx = *std::max_element(row, row + n);
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        row[j] = std::exp(row[j] - mx);
        sum += row[j];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t j = 0; j < n; ++j) row[j] *= inv;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(head_dim),
                static_cast<int>(n), 1.0f, s.data(), static_cast<int>(n), v + o, static_cast<int>(ld), 0.0f, out + o,
                static_cast<int>(D));
  }
}

}  // namespace

void VisionAttention(const float* q, const float* k, const float* v, int64_t ld, std::span<const int64_t> segments,
                     int64_t heads, int64_t head_dim, float* out) {
  const int64_t D = heads * head_dim;
  int64_t start = 0;
  for (int64_t len : segments) {
    SegmentAttention(q + start * ld, k + start * ld, v + start * ld, ld, len, heads, head_dim, out + start * D);
    start += len;
  }
}

// ---- GELU ------------------------------------------------------------------------------------

void GeluErf(std::span<float> x) {
  for (float& v : x) v = 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
}

}  // namespace gyre::ops
