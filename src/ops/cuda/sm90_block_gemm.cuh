// Device code only: a block-wide fp32 GEMM on shared-memory operands (FFMA, no tensor cores), the
// building block of the chunked KDA kernels. Exact fp32 arithmetic on purpose: the chunked form is
// checked against an fp64 reference at 1e-4 (tf32 operands would land near 3e-4).
//
//   acc[kTM][kTN] += A · B   over kKd,   A given transposed: at[x·lda + m];  B row-major: b[x·ldb + n]
//
// kNumThreads = (kM/kTM)·(kN/kTN) threads take part (threads with tid ≥ kNumThreads must not call
// Run). Thread `tid` owns rows Row(tm, i) and columns Col(tn, j): chunks of 4 spread over the tile,
// so that each 16-byte load of a quarter warp touches consecutive addresses (no bank conflicts)
// and every A/B element loaded feeds kTN/kTM FMAs.
#pragma once

#include <cuda_runtime.h>

namespace gyre::cuda::internal {

template <int kM, int kN, int kTM, int kTN>
struct BlockGemm {
  static constexpr int kThreadsM = kM / kTM;
  static constexpr int kThreadsN = kN / kTN;
  static constexpr int kNumThreads = kThreadsM * kThreadsN;
  static_assert(kTM % 4 == 0 && kTN % 4 == 0, "thread tiles are whole float4 chunks");
  static_assert(kM % kTM == 0 && kN % kTN == 0, "tiles cover the matrix");

  __device__ static int Tm(int tid) { return tid / kThreadsN; }
  __device__ static int Tn(int tid) { return tid % kThreadsN; }
  __device__ static int Row(int tm, int i) { return (i / 4) * (4 * kThreadsM) + tm * 4 + (i % 4); }
  __device__ static int Col(int tn, int j) { return (j / 4) * (4 * kThreadsN) + tn * 4 + (j % 4); }

  __device__ static void Zero(float (&acc)[kTM][kTN]) {
#pragma unroll
    for (int i = 0; i < kTM; ++i)
#pragma unroll
      for (int j = 0; j < kTN; ++j) acc[i][j] = 0.f;
  }

  // REQUIRES: at, b 16-byte aligned; lda, ldb multiples of 4.
  template <int kKd>
  __device__ static void Run(const float* at, int lda, const float* b, int ldb, int tid, float (&acc)[kTM][kTN]) {
    const int tm = Tm(tid), tn = Tn(tid);
#pragma unroll 4
    for (int x = 0; x < kKd; ++x) {
      float a[kTM], bv[kTN];
#pragma unroll
      for (int c = 0; c < kTM / 4; ++c) {
        const float4 t = *reinterpret_cast<const float4*>(at + x * lda + c * 4 * kThreadsM + tm * 4);
        a[c * 4 + 0] = t.x;
        a[c * 4 + 1] = t.y;
        a[c * 4 + 2] = t.z;
        a[c * 4 + 3] = t.w;
      }
#pragma unroll
      for (int c = 0; c < kTN / 4; ++c) {
        const float4 t = *reinterpret_cast<const float4*>(b + x * ldb + c * 4 * kThreadsN + tn * 4);
        bv[c * 4 + 0] = t.x;
        bv[c * 4 + 1] = t.y;
        bv[c * 4 + 2] = t.z;
        bv[c * 4 + 3] = t.w;
      }
#pragma unroll
      for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
    }
  }
};

// exp2 on the special-function unit (ex2.approx.ftz: relative error ~2^-22, flushes denormals).
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Starts copying n floats global → shared with all threads of the block (cp.async, 16 bytes per
// instruction, no registers: every copy is in flight at once). REQUIRES: n a multiple of 4, both
// pointers 16-byte aligned. Complete with CopyAsyncWait() and then a barrier.
template <int kNumThreads>
__device__ __forceinline__ void CopyAsync(float* dst, const float* src, int n, int tid) {
  for (int i = tid * 4; i < n; i += kNumThreads * 4) {
    const unsigned saddr = static_cast<unsigned>(__cvta_generic_to_shared(dst + i));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(src + i) : "memory");
  }
}
// Waits for this thread's outstanding CopyAsync copies.
__device__ __forceinline__ void CopyAsyncWait() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

}  // namespace gyre::cuda::internal
