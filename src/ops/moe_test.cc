#include "ops/moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <map>

#include "ops/basic.h"
#include "ops/sampling.h"

namespace gyre::ops {
namespace {

TEST(Route, BiasSelectsButWeightsAreUnbiased) {
  // 4 experts, top-2; the bias lifts expert 3 into the selection, the weight stays σ(logit).
  const float logits[4] = {2.0f, 1.0f, 0.0f, -1.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 1.0f};
  RouterParams p{4, 2, 1, 1, true, 2.5f};
  int32_t idx[2];
  float w[2];
  Route(logits, 1, bias, p, idx, w);
  EXPECT_EQ(idx[0], 3);  // σ(-1)+1 = 1.27 > σ(2) = 0.88
  EXPECT_EQ(idx[1], 0);
  const float s3 = Sigmoid(-1.0f), s0 = Sigmoid(2.0f);
  EXPECT_NEAR(w[0], 2.5f * s3 / (s3 + s0), 1e-6);
  EXPECT_NEAR(w[1], 2.5f * s0 / (s3 + s0), 1e-6);
}

TEST(Route, GroupLimitedTopK) {
  // 2 groups of 2; group 1 has the best top-2 sum; top-2 then comes from group 1 only.
  const float logits[4] = {3.0f, -3.0f, 1.0f, 1.0f};
  RouterParams p{4, 2, 2, 1, false, 1.0f};
  int32_t idx[2];
  float w[2];
  Route(logits, 1, {}, p, idx, w);
  EXPECT_EQ(idx[0], 2);
  EXPECT_EQ(idx[1], 3);
  EXPECT_NEAR(w[0], Sigmoid(1.0f), 1e-6);
}

TEST(Sampling, GreedyTopKTopPMinP) {
  Sampler s(42);
  std::vector<float> logits = {0.0f, 5.0f, 4.9f, -2.0f};
  SamplingParams greedy;
  EXPECT_EQ(s.Sample(logits, greedy), 1);
  SamplingParams topk{1.0f, 1, 1.0f, 0.0f, 0};
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.Sample(logits, topk), 1);
  SamplingParams topp{1.0f, 0, 0.5f, 0.0f, 0};  // p(1) ≈ 0.52 ≥ 0.5 → only token 1
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.Sample(logits, topp), 1);
  SamplingParams minp{1.0f, 0, 1.0f, 0.5f, 0};  // tokens 1, 2 survive
  std::set<int32_t> seen;
  for (int i = 0; i < 200; ++i) seen.insert(s.Sample(logits, minp));
  EXPECT_EQ(seen, (std::set<int32_t>{1, 2}));
  // Same seed, same draws.
  Sampler a(7), b(7);
  SamplingParams t{1.5f, 0, 1.0f, 0.0f, 0};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.Sample(logits, t), b.Sample(logits, t));
  EXPECT_FALSE(ValidateSampling({1.0f, 0, 0.0f, 0.0f, 0}).ok());
  EXPECT_FALSE(ValidateSampling({1.0f, 0, 1.0f, 2.0f, 0}).ok());
}

TEST(Sampling, SupportIsTheDistributionSampleDrawsFrom) {
  // Ties at the top-k cut keep the lower id; probabilities are over the kept set.
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 2.0f, -1.0f};
  const SampleSupport k2 = SamplingSupport(logits, {1.0f, 2, 1.0f, 0.0f, 0});
  ASSERT_EQ(k2.ids, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(k2.prob[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-12);
  EXPECT_NEAR(k2.prob[0] + k2.prob[1], 1.0, 1e-12);
  // top-p cuts at the first prefix whose mass reaches p; the margin says how close that was.
  const SampleSupport p5 = SamplingSupport(logits, {1.0f, 0, 0.6f, 0.0f, 0});  // p(1) = 0.53 < 0.6
  EXPECT_EQ(p5.ids, (std::vector<int32_t>{1, 2}));
  EXPECT_GT(p5.margin, 0.0);
  EXPECT_TRUE(std::isinf(SamplingSupport(logits, {1.0f, 0, 1.0f, 0.0f, 0}).margin));
  EXPECT_EQ(SamplingSupport(logits, {}).ids, (std::vector<int32_t>{1}));  // greedy
  // Empirical frequencies of Sample match the support (a statistic decides: |f - p| < 5 sigma).
  Sampler s(3);
  const SamplingParams t{0.8f, 3, 1.0f, 0.0f, 0};
  const SampleSupport sup = SamplingSupport(logits, t);
  std::map<int32_t, int> count;
  const int n = 20000;
  for (int i = 0; i < n; ++i) count[s.Sample(logits, t)]++;
  for (size_t j = 0; j < sup.ids.size(); ++j) {
    const double p = sup.prob[j], f = static_cast<double>(count[sup.ids[j]]) / n;
    EXPECT_LT(std::fabs(f - p), 5 * std::sqrt(p * (1 - p) / n)) << "id " << sup.ids[j];
  }
  EXPECT_EQ(count.size(), sup.ids.size());
}

TEST(Sampling, EqualMaximaGoToTheLowestIdAndTopPStopsWhereTheMassReachesP) {
  // Greedy picks the lowest id among equal maxima, as the sorted support does (a tie rule that
  // the continuous-logit tests above never exercise; tools/mutate.py argmax_tie).
  const std::vector<float> tied = {0.5f, 2.0f, -1.0f, 2.0f, 2.0f};
  EXPECT_EQ(Argmax(tied), 1);
  Sampler s(1);
  EXPECT_EQ(s.Sample(tied, SamplingParams{}), 1);
  EXPECT_EQ(SamplingSupport(tied, {}).ids, (std::vector<int32_t>{1}));
  // Two equal logits hold 0.5 each, exactly: top_p = 0.5 is reached by the first alone, 0.75 needs
  // both (tools/mutate.py top_p_boundary: a cut at mass > p keeps both at 0.5).
  const std::vector<float> halves = {1.0f, 1.0f};
  EXPECT_EQ(SamplingSupport(halves, {1.0f, 0, 0.5f, 0.0f, 0}).ids, (std::vector<int32_t>{0}));
  EXPECT_EQ(SamplingSupport(halves, {1.0f, 0, 0.75f, 0.0f, 0}).ids, (std::vector<int32_t>{0, 1}));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.Sample(halves, {1.0f, 0, 0.5f, 0.0f, 0}), 0);
}

}  // namespace
}  // namespace gyre::ops
