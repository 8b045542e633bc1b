// Tests of the W8A8 formats and reference GEMMs against fp64 references on fresh random inputs.
// Tolerances (rel-L2 unless said): a GEMM vs the fp64 product of the same dequantized operands:
// 1e-5 (fp32 accumulation only); vs the fp64 product of the unquantized operands: FP8 8e-2,
// INT8 3e-2 (quantization error of e4m3's 3 mantissa bits and of 127 levels per row/token).
#include "quant/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/dtype.h"
#include "quant/fp8.h"
#include "quant/policy.h"

namespace gyre {
namespace {

// The e4m3 code nearest to x in fp64 over the finite codes; ties go to the even code (mantissa
// LSB 0). Returns the positive code for |x| (sign handled by the caller).
int NearestCode(double ax) {
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7e; ++c) {
    const double d = std::fabs(static_cast<double>(F8E4M3ToF32(static_cast<uint8_t>(c))) - ax);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return best;
}

double RelL2(const std::vector<float>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

std::vector<float> Gaussian(size_t n, std::mt19937& rng, float sd = 1.0f) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// y = a · bᵀ in fp64.
std::vector<double> MatmulF64(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t n,
                              int64_t k) {
  std::vector<double> y(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t t = 0; t < k; ++t) acc += static_cast<double>(a[i * k + t]) * b[j * k + t];
      y[i * n + j] = acc;
    }
  return y;
}

TEST(Fp8E4M3, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN
    const float v = F8E4M3ToF32(static_cast<uint8_t>(c));
    EXPECT_EQ(F32ToF8E4M3(v), c) << "code " << c << " value " << v;
    EXPECT_EQ(F32ToF8E4M3Torch(v), c) << "code " << c;
  }
  EXPECT_EQ(F8E4M3ToF32(0x7e), 448.0f);
  EXPECT_EQ(F8E4M3ToF32(0x01), std::ldexp(1.0f, -9));
}

TEST(Fp8E4M3, RoundsToNearestEvenLikeFp64Reference) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> log2mag(-13.0, 8.8);  // 2^-13 .. ~445
  std::vector<double> xs;
  for (int i = 0; i < 20000; ++i) xs.push_back(std::exp2(log2mag(rng)));
  // Every midpoint between adjacent finite codes (the tie cases), and just above / below it.
  for (int c = 0; c < 0x7e; ++c) {
    const double mid = 0.5 * (F8E4M3ToF32(static_cast<uint8_t>(c)) + F8E4M3ToF32(static_cast<uint8_t>(c + 1)));
    xs.push_back(mid);
    xs.push_back(std::nextafter(static_cast<float>(mid), 0.0f));
    xs.push_back(std::nextafter(static_cast<float>(mid), 1e30f));
  }
  for (double x : xs) {
    const float f = static_cast<float>(x);
    const int want = NearestCode(std::fabs(static_cast<double>(f)));
    ASSERT_EQ(F32ToF8E4M3(f), want) << "x = " << f;
    ASSERT_EQ(F32ToF8E4M3(-f), want | 0x80) << "x = " << -f;
    ASSERT_EQ(F32ToF8E4M3Torch(f), want) << "x = " << f;
  }
}

TEST(Fp8E4M3, SaturationAndNanFollowTheirContracts) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // Saturating encoder: ±448 beyond the range, inf included; NaN stays NaN with its sign.
  EXPECT_EQ(F32ToF8E4M3(448.0f), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(463.9f), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(464.0f), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(470.0f), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(1e30f), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(-1e30f), 0xfe);
  EXPECT_EQ(F32ToF8E4M3(inf), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(-inf), 0xfe);
  EXPECT_EQ(F32ToF8E4M3(nan), 0x7f);
  EXPECT_EQ(F32ToF8E4M3(-nan), 0xff);
  // torch: 464 ties to even (448); anything rounding past it, and inf, is NaN.
  EXPECT_EQ(F32ToF8E4M3Torch(464.0f), 0x7e);
  EXPECT_EQ(F32ToF8E4M3Torch(464.1f), 0x7f);
  EXPECT_EQ(F32ToF8E4M3Torch(-500.0f), 0xff);
  EXPECT_EQ(F32ToF8E4M3Torch(inf), 0x7f);
  EXPECT_EQ(F32ToF8E4M3Torch(nan), 0x7f);
  EXPECT_EQ(F32ToF8E4M3(-0.0f), 0x80);
  EXPECT_EQ(F32ToF8E4M3(1e-9f), 0x00);  // below half the smallest subnormal
}

