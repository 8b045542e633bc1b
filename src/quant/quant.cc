// Quantization formats and reference GEMMs. Sections: scheme names; weights; activations; GEMMs.
#include "quant/quant.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/dtype.h"
#include "quant/fp8.h"

namespace gyre {

// ---- scheme names --------------------------------------------------------------------------------

const char* QuantSchemeName(QuantScheme s) {
  switch (s) {
    case QuantScheme::kNone: return "none";
    case QuantScheme::kFp8Block: return "fp8-block";
    case QuantScheme::kInt8Channel: return "int8";
  }
  return "?";
}

namespace {

// NOTE: DeepGEMM's reference casts clamp amax at 1e-4 so an all-zero block gets a usable scale;
// gyre does the same for fp8. INT8 uses a smaller floor (its step is amax/127, not a float grid).
constexpr float kFp8AmaxFloor = 1e-4f;
constexpr float kInt8AmaxFloor = 1e-8f;

const std::array<float, 256>& F8Table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> r{};
    for (int i = 0; i < 256; ++i) r[i] = F8E4M3ToF32(static_cast<uint8_t>(i));
    return r;
  }();
  return t;
}

int8_t RoundInt8(float v) {
  const float r = std::nearbyint(v);  // half to even
  return static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
}

}  // namespace

// ---- weights -------------------------------------------------------------------------------------

int64_t QuantizedWeight::scale_rows() const {
  return scheme == QuantScheme::kFp8Block ? (rows + block_n - 1) / block_n : rows;
}
int64_t QuantizedWeight::scale_cols() const {
  return scheme == QuantScheme::kFp8Block ? (cols + block_k - 1) / block_k : 1;
}

QuantizedWeight QuantizeFp8Block(const float* w, int64_t rows, int64_t cols, int64_t bn, int64_t bk) {
  QuantizedWeight r;
  r.scheme = QuantScheme::kFp8Block;
  r.rows = rows;
  r.cols = cols;
  r.block_n = bn;
  r.block_k = bk;
  r.q.resize(rows * cols);
  const int64_t sr = r.scale_rows(), sc = r.scale_cols();
  r.scale.resize(sr * sc);
#pragma omp parallel for collapse(2) if (rows * cols > 65536)
  for (int64_t bi = 0; bi < sr; ++bi) {
    for (int64_t bj = 0; bj < sc; ++bj) {
      const int64_t r0 = bi * bn, r1 = std::min(rows, r0 + bn), c0 = bj * bk, c1 = std::min(cols, c0 + bk);
      float amax = 0;
      for (int64_t i = r0; i < r1; ++i)
        for (int64_t j = c0; j < c1; ++j) amax = std::max(amax, std::fabs(w[i * cols + j]));
      const float s = std::max(amax, kFp8AmaxFloor) / kF8E4M3Max;
      r.scale[bi * sc + bj] = s;
      for (int64_t i = r0; i < r1; ++i)
        for (int64_t j = c0; j < c1; ++j) r.q[i * cols + j] = F32ToF8E4M3(w[i * cols + j] / s);
    }
  }
  return r;
}

QuantizedWeight QuantizeInt8Channel(const float* w, int64_t rows, int64_t cols) {
  QuantizedWeight r;
  r.scheme = QuantScheme::kInt8Channel;
  r.rows = rows;
  r.cols = cols;
  r.q.resize(rows * cols);
  r.scale.resize(rows);
  auto* q = reinterpret_cast<int8_t*>(r.q.data());
  QuantizeActInt8(w, rows, cols, q, r.scale.data());
  return r;
}

std::vector<float> Dequantize(const QuantizedWeight& w) {
  std::vector<float> out(w.rows * w.cols);
  const auto& t = F8Table();
  const int64_t sc = w.scale_cols();
#pragma omp parallel for if (w.rows * w.cols > 65536)
  for (int64_t i = 0; i < w.rows; ++i) {
    for (int64_t j = 0; j < w.cols; ++j) {
      const uint8_t b = w.q[i * w.cols + j];
      out[i * w.cols + j] = w.scheme == QuantScheme::kFp8Block
                                ? t[b] * w.scale[(i / w.block_n) * sc + j / w.block_k]
                                : static_cast<float>(static_cast<int8_t>(b)) * w.scale[i];
    }
  }
  return out;
}

