#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace gyre {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(DTypeTest, NamesSizesAndParsing) {
  const DType all[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2, DType::kF64,
                       DType::kI64, DType::kI32, DType::kI16,  DType::kI8,     DType::kU8,     DType::kBool};
  for (DType t : all) {
    DType back;
    ASSERT_TRUE(ParseDType(DTypeName(t), &back)) << DTypeName(t);
    EXPECT_EQ(back, t);
    EXPECT_GT(DTypeSize(t), 0u);
  }
  EXPECT_EQ(DTypeName(DType::kF8E4M3), "F8_E4M3");
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
  EXPECT_EQ(DTypeSize(DType::kBool), 1u);
  DType t;
  EXPECT_FALSE(ParseDType("F7", &t));
  EXPECT_FALSE(ParseDType("f32", &t));
  EXPECT_FALSE(ParseDType("", &t));
}

// ---- F16 ----

TEST(DTypeTest, F16KnownValues) {
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);                      // max normal
  EXPECT_EQ(F16ToF32(0x0400), std::ldexp(1.0f, -14));          // min normal
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));          // min subnormal
  EXPECT_EQ(F16ToF32(0x03ff), std::ldexp(1023.0f, -24));       // max subnormal
  EXPECT_EQ(F16ToF32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(F16ToF32(0x7c00), kInf);
  EXPECT_EQ(F16ToF32(0xfc00), -kInf);
  EXPECT_TRUE(std::isnan(F16ToF32(0x7e00)));
  EXPECT_TRUE(std::isnan(F16ToF32(0x7c01)));
  EXPECT_TRUE(std::isnan(F16ToF32(0xfe00)));
  EXPECT_EQ(Bits(F16ToF32(0x8000)), 0x80000000u);  // -0 keeps its sign

  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(kInf), 0x7c00);
  EXPECT_EQ(F32ToF16(-kInf), 0xfc00);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  uint16_t nan = F32ToF16(kNaN);
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
}

TEST(DTypeTest, F16ExhaustiveRoundTrip) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(f)))) << std::hex << h;
      continue;
    }
    EXPECT_EQ(F32ToF16(f), h) << std::hex << h;
  }
}

TEST(DTypeTest, F16RoundsToNearestEven) {
  // Normal range: 1 + 2^-11 is halfway between 1 (even mantissa) and 1 + 2^-10.
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie, odd below -> up
  EXPECT_EQ(F32ToF16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
  // Overflow: 65520 is halfway between 65504 and 65536 (= inf); ties to even -> inf.
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);
  EXPECT_EQ(F32ToF16(-1e10f), 0xfc00);
  // Subnormals: ties go to even units of 2^-24.
  const float unit = std::ldexp(1.0f, -24);
  EXPECT_EQ(F32ToF16(0.5f * unit), 0x0000);
  EXPECT_EQ(F32ToF16(std::nextafter(0.5f * unit, 1.0f)), 0x0001);
  EXPECT_EQ(F32ToF16(1.5f * unit), 0x0002);
  EXPECT_EQ(F32ToF16(2.5f * unit), 0x0002);
  EXPECT_EQ(F32ToF16(-1.5f * unit), 0x8002);
  EXPECT_EQ(F32ToF16(0.25f * unit), 0x0000);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -30)), 0x0000);
  // The largest subnormal plus half a unit rounds up into the smallest normal.
  EXPECT_EQ(F32ToF16(1023.5f * unit), 0x0400);
}

// ---- BF16 ----

TEST(DTypeTest, Bf16KnownValuesAndRounding) {
  EXPECT_EQ(Bf16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(Bf16ToF32(0xc040), -3.0f);
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  // Ties: 0x3f808000 is halfway between 0x3f80 (even) and 0x3f81.
  EXPECT_EQ(F32ToBf16(FromBits(0x3f808000u)), 0x3f80);
  EXPECT_EQ(F32ToBf16(FromBits(0x3f818000u)), 0x3f82);  // odd below -> up to even
  EXPECT_EQ(F32ToBf16(FromBits(0x3f808001u)), 0x3f81);  // above half
  EXPECT_EQ(F32ToBf16(FromBits(0x3f807fffu)), 0x3f80);  // below half
  EXPECT_EQ(F32ToBf16(FromBits(0xbf808000u)), 0xbf80);  // negative tie
  // The mantissa carry propagates into the exponent.
  EXPECT_EQ(F32ToBf16(FromBits(0x3fffffffu)), 0x4000);
  // Largest finite float rounds to inf; inf stays inf.
  EXPECT_EQ(F32ToBf16(FromBits(0x7f7fffffu)), 0x7f80);
  EXPECT_EQ(F32ToBf16(kInf), 0x7f80);
  EXPECT_EQ(F32ToBf16(-kInf), 0xff80);
  // NaN stays NaN, even a NaN whose payload lives only in the low bits (truncation would give inf).
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(kNaN))));
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(FromBits(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(FromBits(0xffffffffu)))));
  // Subnormal bf16 survive.
  EXPECT_EQ(Bf16ToF32(F32ToBf16(FromBits(0x00010000u))), FromBits(0x00010000u));

  EXPECT_EQ(RoundBf16(FromBits(0x3f808000u)), 1.0f);
  std::vector<float> v = {FromBits(0x3f808001u), 2.0f};
  RoundBf16InPlace(v);
  EXPECT_EQ(Bits(v[0]), 0x3f810000u);
  EXPECT_EQ(v[1], 2.0f);
}

TEST(DTypeTest, Bf16ExhaustiveRoundTrip) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    float f = Bf16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToBf16(f), h) << std::hex << h;
  }
}

// ---- FP8 ----