TEST(Fp8Block, ScalesAndCodesFollowTheFormat) {
  std::mt19937 rng(7);
  const int64_t N = 200, K = 300;  // not multiples of 128: partial edge blocks
  std::vector<float> w = Gaussian(N * K, rng, 0.05f);
  w[5] = 0.9f;  // one block with a large amax
  const QuantizedWeight q = QuantizeFp8Block(w.data(), N, K);
  ASSERT_EQ(q.scale_rows(), 2);
  ASSERT_EQ(q.scale_cols(), 3);
  ASSERT_EQ(q.scale.size(), 6u);
  for (int64_t bi = 0; bi < 2; ++bi)
    for (int64_t bj = 0; bj < 3; ++bj) {
      float amax = 0;
      for (int64_t i = bi * 128; i < std::min<int64_t>(N, bi * 128 + 128); ++i)
        for (int64_t j = bj * 128; j < std::min<int64_t>(K, bj * 128 + 128); ++j)
          amax = std::max(amax, std::fabs(w[i * K + j]));
      EXPECT_EQ(q.scale[bi * 3 + bj], amax / 448.0f);
    }
  const std::vector<float> d = Dequantize(q);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < K; ++j) {
      const float s = q.scale[(i / 128) * 3 + j / 128];
      ASSERT_EQ(q.q[i * K + j], F32ToF8E4M3(w[i * K + j] / s));
      // Half an e4m3 ulp: 2^-4 relative for normals, 2^-10 · s absolute in the subnormal range.
      const double err = std::fabs(static_cast<double>(d[i * K + j]) - w[i * K + j]);
      ASSERT_LE(err, std::fabs(w[i * K + j]) * 0.0625 + s * std::ldexp(1.0, -10) * 1.0001) << i << "," << j;
    }
  // The block holding the outlier reaches ±448 exactly there.
  EXPECT_EQ(q.q[5], 0x7e);
}

TEST(Fp8Block, AllZeroBlockGetsTheFloorScale) {
  std::vector<float> w(130 * 4, 0.0f);
  const QuantizedWeight q = QuantizeFp8Block(w.data(), 130, 4);
  EXPECT_EQ(q.scale[0], 1e-4f / 448.0f);
  for (float v : Dequantize(q)) EXPECT_EQ(v, 0.0f);
}

TEST(Fp8Act, PerTokenPerGroupScales) {
  std::mt19937 rng(11);
  const int64_t n = 5, k = 300, g = 128;
  std::vector<float> x = Gaussian(n * k, rng, 3.0f);
  std::vector<uint8_t> q(n * k);
  std::vector<float> s(n * 3);
  QuantizeActFp8(x.data(), n, k, g, q.data(), s.data());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t gi = 0; gi < 3; ++gi) {
      float amax = 0;
      for (int64_t j = gi * g; j < std::min(k, gi * g + g); ++j) amax = std::max(amax, std::fabs(x[i * k + j]));
      EXPECT_EQ(s[i * 3 + gi], amax / 448.0f);
      for (int64_t j = gi * g; j < std::min(k, gi * g + g); ++j)
        EXPECT_EQ(q[i * k + j], F32ToF8E4M3(x[i * k + j] / s[i * 3 + gi]));
    }
}

struct GemmCase {
  int64_t m, n, k;
};

TEST(GemmFp8Block, MatchesFp64OnDequantizedValues) {
  for (const GemmCase c : {GemmCase{1, 64, 128}, GemmCase{7, 200, 300}, GemmCase{33, 130, 129}}) {
    std::mt19937 rng(static_cast<uint32_t>(c.m * 1000 + c.n + c.k));
    const std::vector<float> x = Gaussian(c.m * c.k, rng), w = Gaussian(c.n * c.k, rng, 0.05f);
    const QuantizedWeight qw = QuantizeFp8Block(w.data(), c.n, c.k);
    const int64_t ng = qw.num_groups();
    std::vector<uint8_t> qa(c.m * c.k);
    std::vector<float> sa(c.m * ng), xd(c.m * c.k);
    QuantizeActFp8(x.data(), c.m, c.k, 128, qa.data(), sa.data());
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.k; ++j) xd[i * c.k + j] = F8E4M3ToF32(qa[i * c.k + j]) * sa[i * ng + j / 128];
    std::vector<float> y(c.m * c.n, std::numeric_limits<float>::quiet_NaN());
    GemmFp8BlockRef(qa.data(), sa.data(), c.m, qw, y.data());
    const double e_deq = RelL2(y, MatmulF64(xd, Dequantize(qw), c.m, c.n, c.k));
    const double e_full = RelL2(y, MatmulF64(x, w, c.m, c.n, c.k));
    EXPECT_LT(e_deq, 1e-5) << c.m << "x" << c.n << "x" << c.k;
    EXPECT_LT(e_full, 8e-2) << c.m << "x" << c.n << "x" << c.k;
    EXPECT_GT(e_full, 1e-3);  // the quantization is really there
  }
}

