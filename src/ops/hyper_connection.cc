#include "ops/hyper_connection.h"

#include <cmath>
#include <vector>

#include "ops/basic.h"

namespace gyre::ops {

void HcPre(const float* x, int64_t t, const Matrix& fn, std::span<const float> base, std::span<const float> scale,
           const HcParams& p, float* post, float* comb, float* y, const Numerics& num) {
  const int64_t n = p.n, d = p.d, nd = n * d, mix = (2 + n) * n;
  std::vector<float> xn(t * nd), mu(t * mix);
  RmsNorm(x, t, nd, {}, p.norm_eps, xn.data(), Numerics{});  // fp32: the reference upcasts first
  LinearF32(xn.data(), t, fn, mu.data());
  for (int64_t i = 0; i < t; ++i) {
    const float* m = &mu[i * mix];
    float pre[16];
    for (int64_t s = 0; s < n; ++s) {
      pre[s] = Sigmoid(m[s] * scale[0] + base[s]) + p.hc_eps;
      post[i * n + s] = 2.0f * Sigmoid(m[n + s] * scale[1] + base[n + s]);
    }
    float* C = comb + i * n * n;
    for (int64_t r = 0; r < n; ++r) {
      float mx = -INFINITY;
      for (int64_t c = 0; c < n; ++c) {
        C[r * n + c] = m[2 * n + r * n + c] * scale[2] + base[2 * n + r * n + c];
        mx = std::max(mx, C[r * n + c]);
      }
      float den = 0;
      for (int64_t c = 0; c < n; ++c) {
        C[r * n + c] = std::exp(C[r * n + c] - mx);
        den += C[r * n + c];
      }
      for (int64_t c = 0; c < n; ++c) C[r * n + c] = C[r * n + c] / den + p.hc_eps;
    }
    auto col_step = [&] {
      for (int64_t c = 0; c < n; ++c) {
        float sum = 0;
        for (int64_t r = 0; r < n; ++r) sum += C[r * n + c];
        for (int64_t r = 0; r < n; ++r) C[r * n + c] /= (sum + p.hc_eps);
      }
    };
    auto row_step = [&] {
      for (int64_t r = 0; r < n; ++r) {
        float sum = 0;
        for (int64_t c = 0; c < n; ++c) sum += C[r * n + c];
        for (int64_t c = 0; c < n; ++c) C[r * n + c] /= (sum + p.hc_eps);
      }
    };
    col_step();
    for (int64_t it = 0; it < p.sinkhorn_iters - 1; ++it) {
      row_step();
      col_step();
    }
    // Collapse.
    const float* X = x + i * nd;
    for (int64_t c = 0; c < d; ++c) {
      float acc = 0;
      for (int64_t s = 0; s < n; ++s) acc += pre[s] * X[s * d + c];
      y[i * d + c] = num.Round(acc);
    }
  }
}

void HcPost(float* x, int64_t t, const float* a, const float* post, const float* comb, const HcParams& p,
            const Numerics& num) {
  const int64_t n = p.n, d = p.d;
  std::vector<float> out(n * d);
  for (int64_t i = 0; i < t; ++i) {
    float* X = x + i * n * d;
    const float* C = comb + i * n * n;
    for (int64_t s = 0; s < n; ++s) {
      const float ps = num.Round(post[i * n + s]);
      for (int64_t c = 0; c < d; ++c) {
        float mix = 0;
        for (int64_t j = 0; j < n; ++j) mix += num.Round(C[j * n + s]) * X[j * d + c];
        out[s * d + c] = num.Round(num.Round(ps * a[i * d + c]) + num.Round(mix));
      }
    }
    std::copy(out.begin(), out.end(), X);
  }
}

}  // namespace gyre::ops
