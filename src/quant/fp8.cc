#include "quant/fp8.h"

#include <cmath>
#include <cstring>

namespace gyre {

namespace {

constexpr uint8_t kMaxCode = 0x7e;  // 448
constexpr uint8_t kNanCode = 0x7f;

// REQUIRES: |f| is finite. Returns the RNE code of |f| without the sign; a code above kMaxCode
// means the rounded value left the finite range.
uint32_t EncodeMagnitude(uint32_t abs_bits) {
  float a;
  std::memcpy(&a, &abs_bits, 4);
  if (a < 0.015625f) {  // below 2^-6, the smallest normal: subnormal step 2^-9
    // NOTE: a · 512 is exact (power of two) and nearbyint rounds half to even in the default
    // rounding mode; a result of 8 is the code of 2^-6, the smallest normal.
    return static_cast<uint32_t>(std::nearbyint(a * 512.0f));
  }
  const uint32_t exp = (abs_bits >> 23) - 127 + 7;  // >= 1 here
  const uint32_t mant = abs_bits & 0x7fffffu;
  uint32_t code = (exp << 3) | (mant >> 20);
  const uint32_t rest = mant & 0xfffffu;  // the 20 bits rounded away
  if (rest > 0x80000u || (rest == 0x80000u && (code & 1u))) ++code;
  return code;
}

uint8_t Encode(float f, bool saturate) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs_bits = u & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | kNanCode;
  if (abs_bits == 0x7f800000u) return sign | (saturate ? kMaxCode : kNanCode);
  const uint32_t code = EncodeMagnitude(abs_bits);
  if (code > kMaxCode) return sign | (saturate ? kMaxCode : kNanCode);
  return sign | static_cast<uint8_t>(code);
}

}  // namespace

uint8_t F32ToF8E4M3(float f) { return Encode(f, /*saturate=*/true); }
uint8_t F32ToF8E4M3Torch(float f) { return Encode(f, /*saturate=*/false); }

}  // namespace gyre
