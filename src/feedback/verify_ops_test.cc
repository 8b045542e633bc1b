#include "feedback/verify_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/dtype.h"
#include "ops/attention.h"
#include "ops/kda.h"
#include "ops/reference.h"
#include "ops/registry_quant.h"

namespace gyre::feedback {
namespace {

// A CPU-only op (e4m3 and the weight quantizers) is listed as not covered on cuda, neither run nor
// failed; the activation quantizers and W8A8 GEMMs have a cuda backend and are run there.
TEST(VerifyOps, CpuOnlyOpsAreNotCoveredOnCuda) {
  const std::vector<ops::OpSpec> quant = ops::QuantOpSpecs();
  size_t cpu_only = 0, cuda_shapes = 0;
  for (const ops::OpSpec& op : quant) {
    const bool cuda = std::find(op.backends.begin(), op.backends.end(), ops::Backend::kCuda) != op.backends.end();
    cpu_only += !cuda;
    if (cuda) cuda_shapes += op.shapes.size();
  }
  EXPECT_EQ(cpu_only, 3u);
  const VerifyOpsReport r = VerifyOps(quant, "", ops::Backend::kCuda, 1);
  EXPECT_EQ(r.rows.size(), cuda_shapes);
  ASSERT_EQ(r.not_covered.size(), cpu_only);
  EXPECT_EQ(r.not_covered[0], quant[0].name);
  EXPECT_NE(r.Human().find("not on this backend"), std::string::npos);
  EXPECT_EQ(r.Json()["not_covered"].size(), cpu_only);
  const VerifyOpsReport cpu = VerifyOps(quant, "", ops::Backend::kCpu, 1);
  EXPECT_TRUE(cpu.not_covered.empty());
  EXPECT_FALSE(cpu.rows.empty());
}

// OpSpec::cuda_tolerance bounds the cuda rows (with its class) and leaves the cpu rows alone.
TEST(VerifyOps, CudaToleranceAppliesToCudaRowsOnly) {
  ops::OpSpec op;
  op.name = "fake.half";
  op.tolerance_class = "tight";
  op.tolerance = 1e-6;
  op.cuda_tolerance = 0.75;
  op.cuda_tolerance_class = "loose on cuda";
  op.shapes = {ops::OpShape{"N=1", {{"N", 1}}, 0}};
  op.check = [](const ops::OpShape&, uint64_t, ops::Backend) -> Result<ops::CheckResult> {
    ops::CheckResult c;
    c.num_outputs = 1;
    c.diff.rel_l2 = 0.5;
    return c;
  };
  const VerifyOpsReport g = VerifyOps({op}, "", ops::Backend::kCuda, 1);
  ASSERT_EQ(g.rows.size(), 1u);
  EXPECT_TRUE(g.rows[0].pass);
  EXPECT_EQ(g.rows[0].tolerance, 0.75);
  EXPECT_EQ(g.rows[0].tolerance_class, "loose on cuda");
  const VerifyOpsReport c = VerifyOps({op}, "", ops::Backend::kCpu, 1);
  ASSERT_EQ(c.rows.size(), 1u);
  EXPECT_FALSE(c.rows[0].pass);
  EXPECT_EQ(c.rows[0].tolerance, 1e-6);
}

TEST(VerifyOps, EveryRegisteredOpPassesOnCpu) {
  const VerifyOpsReport r = VerifyOps({}, "", ops::Backend::kCpu, 12345);
  EXPECT_GE(r.rows.size(), 30u);
  EXPECT_EQ(r.num_failed(), 0) << r.Human();
  // Margins are printed and are what they say; the constructed-tie shapes run on every run.
  int num_tie_rows = 0;
  for (const OpCheckRow& row : r.rows) {
    EXPECT_LE(row.Margin(), 1.0) << row.op << " " << row.shape;
    if (row.tolerance > 0) EXPECT_DOUBLE_EQ(row.Margin(), row.rel_l2 / row.tolerance);
    if (row.op == "kda.chunk" || row.op == "linear" || row.op == "mla.attention") {
      EXPECT_NE(row.tolerance_class.find("(calibrated)"), std::string::npos) << row.op << " " << row.shape;
    }
    num_tie_rows += row.shape.find("TIES=1") != std::string::npos;
  }
  EXPECT_EQ(num_tie_rows, 3);  // dsa.select x1, moe.route x2
  EXPECT_NE(r.Human().find("margin "), std::string::npos);
  EXPECT_TRUE(r.Json()["checks"][0].contains("margin"));
}

// A router whose tie rule is reversed (equal scores: higher index first) agrees with the
// reference on continuous random logits, so random inputs would pass it; the registry's TIES=1
// shapes construct equal scores, and there it must fail.
TEST(VerifyOps, ConstructedTiesCatchAReversedTieRule) {
  ops::OpSpec wrong = *ops::FindOp("moe.route");
  wrong.name = "moe.route.reversed_ties";
  wrong.check = [](const ops::OpShape& s, uint64_t seed, ops::Backend) -> Result<ops::CheckResult> {
    const int64_t n = s.dims.at("N"), e = s.dims.at("E"), k = s.dims.at("K"), g = s.dims.at("G");
    const int64_t tg = g > 1 ? g / 2 : 1;
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::uniform_int_distribution<int> level(0, 3);
    std::vector<float> logits(n * e), reversed(n * e);
    for (float& x : logits) x = s.dims.at("TIES") ? 0.5f * static_cast<float>(level(rng)) : normal(rng);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < e; ++j) reversed[i * e + j] = logits[i * e + (e - 1 - j)];
    // The "backend": the reference on the expert axis reversed, ids mapped back, so every tie
    // is broken towards the higher original index.
    ops::ref::Vec got = ops::ref::Route(reversed, n, e, {}, k, g, tg, true, 2.5);
    for (int64_t i = 0; i < n * k; ++i) got[i] = static_cast<double>(e - 1) - got[i];
    const ops::ref::Vec want = ops::ref::Route(logits, n, e, {}, k, g, tg, true, 2.5);
    ops::CheckResult c;
    c.num_outputs = 2 * n * k;
    c.diff = ops::Compare(std::vector<float>(got.begin(), got.end()), std::vector<float>(want.begin(), want.end()));
    return c;
  };
  const auto rep = VerifyOps({wrong}, "", ops::Backend::kCpu, 5);
  int num_tie_rows = 0;
  for (const OpCheckRow& row : rep.rows) {
    if (row.shape.find("TIES=1") != std::string::npos) {
      ++num_tie_rows;
      EXPECT_FALSE(row.pass) << row.shape;
    } else if (row.shape.find("HOT=0") != std::string::npos) {
      EXPECT_TRUE(row.pass) << row.shape << ": continuous logits have no ties";
    }
  }
  EXPECT_EQ(num_tie_rows, 2);
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
#ifdef GYRE_CUDA
  GTEST_SKIP() << "this build has the CUDA backend (the case is for a CPU-only build)";
#endif
  const auto rep = VerifyOps({}, "rmsnorm", ops::Backend::kCuda, 1);  // a CPU-only build
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

// ---- the check checks itself: reduced-precision variants must fail ------------------------------

std::vector<float> Gauss(std::mt19937_64& g, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}
std::vector<float> Flat(std::mt19937_64& g, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}
double RelL2(const std::vector<float>& got, const ops::ref::Vec& want) {
  return ops::Compare(got, std::vector<float>(want.begin(), want.end())).rel_l2;
}

// linear: every dot product accumulated in bf16 (the running sum rounded after each add).
TEST(VerifyOps, LinearWithABf16AccumulatorFails) {
  const ops::OpSpec& op = *ops::FindOp("linear");
  for (const ops::OpShape& shape : op.shapes) {
    ASSERT_GT(shape.tolerance, 0) << shape.label << ": calibrated";
    const int64_t n = shape.dims.at("N"), in = shape.dims.at("IN"), out = shape.dims.at("OUT");
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      std::mt19937_64 g(seed);
      const std::vector<float> x = Gauss(g, n * in), w = Gauss(g, out * in);
      std::vector<float> y(n * out);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t o = 0; o < out; ++o) {
          float acc = 0;
          for (int64_t j = 0; j < in; ++j) acc = RoundBf16(acc + x[i * in + j] * w[o * in + j]);
          y[i * out + o] = acc;
        }
      EXPECT_GT(RelL2(y, ops::ref::Linear(x, n, w, out, in)), shape.tolerance) << shape.label << " seed " << seed;
    }
  }
}

