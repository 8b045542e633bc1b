// KDA ops: the chunked form equals the recurrent definition; pieces equal one shot.
#include "ops/kda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ops/basic.h"

namespace gyre::ops {
namespace {

struct Inputs {
  std::vector<float> q, k, v, g, beta, state;
};

Inputs MakeInputs(int64_t t, KdaShape s, uint64_t seed, bool softplus_like) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const int64_t P = s.num_heads * s.head_dim;
  Inputs in;
  for (auto* vec : {&in.q, &in.k, &in.v}) {
    vec->resize(t * P);
    for (auto& x : *vec) x = n(rng);
  }
  in.g.resize(t * P);
  for (auto& x : in.g) x = softplus_like ? -std::exp(2.0f * n(rng)) : -5.0f * u(rng);  // wide range of decays
  in.beta.resize(t * s.num_heads);
  for (auto& x : in.beta) x = u(rng);
  in.state.resize(s.num_heads * s.head_dim * s.head_dim);
  for (auto& x : in.state) x = 0.3f * n(rng);
  return in;
}

class KdaFormsTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(KdaFormsTest, ChunkedEqualsRecurrent) {
  const int64_t t = GetParam();
  const KdaShape s{3, 16};
  for (bool softplus : {false, true}) {
    Inputs in = MakeInputs(t, s, 1234 + t, softplus);
    std::vector<float> st_c = in.state, st_r = in.state;
    const int64_t P = s.num_heads * s.head_dim;
    std::vector<float> oc(t * P, NAN), orr(t * P, NAN);  // poisoned
    KdaChunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), t, s, st_c.data(), oc.data());
    KdaRecurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), t, s, st_r.data(), orr.data());
    const Diff d_o = Compare(oc, orr), d_s = Compare(st_c, st_r);
    EXPECT_LT(d_o.rel_l2, 2e-5) << "T=" << t << " softplus=" << softplus << " worst=" << d_o.worst_index;
    EXPECT_LT(d_s.rel_l2, 2e-5) << "T=" << t << " softplus=" << softplus;
  }
}

INSTANTIATE_TEST_SUITE_P(Lengths, KdaFormsTest, ::testing::Values(1, 2, 63, 64, 65, 128, 150));

// ReplaySSM: folding n kept inputs equals running the recurrence over them, bit for bit in fp32,
// for every n a verify step can accept (0..k+1), and the conv tail shifts as the conv leaves it.
TEST(KdaFold, EqualsRecurrenceBitForBit) {
  const KdaShape s{3, 16};
  const int64_t k1 = 5, P = s.num_heads * s.head_dim;  // k = 4 drafts + the known token
  for (int64_t n = 0; n <= k1; ++n) {
    Inputs in = MakeInputs(k1, s, 77 + n, n % 2 == 1);
    std::vector<float> st_f = in.state, st_r = in.state, o(k1 * P);
    KdaFold(in.k.data(), in.v.data(), in.g.data(), in.beta.data(), n, s, st_f.data());
    KdaRecurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), n, s, st_r.data(), o.data());
    ASSERT_EQ(0, std::memcmp(st_f.data(), st_r.data(), st_f.size() * sizeof(float))) << "n=" << n;
    if (n > 0) EXPECT_NE(st_f, in.state) << "n=" << n;  // the fold did move the state
    // Conv tail: the shift equals the state CausalConv1dSilu leaves after the same n inputs.
    const int64_t ch = 24, width = 4;
    std::vector<float> x(k1 * ch), w(ch * width), tail((width - 1) * ch), y(k1 * ch);
    std::mt19937_64 rng(900 + n);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto* vec : {&x, &w, &tail})
      for (auto& e : *vec) e = nd(rng);
    std::vector<float> tail_conv = tail, tail_shift = tail;
    CausalConv1dSilu(x.data(), n, ch, w.data(), width, tail_conv.data(), y.data(), Numerics{});
    CausalConvShift(x.data(), n, ch, width, tail_shift.data());
    EXPECT_EQ(tail_conv, tail_shift) << "n=" << n;
  }
}

TEST(KdaChunked, PiecesEqualOneShot) {
  const KdaShape s{2, 16};
  const int64_t t = 150, P = s.num_heads * s.head_dim;
  Inputs in = MakeInputs(t, s, 99, false);
  std::vector<float> st_one = in.state, st_pc = in.state, o_one(t * P, NAN), o_pc(t * P, NAN);
  KdaChunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), t, s, st_one.data(), o_one.data());
  int64_t pos = 0;
  for (int64_t piece : {37, 1, 64, 48}) {
    KdaChunked(&in.q[pos * P], &in.k[pos * P], &in.v[pos * P], &in.g[pos * P], &in.beta[pos * s.num_heads], piece, s,
               st_pc.data(), &o_pc[pos * P]);
    pos += piece;
  }
  ASSERT_EQ(pos, t);
  EXPECT_LT(Compare(o_pc, o_one).rel_l2, 2e-5);
  EXPECT_LT(Compare(st_pc, st_one).rel_l2, 2e-5);
}

TEST(CausalConv, PiecesEqualOneShotAndNaive) {
  const int64_t t = 20, ch = 5, w = 4;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(t * ch), wt(ch * w);
  for (auto& v : x) v = n(rng);
  for (auto& v : wt) v = n(rng);
  std::vector<float> st1((w - 1) * ch, 0.0f), st2 = st1, y1(t * ch, NAN), y2(t * ch, NAN);
  Numerics num;
  CausalConv1dSilu(x.data(), t, ch, wt.data(), w, st1.data(), y1.data(), num);
  int64_t pos = 0;
  for (int64_t piece : {1, 2, 7, 10}) {
    CausalConv1dSilu(&x[pos * ch], piece, ch, wt.data(), w, st2.data(), &y2[pos * ch], num);
    pos += piece;
  }
  EXPECT_EQ(Compare(y2, y1).max_abs, 0.0);
  EXPECT_EQ(Compare(st2, st1).max_abs, 0.0);
  // Naive definition at one point: y[t][c] = silu(Σ_j w[c][j] x[t-3+j][c]).
  const int64_t ti = 5, c = 3;
  float acc = 0;
  for (int64_t j = 0; j < w; ++j) acc += wt[c * w + j] * x[(ti - 3 + j) * ch + c];
  EXPECT_NEAR(y1[ti * ch + c], Silu(acc), 1e-6);
  // The state holds the last 3 inputs.
  for (int64_t j = 0; j < w - 1; ++j) EXPECT_EQ(st1[j * ch + c], x[(t - 3 + j) * ch + c]);
}

TEST(KdaGate, LowerBoundAndSoftplusForms) {
  const KdaShape s{1, 2};
  std::vector<float> f = {0.5f, 30.0f}, dt = {0.1f, -0.2f}, alog = {std::log(2.0f)}, g(2);
  KdaGate(f.data(), 1, s, dt, alog, -5.0f, g.data());
  EXPECT_NEAR(g[0], -5.0f * Sigmoid(2.0f * 0.6f), 1e-6);
  KdaGate(f.data(), 1, s, dt, alog, std::nullopt, g.data());
  EXPECT_NEAR(g[0], -2.0f * std::log(1.0f + std::exp(0.6f)), 1e-6);
  EXPECT_NEAR(g[1], -2.0f * 29.8f, 1e-4);  // z > 20: softplus(z) = z
}

}  // namespace
}  // namespace gyre::ops
