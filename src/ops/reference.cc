#include "ops/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace gyre::ops::ref {

namespace {
double Sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

Vec Linear(const std::vector<float>& x, int64_t n, const std::vector<float>& w, int64_t out, int64_t in) {
  Vec y(n * out, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double a = 0;
      for (int64_t j = 0; j < in; ++j) a += static_cast<double>(x[i * in + j]) * w[o * in + j];
      y[i * out + o] = a;
    }
  return y;
}

Vec RmsNorm(const std::vector<float>& x, int64_t n, int64_t d, const std::vector<float>& w, double eps) {
  Vec y(n * d);
  for (int64_t i = 0; i < n; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(x[i * d + j]) * x[i * d + j];
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = x[i * d + j] * inv * (w.empty() ? 1.0 : w[j]);
  }
  return y;
}

Vec SwiGlu(const std::vector<float>& g, const std::vector<float>& u, double limit) {
  Vec a(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    double gv = g[i], uv = u[i];
    if (limit > 0) {
      gv = std::min(gv, limit);
      uv = std::clamp(uv, -limit, limit);
    }
    a[i] = gv * Sig(gv) * uv;
  }
  return a;
}

Vec Conv(const std::vector<float>& x, int64_t t, int64_t ch, const std::vector<float>& w, int64_t width,
         const std::vector<float>& history) {
  const int64_t h = width - 1;
  auto in = [&](int64_t pos, int64_t c) -> double {  // pos in [-h, t)
    return pos >= 0 ? x[pos * ch + c] : history[(h + pos) * ch + c];
  };
  Vec y(t * ch);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t c = 0; c < ch; ++c) {
      double a = 0;
      for (int64_t j = 0; j < width; ++j) a += w[c * width + j] * in(i - h + j, c);
      y[i * ch + c] = a * Sig(a);
    }
  return y;
}

Vec Gate(const std::vector<float>& f, int64_t t, int64_t h, int64_t k, const std::vector<float>& dt_bias,
         const std::vector<float>& a_log, std::optional<double> lb) {
  Vec g(t * h * k);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t d = 0; d < k; ++d) {
        const int64_t c = hh * k + d;
        const double z = static_cast<double>(f[i * h * k + c]) + dt_bias[c], a = std::exp(static_cast<double>(a_log[hh]));
        g[i * h * k + c] = lb ? *lb * Sig(a * z) : -a * (z > 20 ? z : std::log(1 + std::exp(z)));
      }
  return g;
}

Vec Kda(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
        const std::vector<float>& g, const std::vector<float>& beta, int64_t t, int64_t h, int64_t dk, Vec* S) {
  Vec o(t * h * dk, 0.0);
  for (int64_t hh = 0; hh < h; ++hh) {
    double* St = S->data() + hh * dk * dk;
    for (int64_t i = 0; i < t; ++i) {
      const int64_t base = (i * h + hh) * dk;
      double qn = 0, kn = 0;
      for (int64_t d = 0; d < dk; ++d) {
        qn += static_cast<double>(q[base + d]) * q[base + d];
        kn += static_cast<double>(k[base + d]) * k[base + d];
      }
      const double qs = 1.0 / std::sqrt(qn + 1e-6) / std::sqrt(static_cast<double>(dk)), ks = 1.0 / std::sqrt(kn + 1e-6);
      for (int64_t a = 0; a < dk; ++a)
        for (int64_t b = 0; b < dk; ++b) St[a * dk + b] *= std::exp(static_cast<double>(g[base + a]));
      for (int64_t b = 0; b < dk; ++b) {
        double u = 0;
        for (int64_t a = 0; a < dk; ++a) u += St[a * dk + b] * k[base + a] * ks;
        const double delta = beta[i * h + hh] * (v[base + b] - u);
        for (int64_t a = 0; a < dk; ++a) St[a * dk + b] += k[base + a] * ks * delta;
      }
      for (int64_t b = 0; b < dk; ++b) {
        double acc = 0;
        for (int64_t a = 0; a < dk; ++a) acc += St[a * dk + b] * q[base + a] * qs;
        o[base + b] = acc;
      }
    }
  }
  return o;
}

Vec GatedNorm(const std::vector<float>& o, const std::vector<float>& z, int64_t rows, int64_t v,
              const std::vector<float>& w, double eps) {
  Vec y(rows * v);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t x = 0; x < v; ++x) ss += static_cast<double>(o[r * v + x]) * o[r * v + x];
    const double inv = 1.0 / std::sqrt(ss / v + eps);
    for (int64_t x = 0; x < v; ++x) y[r * v + x] = w[x] * o[r * v + x] * inv * Sig(z[r * v + x]);
  }
  return y;
}

