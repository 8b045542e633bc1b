// KDA CPU implementation. Sections: conv; gate; helpers; chunked form; recurrent form; gated norm.
#include "ops/kda.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/basic.h"

namespace gyre::ops {

// ---- conv ----------------------------------------------------------------------------------------

void CausalConv1dSilu(const float* x, int64_t t, int64_t channels, const float* w, int64_t width, float* state,
                      float* y, const Numerics& num) {
  const int64_t hist = width - 1;
#pragma omp parallel for if (t * channels > 32768)
  for (int64_t c = 0; c < channels; ++c) {
    const float* wc = w + c * width;
    for (int64_t i = 0; i < t; ++i) {
      float acc = 0;
      for (int64_t j = 0; j < width; ++j) {
        const int64_t src = i - hist + j;  // index into x; negative reads the state
        const float in = src >= 0 ? x[src * channels + c] : state[(hist + src) * channels + c];
        acc += wc[j] * in;
      }
      y[i * channels + c] = num.Round(Silu(acc));
    }
    // New state: last `hist` inputs of [state; x].
    float tmp[16];
    for (int64_t j = 0; j < hist; ++j) {
      const int64_t src = t - hist + j;
      tmp[j] = src >= 0 ? x[src * channels + c] : state[(hist + src) * channels + c];
    }
    for (int64_t j = 0; j < hist; ++j) state[j * channels + c] = tmp[j];
  }
}

// ---- gate ----------------------------------------------------------------------------------------

void KdaGate(const float* f, int64_t t, KdaShape s, std::span<const float> dt_bias, std::span<const float> a_log,
             std::optional<float> lower_bound, float* g) {
  const int64_t width = s.num_heads * s.head_dim;
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t h = 0; h < s.num_heads; ++h) {
      const float a = std::exp(a_log[h]);
      for (int64_t d = 0; d < s.head_dim; ++d) {
        const int64_t c = h * s.head_dim + d;
        const float z = f[i * width + c] + dt_bias[c];
        float out;
        if (lower_bound) {
          out = *lower_bound * Sigmoid(a * z);
        } else {
          const float sp = z > 20.0f ? z : std::log(1.0f + std::exp(z));
          out = -a * sp;
        }
        g[i * width + c] = out;
      }
    }
  }
}

// ---- helpers -------------------------------------------------------------------------------------

namespace {

// x / sqrt(sum(x²) + 1e-6), times `scale`.
void L2NormScaled(const float* x, int64_t d, float scale, float* y) {
  float ss = 0;
  for (int64_t i = 0; i < d; ++i) ss += x[i] * x[i];
  const float inv = scale / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < d; ++i) y[i] = x[i] * inv;
}

// Gathers head h of a [T, H, D] tensor into a contiguous [T, D] buffer.
void GatherHead(const float* src, int64_t t, int64_t heads, int64_t d, int64_t h, float* dst) {
  for (int64_t i = 0; i < t; ++i) std::memcpy(dst + i * d, src + (i * heads + h) * d, d * sizeof(float));
}

}  // namespace

// ---- chunked form --------------------------------------------------------------------------------