// kda.chunk: the state handed from one 64-token chunk to the next passes through bf16 (the
// chunked form may be called piecewise on one sequence, so this is the same op with only the
// state passing degraded). Inputs as the registry draws them; every shape with a chunk boundary.
TEST(VerifyOps, KdaChunkWithBf16StatePassingFails) {
  const ops::OpSpec& op = *ops::FindOp("kda.chunk");
  int num_shapes = 0;
  for (const ops::OpShape& shape : op.shapes) {
    const int64_t t = shape.dims.at("T"), h = shape.dims.at("H"), k = shape.dims.at("K"), p = h * k;
    ASSERT_GT(shape.tolerance, 0) << shape.label << ": calibrated";
    if (t <= 64) continue;
    ++num_shapes;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      std::mt19937_64 g(seed);
      const std::vector<float> q = Gauss(g, t * p), kk = Gauss(g, t * p), v = Gauss(g, t * p),
                               gate = Flat(g, t * p, -5.0f, 0.0f), beta = Flat(g, t * h, 0.0f, 1.0f),
                               state = Gauss(g, h * k * k, 0.3f);
      std::vector<float> st = state, o(t * p);
      for (int64_t c0 = 0; c0 < t; c0 += 64) {
        if (c0 > 0) RoundBf16InPlace(st);
        const int64_t c = std::min<int64_t>(64, t - c0);
        ops::KdaChunked(q.data() + c0 * p, kk.data() + c0 * p, v.data() + c0 * p, gate.data() + c0 * p,
                        beta.data() + c0 * h, c, {h, k}, st.data(), o.data() + c0 * p);
      }
      o.insert(o.end(), st.begin(), st.end());
      ops::ref::Vec ref_state(state.begin(), state.end());
      ops::ref::Vec want = ops::ref::Kda(q, kk, v, gate, beta, t, h, k, &ref_state);
      want.insert(want.end(), ref_state.begin(), ref_state.end());
      EXPECT_GT(RelL2(o, want), shape.tolerance) << shape.label << " seed " << seed;
    }
  }
  EXPECT_GE(num_shapes, 2);
}