Vec HcPre(const std::vector<float>& x, int64_t t, int64_t n, int64_t d, const std::vector<float>& fn,
          const std::vector<float>& base, const std::vector<float>& scale, double norm_eps, double hc_eps, int iters) {
  Vec post(t * n), comb(t * n * n), y(t * d);
  const int64_t nd = n * d, mix = (2 + n) * n;
  for (int64_t i = 0; i < t; ++i) {
    const float* X = &x[i * nd];
    double ss = 0;
    for (int64_t j = 0; j < nd; ++j) ss += static_cast<double>(X[j]) * X[j];
    const double inv = 1.0 / std::sqrt(ss / nd + norm_eps);
    std::vector<double> mu(mix, 0.0);
    for (int64_t m = 0; m < mix; ++m)
      for (int64_t j = 0; j < nd; ++j) mu[m] += fn[m * nd + j] * X[j] * inv;
    std::vector<double> pre(n);
    for (int64_t s = 0; s < n; ++s) {
      pre[s] = Sig(scale[0] * mu[s] + base[s]) + hc_eps;
      post[i * n + s] = 2 * Sig(scale[1] * mu[n + s] + base[n + s]);
    }
    std::vector<double> C(n * n);
    for (int64_t r = 0; r < n; ++r) {
      double mx = -1e300, den = 0;
      for (int64_t c = 0; c < n; ++c) mx = std::max(mx, scale[2] * mu[2 * n + r * n + c] + base[2 * n + r * n + c]);
      for (int64_t c = 0; c < n; ++c) den += std::exp(scale[2] * mu[2 * n + r * n + c] + base[2 * n + r * n + c] - mx);
      for (int64_t c = 0; c < n; ++c)
        C[r * n + c] = std::exp(scale[2] * mu[2 * n + r * n + c] + base[2 * n + r * n + c] - mx) / den + hc_eps;
    }
    auto col = [&] {
      for (int64_t c = 0; c < n; ++c) {
        double s = 0;
        for (int64_t r = 0; r < n; ++r) s += C[r * n + c];
        for (int64_t r = 0; r < n; ++r) C[r * n + c] /= (s + hc_eps);
      }
    };
    auto row = [&] {
      for (int64_t r = 0; r < n; ++r) {
        double s = 0;
        for (int64_t c = 0; c < n; ++c) s += C[r * n + c];
        for (int64_t c = 0; c < n; ++c) C[r * n + c] /= (s + hc_eps);
      }
    };
    col();
    for (int it = 1; it < iters; ++it) {
      row();
      col();
    }
    for (int64_t j = 0; j < n * n; ++j) comb[i * n * n + j] = C[j];
    for (int64_t c = 0; c < d; ++c) {
      double a = 0;
      for (int64_t s = 0; s < n; ++s) a += pre[s] * X[s * d + c];
      y[i * d + c] = a;
    }
  }
  Vec out;
  out.insert(out.end(), post.begin(), post.end());
  out.insert(out.end(), comb.begin(), comb.end());
  out.insert(out.end(), y.begin(), y.end());
  return out;
}

Vec Mla(const std::vector<float>& q, int64_t s, const std::vector<float>& latent, const std::vector<float>& krot,
        const std::vector<float>& kv_b, int64_t H, int64_t nope, int64_t rope, int64_t vdim, int64_t L, double scale,
        const std::vector<std::vector<int32_t>>& sel) {
  const int64_t qd = nope + rope, blk = nope + vdim;
  Vec out(s * H * vdim, 0.0);
  for (int64_t i = 0; i < s; ++i)
    for (int64_t h = 0; h < H; ++h) {
      const auto& keys = sel[i];
      if (keys.empty()) continue;
      std::vector<double> sc;
      for (int32_t j : keys) {
        double a = 0;
        for (int64_t d = 0; d < nope; ++d) {
          double kk = 0;  // expanded k_nope[h][d] of token j
          for (int64_t l = 0; l < L; ++l) kk += static_cast<double>(kv_b[(h * blk + d) * L + l]) * latent[j * L + l];
          a += q[(i * H + h) * qd + d] * kk;
        }
        for (int64_t r = 0; r < rope; ++r) a += static_cast<double>(q[(i * H + h) * qd + nope + r]) * krot[j * rope + r];
        sc.push_back(a * scale);
      }
      const double mx = *std::max_element(sc.begin(), sc.end());
      double den = 0;
      for (double& x : sc) den += (x = std::exp(x - mx));
      for (int64_t x = 0; x < vdim; ++x) {
        double acc = 0;
        for (size_t jj = 0; jj < keys.size(); ++jj) {
          double vv = 0;
          for (int64_t l = 0; l < L; ++l)
            vv += static_cast<double>(kv_b[(h * blk + nope + x) * L + l]) * latent[keys[jj] * L + l];
          acc += sc[jj] / den * vv;
        }
        out[(i * H + h) * vdim + x] = acc;
      }
    }
  return out;
}

