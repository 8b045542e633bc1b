// CompareLogits: a model against itself scores KL 0 and full agreement; against a perturbed copy
// the figures move, positions are counted once, and the mean KL matches a direct computation.
#include "feedback/quant_eval.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace gyre::feedback {
namespace {

const std::string kTiny = std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/glm5_tiny";

TEST(CompareLogits, SelfIsExactAndAPerturbedCopyIsNot) {
  auto ref = Model::Load(kTiny);
  ASSERT_TRUE(ref.ok()) << ref.error().ToString();
  ModelWeights w = (*ref)->weights();
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (float& v : w.lm_head.data) v *= 1.0f + nd(rng);
  auto perturbed = Model::FromWeights((*ref)->config(), std::move(w));
  const int64_t V = (*ref)->config().vocab_size;
  std::vector<int32_t> ids(45);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V) - 1);
  for (auto& id : ids) id = tok(rng);

  const Model* tests[] = {ref->get(), perturbed.get()};
  LogitCompareOptions o;
  o.ctx = 20;  // windows of 21, 21 and 5 tokens: 20 + 20 + 4 = 44 positions
  auto reps = CompareLogits(**ref, tests, ids, o);
  ASSERT_TRUE(reps.ok()) << reps.error().ToString();
  ASSERT_EQ(reps->size(), 2u);
  const LogitCompareReport &self = (*reps)[0], &other = (*reps)[1];
  EXPECT_EQ(self.num_positions, 44);
  EXPECT_EQ(self.num_windows, 3);
  EXPECT_EQ(self.kl_sum, 0.0);
  EXPECT_EQ(self.num_top1_agree, 44);
  EXPECT_EQ(self.nll_ref, self.nll_test);
  int64_t in_buckets = 0;
  for (const PositionBucket& b : other.buckets) in_buckets += b.num_positions;
  EXPECT_EQ(in_buckets, 44);
  EXPECT_GT(other.mean_kl(), 1e-5);
  EXPECT_EQ(other.nll_ref, self.nll_ref);
  EXPECT_NE(other.nll_test, other.nll_ref);

  // The first position of the first window, by hand.
  SequenceState sa = (*ref)->NewSequence(), sb = perturbed->NewSequence();
  std::vector<float> la, lb;
  const SeqInput ia{&sa, std::span<const int32_t>(ids).first(1), false}, ib{&sb, std::span<const int32_t>(ids).first(1), false};
  ASSERT_TRUE((*ref)->Forward(std::span<const SeqInput>(&ia, 1), &la).ok());
  ASSERT_TRUE(perturbed->Forward(std::span<const SeqInput>(&ib, 1), &lb).ok());
  auto lse = [](const std::vector<float>& l) {
    double m = -INFINITY, s = 0;
    for (float v : l) m = std::max<double>(m, v);
    for (float v : l) s += std::exp(v - m);
    return m + std::log(s);
  };
  const double za = lse(la), zb = lse(lb);
  double kl = 0;
  for (int64_t v = 0; v < V; ++v) kl += std::exp(la[v] - za) * ((la[v] - za) - (lb[v] - zb));
  ASSERT_EQ(other.buckets[0].lo, 0);
  EXPECT_GT(kl, 0.0);
  EXPECT_LE(kl, other.kl_max * (1 + 1e-9));

  o.ctx = 0;
  EXPECT_FALSE(CompareLogits(**ref, tests, ids, o).ok());
}

}  // namespace
}  // namespace gyre::feedback
