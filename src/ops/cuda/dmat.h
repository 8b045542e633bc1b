// DMat: a device-resident weight matrix [rows, cols] row-major ([out, in] as in HF checkpoints), fp32
// or bf16. A view: the owner (runtime/cuda_model.h's weight arena) keeps the memory alive.
#pragma once

#include <cstdint>

#include "ops/cuda/cublaslt_gemm.h"

namespace gyre::cuda {

struct DMat {
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
  bool bf16 = false;  // element type: bf16 (__nv_bfloat16) when set, else fp32
  // W8A8 (quant_cuda.h), set only on the projections the CUDA model runs through its Linear:
  // rows [0, q_rows) are quantized (data: 1-byte codes [q_rows, cols], scale: per-row scales) and
  // the rows [q_rows, rows), if any, are kept weights in `hp` (bf16 or fp32 as `bf16` says).
  int qscheme = 0;  // 0: not quantized (elem_bytes, bytes and row apply); else a cuda::W8A8
  const float* scale = nullptr;
  int64_t q_rows = 0;
  const void* hp = nullptr;
  int64_t elem_bytes() const { return bf16 ? 2 : 4; }
  int64_t bytes() const { return rows * cols * elem_bytes(); }
  // Pointer to row r (for slicing a fused matrix by rows).
  const void* row(int64_t r) const { return static_cast<const char*>(data) + r * cols * elem_bytes(); }
};

}  // namespace gyre::cuda
