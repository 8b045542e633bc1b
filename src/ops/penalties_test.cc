// ApplyPenalties (ops/penalties.h) against the fp64 reference (ops/reference.h) on fresh random
// rows, counts, biases and stop ids; min_tokens masks only while it applies; neutral parameters
// leave a row unchanged.
#include "ops/penalties.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ops/reference.h"

namespace gyre::ops {
namespace {

struct Case {
  std::vector<float> logits;
  SamplingParams p;
  std::vector<LogitBias> bias;
  std::vector<int32_t> stops;
  TokenCounts counts;
};

Case RandomCase(int64_t vocab, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.0f, 3.0f);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Case c;
  for (int64_t i = 0; i < vocab; ++i) c.logits.push_back(n(g));
  c.p.presence_penalty = 2.0f * u(g);
  c.p.frequency_penalty = 2.0f * u(g);
  c.p.repetition_penalty = 1.0f + 0.9f * u(g);
  c.p.min_tokens = 5;
  c.counts.Reset(vocab);
  for (int64_t i = 0; i < vocab; ++i) {
    if (g() % 3 == 0) c.counts.output[i] = static_cast<int32_t>(1 + g() % 4);
    if (g() % 4 == 0) c.counts.prompt[i] = 1;
  }
  for (int k = 0; k < 6; ++k) c.bias.push_back({static_cast<int32_t>(g() % vocab), 100.0f * u(g)});
  c.bias.push_back(c.bias.front());  // a repeated id: the biases add up
  c.stops = {static_cast<int32_t>(g() % vocab), static_cast<int32_t>(g() % vocab)};
  return c;
}

std::vector<double> Reference(const Case& c, int64_t num_generated) {
  ref::PenaltyRow row;
  for (const LogitBias& b : c.bias) row.bias.emplace_back(b.id, b.bias);
  row.stop_ids = c.stops;
  row.mask_stops = num_generated < c.p.min_tokens;
  row.output_counts = c.counts.output;
  row.in_prompt = c.counts.prompt;
  row.presence = c.p.presence_penalty;
  row.frequency = c.p.frequency_penalty;
  row.repetition = c.p.repetition_penalty;
  return ref::Penalties(c.logits, row);
}

TEST(Penalties, MatchesTheReferenceOnRandomRows) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const int64_t vocab = 1 + static_cast<int64_t>(seed * 37 % 500);
    const Case c = RandomCase(vocab, seed);
    for (int64_t generated : {int64_t{0}, int64_t{4}, int64_t{5}, int64_t{9}}) {
      std::vector<float> row = c.logits;
      ApplyPenalties(row, c.p, c.bias, c.stops, generated, &c.counts);
      const std::vector<double> want = Reference(c, generated);
      int changed = 0;
      for (int64_t i = 0; i < vocab; ++i) {
        changed += row[i] != c.logits[i];
        if (std::isinf(want[i])) {
          EXPECT_TRUE(std::isinf(row[i]) && row[i] < 0) << "seed " << seed << " id " << i;
          continue;
        }
        EXPECT_NEAR(row[i], want[i], 1e-5 * (1.0 + std::abs(want[i]))) << "seed " << seed << " id " << i;
      }
      EXPECT_GT(changed, 0) << "seed " << seed;  // the case exercises something
    }
  }
}

TEST(Penalties, MinTokensMasksStopIdsOnlyUntilReached) {
  std::vector<float> logits = {1, 2, 3, 4};
  SamplingParams p;
  p.min_tokens = 2;
  const std::vector<int32_t> stops = {3};
  std::vector<float> row = logits;
  ApplyPenalties(row, p, {}, stops, 1, nullptr);
  EXPECT_TRUE(std::isinf(row[3]));
  EXPECT_EQ(Argmax(row), 2);
  row = logits;
  ApplyPenalties(row, p, {}, stops, 2, nullptr);
  EXPECT_EQ(row, logits);
}

TEST(Penalties, RepetitionDividesPositiveAndMultipliesNegativeLogits) {
  std::vector<float> row = {2.0f, -2.0f, 2.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  TokenCounts c;
  c.Reset(3);
  c.Add(0, 0, 1);  // prompt token
  c.Add(1, 1, 1);  // output token
  ApplyPenalties(row, p, {}, {}, 0, &c);
  EXPECT_EQ(row, (std::vector<float>{1.0f, -4.0f, 2.0f}));
}

TEST(Penalties, FrequencyAndPresenceCountOnlyTheOutput) {
  std::vector<float> row = {0.0f, 0.0f, 0.0f};
  SamplingParams p;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 1.0f;
  TokenCounts c;
  c.Reset(3);
  c.Add(0, 0, 2);  // prompt: no frequency/presence penalty
  c.Add(1, 1, 2);  // prompt too: not counted below
  c.Add(1, 2, 2);  // output: twice
  c.Add(1, 3, 2);
  c.Add(2, 4, 2);  // output: once
  ApplyPenalties(row, p, {}, {}, 0, &c);
  EXPECT_EQ(row, (std::vector<float>{0.0f, -2.0f, -1.5f}));
}

TEST(Penalties, NeutralParametersLeaveTheRowUnchanged) {
  const Case c = RandomCase(64, 3);
  std::vector<float> row = c.logits;
  SamplingParams p;
  EXPECT_FALSE(HasPenalties(p));
  ApplyPenalties(row, p, {}, c.stops, 0, &c.counts);
  EXPECT_EQ(row, c.logits);
}

TEST(Penalties, ValidateSamplingChecksTheRanges) {
  SamplingParams p;
  p.presence_penalty = 2.5f;
  EXPECT_FALSE(ValidateSampling(p).ok());
  p = {};
  p.frequency_penalty = -2.01f;
  EXPECT_FALSE(ValidateSampling(p).ok());
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_FALSE(ValidateSampling(p).ok());
  p = {};
  p.min_tokens = -1;
  EXPECT_FALSE(ValidateSampling(p).ok());
  p = {};
  p.repetition_penalty = 1.3f;
  p.presence_penalty = -2.0f;
  EXPECT_TRUE(ValidateSampling(p).ok());
}

}  // namespace
}  // namespace gyre::ops
