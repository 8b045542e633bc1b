#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "parallel/shared_device_group_kernel.h"

namespace gyre::parallel {

namespace {

__device__ inline float Load(const float* p, int64_t i) { return p[i]; }
__device__ inline float Load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ inline void Store(float* p, int64_t i, float v) { p[i] = v; }
__device__ inline void Store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

// Rank order, one fp32 accumulator: the same association as InProcessGroup.
template <typename T>
__global__ void SumRanksKernel(const __grid_constant__ SumRanksParams p) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.count; i += stride) {
    float acc = Load(static_cast<const T*>(p.src[0]), p.offset + i);
    for (int s = 1; s < p.n; ++s) acc = __fadd_rn(acc, Load(static_cast<const T*>(p.src[s]), p.offset + i));
    Store(static_cast<T*>(p.out), i, acc);
  }
}

}  // namespace

Status LaunchSumRanks(const SumRanksParams& p, DType dtype, DeviceStream stream) {
  if (p.count == 0) return Status();
  constexpr int kThreads = 256;
  const int64_t blocks64 = (p.count + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(blocks64 < 4096 ? blocks64 : 4096);
  if (dtype == DType::kF32) {
    SumRanksKernel<float><<<blocks, kThreads, 0, stream>>>(p);
  } else {
    SumRanksKernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(p);
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    return Status::Internal(std::string("SumRanks launch: ") + cudaGetErrorString(e));
  }
  return Status();
}

}  // namespace gyre::parallel
