// The CP shard summary against the engine's KDA op: the affine identity
// o(S) = o⁰ + P·S, S_end = M·S + H must hold for any start state S.
#include "parallel/context_parallel.h"

#include <gtest/gtest.h>

#include <random>

#include "ops/basic.h"

namespace gyre::parallel {
namespace {

struct Inputs {
  std::vector<float> q, k, v, g, beta, s0;
};

Inputs MakeInputs(int64_t t, int64_t H, int64_t K, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Inputs in;
  for (auto* x : {&in.q, &in.k, &in.v}) {
    x->resize(t * H * K);
    for (auto& e : *x) e = n(rng);
  }
  in.g.resize(t * H * K);
  for (auto& e : in.g) e = -0.1f * u(rng);
  in.beta.resize(t * H);
  for (auto& e : in.beta) e = u(rng);
  in.s0.resize(H * K * K);
  for (auto& e : in.s0) e = n(rng);
  return in;
}

class ShardSummary : public ::testing::TestWithParam<int64_t> {};

TEST_P(ShardSummary, IsTheAffineMapOfTheChunkedOp) {
  const int64_t t = GetParam(), H = 2, K = 16;
  const ops::KdaShape s{H, K};
  const Inputs in = MakeInputs(t, H, K, 7 + t);
  // Engine: the chunked op from a non-zero start state.
  std::vector<float> o_ref(t * H * K), state = in.s0;
  ops::KdaChunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), t, s, state.data(), o_ref.data());
  // Summary from zero, then the start state applied.
  KdaShardSummary sum = SummarizeKdaShard(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), t, s,
                                          MergePrecision::kF32);
  std::vector<float> o = sum.o_zero, s_end(H * K * K);
  ApplyStartState(sum, in.s0.data(), t, s, MergePrecision::kF32, o.data(), s_end.data());
  EXPECT_LT(ops::Compare(o, o_ref).rel_l2, 1e-5);
  EXPECT_LT(ops::Compare(s_end, state).rel_l2, 1e-5);
}

// 1 token, one partial chunk, exactly two chunks, a partial third.
INSTANTIATE_TEST_SUITE_P(Lengths, ShardSummary, ::testing::Values(1, 37, 128, 150));

TEST(ShardSummary, LowPrecisionChainsDiffer) {
  const int64_t t = 200, H = 1, K = 16;
  const ops::KdaShape s{H, K};
  const Inputs in = MakeInputs(t, H, K, 3);
  auto run = [&](MergePrecision p) {
    return SummarizeKdaShard(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), t, s, p).m;
  };
  const auto f32 = run(MergePrecision::kF32), bf16 = run(MergePrecision::kBf16), tf32 = run(MergePrecision::kTf32);
  const double e_bf16 = ops::Compare(bf16, f32).rel_l2, e_tf32 = ops::Compare(tf32, f32).rel_l2;
  EXPECT_GT(e_bf16, 1e-4);
  EXPECT_GT(e_tf32, 1e-5);
  EXPECT_GT(e_bf16, e_tf32);  // 8 mantissa bits lose more than 10
}

TEST(MergePrecision, ParsesAndRounds) {
  MergePrecision p;
  EXPECT_TRUE(ParseMergePrecision("bf16", &p));
  EXPECT_EQ(p, MergePrecision::kBf16);
  EXPECT_TRUE(ParseMergePrecision("tf32", &p));
  EXPECT_TRUE(ParseMergePrecision("fp32", &p));
  EXPECT_EQ(p, MergePrecision::kF32);
  EXPECT_FALSE(ParseMergePrecision("fp16", &p));
  // tf32 keeps 10 mantissa bits: 1 + 2^-10 survives, 1 + 2^-11 is a tie and rounds to even (1),
  // 1 + 3·2^-11 rounds up to 1 + 2^-9.
  EXPECT_EQ(RoundOperand(1.0f + 0x1p-10f, MergePrecision::kTf32), 1.0f + 0x1p-10f);
  EXPECT_EQ(RoundOperand(1.0f + 0x1p-11f, MergePrecision::kTf32), 1.0f);
  EXPECT_EQ(RoundOperand(1.0f + 3 * 0x1p-11f, MergePrecision::kTf32), 1.0f + 0x1p-9f);
  EXPECT_EQ(RoundOperand(1.0f + 0x1p-11f, MergePrecision::kF32), 1.0f + 0x1p-11f);
  EXPECT_EQ(RoundOperand(1.0f + 0x1p-9f, MergePrecision::kBf16), 1.0f);  // tie → even
}

TEST(KdaCp, TooFewTokensForTheHaloIsAnError) {
  const int64_t H = 1, K = 8, P = H * K;
  KdaCpWeights w;
  w.shape = {H, K};
  w.conv = {std::vector<float>(3 * P * 4, 0.1f), 3 * P, 4};
  w.o_norm.assign(K, 1.0f);
  w.o = {std::vector<float>(4 * P, 0.1f), 4, P};
  std::vector<float> u(2 * 3 * P, 1.0f), g(2 * P, -0.1f), beta(2 * H, 0.5f), z(2 * P, 0.0f);
  Status s = RunOnRanks(2, [&](Communicator& c) {
    KdaCpInputs in{u.data(), g.data(), beta.data(), z.data(), 2};  // 2 < W − 1 = 3
    KdaCpTrace t;
    return KdaCpForward(c, w, {}, in, &t);
  });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("at least 3 tokens"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace gyre::parallel