void KdaChunkUtTransform(const float* k, const float* G, const float* beta, int64_t c, int64_t K, int64_t ld,
                         const float* decay, float* A) {
  // A = -L (strictly lower), then the row recurrence → (I + L)^{-1} - I, then + I.
  for (int64_t i = 0; i < c; ++i) {
    for (int64_t j = 0; j < c; ++j) {
      float a = 0;
      if (j < i) {
        if (decay) {
          const float* dij = &decay[(i * ld + j) * K];
          for (int64_t d = 0; d < K; ++d) a += k[i * K + d] * k[j * K + d] * dij[d];
        } else {
          for (int64_t d = 0; d < K; ++d) a += k[i * K + d] * k[j * K + d] * std::exp(G[i * K + d] - G[j * K + d]);
        }
        a = -beta[i] * a;
      }
      A[i * ld + j] = a;
    }
  }
  std::vector<float> row(c);
  for (int64_t i = 1; i < c; ++i) {
    // row_i[:i] += row_i[:i] · A[:i, :i]  (rows < i already final; uses the original row_i)
    std::copy(A + i * ld, A + i * ld + i, row.begin());
    for (int64_t j = 0; j < i; ++j) {
      float acc = row[j];
      for (int64_t m = j + 1; m < i; ++m) acc += row[m] * A[m * ld + j];
      A[i * ld + j] = acc;
    }
  }
  for (int64_t i = 0; i < c; ++i) A[i * ld + i] = 1.0f;
}
//
// Per head and chunk of c ≤ C rows (G = in-chunk cumsum of g, rows r; all fp32):
//   A = (I + L)⁻¹ with L[i,j] = β_i Σ_d k_i k_j e^{G_i − G_j} (i > j), by forward substitution
//   U = A·(β⊙V),  W = A·(β⊙K⊙e^{G})
//   Ṽ = U − W·S ;  O = (Q̃⊙e^{G})·S + tril(Q̃ Kᵀ ⊙ e^{G_i − G_j})·Ṽ
//   S ← e^{G_c}⊙S + (K⊙e^{G_c − G})ᵀ·Ṽ
// A partial last chunk just has fewer rows (identical to the reference's zero padding).

void KdaChunked(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t t,
                KdaShape s, float* state, float* o, int64_t chunk) {
  const int64_t H = s.num_heads, K = s.head_dim, V = s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(K));
  // Only fan out over heads when the work amortises a parallel region (see attention.cc).