Matrix DequantizedMatrix(const QuantizedWeight& w) {
  Matrix m;
  m.rows = w.rows;
  m.cols = w.cols;
  m.data = Dequantize(w);
  return m;
}

std::vector<float> ScalesPerRow(const QuantizedWeight& w) {
  if (w.scheme != QuantScheme::kFp8Block) return w.scale;
  const int64_t sc = w.scale_cols();
  std::vector<float> out(w.rows * sc);
  for (int64_t i = 0; i < w.rows; ++i)
    std::copy_n(w.scale.begin() + (i / w.block_n) * sc, sc, out.begin() + i * sc);
  return out;
}

// ---- activations ---------------------------------------------------------------------------------

void QuantizeActFp8(const float* x, int64_t n, int64_t k, int64_t group, uint8_t* q, float* s, int64_t ldx) {
  if (ldx == 0) ldx = k;
  const int64_t ng = (k + group - 1) / group;
#pragma omp parallel for if (n * k > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x + i * ldx;
    for (int64_t g = 0; g < ng; ++g) {
      const int64_t c0 = g * group, c1 = std::min(k, c0 + group);
      float amax = 0;
      for (int64_t j = c0; j < c1; ++j) amax = std::max(amax, std::fabs(xr[j]));
      const float sg = std::max(amax, kFp8AmaxFloor) / kF8E4M3Max;
      s[i * ng + g] = sg;
      for (int64_t j = c0; j < c1; ++j) q[i * k + j] = F32ToF8E4M3(xr[j] / sg);
    }
  }
}

void QuantizeActInt8(const float* x, int64_t n, int64_t k, int8_t* q, float* s, int64_t ldx) {
  if (ldx == 0) ldx = k;
#pragma omp parallel for if (n * k > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x + i * ldx;
    float amax = 0;
    for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(xr[j]));
    const float si = std::max(amax, kInt8AmaxFloor) / 127.0f;
    s[i] = si;
    for (int64_t j = 0; j < k; ++j) q[i * k + j] = RoundInt8(xr[j] / si);
  }
}

// ---- GEMMs ---------------------------------------------------------------------------------------

void GemmFp8BlockRef(const uint8_t* qa, const float* sa, int64_t m, const QuantizedWeight& w, float* y) {
  const auto& t = F8Table();
  const int64_t N = w.rows, K = w.cols, ng = w.num_groups(), sc = w.scale_cols();
#pragma omp parallel for collapse(2) if (m * N * K > 262144)
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t n = 0; n < N; ++n) {
      const uint8_t* a = qa + i * K;
      const uint8_t* b = w.q.data() + n * K;
      float acc = 0;
      for (int64_t g = 0; g < ng; ++g) {
        const int64_t c0 = g * w.block_k, c1 = std::min(K, c0 + w.block_k);
        float part = 0;
        for (int64_t j = c0; j < c1; ++j) part += t[a[j]] * t[b[j]];
        acc += part * sa[i * ng + g] * w.scale[(n / w.block_n) * sc + g];
      }
      y[i * N + n] = acc;
    }
  }
}

void GemmInt8Ref(const int8_t* qa, const float* sa, int64_t m, const QuantizedWeight& w, float* y) {
  const int64_t N = w.rows, K = w.cols;
  const auto* wq = reinterpret_cast<const int8_t*>(w.q.data());
#pragma omp parallel for collapse(2) if (m * N * K > 262144)
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t n = 0; n < N; ++n) {
      const int8_t* a = qa + i * K;
      const int8_t* b = wq + n * K;
      int32_t acc = 0;
      for (int64_t j = 0; j < K; ++j) acc += static_cast<int32_t>(a[j]) * static_cast<int32_t>(b[j]);
      y[i * N + n] = static_cast<float>(acc) * sa[i] * w.scale[n];
    }
  }
}

}  // namespace gyre
