// float8_e4m3fn (OCP "E4M3FN"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities;
// 0x7f / 0xff are NaN; largest finite ±448; smallest subnormal 2^-9. Decoding is F8E4M3ToF32
// (core/dtype.h).
//
// Two encoders, both exact where e4m3 can represent the value and round-to-nearest-even otherwise:
//   F32ToF8E4M3     saturating (what quantization wants, and what CUDA's __NV_SATFINITE does):
//                   finite values and ±inf beyond ±448 become ±448; NaN becomes NaN (sign kept).
//   F32ToF8E4M3Torch torch's `x.to(torch.float8_e4m3fn)`: not saturating; a value whose rounding
//                   leaves the finite range (|x| > 464, the midpoint 464 rounds to even 448) and
//                   ±inf become NaN (sign kept).
// Both map -0.0 to 0x80 and keep the sign of NaN inputs (0x7f or 0xff).
#pragma once

#include <cstdint>

namespace gyre {

inline constexpr float kF8E4M3Max = 448.0f;

uint8_t F32ToF8E4M3(float f);
uint8_t F32ToF8E4M3Torch(float f);

}  // namespace gyre
