#include "quant/kv_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/dtype.h"

namespace gyre {
namespace {

std::vector<float> RandomRow(int64_t w, uint32_t seed, float scale) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, scale);
  std::vector<float> x(w);
  for (float& v : x) v = n(g);
  return x;
}

TEST(KvCache, ParseNamesAndSpellings) {
  EXPECT_EQ(*ParseKvDtype("auto"), KvDtype::kF32);
  EXPECT_EQ(*ParseKvDtype("fp32"), KvDtype::kF32);
  EXPECT_EQ(*ParseKvDtype("bfloat16"), KvDtype::kBf16);
  EXPECT_EQ(*ParseKvDtype("fp8_e4m3"), KvDtype::kFp8);
  EXPECT_EQ(*ParseKvDtype("int8"), KvDtype::kInt8);
  const auto bad = ParseKvDtype("fp8_e5m2");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("fp8_e5m2"), std::string::npos);
  for (KvDtype d : {KvDtype::kF32, KvDtype::kBf16, KvDtype::kFp8, KvDtype::kInt8})
    EXPECT_EQ(*ParseKvDtype(KvDtypeName(d)), d);
}

TEST(KvCache, RowBytesAreMultiplesOf16) {
  EXPECT_EQ(KvRowBytes(KvDtype::kF32, 512), 2048);
  EXPECT_EQ(KvRowBytes(KvDtype::kBf16, 512), 1024);
  EXPECT_EQ(KvRowBytes(KvDtype::kFp8, 512), 528);
  EXPECT_EQ(KvRowBytes(KvDtype::kInt8, 64), 80);
  EXPECT_EQ(KvRowBytes(KvDtype::kBf16, 68), 144);  // 136 rounded up
  for (int64_t w : {4, 8, 12, 20, 64, 100, 512, 576})
    for (KvDtype d : {KvDtype::kBf16, KvDtype::kFp8, KvDtype::kInt8}) {
      EXPECT_EQ(KvRowBytes(d, w) % 16, 0) << w;
      EXPECT_LT(KvRowBytes(d, w), KvRowBytes(KvDtype::kF32, w) + 32) << w;
    }
}

// Round trip error bounds by format: bf16 half an ulp (2^-8 relative); int8 half a step of the row's
// scale; fp8 (3 mantissa bits) 2^-4 relative for normal codes, half a subnormal step of the scale
// below them. Padding bytes are zero.
TEST(KvCache, EncodeDecodeRoundTripWithinTheFormatsError) {
  for (int64_t w : {4, 60, 512}) {
    for (float scale : {1e-3f, 1.0f, 300.0f}) {
      const std::vector<float> x = RandomRow(w, static_cast<uint32_t>(w * 7 + scale), scale);
      float amax = 0;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      for (KvDtype d : {KvDtype::kF32, KvDtype::kBf16, KvDtype::kFp8, KvDtype::kInt8}) {
        std::vector<uint8_t> row(KvRowBytes(d, w), 0xAB);
        KvEncodeRow(d, x, row.data());
        std::vector<float> y(w);
        KvDecodeRow(d, row.data(), y);
        for (int64_t i = 0; i < w; ++i) {
          const float e = std::fabs(y[i] - x[i]);
          switch (d) {
            case KvDtype::kF32: EXPECT_EQ(y[i], x[i]); break;
            case KvDtype::kBf16: EXPECT_LE(e, std::fabs(x[i]) * 0x1p-8f) << i; break;
            case KvDtype::kInt8: EXPECT_LE(e, 0.5f * amax / 127.0f * 1.0001f) << i; break;
            case KvDtype::kFp8: {
              const float s = amax / 448.0f;
              EXPECT_LE(e, std::max(std::fabs(x[i]) * 0x1p-4f, 0x1p-10f * s) * 1.0001f) << i << " of " << w;
              break;
            }
          }
        }
        if (d == KvDtype::kFp8 || d == KvDtype::kInt8) {
          for (int64_t b = w; b < KvScaleOffset(w); ++b) EXPECT_EQ(row[b], 0) << b;
          for (int64_t b = KvScaleOffset(w) + 4; b < KvRowBytes(d, w); ++b) EXPECT_EQ(row[b], 0) << b;
          // the largest magnitude lands on the top code
          const int64_t im = std::max_element(x.begin(), x.end(), [](float a, float b) { return std::fabs(a) < std::fabs(b); }) - x.begin();
          if (d == KvDtype::kInt8) EXPECT_EQ(std::abs(static_cast<int8_t>(row[im])), 127);
          else EXPECT_EQ(row[im] & 0x7f, 0x7e);  // ±448
        }
      }
    }
  }
}

TEST(KvCache, ZeroRowKeepsAFiniteScale) {
  const std::vector<float> x(16, 0.0f);
  for (KvDtype d : {KvDtype::kFp8, KvDtype::kInt8}) {
    std::vector<uint8_t> row(KvRowBytes(d, 16));
    KvEncodeRow(d, x, row.data());
    float s;
    std::memcpy(&s, row.data() + KvScaleOffset(16), 4);
    EXPECT_TRUE(std::isfinite(s) && s > 0);
    std::vector<float> y(16, 1.0f);
    KvDecodeRow(d, row.data(), y);
    for (float v : y) EXPECT_EQ(v, 0.0f);
  }
}

TEST(KvCache, PolicyFile) {
  const std::vector<bool> attn{false, false, true, false, true, true};
  auto p = ParseKvCachePolicy(R"({"default": "bf16", "layers": {"4": "fp8", "5": "int8"}})", attn);
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_EQ(p->layers, (std::vector<KvDtype>{KvDtype::kF32, KvDtype::kF32, KvDtype::kBf16, KvDtype::kF32,
                                             KvDtype::kFp8, KvDtype::kInt8}));
  EXPECT_EQ(p->Describe().find("fp32"), 0u);  // KDA entries count as fp32 in the full-layer list
  auto none = ParseKvCachePolicy("{}", attn);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->uniform_fp32());
  auto uni = ParseKvCachePolicy(R"({"default": "fp8"})", attn);
  ASSERT_TRUE(uni.ok());
  EXPECT_EQ(uni->layers[2], KvDtype::kFp8);
  EXPECT_EQ(uni->layers[0], KvDtype::kF32);

  struct Bad {
    const char* text;
    const char* says;
  };
  for (const Bad& b : {Bad{R"({"layers": {"1": "fp8"}})", "KDA layer"}, Bad{R"({"layers": {"6": "fp8"}})", "[0, 6)"},
                       Bad{R"({"layers": {"-1": "fp8"}})", "'-1'"}, Bad{R"({"layers": {"2": "fp16"}})", "fp16"},
                       Bad{R"({"default": "e5m2"})", "e5m2"}, Bad{R"({"defaults": "bf16"})", "unknown key 'defaults'"},
                       Bad{R"({"layers": {"2": 8}})", "string"}, Bad{R"([1, 2])", "JSON object"},
                       Bad{R"({"layers": ["fp8"]})", "'layers'"}, Bad{"{", "not valid JSON"},
                       Bad{R"({"layers": {"99999999999": "fp8"}})", "not a layer index"}}) {
    auto r = ParseKvCachePolicy(b.text, attn);
    ASSERT_FALSE(r.ok()) << b.text;
    EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument) << b.text;
    EXPECT_NE(r.error().message().find(b.says), std::string::npos) << b.text << " -> " << r.error().message();
  }
  EXPECT_EQ(LoadKvCachePolicy("/nonexistent/policy.json", attn).error().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gyre
