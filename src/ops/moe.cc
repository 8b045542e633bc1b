#include "ops/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "ops/basic.h"

namespace gyre::ops {

void Route(const float* logits, int64_t n, std::span<const float> bias, const RouterParams& p, int32_t* idx,
           float* w) {
  const int64_t E = p.num_experts, per_group = E / p.n_group;
  std::vector<float> s(E), choice(E), gscore(p.n_group);
  std::vector<int64_t> order(std::max(E, p.n_group));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t e = 0; e < E; ++e) {
      s[e] = Sigmoid(logits[i * E + e]);
      choice[e] = s[e] + (bias.empty() ? 0.0f : bias[e]);
    }
    if (p.n_group > 1) {
      for (int64_t gi = 0; gi < p.n_group; ++gi) {
        float a = -std::numeric_limits<float>::infinity(), b = a;
        for (int64_t e = gi * per_group; e < (gi + 1) * per_group; ++e) {
          if (choice[e] > a) {
            b = a;
            a = choice[e];
          } else if (choice[e] > b) {
            b = choice[e];
          }
        }
        gscore[gi] = a + b;
      }
      std::iota(order.begin(), order.begin() + p.n_group, 0);
      std::stable_sort(order.begin(), order.begin() + p.n_group,
                       [&](int64_t a, int64_t b) { return gscore[a] > gscore[b]; });
      std::vector<bool> keep(p.n_group, false);
      for (int64_t k = 0; k < p.topk_group; ++k) keep[order[k]] = true;
      for (int64_t e = 0; e < E; ++e)
        if (!keep[e / per_group]) choice[e] = -std::numeric_limits<float>::infinity();
    }
    std::iota(order.begin(), order.begin() + E, 0);
    std::partial_sort(order.begin(), order.begin() + p.top_k, order.begin() + E, [&](int64_t a, int64_t b) {
      return choice[a] > choice[b] || (choice[a] == choice[b] && a < b);
    });
    float sum = 0;
    for (int64_t k = 0; k < p.top_k; ++k) {
      idx[i * p.top_k + k] = static_cast<int32_t>(order[k]);
      w[i * p.top_k + k] = s[order[k]];
      sum += s[order[k]];
    }
    for (int64_t k = 0; k < p.top_k; ++k) {
      float v = w[i * p.top_k + k];
      if (p.norm_topk_prob) v /= (sum + 1e-20f);
      w[i * p.top_k + k] = v * p.routed_scaling_factor;
    }
  }
}

void MoeExperts(const float* x, int64_t n, const int32_t* idx, const float* w, int64_t top_k, const float* gate_up,
                const float* down, const ExpertDims& d, float swiglu_limit, float* out) {
  const int64_t E = d.num_experts, D = d.hidden, I = d.inter;
  std::vector<std::vector<std::pair<int64_t, float>>> by_expert(E);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t e = idx[t * top_k + j];
      if (e >= 0 && e < E) by_expert[e].push_back({t, w[t * top_k + j]});
    }
  std::fill(out, out + n * D, 0.0f);
  std::vector<float> g, u, a, y;
  for (int64_t e = 0; e < E; ++e) {
    const auto& hits = by_expert[e];
    if (hits.empty()) continue;
    const int64_t m = static_cast<int64_t>(hits.size());
    const float* wg = gate_up + e * 2 * I * D;
    const float* wd = down + e * D * I;
    g.assign(m * I, 0.0f);
    u.assign(m * I, 0.0f);
    a.resize(m * I);
    y.assign(m * D, 0.0f);
    for (int64_t r = 0; r < m; ++r) {
      const float* xr = x + hits[r].first * D;
      for (int64_t i = 0; i < I; ++i) {
        float sg = 0, su = 0;
        for (int64_t k = 0; k < D; ++k) {
          sg += xr[k] * wg[i * D + k];
          su += xr[k] * wg[(I + i) * D + k];
        }
        g[r * I + i] = sg;
        u[r * I + i] = su;
      }
    }
    SwiGlu(g.data(), I, u.data(), I, m, I, swiglu_limit, a.data(), Numerics{});
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t k = 0; k < D; ++k) {
        float s = 0;
        for (int64_t i = 0; i < I; ++i) s += a[r * I + i] * wd[k * I + i];
        y[r * D + k] = s;
      }
      float* dst = out + hits[r].first * D;
      const float wt = hits[r].second;
      for (int64_t k = 0; k < D; ++k) dst[k] += y[r * D + k] * wt;
    }
  }
}

}  // namespace gyre::ops
