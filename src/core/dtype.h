// Element types of checkpoint tensors and the scalar conversions gyre needs on the CPU.
//
// All conversions are exact where the target can represent the value and round to nearest even
// otherwise (the rounding torch uses for `.to(bfloat16)`), so bf16 emulation on the CPU rounds at
// the same points and in the same way as the reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace gyre {

enum class DType { kF32, kF16, kBF16, kF8E4M3, kF8E5M2, kF64, kI64, kI32, kI16, kI8, kU8, kBool };

// Size of one element in bytes.
size_t DTypeSize(DType t);
// The safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
std::string_view DTypeName(DType t);
// Parses a safetensors dtype string. Returns false for unknown names.
bool ParseDType(std::string_view name, DType* out);

inline float Bf16ToF32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round-to-nearest-even; NaN stays NaN (quiet).
inline uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

// The float nearest to `f` that bf16 can represent (what `x.to(bf16).float()` gives).
inline float RoundBf16(float f) { return Bf16ToF32(F32ToBf16(f)); }

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);
float F8E4M3ToF32(uint8_t v);  // OCP e4m3fn: no infinities, 0x7f/0xff are NaN
float F8E5M2ToF32(uint8_t v);

// Rounds every element of `x` to bf16 precision in place.
void RoundBf16InPlace(std::span<float> x);

// Converts `n` elements of type `t` at `src` to float. Integer types convert by value.
// REQUIRES: t is not kBool-incompatible; every DType is supported.
void ConvertToF32(DType t, const void* src, size_t n, float* dst);

}  // namespace gyre
