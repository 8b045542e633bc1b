// Linear layers through cuBLASLt: y[m, n] = x[m, k] · w[n, k]ᵀ, all row-major ([out, in] weights as
// in HF checkpoints and the CPU backend's Matrix).
//
//   kF32:  fp32 x, w, y; FP32 compute (CUBLAS_COMPUTE_32F: TF32 is OFF, it is only ever used
//          with the _FAST_TF32 compute types, which this file never asks for).
//   kBf16: bf16 x, w, y; fp32 accumulate and scale.
//   kBf16F32: bf16 x, w; fp32 y (the model's linear layers: bf16 operands, fp32 activations out).
//
// Descriptors are cached per (m, n, k, dtype, strides), so a steady-state call is one cublasLtMatmul.
// The algorithm comes from cuBLASLt's heuristic once per row bucket (m rounded up to a power of
// two) and shape; another m of the bucket reuses it when cublasLtMatmulAlgoCheck accepts it (else
// its own query). The heuristics' one-time initialization runs in Create. Spans: gemm.init,
// gemm.plan (a new shape), gemm.launch (the host side of each call).
// Thread safety: not thread-safe (one owner thread; calls may go to any stream, but the shared
// workspace means calls on different streams must not overlap).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "core/status.h"
#include "ops/cuda/device_buffer.h"

#include <cublasLt.h>

namespace gyre::cuda {

enum class GemmDType { kF32, kBf16, kBf16F32 };

// Bytes of one element of x / w for `t` (fp32 or bf16).
inline int64_t GemmInBytes(GemmDType t) { return t == GemmDType::kF32 ? 4 : 2; }

class GemmLt {
 public:
  // Creates the cuBLASLt handle and a `workspace_bytes` device workspace.
  static Result<std::unique_ptr<GemmLt>> Create(size_t workspace_bytes = 32u << 20);
  ~GemmLt();
  GemmLt(const GemmLt&) = delete;
  GemmLt& operator=(const GemmLt&) = delete;

  // Enqueues y = x·wᵀ on `stream` (no synchronization). REQUIRES: device pointers, 16-byte
  // aligned. Returns InvalidArgument for non-positive sizes, Unimplemented when cuBLASLt has no
  // algorithm for the shape, Internal on a cuBLAS error.
  // `ldx` / `ldy`: row strides of x and y in elements (0 = dense: k and n).
  Status Run(GemmDType dtype, const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k,
             cudaStream_t stream, int64_t ldx = 0, int64_t ldy = 0);

  // Queries the algorithm of every row bucket 1, 2, 4, ... up to BucketRows(max_rows) for a dense
  // y[m, n] = x[m, k]·wᵀ (the model calls it at load for each weight shape). Span gemm.prepare.
  Status Prepare(GemmDType dtype, int64_t n, int64_t k, int64_t max_rows);

  // Cached plans (one per exact shape), heuristic queries made, and plans that reused the
  // algorithm of their row bucket instead of a query.
  size_t num_plans() const { return plans_.size(); }
  int64_t heuristic_queries() const { return heuristic_queries_; }
  int64_t algo_reuses() const { return algo_reuses_; }

 private:
  struct Plan;
  GemmLt() = default;
  Status MakePlan(GemmDType dtype, int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldy, Plan* plan);
  Status Heuristic(const Plan& plan, int64_t m, int64_t n, int64_t k, cublasLtMatmulAlgo_t* algo);

  cublasLtContext* handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int64_t, int64_t>, std::unique_ptr<Plan>> plans_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int64_t, int64_t>, cublasLtMatmulAlgo_t> bucket_algos_;
  int64_t heuristic_queries_ = 0, algo_reuses_ = 0;
};

}  // namespace gyre::cuda
