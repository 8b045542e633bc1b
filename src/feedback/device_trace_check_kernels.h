// Kernels of a known GPU workload for `gyre verify trace` (feedback/device_trace_check.h): their
// names, streams and durations are what the device trace must show.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace gyre::feedback::tracecheck {

cudaError_t Fill(float* x, int64_t n, float v, cudaStream_t s);
cudaError_t Scale(float* x, int64_t n, float a, cudaStream_t s);
// One thread spins on %globaltimer for `ns` and writes the time it measured to *measured_ns
// (device memory).
cudaError_t Spin(int64_t ns, unsigned long long* measured_ns, cudaStream_t s);
cudaError_t Empty(cudaStream_t s);

}  // namespace gyre::feedback::tracecheck
