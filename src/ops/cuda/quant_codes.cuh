// Device encoders and decoders of the 8-bit codes (quant/fp8.h, quant/quant.h, quant/kv_cache.h),
// shared by the W8A8 kernels (quant_cuda.cu) and the KV-cache rows (sm90_mla_*.cu). Bit-exact with
// the CPU's: tested through both users.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gyre::cuda::internal {

// quant/fp8.cc's saturating encoder, operation for operation: RNE, ±inf and values past 448 → ±448,
// NaN → NaN with its sign, -0 → 0x80.
__device__ __forceinline__ uint8_t EncodeE4M3(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t abs_bits = u & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  if (abs_bits == 0x7f800000u) return static_cast<uint8_t>(sign | 0x7eu);
  const float a = __uint_as_float(abs_bits);
  uint32_t code;
  if (a < 0.015625f) {
    code = static_cast<uint32_t>(rintf(a * 512.0f));  // exact product; rintf: half to even
  } else {
    const uint32_t exp = (abs_bits >> 23) - 127 + 7;
    const uint32_t mant = abs_bits & 0x7fffffu;
    code = (exp << 3) | (mant >> 20);
    const uint32_t rest = mant & 0xfffffu;
    if (rest > 0x80000u || (rest == 0x80000u && (code & 1u))) ++code;
  }
  if (code > 0x7eu) code = 0x7eu;
  return static_cast<uint8_t>(sign | code);
}

__device__ __forceinline__ int8_t EncodeInt8(float v) {
  return static_cast<int8_t>(fminf(fmaxf(rintf(v), -127.0f), 127.0f));
}

// OCP e4m3fn → fp32, exactly (no infinities; 0x7f / 0xff are NaN), as core/dtype.h F8E4M3ToF32.
__device__ __forceinline__ float DecodeE4M3(uint32_t b) {
  const uint32_t sign = (b & 0x80u) << 24, e = (b >> 3) & 0xfu, m = b & 7u;
  if (e == 0xfu && m == 7u) return __uint_as_float(sign | 0x7fc00000u);
  if (e == 0) {
    const float r = static_cast<float>(m) * 0.001953125f;  // m · 2^-9, exact
    return sign ? -r : r;
  }
  return __uint_as_float(sign | ((e + 120u) << 23) | (m << 20));
}

}  // namespace gyre::cuda::internal
