// CP for KDA. Sections: precision helpers; shard summary (M, P); start-state application; plan.
#include "parallel/context_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "ops/basic.h"
#include "ops/kda.h"

namespace gyre::parallel {

// ---- precision helpers ---------------------------------------------------------------------------

const char* MergePrecisionName(MergePrecision p) {
  switch (p) {
    case MergePrecision::kF32: return "fp32";
    case MergePrecision::kBf16: return "bf16";
    case MergePrecision::kTf32: return "tf32";
  }
  return "?";
}

bool ParseMergePrecision(std::string_view s, MergePrecision* out) {
  if (s == "fp32") *out = MergePrecision::kF32;
  else if (s == "bf16") *out = MergePrecision::kBf16;
  else if (s == "tf32") *out = MergePrecision::kTf32;
  else return false;
  return true;
}

float RoundOperand(float x, MergePrecision p) {
  switch (p) {
    case MergePrecision::kF32: return x;
    case MergePrecision::kBf16: return RoundBf16(x);
    case MergePrecision::kTf32: {
      uint32_t u;
      std::memcpy(&u, &x, 4);
      if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf / nan
      u += 0xfffu + ((u >> 13) & 1u);                   // round to nearest even at bit 13
      u &= ~0x1fffu;
      std::memcpy(&x, &u, 4);
      return x;
    }
  }
  return x;
}

namespace {

// Result storage of a chain product: bf16 keeps its results in bf16.
float RoundResult(float x, MergePrecision p) { return p == MergePrecision::kBf16 ? RoundBf16(x) : x; }

// c[m, n] = a[m, k] · b[k, n] (row-major, leading dims = widths) in the chain arithmetic.
// `acc` (may be null) is added after the product: c = a·b + acc.
void ChainMatMul(const float* a, const float* b, int64_t m, int64_t k, int64_t n, const float* acc,
                 MergePrecision p, float* c) {
  std::vector<float> ra(a, a + m * k), rb(b, b + k * n);
  for (auto& x : ra) x = RoundOperand(x, p);
  for (auto& x : rb) x = RoundOperand(x, p);
  std::vector<float> row(n);
  for (int64_t i = 0; i < m; ++i) {
    std::fill(row.begin(), row.end(), 0.0f);
    for (int64_t l = 0; l < k; ++l) {
      const float av = ra[i * k + l];
      const float* br = &rb[l * n];
      for (int64_t j = 0; j < n; ++j) row[j] += av * br[j];
    }
    for (int64_t j = 0; j < n; ++j) c[i * n + j] = RoundResult(acc ? row[j] + acc[i * n + j] : row[j], p);
  }
}

void L2NormScaled(const float* x, int64_t d, float scale, float* y) {
  float ss = 0;
  for (int64_t i = 0; i < d; ++i) ss += x[i] * x[i];
  const float inv = scale / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < d; ++i) y[i] = x[i] * inv;
}

// ---- shard summary ---------------------------------------------------------------------------------
//
// M and P of one head. The intra-chunk terms (G, A = (I + L)⁻¹, W, A_qk) use the same formulas and
// loop order as ops::KdaChunked (src/ops/kda.cc), so a GPU kernel can produce them in the same
// pass as o⁰ and H (FLA's pre-process shares W and U with the main kernel the same way).
// NOTE: they are recomputed here, not shared with the ops::KdaChunked call, to keep the engine's
// op untouched; the CPU verification pays about twice the core's cost for it.
void HeadTransition(const float* qh, const float* kh, const float* gh, const float* bh, int64_t t, int64_t K,
                    int64_t chunk, MergePrecision prec, float* m_out, float* p_out, int64_t p_stride) {
  std::vector<float> G(chunk * K), A(chunk * chunk), W(chunk * K), Aqk(chunk * chunk), Qeff(chunk * K),
      Pc(chunk * K), Mc(K * K), Mp(K * K, 0.0f), Mn(K * K);
  for (int64_t d = 0; d < K; ++d) Mp[d * K + d] = 1.0f;
  for (int64_t c0 = 0; c0 < t; c0 += chunk) {
    const int64_t c = std::min(chunk, t - c0);
    const float* Q = qh + c0 * K;
    const float* Kc = kh + c0 * K;
    const float* B = bh + c0;
    for (int64_t r = 0; r < c; ++r)
      for (int64_t d = 0; d < K; ++d) G[r * K + d] = gh[(c0 + r) * K + d] + (r ? G[(r - 1) * K + d] : 0.0f);
    // A = (I + L)⁻¹, exactly as ops::KdaChunked computes it.
    ops::KdaChunkUtTransform(Kc, G.data(), B, c, K, chunk, nullptr, A.data());
    // W = A·(β⊙K⊙e^G)
    for (int64_t i = 0; i < c; ++i) {
      for (int64_t d = 0; d < K; ++d) W[i * K + d] = 0;
      for (int64_t j = 0; j <= i; ++j) {
        const float a = A[i * chunk + j] * B[j];
        if (a == 0) continue;
        for (int64_t d = 0; d < K; ++d) W[i * K + d] += a * Kc[j * K + d] * std::exp(G[j * K + d]);
      }
    }
    // A_qk (lower incl. diagonal), then Q_eff = Q̃⊙Γ − A_qk·W.
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        float a = 0;
        for (int64_t d = 0; d < K; ++d) a += Q[i * K + d] * Kc[j * K + d] * std::exp(G[i * K + d] - G[j * K + d]);
        Aqk[i * chunk + j] = a;
      }
    for (int64_t i = 0; i < c; ++i)
      for (int64_t d = 0; d < K; ++d) {
        float a = Q[i * K + d] * std::exp(G[i * K + d]);
        for (int64_t j = 0; j <= i; ++j) a -= Aqk[i * chunk + j] * W[j * K + d];
        Qeff[i * K + d] = a;
      }
    // P rows of this chunk = Q_eff · M_{<c}.
    ChainMatMul(Qeff.data(), Mp.data(), c, K, K, nullptr, prec, Pc.data());
    for (int64_t i = 0; i < c; ++i) std::memcpy(p_out + (c0 + i) * p_stride, &Pc[i * K], K * sizeof(float));
    // M_c = diag(Γ_C) − K̄ᵀ·W, K̄[r, d] = k_r[d]·e^{G_C[d] − G_r[d]}; then M_{<c+1} = M_c · M_{<c}.
    const float* Gl = &G[(c - 1) * K];
    for (int64_t d = 0; d < K; ++d)
      for (int64_t e = 0; e < K; ++e) {
        float a = d == e ? std::exp(Gl[d]) : 0.0f;
        for (int64_t r = 0; r < c; ++r) a -= Kc[r * K + d] * std::exp(Gl[d] - G[r * K + d]) * W[r * K + e];
        Mc[d * K + e] = a;
      }
    ChainMatMul(Mc.data(), Mp.data(), K, K, K, nullptr, prec, Mn.data());
    Mp.swap(Mn);
  }
  std::memcpy(m_out, Mp.data(), K * K * sizeof(float));
}

}  // namespace