#pragma omp parallel for schedule(dynamic) if (H * t * K * (K + 64) > (1 << 20))
  for (int64_t h = 0; h < H; ++h) {
    std::vector<float> qh(t * K), kh(t * K), vh(t * V), gh(t * K), bh(t);
    GatherHead(q, t, H, K, h, qh.data());
    GatherHead(k, t, H, K, h, kh.data());
    GatherHead(v, t, H, V, h, vh.data());
    GatherHead(g, t, H, K, h, gh.data());
    for (int64_t i = 0; i < t; ++i) {
      bh[i] = beta[i * H + h];
      L2NormScaled(&qh[i * K], K, scale, &qh[i * K]);
      L2NormScaled(&kh[i * K], K, 1.0f, &kh[i * K]);
    }
    float* S = state + h * K * V;
    std::vector<float> G(chunk * K), A(chunk * chunk), U(chunk * V), W(chunk * K), Vn(chunk * V), Aqk(chunk * chunk);
    // NOTE: the decay factors e^{G_i − G_j} (j ≤ i) are computed once per chunk and shared by L and
    // A_qk, and e^{G_j} once per row: `exp` dominated this loop (3 evaluations per (i, j, d) before).
    std::vector<float> decay(chunk * chunk * K), eg(chunk * K);
    std::vector<float> Vb(chunk * V), Kbe(chunk * K), Qe(chunk * K), Oc(chunk * V), Kd(chunk * K);
    for (int64_t c0 = 0; c0 < t; c0 += chunk) {
      const int64_t c = std::min(chunk, t - c0);
      const float* Q = &qh[c0 * K];
      const float* Kc = &kh[c0 * K];
      const float* Vc = &vh[c0 * V];
      const float* B = &bh[c0];
      // Cumulative log decay.
      for (int64_t r = 0; r < c; ++r)
        for (int64_t d = 0; d < K; ++d) G[r * K + d] = gh[(c0 + r) * K + d] + (r ? G[(r - 1) * K + d] : 0.0f);
      for (int64_t r = 0; r < c * K; ++r) eg[r] = std::exp(G[r]);
      for (int64_t i = 0; i < c; ++i)
        for (int64_t j = 0; j <= i; ++j) {
          float* dij = &decay[(i * chunk + j) * K];
          for (int64_t d = 0; d < K; ++d) dij[d] = std::exp(G[i * K + d] - G[j * K + d]);
        }
      KdaChunkUtTransform(Kc, G.data(), B, c, K, chunk, decay.data(), A.data());
      // The C×K×V products below are sgemm calls (row-major; nested inside the head loop, the
      // OpenMP OpenBLAS runs them single-threaded).
      const int ci = static_cast<int>(c), Ki = static_cast<int>(K), Vi = static_cast<int>(V),
                ld = static_cast<int>(chunk);
      // U = A·(β⊙V), W = A·(β⊙K⊙e^G)   (A is unit lower triangular, zero above the diagonal)
      for (int64_t j = 0; j < c; ++j) {
        for (int64_t x = 0; x < V; ++x) Vb[j * V + x] = B[j] * Vc[j * V + x];
        for (int64_t d = 0; d < K; ++d) Kbe[j * K + d] = B[j] * Kc[j * K + d] * eg[j * K + d];
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ci, Vi, ci, 1.0f, A.data(), ld, Vb.data(), Vi, 0.0f,
                  U.data(), Vi);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ci, Ki, ci, 1.0f, A.data(), ld, Kbe.data(), Ki, 0.0f,
                  W.data(), Ki);
      // Ṽ = U − W·S
      std::copy(U.begin(), U.begin() + c * V, Vn.begin());
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ci, Vi, Ki, -1.0f, W.data(), Ki, S, Vi, 1.0f, Vn.data(),
                  Vi);
      // Aqk (lower incl. diagonal, zero above).
      for (int64_t i = 0; i < c; ++i)
        for (int64_t j = 0; j < c; ++j) {
          float a = 0;
          if (j <= i) {
            const float* dij = &decay[(i * chunk + j) * K];
            for (int64_t d = 0; d < K; ++d) a += Q[i * K + d] * Kc[j * K + d] * dij[d];
          }
          Aqk[i * chunk + j] = a;
        }
      // O = (Q⊙e^G)·S + Aqk·Ṽ
      for (int64_t r = 0; r < c * K; ++r) Qe[r] = Q[r] * eg[r];
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ci, Vi, Ki, 1.0f, Qe.data(), Ki, S, Vi, 0.0f, Oc.data(),
                  Vi);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ci, Vi, ci, 1.0f, Aqk.data(), ld, Vn.data(), Vi, 1.0f,
                  Oc.data(), Vi);
      for (int64_t i = 0; i < c; ++i) std::memcpy(o + ((c0 + i) * H + h) * V, &Oc[i * V], V * sizeof(float));
      // S ← e^{G_c}⊙S + (K⊙e^{G_c − G})ᵀ·Ṽ
      const float* Gl = &G[(c - 1) * K];
      for (int64_t d = 0; d < K; ++d) {
        const float dec = std::exp(Gl[d]);
        for (int64_t x = 0; x < V; ++x) S[d * V + x] *= dec;
      }
      for (int64_t r = 0; r < c; ++r)
        for (int64_t d = 0; d < K; ++d) Kd[r * K + d] = Kc[r * K + d] * std::exp(Gl[d] - G[r * K + d]);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Ki, Vi, ci, 1.0f, Kd.data(), Ki, Vn.data(), Vi, 1.0f, S, Vi);
    }
  }
}

// ---- recurrent form ------------------------------------------------------------------------------

// One token of the recurrence, first half: S ← S·exp(g) row-wise, then the delta-rule update
// u = β·(v − Sᵀk). Shared by KdaRecurrent and KdaFold so the fold stays its state half bit for bit.
static inline void DecayAndDelta(float* S, const float* kn, const float* vv, float b, const float* gg, int64_t K, int64_t V,
                                 float* u) {
  std::fill(u, u + V, 0.0f);
  for (int64_t d = 0; d < K; ++d) {
    float* Srow = S + d * V;
    const float decay = std::exp(gg[d]);
    for (int64_t x = 0; x < V; ++x) {
      Srow[x] *= decay;
      u[x] += Srow[x] * kn[d];
    }
  }
  for (int64_t x = 0; x < V; ++x) u[x] = b * (vv[x] - u[x]);
}

