#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace gyre::ops {

namespace {
// Multiply-adds below which a loop runs on the calling thread only.
constexpr int64_t kParallelWork = 1 << 20;
}  // namespace

void MlaAttention(const float* q, int64_t s, int64_t pos0, const RowView& latent, const RowView& krot,
                  const Matrix& kv_b, MlaShape sh, const Selection& sel, float* out, const Numerics& num) {
  const int64_t H = sh.num_heads, L = sh.kv_lora, qd = sh.nope + sh.rope, blk = sh.nope + sh.v;
  // NOTE: a parallel region costs tens of µs and, on a loaded 2-core machine, can stall for a
  // scheduler quantum at the join; only fan out when the work is large (see kParallelWork).
  const int64_t work = s * H * L * (pos0 + s + sh.nope + sh.v);
#pragma omp parallel for collapse(2) schedule(dynamic) if (work > kParallelWork)
  for (int64_t i = 0; i < s; ++i) {
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q + (i * H + h) * qd;
      // q_lat[l] = Σ_d q_nope[d] · W_UK[h][d][l]
      std::vector<float> qlat(L, 0.0f), olat(L, 0.0f);
      for (int64_t d = 0; d < sh.nope; ++d) {
        const float* wr = kv_b.row(h * blk + d);
        const float qv = qh[d];
        for (int64_t l = 0; l < L; ++l) qlat[l] += qv * wr[l];
      }
      const int64_t pos = pos0 + i;
      const int32_t* idx = nullptr;
      int64_t n = 0;
      if (sel.causal) {
        n = pos + 1;
      } else {
        idx = sel.indices.data() + sel.offsets[i];
        n = sel.offsets[i + 1] - sel.offsets[i];
      }
      std::vector<float> sc(n);
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t jj = 0; jj < n; ++jj) {
        const int64_t j = idx ? idx[jj] : jj;
        const float* c = latent.Row(j);
        float a = 0;
        for (int64_t l = 0; l < L; ++l) a += qlat[l] * c[l];
        if (sh.rope > 0) {
          const float* kr = krot.Row(j);
          for (int64_t r = 0; r < sh.rope; ++r) a += qh[sh.nope + r] * kr[r];
        }
        sc[jj] = a * sh.scale;
        mx = std::max(mx, sc[jj]);
      }
      float* o = out + (i * H + h) * sh.v;
      if (n == 0) {  // nothing selected (cannot happen for real tokens); output zeros
        for (int64_t x = 0; x < sh.v; ++x) o[x] = 0;
        continue;
      }
      double den = 0;
      for (int64_t jj = 0; jj < n; ++jj) {
        sc[jj] = std::exp(sc[jj] - mx);
        den += sc[jj];
      }
      for (int64_t jj = 0; jj < n; ++jj) {
        const int64_t j = idx ? idx[jj] : jj;
        const float p = static_cast<float>(sc[jj] / den);
        const float* c = latent.Row(j);
        for (int64_t l = 0; l < L; ++l) olat[l] += p * c[l];
      }
      for (int64_t x = 0; x < sh.v; ++x) {
        const float* wr = kv_b.row(h * blk + sh.nope + x);
        float a = 0;
        for (int64_t l = 0; l < L; ++l) a += wr[l] * olat[l];
        o[x] = num.Round(a);
      }
    }
  }
}

void PoolKey(const float* k, const float* gamma, const float* ape, int64_t m, int64_t d, float* out,
             const Numerics& num) {
  for (int64_t c = 0; c < d; ++c) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t r = 0; r < m; ++r) mx = std::max(mx, gamma[r * d + c] + ape[r * d + c]);
    float den = 0;
    float e[64];
    for (int64_t r = 0; r < m; ++r) {
      e[r] = std::exp(gamma[r * d + c] + ape[r * d + c] - mx);
      den += e[r];
    }
    float acc = 0;
    for (int64_t r = 0; r < m; ++r) acc += num.Round(num.Round(e[r] / den) * k[r * d + c]);
    out[c] = num.Round(acc);
  }
}

void IndexerSelect(const float* q_idx, const float* w, int64_t s, int64_t pos0, const float* pool_keys, int64_t p,
                   IndexerShape sh, Selection* sel, std::vector<float>* scores_out) {
  const int64_t Hi = sh.num_heads, d = sh.head_dim, m = sh.kpool;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t budget = sh.topk / m;
  sel->causal = false;
  sel->offsets.assign(s + 1, 0);
  sel->indices.clear();
  if (scores_out) scores_out->assign(s * p, -std::numeric_limits<float>::infinity());
  std::vector<float> score(p);
  std::vector<int64_t> order;
  for (int64_t i = 0; i < s; ++i) {
    const int64_t t = pos0 + i;
    const int64_t ncand = std::min<int64_t>((t + 1) / m, p);
    const float* qi = q_idx + i * Hi * d;
    for (int64_t pp = 0; pp < ncand; ++pp) {
      const float* kp = pool_keys + pp * d;
      float acc = 0;
      for (int64_t h = 0; h < Hi; ++h) {
        float dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += qi[h * d + c] * kp[c];
        acc += w[i * Hi + h] * std::max(dot * scale, 0.0f);
      }
      score[pp] = acc;
      if (scores_out) (*scores_out)[i * p + pp] = acc;
    }
    order.resize(ncand);
    std::iota(order.begin(), order.end(), 0);
    const int64_t take = std::min(budget, ncand);
    if (take < ncand) {
      std::partial_sort(order.begin(), order.begin() + take, order.end(), [&](int64_t a, int64_t b) {
        return score[a] > score[b] || (score[a] == score[b] && a < b);
      });
      order.resize(take);
      std::sort(order.begin(), order.end());
    }
    for (int64_t pp : order)
      for (int64_t r = 0; r < m; ++r) sel->indices.push_back(static_cast<int32_t>(pp * m + r));
    if (sh.tail) {
      const int64_t nvis = t + 1, c = nvis % m;
      for (int64_t r = 0; r < c; ++r) sel->indices.push_back(static_cast<int32_t>(nvis - c + r));
    }
    sel->offsets[i + 1] = static_cast<int64_t>(sel->indices.size());
  }
}

}  // namespace gyre::ops