KdaShardSummary SummarizeKdaShard(const float* q, const float* k, const float* v, const float* g,
                                  const float* beta, int64_t t, ops::KdaShape s, MergePrecision precision,
                                  int64_t chunk) {
  const int64_t H = s.num_heads, K = s.head_dim;
  KdaShardSummary sum;
  // o⁰ and H: the engine's own chunked op from a zero state.
  sum.o_zero.resize(t * H * K);
  sum.h.assign(H * K * K, 0.0f);
  ops::KdaChunked(q, k, v, g, beta, t, s, sum.h.data(), sum.o_zero.data(), chunk);
  for (auto& x : sum.h) x = RoundResult(x, precision);  // H is exchanged in the chain format
  // M and P per head.
  sum.m.resize(H * K * K);
  sum.p.resize(t * H * K);
  const float scale = 1.0f / std::sqrt(static_cast<float>(K));
#pragma omp parallel for schedule(dynamic)
  for (int64_t h = 0; h < H; ++h) {
    std::vector<float> qh(t * K), kh(t * K), gh(t * K), bh(t);
    for (int64_t i = 0; i < t; ++i) {
      const int64_t base = (i * H + h) * K;
      L2NormScaled(q + base, K, scale, &qh[i * K]);
      L2NormScaled(k + base, K, 1.0f, &kh[i * K]);
      std::memcpy(&gh[i * K], g + base, K * sizeof(float));
      bh[i] = beta[i * H + h];
    }
    HeadTransition(qh.data(), kh.data(), gh.data(), bh.data(), t, K, chunk, precision, &sum.m[h * K * K],
                   &sum.p[h * K], H * K);
  }
  return sum;
}

// ---- start-state application -----------------------------------------------------------------------

void ApplyStartState(const KdaShardSummary& sum, const float* s_start, int64_t t, ops::KdaShape s,
                     MergePrecision precision, float* o, float* s_end) {
  const int64_t H = s.num_heads, K = s.head_dim;
  std::vector<float> ph(t * K), corr(t * K);
  for (int64_t h = 0; h < H; ++h) {
    const float* S = s_start + h * K * K;
    // o_t += P_t · S (the correction is a chain product; the sum with o⁰ is fp32).
    for (int64_t i = 0; i < t; ++i) std::memcpy(&ph[i * K], &sum.p[(i * H + h) * K], K * sizeof(float));
    ChainMatMul(ph.data(), S, t, K, K, nullptr, precision, corr.data());
    for (int64_t i = 0; i < t; ++i)
      for (int64_t x = 0; x < K; ++x) o[(i * H + h) * K + x] += corr[i * K + x];
    // S_end = M·S + H.
    ChainMatMul(&sum.m[h * K * K], S, K, K, K, &sum.h[h * K * K], precision, s_end + h * K * K);
  }
}

