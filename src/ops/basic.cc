#include "ops/basic.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/quant.h"

namespace gyre::ops {

void LinearF32(const float* x, int64_t n, const Matrix& w, float* y, int64_t ldx) {
  if (n == 0 || w.rows == 0) return;
  if (ldx == 0) ldx = w.cols;
  if (n == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(w.rows), static_cast<int>(w.cols), 1.0f,
                w.data.data(), static_cast<int>(w.cols), x, 1, 0.0f, y, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(w.rows),
              static_cast<int>(w.cols), 1.0f, x, static_cast<int>(ldx), w.data.data(), static_cast<int>(w.cols),
              0.0f, y, static_cast<int>(w.rows));
}

namespace {
// W8A8 (docs/quantization.md). FP8: x quantized per token and block_k group, then the product of
// the dequantized operands by BLAS — GemmFp8BlockRef's sum in another order (fp32 reassociation
// only; ops_test checks it). INT8: GemmInt8Ref, exact int32 sums.
void LinearW8A8(const float* x, int64_t n, const Matrix& w, float* y, int64_t ldx) {
  const QuantizedWeight& qw = *w.quant;
  const int64_t K = w.cols;
  if (qw.scheme == QuantScheme::kInt8Channel) {
    std::vector<int8_t> qa(n * K);
    std::vector<float> sa(n);
    QuantizeActInt8(x, n, K, qa.data(), sa.data(), ldx);
    GemmInt8Ref(qa.data(), sa.data(), n, qw, y);
    return;
  }
  const int64_t ng = qw.num_groups();
  std::vector<uint8_t> qa(n * K);
  std::vector<float> sa(n * ng), xd(n * K);
  QuantizeActFp8(x, n, K, qw.block_k, qa.data(), sa.data(), ldx);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < K; ++j) xd[i * K + j] = F8E4M3ToF32(qa[i * K + j]) * sa[i * ng + j / qw.block_k];
  LinearF32(xd.data(), n, w, y);
}
}  // namespace

void Linear(const float* x, int64_t n, const Matrix& w, float* y, const Numerics& num, int64_t ldx) {
  if (w.quant && n > 0) {
    LinearW8A8(x, n, w, y, ldx);
  } else {
    LinearF32(x, n, w, y, ldx);
  }
  num.Round(std::span<float>(y, static_cast<size_t>(n * w.rows)));
}

void Embedding(std::span<const int32_t> ids, const Matrix& table, float* y) {
  for (size_t i = 0; i < ids.size(); ++i) {
    std::memcpy(y + i * table.cols, table.row(ids[i]), table.cols * sizeof(float));
  }
}

void RmsNorm(const float* x, int64_t n, int64_t d, std::span<const float> w, float eps, float* y,
             const Numerics& num) {
#pragma omp parallel for if (n * d > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x + i * d;
    float* yr = y + i * d;
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(xr[j]) * xr[j];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / d) + eps);
    for (int64_t j = 0; j < d; ++j) {
      float v = num.Round(xr[j] * inv);
      yr[j] = w.empty() ? v : num.Round(w[j] * v);
    }
  }
}

void LayerNorm(const float* x, int64_t n, int64_t d, std::span<const float> w, std::span<const float> b,
               float eps, float* y, const Numerics& num) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x + i * d;
    float* yr = y + i * d;
    double mean = 0;
    for (int64_t j = 0; j < d; ++j) mean += xr[j];
    mean /= d;
    double var = 0;
    for (int64_t j = 0; j < d; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= d;
    const float inv = 1.0f / std::sqrt(static_cast<float>(var) + eps);
    for (int64_t j = 0; j < d; ++j) {
      yr[j] = num.Round((xr[j] - static_cast<float>(mean)) * inv * w[j] + b[j]);
    }
  }
}

void SwiGlu(const float* g, int64_t ldg, const float* u, int64_t ldu, int64_t n, int64_t width, float limit,
            float* a, const Numerics& num) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < width; ++j) {
      float gv = g[i * ldg + j], uv = u[i * ldu + j];
      if (limit > 0) {
        gv = std::min(gv, limit);
        uv = std::clamp(uv, -limit, limit);
      }
      a[i * width + j] = num.Round(num.Round(Silu(gv)) * uv);
    }
  }
}

Diff Compare(std::span<const float> a, std::span<const float> b) {
  Diff d;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    double e = static_cast<double>(a[i]) - b[i];
    if (std::isnan(a[i]) != std::isnan(b[i])) e = INFINITY;
    num += e * e;
    den += static_cast<double>(b[i]) * b[i];
    if (std::fabs(e) > d.max_abs || (std::isinf(e) && d.worst_index < 0)) {
      d.max_abs = std::fabs(e);
      d.worst_index = static_cast<int64_t>(i);
    }
  }
  d.rel_l2 = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
  return d;
}

}  // namespace gyre::ops
