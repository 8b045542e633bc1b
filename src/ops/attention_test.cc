// DSA indexer selection rules (docs/model-glm5-next.md §5.3–5.5) and MLA attention vs a naive
// expanded-K/V reference.
#include "ops/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "ops/basic.h"

namespace gyre::ops {
namespace {

std::set<int32_t> Row(const Selection& s, int64_t i) {
  return std::set<int32_t>(s.indices.begin() + s.offsets[i], s.indices.begin() + s.offsets[i + 1]);
}

TEST(IndexerSelect, DenseRegimeAttendsEveryVisibleToken) {
  // m = 4, K = 8 (2 pools), 11 tokens: every query attends all its visible tokens (§5.5).
  const IndexerShape sh{2, 4, 4, 8, true};
  const int64_t T = 11, P = T / 4;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> n(0, 1);
  std::vector<float> q(T * 2 * 4), w(T * 2), pk(P * 4);
  for (auto& v : q) v = n(rng);
  for (auto& v : w) v = n(rng);
  for (auto& v : pk) v = n(rng);
  Selection sel;
  IndexerSelect(q.data(), w.data(), T, 0, pk.data(), P, sh, &sel);
  for (int64_t t = 0; t < T; ++t) {
    std::set<int32_t> want;
    for (int32_t j = 0; j <= t; ++j) want.insert(j);
    EXPECT_EQ(Row(sel, t), want) << "t=" << t;
  }
}

TEST(IndexerSelect, SparseRegimePicksTopPoolsPlusTail) {
  // m = 4, K = 8: at most 2 pools; query t=17 sees 4 complete pools and a 2-token tail.
  const IndexerShape sh{1, 2, 4, 8, true};
  const int64_t P = 4;
  std::vector<float> q = {1.0f, 0.0f}, w = {1.0f};
  std::vector<float> pk = {0.5f, 0, 3.0f, 0, -1.0f, 0, 2.0f, 0};  // scores 0.5, 3, relu(-1)=0, 2 (× 1/√2)
  Selection sel;
  std::vector<float> scores;
  IndexerSelect(q.data(), w.data(), 1, 17, pk.data(), P, sh, &sel, &scores);
  EXPECT_EQ(Row(sel, 0), (std::set<int32_t>{4, 5, 6, 7, 12, 13, 14, 15, 16, 17}));
  // Without the tail rule, the current token is not attended.
  Selection no_tail;
  IndexerShape sh2 = sh;
  sh2.tail = false;
  IndexerSelect(q.data(), w.data(), 1, 17, pk.data(), P, sh2, &no_tail);
  EXPECT_EQ(Row(no_tail, 0), (std::set<int32_t>{4, 5, 6, 7, 12, 13, 14, 15}));
}

TEST(IndexerSelect, TiesBreakTowardsLowerPoolIndex) {
  const IndexerShape sh{1, 2, 4, 4, false};  // one pool budget
  std::vector<float> q = {-1.0f, 0.0f}, w = {1.0f};
  std::vector<float> pk = {1.0f, 0, 2.0f, 0, 3.0f, 0};  // all scores relu(negative) = 0: a 3-way tie
  Selection sel;
  IndexerSelect(q.data(), w.data(), 1, 11, pk.data(), 3, sh, &sel);
  EXPECT_EQ(Row(sel, 0), (std::set<int32_t>{0, 1, 2, 3}));
}

TEST(MlaAttention, AbsorbedEqualsExpandedReference) {
  const MlaShape sh{3, 8, 4, 6, 5, 1.0f / std::sqrt(12.0f)};
  const int64_t T = 9, S = 4, pos0 = T - S;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> n(0, 1);
  std::vector<float> q(S * 3 * 12), lat(T * 5), kr(T * 4);
  Matrix kvb;
  kvb.rows = 3 * (8 + 6);
  kvb.cols = 5;
  kvb.data.resize(kvb.rows * kvb.cols);
  for (auto* v : {&q, &lat, &kr, &kvb.data})
    for (auto& x : *v) x = n(rng);
  Selection sel;  // causal
  std::vector<float> out(S * 3 * 6, NAN);
  const RowView lat_rows{lat.data(), nullptr, 1, 5, 0}, kr_rows{kr.data(), nullptr, 1, 4, 0};
  MlaAttention(q.data(), S, pos0, lat_rows, kr_rows, kvb, sh, sel, out.data(), Numerics{});
  // Naive: expand K = [W_UK c | k_rot], V = W_UV c, causal softmax.
  for (int64_t i = 0; i < S; ++i) {
    for (int64_t h = 0; h < 3; ++h) {
      std::vector<double> sc;
      double mx = -1e30;
      for (int64_t j = 0; j <= pos0 + i; ++j) {
        double a = 0;
        for (int64_t d = 0; d < 8; ++d) {
          double k = 0;
          for (int64_t l = 0; l < 5; ++l) k += kvb.row(h * 14 + d)[l] * lat[j * 5 + l];
          a += q[(i * 3 + h) * 12 + d] * k;
        }
        for (int64_t r = 0; r < 4; ++r) a += q[(i * 3 + h) * 12 + 8 + r] * kr[j * 4 + r];
        sc.push_back(a * sh.scale);
        mx = std::max(mx, sc.back());
      }
      double den = 0;
      for (auto& v : sc) den += (v = std::exp(v - mx));
      for (int64_t x = 0; x < 6; ++x) {
        double o = 0;
        for (int64_t j = 0; j <= pos0 + i; ++j) {
          double vv = 0;
          for (int64_t l = 0; l < 5; ++l) vv += kvb.row(h * 14 + 8 + x)[l] * lat[j * 5 + l];
          o += sc[j] / den * vv;
        }
        EXPECT_NEAR(out[(i * 3 + h) * 6 + x], o, 1e-4) << i << "," << h << "," << x;
      }
    }
  }
}

}  // namespace
}  // namespace gyre::ops
