// Device code only: the building blocks of the chunked KDA kernels — warp-level tensor-core
// products at fp32 accuracy (3xTF32), the SFU exponential and cp.async copies.
//
// 3xTF32. Every fp32 operand x is split into two TF32 numbers, hi = rna_tf32(x) and
// lo = rna_tf32(x − hi), so hi + lo = x to ~2^-22 relative. A product is accumulated as
// a_lo·b_hi + a_hi·b_lo + a_hi·b_hi on the tensor cores with fp32 accumulators; the dropped
// a_lo·b_lo term is ~2^-22 relative. This keeps fp32-class accuracy (the chunked form is checked
// against an fp64 reference at 1e-4; a single TF32 product lands near 3e-4) at three
// mma.sync.m16n8k8 per 16×8×8 step.
//
// Fragment coordinates of mma.m16n8k8 (PTX ISA), lane = 4·g + t:
//   A (16×8, [row][k]):  a[0] (g, t)   a[1] (g+8, t)   a[2] (g, t+4)   a[3] (g+8, t+4)
//   B (8×8,  [k][col]):  b[0] (t, g)   b[1] (t+4, g)
//   C (16×8, [row][col]): c[0] (g, 2t) c[1] (g, 2t+1)  c[2] (g+8, 2t)  c[3] (g+8, 2t+1)
// Shared-memory operands are fp32 rows with a padded leading dimension: an A tile read as
// [row][k] is conflict-free with ld ≡ 4 (mod 32), one read as [k][row] (LoadAT) or a B tile read as
// [k][col] with ld ≡ 8 (mod 32).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gyre::cuda::internal {

// ---- 3xTF32 warp MMA -----------------------------------------------------------------------------

struct FragA {  // one 16×8 A tile, split
  uint32_t hi[4], lo[4];
};
struct FragB {  // one 8×8 B tile, split
  uint32_t hi[2], lo[2];
};

__device__ __forceinline__ uint32_t RoundTf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ void SplitTf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = RoundTf32(x);
  lo = RoundTf32(x - __uint_as_float(hi));
}

// Elements in fragment order (see the table above).
__device__ __forceinline__ FragA MakeFragA(float a0, float a1, float a2, float a3) {
  FragA f;
  SplitTf32(a0, f.hi[0], f.lo[0]);
  SplitTf32(a1, f.hi[1], f.lo[1]);
  SplitTf32(a2, f.hi[2], f.lo[2]);
  SplitTf32(a3, f.hi[3], f.lo[3]);
  return f;
}
__device__ __forceinline__ FragB MakeFragB(float b0, float b1) {
  FragB f;
  SplitTf32(b0, f.hi[0], f.lo[0]);
  SplitTf32(b1, f.hi[1], f.lo[1]);
  return f;
}

// A[m][k] = a[(m0 + m)·ld + k0 + k]  (row-major tile).
__device__ __forceinline__ FragA LoadA(const float* a, int ld, int m0, int k0, int g, int t) {
  const float* p = a + (m0 + g) * ld + k0 + t;
  return MakeFragA(p[0], p[8 * ld], p[4], p[8 * ld + 4]);
}
// A[m][k] = x[(k0 + k)·ld + m0 + m]  (the tile stored transposed).
__device__ __forceinline__ FragA LoadAT(const float* x, int ld, int m0, int k0, int g, int t) {
  const float* p = x + (k0 + t) * ld + m0 + g;
  return MakeFragA(p[0], p[8], p[4 * ld], p[4 * ld + 8]);
}
// B[k][n] = b[(k0 + k)·ld + n0 + n]  (row-major tile).
__device__ __forceinline__ FragB LoadB(const float* b, int ld, int k0, int n0, int g, int t) {
  const float* p = b + (k0 + t) * ld + n0 + g;
  return MakeFragB(p[0], p[4 * ld]);
}

__device__ __forceinline__ void MmaTf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// d += A·B at fp32-class accuracy: the two small cross terms first, then the main one.
__device__ __forceinline__ void Mma3xTf32(float (&d)[4], const FragA& a, const FragB& b) {
  MmaTf32(d, a.lo, b.hi);
  MmaTf32(d, a.hi, b.lo);
  MmaTf32(d, a.hi, b.hi);
}
// d[m][n] += A[m]·B[n] for a warp tile of kM × kN fragments, pass by pass, so that kM·kN
// independent mma sit between two that update the same accumulator.
template <int kM, int kN>
__device__ __forceinline__ void Mma3xTf32Tile(float (&d)[kM][kN][4], const FragA (&a)[kM], const FragB (&b)[kN]) {
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int n = 0; n < kN; ++n) MmaTf32(d[m][n], a[m].lo, b[n].hi);
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int n = 0; n < kN; ++n) MmaTf32(d[m][n], a[m].hi, b[n].lo);
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int n = 0; n < kN; ++n) MmaTf32(d[m][n], a[m].hi, b[n].hi);
}
// The same for one row of fragments.
template <int kN>
__device__ __forceinline__ void Mma3xTf32Row(float (&d)[kN][4], const FragA& a, const FragB (&b)[kN]) {
#pragma unroll
  for (int n = 0; n < kN; ++n) MmaTf32(d[n], a.lo, b[n].hi);
#pragma unroll
  for (int n = 0; n < kN; ++n) MmaTf32(d[n], a.hi, b[n].lo);
#pragma unroll
  for (int n = 0; n < kN; ++n) MmaTf32(d[n], a.hi, b[n].hi);
}

// ---- SFU exponential -----------------------------------------------------------------------------

// exp2 on the special-function unit (ex2.approx.ftz: relative error ~2^-22, flushes denormals).
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// ---- cp.async ------------------------------------------------------------------------------------

// Copies 16 bytes global → shared without registers; zero-fills when !valid (src must still be a
// mapped global address). REQUIRES: both addresses 16-byte aligned.
__device__ __forceinline__ void CopyAsync16(float* dst, const float* src, bool valid) {
  const unsigned saddr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
// Closes the group of this thread's copies issued since the last commit (an empty group is fine).
__device__ __forceinline__ void CopyAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most kPending of this thread's committed groups are still in flight. Other
// threads' copies are visible only after a barrier that follows their own wait.
template <int kPending>
__device__ __forceinline__ void CopyAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace gyre::cuda::internal
