// The registry's quantization ops pass their own checks on fresh seeds, and ops::Linear on a
// quantized Matrix computes the reference GEMMs of quant/quant.h.
#include "ops/registry_quant.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "ops/basic.h"
#include "quant/quant.h"

namespace gyre::ops {
namespace {

TEST(QuantOps, EveryShapePassesOnFreshSeeds) {
  int checked = 0;
  for (const OpSpec& op : QuantOpSpecs()) {
    for (const OpShape& sh : op.shapes) {
      for (uint64_t seed : {11ull, 12ull, 13ull}) {
        auto r = op.check(sh, seed, Backend::kCpu);
        ASSERT_TRUE(r.ok()) << op.name << " " << sh.label << ": " << r.error().ToString();
        EXPECT_EQ(r->num_unwritten, 0) << op.name << " " << sh.label;
        EXPECT_LE(r->diff.rel_l2, op.tolerance) << op.name << " " << sh.label << " seed " << seed;
        ++checked;
      }
    }
#ifndef GYRE_CUDA
    EXPECT_FALSE(op.check(op.shapes[0], 1, Backend::kCuda).ok()) << op.name;  // not built
#endif
  }
  EXPECT_EQ(checked, 3 * (2 + 4 * 3 + 6 * 3));
}

TEST(QuantLinear, MatchesTheReferenceGemms) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = 9, K = 300, N = 130;
  std::vector<float> x(n * K), w(N * K);
  for (auto& v : x) v = nd(rng);
  for (auto& v : w) v = nd(rng) * 0.05f;
  for (QuantScheme scheme : {QuantScheme::kFp8Block, QuantScheme::kInt8Channel}) {
    auto q = std::make_shared<QuantizedWeight>(scheme == QuantScheme::kFp8Block ? QuantizeFp8Block(w.data(), N, K)
                                                                               : QuantizeInt8Channel(w.data(), N, K));
    Matrix m = DequantizedMatrix(*q);
    m.quant = q;
    std::vector<float> y(n * N), want(n * N), plain(n * N);
    Linear(x.data(), n, m, y.data(), Numerics{});
    if (scheme == QuantScheme::kFp8Block) {
      std::vector<uint8_t> qa(n * K);
      std::vector<float> sa(n * q->num_groups());
      QuantizeActFp8(x.data(), n, K, 128, qa.data(), sa.data());
      GemmFp8BlockRef(qa.data(), sa.data(), n, *q, want.data());
      EXPECT_LT(Compare(y, want).rel_l2, 1e-5);
    } else {
      std::vector<int8_t> qa(n * K);
      std::vector<float> sa(n);
      QuantizeActInt8(x.data(), n, K, qa.data(), sa.data());
      GemmInt8Ref(qa.data(), sa.data(), n, *q, want.data());
      EXPECT_EQ(y, want);  // the same int32 sums and the same two products
    }
    // Activation quantization is really applied: weight-only (quant cleared) differs.
    Matrix weight_only = m;
    weight_only.quant.reset();
    Linear(x.data(), n, weight_only, plain.data(), Numerics{});
    EXPECT_GT(Compare(y, plain).rel_l2, 1e-4) << QuantSchemeName(scheme);
  }
}

}  // namespace
}  // namespace gyre::ops
