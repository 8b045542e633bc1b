// Host-memory entry points of the W8A8 kernels (quant_cuda.h) for the op registry (`gyre verify
// ops --backend cuda --op quant.fp8_act|quant.int8_act|gemm.fp8_block|gemm.int8|...grouped`) and
// the tests. Plain C++: includes no CUDA header, so src/ops/registry_quant.cc compiles with the
// host compiler.
//
// Each call copies its inputs to fresh device buffers, fills the outputs with NaN bytes (0xFF), runs
// the kernels on a private stream, synchronizes and copies back. Slow by design: for checks only.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace gyre::cuda {

// x [n, k] → q [n, k] (e4m3 bytes when fp8, else int8), s [n, fp8 ? ceil(k/128) : 1].
Status QuantizeActOnDevice(bool fp8, const float* x, int64_t n, int64_t k, uint8_t* q, float* s);

// y [m, N] from quantized activations qa [m, K], sa (as QuantizeActOnDevice writes them) and a
// quantized weight of `groups` groups: wq [groups, N, K], per-row scales ws [groups, N, fp8 ?
// ceil(K/128) : 1]. groups == 1 with offsets empty: the dense GEMM. Otherwise offsets [groups + 1]
// (host) give each group's rows of qa / y (the grouped GEMM; offsets[groups] == m).
Status GemmW8A8OnDevice(bool fp8, const uint8_t* qa, const float* sa, int64_t m, const uint8_t* wq, const float* ws,
                        int64_t N, int64_t K, int64_t groups, const std::vector<int32_t>& offsets, float* y);

// The routed experts of a quantized MoE layer (MoeExpertsW8A8) from host arrays: x [n, D],
// idx / w [n, top_k], gate_up q [E, 2I, D] + per-row scales, down q [E, D, I] + per-row scales.
Status MoeW8A8OnDevice(bool fp8, const float* x, int64_t n, const int32_t* idx, const float* w, int64_t top_k,
                       const uint8_t* gu_q, const float* gu_s, const uint8_t* dn_q, const float* dn_s, int64_t E,
                       int64_t D, int64_t I, float swiglu_limit, float* out);

}  // namespace gyre::cuda