TEST(DTypeTest, F8E4M3) {
  EXPECT_EQ(F8E4M3ToF32(0x38), 1.0f);
  EXPECT_EQ(F8E4M3ToF32(0xb8), -1.0f);
  EXPECT_EQ(F8E4M3ToF32(0x7e), 448.0f);   // max finite
  EXPECT_EQ(F8E4M3ToF32(0xfe), -448.0f);
  EXPECT_EQ(F8E4M3ToF32(0x78), 256.0f);   // exponent 15 is finite in e4m3fn
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0x7f)));
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0xff)));
  EXPECT_EQ(F8E4M3ToF32(0x08), std::ldexp(1.0f, -6));  // min normal
  EXPECT_EQ(F8E4M3ToF32(0x01), std::ldexp(1.0f, -9));  // min subnormal
  EXPECT_EQ(F8E4M3ToF32(0x07), std::ldexp(7.0f, -9));  // max subnormal
  EXPECT_EQ(F8E4M3ToF32(0x00), 0.0f);
  EXPECT_EQ(Bits(F8E4M3ToF32(0x80)), 0x80000000u);
  EXPECT_EQ(F8E4M3ToF32(0x3c), 1.5f);
  // Monotonic over the positive finite codes, and no infinities anywhere.
  for (int v = 0; v < 256; ++v) {
    EXPECT_FALSE(std::isinf(F8E4M3ToF32(static_cast<uint8_t>(v)))) << v;
    if (v > 0 && v < 0x7f) {
      EXPECT_LT(F8E4M3ToF32(static_cast<uint8_t>(v - 1)), F8E4M3ToF32(static_cast<uint8_t>(v))) << v;
    }
  }
}

TEST(DTypeTest, F8E5M2) {
  EXPECT_EQ(F8E5M2ToF32(0x3c), 1.0f);
  EXPECT_EQ(F8E5M2ToF32(0xbc), -1.0f);
  EXPECT_EQ(F8E5M2ToF32(0x7b), 57344.0f);  // max finite
  EXPECT_EQ(F8E5M2ToF32(0x7c), kInf);
  EXPECT_EQ(F8E5M2ToF32(0xfc), -kInf);
  EXPECT_TRUE(std::isnan(F8E5M2ToF32(0x7d)));
  EXPECT_TRUE(std::isnan(F8E5M2ToF32(0x7f)));
  EXPECT_TRUE(std::isnan(F8E5M2ToF32(0xfe)));
  EXPECT_EQ(F8E5M2ToF32(0x04), std::ldexp(1.0f, -14));  // min normal
  EXPECT_EQ(F8E5M2ToF32(0x01), std::ldexp(1.0f, -16));  // min subnormal
  EXPECT_EQ(F8E5M2ToF32(0x03), std::ldexp(3.0f, -16));
  EXPECT_EQ(F8E5M2ToF32(0x00), 0.0f);
}

// ---- ConvertToF32 ----

TEST(DTypeTest, ConvertToF32AllTypes) {
  float out[3];
  const float f32[] = {1.5f, -2.0f, 0.25f};
  ConvertToF32(DType::kF32, f32, 3, out);
  EXPECT_EQ(out[2], 0.25f);
  const uint16_t bf16[] = {0x3f80, 0xc000, 0x0000};
  ConvertToF32(DType::kBF16, bf16, 3, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  const uint16_t f16[] = {0x3c00, 0x7c00, 0x0001};
  ConvertToF32(DType::kF16, f16, 3, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], kInf);
  EXPECT_EQ(out[2], std::ldexp(1.0f, -24));
  const uint8_t e4m3[] = {0x38, 0x7e, 0x7f};
  ConvertToF32(DType::kF8E4M3, e4m3, 3, out);
  EXPECT_EQ(out[1], 448.0f);
  EXPECT_TRUE(std::isnan(out[2]));
  const uint8_t e5m2[] = {0x3c, 0x7b, 0x7c};
  ConvertToF32(DType::kF8E5M2, e5m2, 3, out);
  EXPECT_EQ(out[1], 57344.0f);
  const double f64[] = {0.1, -1e300, 3.0};
  ConvertToF32(DType::kF64, f64, 3, out);
  EXPECT_EQ(out[0], 0.1f);
  EXPECT_EQ(out[1], -kInf);
  const int64_t i64[] = {-5, 1LL << 40, 0};
  ConvertToF32(DType::kI64, i64, 3, out);
  EXPECT_EQ(out[0], -5.0f);
  EXPECT_EQ(out[1], std::ldexp(1.0f, 40));
  const int32_t i32[] = {-7, 123456, 0};
  ConvertToF32(DType::kI32, i32, 3, out);
  EXPECT_EQ(out[0], -7.0f);
  EXPECT_EQ(out[1], 123456.0f);
  const int16_t i16[] = {-32768, 32767, 1};
  ConvertToF32(DType::kI16, i16, 3, out);
  EXPECT_EQ(out[0], -32768.0f);
  const int8_t i8[] = {-128, 127, -1};
  ConvertToF32(DType::kI8, i8, 3, out);
  EXPECT_EQ(out[0], -128.0f);
  EXPECT_EQ(out[2], -1.0f);
  const uint8_t u8[] = {255, 0, 1};
  ConvertToF32(DType::kU8, u8, 3, out);
  EXPECT_EQ(out[0], 255.0f);
  const uint8_t b[] = {1, 0, 1};
  ConvertToF32(DType::kBool, b, 3, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 0.0f);
  // Unaligned source pointer (safetensors data is not aligned in general).
  alignas(4) uint8_t buf[9] = {};
  uint16_t one = 0x3f80;
  std::memcpy(buf + 1, &one, 2);
  ConvertToF32(DType::kBF16, buf + 1, 1, out);
  EXPECT_EQ(out[0], 1.0f);
}

}  // namespace
}  // namespace gyre