Vec PoolKey(const std::vector<float>& k, const std::vector<float>& gamma, const std::vector<float>& ape, int64_t m,
            int64_t d) {
  Vec out(d);
  for (int64_t c = 0; c < d; ++c) {
    double mx = -1e300, den = 0;
    for (int64_t r = 0; r < m; ++r) mx = std::max(mx, static_cast<double>(gamma[r * d + c]) + ape[r * d + c]);
    for (int64_t r = 0; r < m; ++r) den += std::exp(gamma[r * d + c] + ape[r * d + c] - mx);
    double acc = 0;
    for (int64_t r = 0; r < m; ++r) acc += std::exp(gamma[r * d + c] + ape[r * d + c] - mx) / den * k[r * d + c];
    out[c] = acc;
  }
  return out;
}

std::vector<std::vector<int32_t>> IndexerSelect(const std::vector<float>& q, const std::vector<float>& w, int64_t s,
                                                int64_t pos0, const std::vector<float>& pk, int64_t p, int64_t heads,
                                                int64_t d, int64_t m, int64_t topk, bool tail) {
  std::vector<std::vector<int32_t>> out(s);
  for (int64_t i = 0; i < s; ++i) {
    const int64_t t = pos0 + i;
    std::vector<std::pair<double, int64_t>> cand;  // (score, pool)
    for (int64_t pp = 0; pp < p; ++pp) {
      if (pp * m + m - 1 > t) continue;  // last slot not visible
      double sc = 0;
      for (int64_t h = 0; h < heads; ++h) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(q[(i * heads + h) * d + c]) * pk[pp * d + c];
        sc += w[i * heads + h] * std::max(0.0, dot / std::sqrt(static_cast<double>(d)));
      }
      cand.push_back({sc, pp});
    }
    std::sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    const size_t take = std::min<size_t>(cand.size(), static_cast<size_t>(topk / m));
    std::vector<int32_t> keys;
    for (size_t j = 0; j < take; ++j)
      for (int64_t r = 0; r < m; ++r) keys.push_back(static_cast<int32_t>(cand[j].second * m + r));
    if (tail) {
      const int64_t c = (t + 1) % m;
      for (int64_t r = 0; r < c; ++r) keys.push_back(static_cast<int32_t>(t + 1 - c + r));
    }
    std::sort(keys.begin(), keys.end());
    out[i] = keys;
  }
  return out;
}

Vec Route(const std::vector<float>& logits, int64_t n, int64_t e, const std::vector<float>& bias, int64_t k,
          int64_t groups, int64_t topk_group, bool renorm, double scale) {
  Vec idx(n * k), wts(n * k);
  const int64_t per = e / groups;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> s(e), ch(e);
    for (int64_t j = 0; j < e; ++j) {
      s[j] = Sig(logits[i * e + j]);
      ch[j] = s[j] + (bias.empty() ? 0.0 : bias[j]);
    }
    if (groups > 1) {
      std::vector<std::pair<double, int64_t>> gs;
      for (int64_t gi = 0; gi < groups; ++gi) {
        std::vector<double> v(ch.begin() + gi * per, ch.begin() + (gi + 1) * per);
        std::sort(v.rbegin(), v.rend());
        gs.push_back({v[0] + v[1], gi});
      }
      std::stable_sort(gs.begin(), gs.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      std::vector<bool> keep(groups, false);
      for (int64_t g = 0; g < topk_group; ++g) keep[gs[g].second] = true;
      for (int64_t j = 0; j < e; ++j)
        if (!keep[j / per]) ch[j] = -INFINITY;
    }
    std::vector<int64_t> order(e);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ch[a] > ch[b]; });
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += s[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      idx[i * k + j] = static_cast<double>(order[j]);
      wts[i * k + j] = (renorm ? s[order[j]] / (sum + 1e-20) : s[order[j]]) * scale;
    }
  }
  Vec out = idx;
  out.insert(out.end(), wts.begin(), wts.end());
  return out;
}

}  // namespace gyre::ops::ref