// mla.attention: the attention output (the probability-weighted sum) rounded to bf16 once.
TEST(VerifyOps, AttentionWithABf16OutputFails) {
  const ops::OpSpec& op = *ops::FindOp("mla.attention");
  for (const ops::OpShape& shape : op.shapes) {
    ASSERT_GT(shape.tolerance, 0) << shape.label << ": calibrated";
    if (shape.dims.at("SPARSE") != 0) continue;
    const int64_t s = shape.dims.at("S"), t = shape.dims.at("T"), h = shape.dims.at("H"),
                  rope = shape.dims.at("ROPE"), nope = 16, vd = 16, lora = 32;
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      std::mt19937_64 g(seed);
      const std::vector<float> q = Gauss(g, s * h * (nope + rope)), latent = Gauss(g, t * lora),
                               krot = Gauss(g, t * rope);
      const Matrix kvb{Gauss(g, h * (nope + vd) * lora, 0.2f), h * (nope + vd), lora};
      std::vector<std::vector<int32_t>> lists;
      for (int64_t i = 0; i < s; ++i) {
        lists.emplace_back();
        for (int64_t j = 0; j <= t - s + i; ++j) lists.back().push_back(static_cast<int32_t>(j));
      }
      std::vector<float> out(s * h * vd);
      const ops::RowView lat{latent.data(), nullptr, 1, lora, 0}, kr{krot.data(), nullptr, 1, rope, 0};
      const float scale = 1.0f / std::sqrt(float(nope + rope));
      ops::MlaAttention(q.data(), s, t - s, lat, kr, kvb, {h, nope, rope, vd, lora, scale}, ops::Selection{},
                        out.data(), Numerics{ActDType::kBf16});
      const ops::ref::Vec want =
          ops::ref::Mla(q, s, latent, krot, kvb.data, h, nope, rope, vd, lora, 1.0 / std::sqrt(double(nope + rope)), lists);
      EXPECT_GT(RelL2(out, want), shape.tolerance) << shape.label << " seed " << seed;
    }
  }
}

}  // namespace
}  // namespace gyre::feedback
