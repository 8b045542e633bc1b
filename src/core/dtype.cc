#include "core/dtype.h"

#include <cmath>
#include <limits>

namespace gyre {

namespace {
struct DTypeInfo {
  DType t;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kInfos[] = {
    {DType::kF32, "F32", 4},        {DType::kF16, "F16", 2},       {DType::kBF16, "BF16", 2},
    {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1}, {DType::kF64, "F64", 8},
    {DType::kI64, "I64", 8},        {DType::kI32, "I32", 4},       {DType::kI16, "I16", 2},
    {DType::kI8, "I8", 1},          {DType::kU8, "U8", 1},         {DType::kBool, "BOOL", 1},
};
}  // namespace

size_t DTypeSize(DType t) {
  for (const auto& i : kInfos)
    if (i.t == t) return i.size;
  return 0;
}

std::string_view DTypeName(DType t) {
  for (const auto& i : kInfos)
    if (i.t == t) return i.name;
  return "?";
}

bool ParseDType(std::string_view name, DType* out) {
  for (const auto& i : kInfos) {
    if (name == i.name) {
      *out = i.t;
      return true;
    }
  }
  return false;
}

float F16ToF32(uint16_t h) {
  uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

uint16_t F32ToF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absu < 0x38800000u) {                                              // subnormal or zero
    float a;
    std::memcpy(&a, &absu, 4);
    float scaled = a * 16777216.0f;  // 2^24: units of the smallest subnormal
    uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t mant = absu & 0x7fffffu;
  uint32_t exp = (absu >> 23) - 112;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float F8E4M3ToF32(uint8_t v) {
  uint32_t sign = v >> 7, exp = (v >> 3) & 0xfu, mant = v & 0x7u;
  float r;
  if (exp == 0xf && mant == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) {
    r = std::ldexp(static_cast<float>(mant), -9);
  } else {
    r = std::ldexp(static_cast<float>(mant | 0x8u), static_cast<int>(exp) - 10);
  }
  return sign ? -r : r;
}

float F8E5M2ToF32(uint8_t v) { return F16ToF32(static_cast<uint16_t>(v) << 8); }

void RoundBf16InPlace(std::span<float> x) {
  for (float& v : x) v = RoundBf16(v);
}

void ConvertToF32(DType t, const void* src, size_t n, float* dst) {
  const auto* b = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        dst[i] = Bf16ToF32(h);
      }
      return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        dst[i] = F16ToF32(h);
      }
      return;
    case DType::kF8E4M3:
      for (size_t i = 0; i < n; ++i) dst[i] = F8E4M3ToF32(b[i]);
      return;
    case DType::kF8E5M2:
      for (size_t i = 0; i < n; ++i) dst[i] = F8E5M2ToF32(b[i]);
      return;
    case DType::kF64:
      for (size_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, b + 8 * i, 8);
        dst[i] = static_cast<float>(d);
      }
      return;
    case DType::kI64:
      for (size_t i = 0; i < n; ++i) {
        int64_t d;
        std::memcpy(&d, b + 8 * i, 8);
        dst[i] = static_cast<float>(d);
      }
      return;
    case DType::kI32:
      for (size_t i = 0; i < n; ++i) {
        int32_t d;
        std::memcpy(&d, b + 4 * i, 4);
        dst[i] = static_cast<float>(d);
      }
      return;
    case DType::kI16:
      for (size_t i = 0; i < n; ++i) {
        int16_t d;
        std::memcpy(&d, b + 2 * i, 2);
        dst[i] = static_cast<float>(d);
      }
      return;
    case DType::kI8:
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(static_cast<int8_t>(b[i]));
      return;
    case DType::kU8:
    case DType::kBool:
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(b[i]);
      return;
  }
}

}  // namespace gyre
