#include "feedback/verify_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ops/reference.h"

namespace gyre::feedback {
namespace {

TEST(VerifyOps, EveryRegisteredOpPassesOnCpu) {
  const VerifyOpsReport r = VerifyOps({}, "", ops::Backend::kCpu, 12345);
  EXPECT_GE(r.rows.size(), 30u);
  EXPECT_EQ(r.num_failed(), 0) << r.Human();
}

TEST(VerifyOps, DeliberatelyWrongOpFails) {
  // A linear backend with an off-by-one in the reduction (it ignores the last input column),
  // checked against the fp64 reference exactly as registered ops are.
  ops::OpSpec wrong = *ops::FindOp("linear");
  wrong.name = "linear.off_by_one";
  wrong.check = [](const ops::OpShape& s, uint64_t seed, ops::Backend) -> Result<ops::CheckResult> {
    const int64_t n = s.dims.at("N"), in = s.dims.at("IN"), out = s.dims.at("OUT");
    std::mt19937_64 g(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> x(n * in), w(out * in);
    for (auto& v : x) v = d(g);
    for (auto& v : w) v = d(g);
    std::vector<float> y(n * out, NAN);
    Matrix cut{std::vector<float>(out * (in - 1)), out, in - 1};
    for (int64_t o = 0; o < out; ++o)
      for (int64_t j = 0; j < in - 1; ++j) cut.data[o * (in - 1) + j] = w[o * in + j];
    ops::Linear(x.data(), n, cut, y.data(), Numerics{}, /*ldx=*/in);
    const auto want = ops::ref::Linear(x, n, w, out, in);
    ops::CheckResult c;
    c.num_outputs = n * out;
    c.diff = ops::Compare(y, std::vector<float>(want.begin(), want.end()));
    return c;
  };
  const auto rep = VerifyOps({wrong}, "", ops::Backend::kCpu, 1);
  EXPECT_EQ(rep.num_failed(), static_cast<int>(rep.rows.size()));
  EXPECT_NE(rep.Human().find("FAIL linear.off_by_one"), std::string::npos);
  // The poison check: an op whose backend writes nothing is caught even with a zero diff.
  ops::OpSpec lazy = *ops::FindOp("rmsnorm");
  lazy.name = "rmsnorm.lazy";
  lazy.check = [](const ops::OpShape&, uint64_t, ops::Backend) -> Result<ops::CheckResult> {
    ops::CheckResult c;
    c.num_outputs = 10;
    c.num_unwritten = 3;
    return c;
  };
  const auto rep2 = VerifyOps({lazy}, "", ops::Backend::kCpu, 1);
  EXPECT_EQ(rep2.num_failed(), static_cast<int>(rep2.rows.size()));
  EXPECT_NE(rep2.Human().find("UNWRITTEN 3"), std::string::npos);
}

TEST(VerifyOps, UnbuiltBackendIsReportedNotPassed) {
  const auto rep = VerifyOps({}, "rmsnorm", ops::Backend::kCuda, 1);  // no CUDA path yet
  ASSERT_FALSE(rep.rows.empty());
  EXPECT_FALSE(rep.rows[0].pass);
  EXPECT_NE(rep.rows[0].error.find("not built"), std::string::npos);
}

TEST(VerifyOps, SameSeedSameNumbers) {
  const auto a = VerifyOps({}, "kda.chunk", ops::Backend::kCpu, 77);
  const auto b = VerifyOps({}, "kda.chunk", ops::Backend::kCpu, 77);
  ASSERT_EQ(a.rows.size(), b.rows.size());
  for (size_t i = 0; i < a.rows.size(); ++i) EXPECT_EQ(a.rows[i].rel_l2, b.rows[i].rel_l2);
}

}  // namespace
}  // namespace gyre::feedback
