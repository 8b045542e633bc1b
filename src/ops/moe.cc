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

}  // namespace gyre::ops