namespace gyre::ops::ref {

Vec HcPost(const std::vector<float>& x, int64_t t, int64_t n, int64_t d, const std::vector<float>& a,
           const std::vector<float>& post, const std::vector<float>& comb) {
  Vec out(t * n * d);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t s = 0; s < n; ++s)
      for (int64_t c = 0; c < d; ++c) {
        double v = static_cast<double>(post[i * n + s]) * a[i * d + c];
        for (int64_t j = 0; j < n; ++j) v += static_cast<double>(comb[(i * n + j) * n + s]) * x[(i * n + j) * d + c];
        out[(i * n + s) * d + c] = v;
      }
  return out;
}

Vec MoeExperts(const std::vector<float>& x, int64_t n, const std::vector<int32_t>& idx, const std::vector<float>& w,
               int64_t k, const std::vector<float>& gate_up, const std::vector<float>& down, int64_t e, int64_t d,
               int64_t inter, double limit) {
  Vec out(n * d, 0.0), a(inter);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t ex = idx[t * k + j];
      if (ex < 0 || ex >= e) continue;
      const float* gu = &gate_up[ex * 2 * inter * d];
      const float* dn = &down[ex * d * inter];
      for (int64_t i = 0; i < inter; ++i) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < d; ++c) {
          g += static_cast<double>(x[t * d + c]) * gu[i * d + c];
          u += static_cast<double>(x[t * d + c]) * gu[(inter + i) * d + c];
        }
        if (limit > 0) {
          g = std::min(g, limit);
          u = std::clamp(u, -limit, limit);
        }
        a[i] = g * Sig(g) * u;
      }
      for (int64_t c = 0; c < d; ++c) {
        double y = 0;
        for (int64_t i = 0; i < inter; ++i) y += a[i] * dn[c * inter + i];
        out[t * d + c] += static_cast<double>(w[t * k + j]) * y;
      }
    }
  return out;
}

Vec Penalties(const std::vector<float>& logits, const PenaltyRow& row) {
  Vec y(logits.begin(), logits.end());
  for (const auto& [id, b] : row.bias) y[id] += b;
  if (row.mask_stops)
    for (int32_t id : row.stop_ids) y[id] = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < y.size(); ++i) {
    const int32_t count = row.output_counts[i];
    if (row.in_prompt[i] || count > 0) y[i] = y[i] > 0 ? y[i] / row.repetition : y[i] * row.repetition;
    y[i] -= row.frequency * count;
    if (count > 0) y[i] -= row.presence;
  }
  return y;
}

Vec VisionRope(const std::vector<float>& x, int64_t n, int64_t heads, int64_t hd,
               const std::vector<std::pair<int32_t, int32_t>>& pos, double theta) {
  Vec y(x.size());
  const int64_t quarter = hd / 4, half = hd / 2;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* xh = &x[(r * heads + h) * hd];
      for (int64_t j = 0; j < hd; ++j) {
        const double coord = (j / quarter) % 2 == 0 ? pos[r].first : pos[r].second;
        const double angle = coord * std::pow(theta, -2.0 * double(j % quarter) / double(half));
        const double partner = j < half ? -double(xh[j + half]) : double(xh[j - half]);
        y[(r * heads + h) * hd + j] = xh[j] * std::cos(angle) + partner * std::sin(angle);
      }
    }
  }
  return y;
}

Vec VisionAttention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v, int64_t n,
                    int64_t heads, int64_t hd, const std::vector<int64_t>& segments) {
  const int64_t D = heads * hd;
  Vec out(n * D, 0.0);
  int64_t start = 0;
  for (int64_t len : segments) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = start; i < start + len; ++i) {
        std::vector<double> p(len);
        double mx = -1e300;
        for (int64_t j = 0; j < len; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < hd; ++e) dot += double(q[i * D + h * hd + e]) * k[(start + j) * D + h * hd + e];
          p[j] = dot / std::sqrt(double(hd));
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (double& x : p) sum += (x = std::exp(x - mx));
        for (int64_t e = 0; e < hd; ++e) {
          double o = 0;
          for (int64_t j = 0; j < len; ++j) o += p[j] * v[(start + j) * D + h * hd + e];
          out[i * D + h * hd + e] = o / sum;
        }
      }
    }
    start += len;
  }
  return out;
}

}  // namespace gyre::ops::ref