void KdaRecurrent(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t t,
                  KdaShape s, float* state, float* o) {
  const int64_t H = s.num_heads, K = s.head_dim, V = s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(K));
#pragma omp parallel for if (t * H * K * V > (1 << 18))
  for (int64_t h = 0; h < H; ++h) {
    std::vector<float> qn(K), kn(K), u(V);
    float* S = state + h * K * V;
    for (int64_t i = 0; i < t; ++i) {
      const int64_t base = (i * H + h) * K;
      L2NormScaled(q + base, K, scale, qn.data());
      L2NormScaled(k + base, K, 1.0f, kn.data());
      const float* vv = v + (i * H + h) * V;
      const float b = beta[i * H + h];
      DecayAndDelta(S, kn.data(), vv, b, g + base, K, V, u.data());
      float* orow = o + (i * H + h) * V;
      for (int64_t x = 0; x < V; ++x) orow[x] = 0;
      for (int64_t d = 0; d < K; ++d) {
        float* Srow = S + d * V;
        for (int64_t x = 0; x < V; ++x) {
          Srow[x] += kn[d] * u[x];
          orow[x] += Srow[x] * qn[d];
        }
      }
    }
  }
}

void KdaFold(const float* k, const float* v, const float* g, const float* beta, int64_t t, KdaShape s, float* state) {
  const int64_t H = s.num_heads, K = s.head_dim, V = s.head_dim;
#pragma omp parallel for if (t * H * K * V > (1 << 18))
  for (int64_t h = 0; h < H; ++h) {
    std::vector<float> kn(K), u(V);
    float* S = state + h * K * V;
    for (int64_t i = 0; i < t; ++i) {  // the state half of KdaRecurrent's loop, operation for operation
      const int64_t base = (i * H + h) * K;
      L2NormScaled(k + base, K, 1.0f, kn.data());
      const float* vv = v + (i * H + h) * V;
      const float b = beta[i * H + h];
      DecayAndDelta(S, kn.data(), vv, b, g + base, K, V, u.data());
      for (int64_t d = 0; d < K; ++d) {
        float* Srow = S + d * V;
        for (int64_t x = 0; x < V; ++x) Srow[x] += kn[d] * u[x];
      }
    }
  }
}

void CausalConvShift(const float* x, int64_t t, int64_t channels, int64_t width, float* state) {
  const int64_t hist = width - 1;
  for (int64_t c = 0; c < channels; ++c) {
    float tmp[16];
    for (int64_t j = 0; j < hist; ++j) {
      const int64_t src = t - hist + j;
      tmp[j] = src >= 0 ? x[src * channels + c] : state[(hist + src) * channels + c];
    }
    for (int64_t j = 0; j < hist; ++j) state[j * channels + c] = tmp[j];
  }
}

// ---- gated norm ----------------------------------------------------------------------------------

void GatedRmsNorm(const float* o, const float* z, int64_t t, KdaShape s, std::span<const float> w, float eps,
                  float* y, const Numerics& num) {
  const int64_t V = s.head_dim;
  for (int64_t r = 0; r < t * s.num_heads; ++r) {
    const float* orow = o + r * V;
    const float* zrow = z + r * V;
    float ss = 0;
    for (int64_t x = 0; x < V; ++x) ss += orow[x] * orow[x];
    const float inv = 1.0f / std::sqrt(ss / V + eps);
    for (int64_t x = 0; x < V; ++x) y[r * V + x] = num.Round(w[x] * (orow[x] * inv) * Sigmoid(zrow[x]));
  }
}

}  // namespace gyre::ops
