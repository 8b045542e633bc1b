#include "feedback/device_trace_check_kernels.h"

namespace gyre::feedback::tracecheck {

// Named namespace, not anonymous: the trace check finds these kernels by name.
__global__ void FillKernel(float* x, int64_t n, float v) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) x[i] = v;
}

__global__ void ScaleKernel(float* x, int64_t n, float a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) x[i] *= a;
}

__device__ unsigned long long GlobalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void SpinKernel(long long ns, unsigned long long* measured) {
  const unsigned long long t0 = GlobalTimer();
  unsigned long long t = t0;
  while (t - t0 < static_cast<unsigned long long>(ns)) t = GlobalTimer();
  *measured = t - t0;
}

__global__ void EmptyKernel() {}

cudaError_t Fill(float* x, int64_t n, float v, cudaStream_t s) {
  FillKernel<<<128, 256, 0, s>>>(x, n, v);
  return cudaGetLastError();
}

cudaError_t Scale(float* x, int64_t n, float a, cudaStream_t s) {
  ScaleKernel<<<128, 256, 0, s>>>(x, n, a);
  return cudaGetLastError();
}

cudaError_t Spin(int64_t ns, unsigned long long* measured_ns, cudaStream_t s) {
  SpinKernel<<<1, 1, 0, s>>>(ns, measured_ns);
  return cudaGetLastError();
}

cudaError_t Empty(cudaStream_t s) {
  EmptyKernel<<<1, 1, 0, s>>>();
  return cudaGetLastError();
}

}  // namespace gyre::feedback::tracecheck