TEST(GemmInt8, MatchesFp64OnDequantizedValues) {
  for (const GemmCase c : {GemmCase{1, 64, 128}, GemmCase{7, 200, 300}, GemmCase{33, 130, 129}}) {
    std::mt19937 rng(static_cast<uint32_t>(c.m * 1000 + c.n + c.k + 1));
    const std::vector<float> x = Gaussian(c.m * c.k, rng), w = Gaussian(c.n * c.k, rng, 0.05f);
    const QuantizedWeight qw = QuantizeInt8Channel(w.data(), c.n, c.k);
    ASSERT_EQ(qw.scale.size(), static_cast<size_t>(c.n));
    std::vector<int8_t> qa(c.m * c.k);
    std::vector<float> sa(c.m), xd(c.m * c.k);
    QuantizeActInt8(x.data(), c.m, c.k, qa.data(), sa.data());
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.k; ++j) xd[i * c.k + j] = qa[i * c.k + j] * sa[i];
    std::vector<float> y(c.m * c.n, std::numeric_limits<float>::quiet_NaN());
    GemmInt8Ref(qa.data(), sa.data(), c.m, qw, y.data());
    // The int32 sum is exact; only the two scale products round.
    const double e_deq = RelL2(y, MatmulF64(xd, Dequantize(qw), c.m, c.n, c.k));
    const double e_full = RelL2(y, MatmulF64(x, w, c.m, c.n, c.k));
    EXPECT_LT(e_deq, 1e-6);
    EXPECT_LT(e_full, 3e-2);
    EXPECT_GT(e_full, 1e-4);
  }
}

TEST(Int8Channel, RowScalesAndRoundingHalfEven) {
  // Row 0: amax 127 → scale 1, so codes are the values rounded half to even.
  std::vector<float> w = {127.0f, 2.5f, -3.5f, 0.5f, 1.5f, -127.0f};
  const QuantizedWeight q = QuantizeInt8Channel(w.data(), 1, 6);
  EXPECT_EQ(q.scale[0], 1.0f);
  const auto* c = reinterpret_cast<const int8_t*>(q.q.data());
  EXPECT_EQ(c[0], 127);
  EXPECT_EQ(c[1], 2);
  EXPECT_EQ(c[2], -4);
  EXPECT_EQ(c[3], 0);
  EXPECT_EQ(c[4], 2);
  EXPECT_EQ(c[5], -127);
}

// The per-row scales the GPU takes: fp8 row i repeats block row i / 128 (partial edge blocks
// included); int8 is the per-channel scale itself.
TEST(ScalesPerRow, RepeatsBlockRowsAndKeepsChannelScales) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t N = 300, K = 200;
  std::vector<float> w(N * K);
  for (auto& v : w) v = nd(rng);
  const QuantizedWeight f = QuantizeFp8Block(w.data(), N, K);
  const std::vector<float> s = ScalesPerRow(f);
  ASSERT_EQ(s.size(), static_cast<size_t>(N * 2));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t g = 0; g < 2; ++g) EXPECT_EQ(s[i * 2 + g], f.scale[(i / 128) * 2 + g]) << i << " " << g;
  const QuantizedWeight q = QuantizeInt8Channel(w.data(), N, K);
  EXPECT_EQ(ScalesPerRow(q), q.scale);
}

TEST(Policy, QuantizesProjectionsAndKeepsTheRest) {
  const std::string p = "model.language_model.layers.3.";
  for (const char* n : {"self_attn.q_proj.weight", "self_attn.o_proj.weight", "self_attn.kv_b_proj.weight",
                        "self_attn.q_a_proj.weight", "self_attn.indexer.wq_b.weight", "mlp.experts.7.down_proj.weight",
                        "mlp.shared_experts.up_proj.weight", "mlp.gate_proj.weight", "eh_proj.weight"}) {
    EXPECT_TRUE(ShouldQuantize(p + n, {256, 128})) << n;
  }
  for (const char* n : {"mlp.gate.weight", "self_attn.f_a_proj.weight", "self_attn.f_b_proj.weight",
                        "self_attn.b_proj.weight", "self_attn.g_a_proj.weight", "self_attn.g_b_proj.weight",
                        "self_attn.indexer.weights_proj.weight", "input_layernorm.weight", "hc_attn_fn",
                        "self_attn.A_log", "shared_head.head.weight"}) {
    EXPECT_FALSE(ShouldQuantize(p + n, {256, 128})) << n;
  }
  EXPECT_FALSE(ShouldQuantize("model.language_model.embed_tokens.weight", {4096, 256}));
  EXPECT_FALSE(ShouldQuantize("lm_head.weight", {4096, 256}));
  EXPECT_FALSE(ShouldQuantize("model.visual.blocks.0.attn.q_proj.weight", {32, 32}));
  EXPECT_FALSE(ShouldQuantize(p + "self_attn.q_conv1d.weight", {256, 1, 4}));
}

}  // namespace
}  // namespace gyre
