// Helpers shared by the GPU microbenchmarks (src/ops/cuda/*_bench.cu): deterministic uniform
// fills, medians, CUDA-event timing and a minimal JSON writer (the benches must run on a bare CUDA
// image, so no JSON library). CUDA source: include from .cu files only. Not for library code.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_buffer.h"

namespace gyre::cuda::bench {

// A 64-bit mix (murmur3 finaliser) of a counter: the fills below are a function of (seed, index).
__device__ __forceinline__ uint32_t Hash(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}
__device__ __forceinline__ float UniformAt(uint64_t seed, int64_t i, float lo, float hi) {
  return lo + (hi - lo) * (Hash(seed * 0x9E3779B97F4A7C15ULL + i) * (1.0f / 4294967296.0f));
}
__global__ void FillUniformKernel(float* p, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = UniformAt(seed, i, lo, hi);
}
__global__ void FillUniformBf16Kernel(__nv_bfloat16* p, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(UniformAt(seed, i, lo, hi));
}

// p[i] = uniform in [lo, hi) from (seed, i), fp32 or bf16 (round to nearest even); enqueued on s.
inline Status Fill(float* p, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t s) {
  FillUniformKernel<<<2048, 256, 0, s>>>(p, n, seed, lo, hi);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}
inline Status FillBf16(void* p, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t s) {
  FillUniformBf16Kernel<<<2048, 256, 0, s>>>(static_cast<__nv_bfloat16*>(p), n, seed, lo, hi);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median over `reps` of the mean time of `inner` calls fn(i) (i counts calls), in µs per call.
template <typename F>
Result<double> TimeUs(F&& fn, int reps, int inner, cudaStream_t s) {
  GYRE_ASSIGN_OR_RETURN(Event e0, Event::Create());
  GYRE_ASSIGN_OR_RETURN(Event e1, Event::Create());
  std::vector<double> t;
  int call = 0;
  for (int r = 0; r < reps; ++r) {
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e0.get(), s));
    for (int i = 0; i < inner; ++i) GYRE_RETURN_IF_ERROR(fn(call++));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e1.get(), s));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e1.get()));
    float ms = 0;
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, e0.get(), e1.get()));
    t.push_back(1000.0 * ms / inner);
  }
  return Median(t);
}

// The ceilings every benchmark reports against, measured in the same run.
// Device-to-device copy of 2 GiB: bytes read + written per second (GB/s).
inline Result<double> CopyGbps(cudaStream_t s, bool quick = false) {
  const int64_t bytes = int64_t(1) << 31;
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer a, DeviceBuffer::Create(bytes));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(bytes));
  GYRE_RETURN_IF_ERROR(Fill(a.get<float>(), bytes / 4, 1, -1, 1, s));
  auto copy = [&](int) -> Status {
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s));
    return Status::Ok();
  };
  GYRE_RETURN_IF_ERROR(copy(0));
  GYRE_ASSIGN_OR_RETURN(double us, TimeUs(copy, quick ? 3 : 10, 2, s));
  return 2.0 * bytes / (us * 1e-6) / 1e9;
}

// cuBLASLt bf16 GEMM 8192³ on random data (TFLOP/s).
inline Result<double> Bf16GemmTflops(GemmLt& gemm, cudaStream_t s, bool quick = false) {
  const int64_t n = 8192;
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::Create(n * n * 2));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer w, DeviceBuffer::Create(n * n * 2));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::Create(n * n * 2));
  GYRE_RETURN_IF_ERROR(FillBf16(x.get(), n * n, 2, -1, 1, s));
  GYRE_RETURN_IF_ERROR(FillBf16(w.get(), n * n, 3, -1, 1, s));
  auto mm = [&](int) { return gemm.Run(GemmDType::kBf16, x.get(), w.get(), y.get(), n, n, n, s); };
  for (int i = 0; i < 3; ++i) GYRE_RETURN_IF_ERROR(mm(0));
  GYRE_ASSIGN_OR_RETURN(double us, TimeUs(mm, quick ? 3 : 10, 1, s));
  return 2.0 * n * n * n / (us * 1e-6) / 1e12;
}

// One JSON object built field by field; non-finite numbers become null.
struct Json {
  std::string s;
  bool first = true;
  void Sep() {
    if (!first) s += ", ";
    first = false;
  }
  Json& Num(const char* k, double v) {
    Sep();
    char buf[64];
    if (std::isfinite(v)) {
      std::snprintf(buf, sizeof buf, "%.6g", v);
    } else {
      std::snprintf(buf, sizeof buf, "null");
    }
    s += std::string("\"") + k + "\": " + buf;
    return *this;
  }
  Json& Str(const char* k, const std::string& v) {
    Sep();
    std::string e;
    for (char c : v) {
      if (c == '"' || c == '\\') e += '\\';
      if (c == '\n') {
        e += "\\n";
        continue;
      }
      e += c;
    }
    s += std::string("\"") + k + "\": \"" + e + "\"";
    return *this;
  }
  Json& Bool(const char* k, bool v) {
    Sep();
    s += std::string("\"") + k + "\": " + (v ? "true" : "false");
    return *this;
  }
  Json& Raw(const char* k, const std::string& v) {
    Sep();
    s += std::string("\"") + k + "\": " + v;
    return *this;
  }
  std::string Obj() const { return "{" + s + "}"; }
};

// A JSON array of already-serialised items, one per line.
inline std::string Array(const std::vector<std::string>& items) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ",\n    " : "\n    ") + items[i];
  return s + (items.empty() ? "]" : "\n  ]");
}

}  // namespace gyre::cuda::bench
