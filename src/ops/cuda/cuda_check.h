// CUDA and cuBLAS return codes as gyre Status values, with the call site (style.md §2.4).
//
//   GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(...));     // cudaError_t
//   GYRE_CUDA_RETURN_IF_ERROR(cublasLtMatmul(...));      // cublasStatus_t
//   GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());       // after every launch, in the launcher
//
// A failing call returns Status::Internal("file:line: <call>: <error name>: <error text>") from the
// enclosing function, which must return Status (or Result<T>).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "core/status.h"

namespace gyre::cuda {

inline Status ToStatus(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(file) + ":" + std::to_string(line) + ": " + call + ": " + cudaGetErrorName(e) +
                          ": " + cudaGetErrorString(e));
}

inline Status ToStatus(cublasStatus_t e, const char* call, const char* file, int line) {
  if (e == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Status::Internal(std::string(file) + ":" + std::to_string(line) + ": " + call + ": cuBLAS status " +
                          std::to_string(static_cast<int>(e)));
}

}  // namespace gyre::cuda

#define GYRE_CUDA_RETURN_IF_ERROR(call)                                              \
  do {                                                                               \
    ::gyre::Status _gyre_cs = ::gyre::cuda::ToStatus((call), #call, __FILE__, __LINE__); \
    if (!_gyre_cs.ok()) return _gyre_cs;                                             \
  } while (0)