// ---- plan ----------------------------------------------------------------------------------------------

Status KdaCpForward(Communicator& comm, const KdaCpWeights& w, const KdaCpOptions& opt, const KdaCpInputs& in,
                    KdaCpTrace* t) {
  const int n = comm.size(), rank = comm.rank();
  const int64_t H = w.shape.num_heads, K = w.shape.head_dim, P = H * K, C3 = 3 * P, Wc = w.conv.cols,
                hist = Wc - 1, T = in.t, D = w.o.rows;
  const Numerics f32{};

  // kda.conv: send the last W−1 pre-conv rows to the next rank; the first rank starts from zeros.
  std::vector<float> send;
  std::vector<int64_t> counts(n, 0);
  if (rank + 1 < n) {
    if (T < hist) {
      return Status::InvalidArgument("CP needs at least " + std::to_string(hist) +
                                     " tokens on every rank but the last; rank " + std::to_string(rank) + " has " +
                                     std::to_string(T));
    }
    send.assign(in.u + (T - hist) * C3, in.u + T * C3);
    counts[rank + 1] = hist * C3;
  }
  std::vector<float> halo;
  std::vector<int64_t> halo_counts;
  GYRE_RETURN_IF_ERROR(comm.AllToAllV(send, counts, &halo, &halo_counts));
  if (rank == 0) halo.assign(hist * C3, 0.0f);
  t->conv.resize(T * C3);
  ops::CausalConv1dSilu(in.u, T, C3, w.conv.data.data(), Wc, halo.data(), t->conv.data(), f32);

  // Zero-start pass: o⁰, H, M, P.
  std::vector<float> q(T * P), k(T * P), v(T * P);
  for (int64_t i = 0; i < T; ++i) {
    std::memcpy(&q[i * P], &t->conv[i * C3], P * sizeof(float));
    std::memcpy(&k[i * P], &t->conv[i * C3 + P], P * sizeof(float));
    std::memcpy(&v[i * P], &t->conv[i * C3 + 2 * P], P * sizeof(float));
  }
  KdaShardSummary sum =
      SummarizeKdaShard(q.data(), k.data(), v.data(), in.g, in.beta, T, w.shape, opt.precision, opt.chunk);

  // kda.cp_merge: all-gather [M | H] per head, then the exclusive scan in rank order.
  const int64_t blk = H * K * 2 * K;
  std::vector<float> mine(blk), all(n * blk);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t d = 0; d < K; ++d) {
      std::memcpy(&mine[(h * K + d) * 2 * K], &sum.m[(h * K + d) * K], K * sizeof(float));
      std::memcpy(&mine[(h * K + d) * 2 * K + K], &sum.h[(h * K + d) * K], K * sizeof(float));
    }
  GYRE_RETURN_IF_ERROR(comm.AllGather(mine, all));
  t->s_start.assign(H * K * K, 0.0f);
  std::vector<float> mj(K * K), hj(K * K), next(K * K);
  for (int j = 0; j < rank; ++j) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t d = 0; d < K; ++d) {
        std::memcpy(&mj[d * K], &all[j * blk + (h * K + d) * 2 * K], K * sizeof(float));
        std::memcpy(&hj[d * K], &all[j * blk + (h * K + d) * 2 * K + K], K * sizeof(float));
      }
      float* S = &t->s_start[h * K * K];
      ChainMatMul(mj.data(), S, K, K, K, hj.data(), opt.precision, next.data());
      std::memcpy(S, next.data(), K * K * sizeof(float));
    }
  }

  // kda.core: o = o⁰ + P·S_r; the shard's end state for the record.
  t->o = std::move(sum.o_zero);
  t->s_end.resize(H * K * K);
  ApplyStartState(sum, t->s_start.data(), T, w.shape, opt.precision, t->o.data(), t->s_end.data());

  // kda.out: token-local.
  std::vector<float> yn(T * P);
  ops::GatedRmsNorm(t->o.data(), in.z, T, w.shape, w.o_norm, w.eps, yn.data(), f32);
  t->out.resize(T * D);
  ops::Linear(yn.data(), T, w.o, t->out.data(), f32);
  return Status();
}

}  // namespace gyre::parallel
