// Device code of absorbed MLA attention (docs/model-glm5-next.md §5.1): the per-head absorption
// GEMMs, the split-key attention over the latent cache, and the combine of key splits.
//
// Two numerics (docs/cuda.md "MLA / DSA kernels"):
//   fp32 path  fp32 FFMA, fp32 accumulation; bf16 kv_b is widened exactly. Kernels: head_gemm
//              (tiles) or skinny_* (few tokens), mla_attn_kernel.
//   bf16 path  (bf16 kv_b only) tensor cores with bf16 operands and fp32 accumulation. What is
//              rounded to bf16 (round-to-nearest-even), and nothing else:
//                q_nope (GEMM1 A), q_lat and q_rope (the score operand Q), the cache rows
//                [latent | k_rot] as they are loaded (C), the softmax weights p (P of O = P·C),
//                o_lat (GEMM2 A).
//              Scores, the running max m, the sum l (of the unrounded fp32 p), the rescale
//              factors, O and every output stay fp32. Kernels: tc_head_gemm (tiles) or skinny_*
//              with round_a (few tokens; the same function up to summation order),
//              mla_attn_tc_kernel.
//
// Sections: helpers; FFMA head GEMM; skinny head GEMMs; tensor-core head GEMM; FFMA attention;
// tensor-core attention; combine; launchers.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/mla_kernels.h"
#include "ops/cuda/quant_codes.cuh"

namespace gyre::cuda::internal {
namespace {

constexpr unsigned kFull = 0xffffffffu;

// ---- helpers -------------------------------------------------------------------------------------

__device__ __forceinline__ void CpAsync16(void* dst, const void* src, int src_bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ float Bf16ToFloat(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
__device__ __forceinline__ float RoundBf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
// Two floats rounded to bf16 and packed, `lo` in the low half (the lower column of an mma fragment).
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Columns col .. col + 3 (col % 4 == 0) of a cache row of `width` values stored as KvDtype `dt`
// (quant/kv_cache.h), decoded to exactly the fp32 values of KvDecodeRow.
__device__ __forceinline__ float4 LoadKv4(const char* row, int col, int width, int dt) {
  if (dt == static_cast<int>(KvDtype::kF32)) return __ldg(reinterpret_cast<const float4*>(row + 4 * col));
  if (dt == static_cast<int>(KvDtype::kBf16)) {
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(row + 2 * col));
    return make_float4(Bf16ToFloat(static_cast<uint16_t>(u.x & 0xffffu)), Bf16ToFloat(static_cast<uint16_t>(u.x >> 16)),
                       Bf16ToFloat(static_cast<uint16_t>(u.y & 0xffffu)), Bf16ToFloat(static_cast<uint16_t>(u.y >> 16)));
  }
  const uint32_t u = __ldg(reinterpret_cast<const unsigned*>(row + col));
  const float s = __ldg(reinterpret_cast<const float*>(row + ((width + 15) & ~15)));
  if (dt == static_cast<int>(KvDtype::kFp8))
    return make_float4(__fmul_rn(DecodeE4M3(u & 0xffu), s), __fmul_rn(DecodeE4M3((u >> 8) & 0xffu), s),
                       __fmul_rn(DecodeE4M3((u >> 16) & 0xffu), s), __fmul_rn(DecodeE4M3(u >> 24), s));
  auto i8 = [](uint32_t b) { return static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(b))); };
  return make_float4(__fmul_rn(i8(u), s), __fmul_rn(i8(u >> 8), s), __fmul_rn(i8(u >> 16), s), __fmul_rn(i8(u >> 24), s));
}

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of `row_bytes`-byte rows (a multiple of
// 128) whose chunks are XOR-swizzled by row % 8: the 8 rows an ldmatrix phase reads at one logical
// chunk land in 8 distinct bank groups.
__device__ __forceinline__ uint32_t Swz(int row, int row_bytes, int chunk) {
  return static_cast<uint32_t>(row * row_bytes + ((chunk ^ (row & 7)) << 4));
}
__device__ __forceinline__ void Ldsm4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void Ldsm4T(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
// d += a · b, m16n8k16, bf16 operands, fp32 accumulators.
__device__ __forceinline__ void Mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Named barriers (ids 1..15; 0 is __syncthreads): `n` threads take part, a multiple of 32.
__device__ __forceinline__ void BarSync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void BarArrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

// Eight consecutive B values (bf16 or fp32) kept raw in registers until used; v[j] is exact fp32.
template <bool kBf16>
struct Raw8;
template <>
struct Raw8<true> {
  uint4 v;
  __device__ __forceinline__ void Load(const void* base, int64_t off) {
    v = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + off));
  }
  __device__ __forceinline__ void Zero() { v = make_uint4(0, 0, 0, 0); }
  __device__ __forceinline__ float operator[](int j) const {
    const uint32_t w = j < 2 ? v.x : j < 4 ? v.y : j < 6 ? v.z : v.w;
    return __uint_as_float((j & 1) ? (w & 0xffff0000u) : (w << 16));
  }
};
template <>
struct Raw8<false> {
  float4 lo, hi;
  __device__ __forceinline__ void Load(const void* base, int64_t off) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(base) + off);
    lo = __ldg(p);
    hi = __ldg(p + 1);
  }
  __device__ __forceinline__ void Zero() { lo = hi = make_float4(0, 0, 0, 0); }
  __device__ __forceinline__ float operator[](int j) const {
    const float4& q = j < 4 ? lo : hi;
    const int e = j & 3;
    return e == 0 ? q.x : e == 1 ? q.y : e == 2 ? q.z : q.w;
  }
};

// Loads 8 consecutive elements of B (fp32 or bf16) as fp32.
template <bool kBf16>
__device__ __forceinline__ void Load8(const void* base, int64_t off, float (&v)[8]) {
  if constexpr (kBf16) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + off));
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = Bf16ToFloat(static_cast<uint16_t>(w[j] & 0xffffu));
      v[2 * j + 1] = Bf16ToFloat(static_cast<uint16_t>(w[j] >> 16));
    }
  } else {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(base) + off);
    const float4 a = __ldg(p), b = __ldg(p + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  }
}

// ---- head-batched GEMM ---------------------------------------------------------------------------

// Grid (N tiles, M tiles, heads), kHgThreads threads, thread tile 4 × 4 (rows 4ty.., cols 4tx..).
// Tiles: A [BM × BK] stored k-major (As[k][m]), B [BK × BN] (Bs[k][n]); both loaded with lanes
// along the stored row so the shared-memory stores are conflict-free.
template <bool kBf16, bool kNK>
__global__ void __launch_bounds__(kHgThreads) head_gemm_kernel(const __grid_constant__ HeadGemmArgs a) {
  __shared__ __align__(16) float As[kHgBK][kHgBM];
  __shared__ __align__(16) float Bs[kHgBK][kHgBN];
  static_assert(kHgBM == 32 && kHgBN == 64 && kHgBK == 16 && kHgThreads == 128, "thread map below");
  const int h = blockIdx.z, m0 = blockIdx.y * kHgBM, n0 = blockIdx.x * kHgBN;
  const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
  const float* A = a.a + h * a.a_head;
  const int64_t b_off = h * a.b_head;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < a.k; k0 += kHgBK) {
    {  // A: thread = (row tid % 32, k quad tid / 32)
      const int mm = tid & 31, kq = tid >> 5, m = m0 + mm;
      float4 v = make_float4(0, 0, 0, 0);
      if (m < a.m) v = __ldg(reinterpret_cast<const float4*>(A + m * a.lda + k0 + 4 * kq));
      As[4 * kq + 0][mm] = v.x;
      As[4 * kq + 1][mm] = v.y;
      As[4 * kq + 2][mm] = v.z;
      As[4 * kq + 3][mm] = v.w;
    }
    float bv[8];
    if constexpr (!kNK) {  // B(k, n) = b[k·ldb + n]: thread = (row tid / 8, 8 columns)
      const int kk = tid >> 3, nn = 8 * (tid & 7), n = n0 + nn;
      if (n < a.n) {
        Load8<kBf16>(a.b, b_off + static_cast<int64_t>(k0 + kk) * a.ldb + n, bv);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) bv[j] = 0.0f;
      }
      *reinterpret_cast<float4*>(&Bs[kk][nn]) = make_float4(bv[0], bv[1], bv[2], bv[3]);
      *reinterpret_cast<float4*>(&Bs[kk][nn + 4]) = make_float4(bv[4], bv[5], bv[6], bv[7]);
    } else {  // B(k, n) = b[n·ldb + k]: thread = (column tid % 64, 8 k values)
      const int nn = tid & 63, kh = 8 * (tid >> 6), n = n0 + nn;
      if (n < a.n) {
        Load8<kBf16>(a.b, b_off + static_cast<int64_t>(n) * a.ldb + k0 + kh, bv);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) bv[j] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) Bs[kh + j][nn] = bv[j];
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kHgBK; ++kk) {
      const float4 av = *reinterpret_cast<const float4*>(&As[kk][4 * ty]);
      const float4 bw = *reinterpret_cast<const float4*>(&Bs[kk][4 * tx]);
      const float ar[4] = {av.x, av.y, av.z, av.w}, br[4] = {bw.x, bw.y, bw.z, bw.w};
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[r][c] = fmaf(ar[r], br[c], acc[r][c]);
    }
    __syncthreads();
  }
  const int n = n0 + 4 * tx;
  if (n >= a.n) return;
  float* C = a.c + h * a.c_head;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int m = m0 + 4 * ty + r;
    if (m < a.m)
      *reinterpret_cast<float4*>(C + static_cast<int64_t>(m) * a.ldc + n) =
          make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
  }
}

// ---- skinny head GEMMs (M <= kSkMaxTokens) -------------------------------------------------------

// Few tokens make the absorptions weight-streaming: every block loads all of its weight slice (16-byte
// loads, 8 per thread, issued before any FMA, ~32 KB per block) so that the whole kv_b is in flight
// across the GPU at once, and reduces in a fixed order (deterministic). The tokens are processed in
// groups of kMT, A staged in shared memory (rounded to bf16 when a.round_a).

// Stages A rows m0 .. m0 + kMT − 1 (zeros past M) into As [kMT][k].
template <int kMT>
__device__ __forceinline__ void SkinnyStageA(const HeadGemmArgs& a, const float* A, int m0, float* As) {
  for (int e = threadIdx.x; e < kMT * a.k; e += kSkThreads) {
    const int t = e / a.k, k = e - t * a.k;
    const float v = m0 + t < a.m ? A[static_cast<int64_t>(m0 + t) * a.lda + k] : 0.0f;
    As[e] = a.round_a ? RoundBf16(v) : v;
  }
}

// B stored [k][n] (W_UK). Grid (ceil(N / kSkKnCols), heads), kSkThreads threads: thread (kg = tid / 8,
// cg = tid % 8) owns columns n0 + 8cg .. + 8 and the rows k ≡ kg (mod 32). Partial sums over the 32
// row classes: shuffles across the 4 classes of a warp, then the 8 warps through shared memory.
template <int kMT, bool kBf16>
__global__ void __launch_bounds__(kSkThreads) skinny_kn_kernel(const __grid_constant__ HeadGemmArgs a) {
  extern __shared__ float4 sk_smem4[];
  float* const As = reinterpret_cast<float*>(sk_smem4);  // [kMT][k]
  float* const red = As + kMT * a.k;                      // [warps][kMT][kSkKnCols]
  static_assert(kSkThreads == 256 && kSkKnCols == 64, "thread map below");
  const int h = blockIdx.y, n0 = blockIdx.x * kSkKnCols;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, cg = tid & 7, kg = tid >> 3;
  const int n = n0 + 8 * cg;
  const bool col_ok = n < a.n;
  const float* A = a.a + h * a.a_head;
  const int64_t b_off = h * a.b_head + n;
  float* C = a.c + h * a.c_head;
  for (int m0 = 0; m0 < a.m; m0 += kMT) {
    __syncthreads();  // the previous group is done with As and red
    SkinnyStageA<kMT>(a, A, m0, As);
    __syncthreads();
    float acc[kMT][8];
#pragma unroll
    for (int t = 0; t < kMT; ++t)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[t][j] = 0.0f;
    for (int k0 = kg; k0 < a.k; k0 += 32 * 8) {
      Raw8<kBf16> w[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int k = k0 + 32 * u;
        if (col_ok && k < a.k) w[u].Load(a.b, b_off + static_cast<int64_t>(k) * a.ldb);
        else w[u].Zero();
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int k = k0 + 32 * u;
        if (k >= a.k) break;
#pragma unroll
        for (int t = 0; t < kMT; ++t) {
          const float av = As[t * a.k + k];
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[t][j] = fmaf(av, w[u][j], acc[t][j]);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kMT; ++t)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        float v = acc[t][j];
        v += __shfl_xor_sync(kFull, v, 8);
        v += __shfl_xor_sync(kFull, v, 16);
        acc[t][j] = v;
      }
    if (lane < 8) {  // cg == lane
#pragma unroll
      for (int t = 0; t < kMT; ++t)
#pragma unroll
        for (int j = 0; j < 8; ++j) red[(warp * kMT + t) * kSkKnCols + 8 * cg + j] = acc[t][j];
    }
    __syncthreads();
    for (int e = tid; e < kMT * kSkKnCols; e += kSkThreads) {
      const int t = e / kSkKnCols, c = e - t * kSkKnCols;
      if (m0 + t >= a.m || n0 + c >= a.n) continue;
      float sum = 0.0f;
#pragma unroll
      for (int w8 = 0; w8 < kSkThreads / 32; ++w8) sum += red[(w8 * kMT + t) * kSkKnCols + c];
      C[static_cast<int64_t>(m0 + t) * a.ldc + n0 + c] = sum;
    }
  }
}

// B stored [n][k] (W_UV). Grid (ceil(N / kSkNkRows), heads), kSkThreads threads: warp w owns the
// output columns (weight rows) nr0 .. nr0 + 3, lane l the k values 8l + 256j; each dot product is
// reduced across the warp by shuffles.
template <int kMT, bool kBf16>
__global__ void __launch_bounds__(kSkThreads) skinny_nk_kernel(const __grid_constant__ HeadGemmArgs a) {
  extern __shared__ float4 sk_smem4[];
  float* const As = reinterpret_cast<float*>(sk_smem4);  // [kMT][k]
  static_assert(kSkThreads / 32 * 4 == kSkNkRows, "4 rows per warp");
  const int h = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nr0 = blockIdx.x * kSkNkRows + 4 * warp;
  const float* A = a.a + h * a.a_head;
  const int64_t b_off = h * a.b_head;
  float* C = a.c + h * a.c_head;
  for (int m0 = 0; m0 < a.m; m0 += kMT) {
    __syncthreads();
    SkinnyStageA<kMT>(a, A, m0, As);
    __syncthreads();
    float acc[kMT][4];
#pragma unroll
    for (int t = 0; t < kMT; ++t)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[t][r] = 0.0f;
    for (int k0 = 8 * lane; k0 < a.k; k0 += 2 * 256) {
      Raw8<kBf16> w[4][2];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int nn = nr0 + r, k = k0 + 256 * j;
          if (nn < a.n && k < a.k) w[r][j].Load(a.b, b_off + static_cast<int64_t>(nn) * a.ldb + k);
          else w[r][j].Zero();
        }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int k = k0 + 256 * j;
        if (k >= a.k) break;
#pragma unroll
        for (int t = 0; t < kMT; ++t) {
          const float4 x0 = *reinterpret_cast<const float4*>(As + t * a.k + k);
          const float4 x1 = *reinterpret_cast<const float4*>(As + t * a.k + k + 4);
          const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            float sum = acc[t][r];
#pragma unroll
            for (int e = 0; e < 8; ++e) sum = fmaf(xv[e], w[r][j][e], sum);
            acc[t][r] = sum;
          }
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kMT; ++t)
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc[t][r] += __shfl_xor_sync(kFull, acc[t][r], off);
    if (lane == 0) {
#pragma unroll
      for (int t = 0; t < kMT; ++t)
#pragma unroll
        for (int r = 0; r < 4; ++r)
          if (m0 + t < a.m && nr0 + r < a.n) C[static_cast<int64_t>(m0 + t) * a.ldc + nr0 + r] = acc[t][r];
    }
  }
}

// ---- tensor-core head GEMM (bf16 path, M > kSkMaxTokens) -----------------------------------------

// C_h = bf16(A_h) · B_h with fp32 accumulation. Grid (N tiles, M tiles, heads), kTgThreads = 8 warps
// as 2 (M) × 4 (N), warp tile 64 × 32 (4 × 4 mma.m16n8k16 per k16 step). K in stages of kTgBK, two
// stages: B by cp.async (zero-filled past N and K), A through registers (loaded one stage ahead,
// rounded and stored once its stage is free). Stage tiles, 16-byte chunks swizzled by row % 8:
//   A [128 m][64 k] (128-byte rows);  B [64 k][128 n] (W_UK, read with ldmatrix.trans) or
//   [128 n][64 k] (kNK: W_UV).
template <bool kNK>
__global__ void __launch_bounds__(kTgThreads) tc_head_gemm_kernel(const __grid_constant__ HeadGemmArgs a) {
  extern __shared__ float4 tg_smem4[];
  static_assert(kTgBM == 128 && kTgBN == 128 && kTgBK == 64 && kTgThreads == 256, "thread map below");
  constexpr int kStage = kTgBM * kTgBK * 2;  // bytes of one A or B stage
  char* const As = reinterpret_cast<char*>(tg_smem4);
  char* const Bs = As + 2 * kStage;
  const int h = blockIdx.z, m0 = blockIdx.y * kTgBM, n0 = blockIdx.x * kTgBN;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp >> 2, wn = warp & 3;
  const float* A = a.a + h * a.a_head;
  const uint16_t* B = static_cast<const uint16_t*>(a.b) + h * a.b_head;
  const int nk = (a.k + kTgBK - 1) / kTgBK;

  float4 ra[8];
  auto load_a = [&](int kt) {
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int idx = tid + kTgThreads * u, r = idx >> 4, c4 = idx & 15;
      const int m = m0 + r, k = kt * kTgBK + 4 * c4;
      ra[u] = make_float4(0, 0, 0, 0);
      if (m < a.m && k < a.k) ra[u] = __ldg(reinterpret_cast<const float4*>(A + static_cast<int64_t>(m) * a.lda + k));
    }
  };
  auto store_a = [&](int st) {
    char* dst = As + st * kStage;
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int idx = tid + kTgThreads * u, r = idx >> 4, c4 = idx & 15;
      *reinterpret_cast<uint2*>(dst + Swz(r, 128, c4 >> 1) + ((c4 & 1) << 3)) =
          make_uint2(PackBf16(ra[u].x, ra[u].y), PackBf16(ra[u].z, ra[u].w));
    }
  };
  auto issue_b = [&](int kt, int st) {
    char* dst = Bs + st * kStage;
    const int k0 = kt * kTgBK;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int idx = tid + kTgThreads * u;
      const uint16_t* src = B;
      uint32_t off;
      bool ok;
      if constexpr (kNK) {
        const int row = idx >> 3, ch = idx & 7, nn = n0 + row, k = k0 + 8 * ch;
        ok = nn < a.n && k < a.k;
        if (ok) src = B + static_cast<int64_t>(nn) * a.ldb + k;
        off = Swz(row, 128, ch);
      } else {
        const int row = idx >> 4, ch = idx & 15, k = k0 + row, nn = n0 + 8 * ch;
        ok = k < a.k && nn < a.n;
        if (ok) src = B + static_cast<int64_t>(k) * a.ldb + nn;
        off = Swz(row, 256, ch);
      }
      CpAsync16(dst + off, src, ok ? 16 : 0);
    }
  };

  float acc[4][4][4];
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int nj = 0; nj < 4; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.0f;

  load_a(0);
  issue_b(0, 0);
  CpAsyncCommit();
  store_a(0);
  for (int kt = 0; kt < nk; ++kt) {
    const int st = kt & 1;
    if (kt + 1 < nk) {
      issue_b(kt + 1, st ^ 1);
      load_a(kt + 1);
    }
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    const uint32_t as = SmemAddr(As + st * kStage), bs = SmemAddr(Bs + st * kStage);
#pragma unroll
    for (int s16 = 0; s16 < kTgBK / 16; ++s16) {
      uint32_t bf[2][4];
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        if constexpr (kNK) {
          const int row = 32 * wn + 16 * p + ((lane >> 4) << 3) + (lane & 7), ch = 2 * s16 + ((lane >> 3) & 1);
          Ldsm4(bf[p], bs + Swz(row, 128, ch));
        } else {
          const int row = 16 * s16 + (((lane >> 3) & 1) << 3) + (lane & 7), ch = 4 * wn + 2 * p + (lane >> 4);
          Ldsm4T(bf[p], bs + Swz(row, 256, ch));
        }
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        uint32_t af[4];
        const int row = 64 * wm + 16 * mi + (lane & 15), ch = 2 * s16 + (lane >> 4);
        Ldsm4(af, as + Swz(row, 128, ch));
#pragma unroll
        for (int p = 0; p < 2; ++p) {
          Mma16816(acc[mi][2 * p], af, bf[p][0], bf[p][1]);
          Mma16816(acc[mi][2 * p + 1], af, bf[p][2], bf[p][3]);
        }
      }
    }
    __syncthreads();
    if (kt + 1 < nk) store_a(st ^ 1);
  }
  CpAsyncWait<0>();

  float* C = a.c + h * a.c_head;
  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int nj = 0; nj < 4; ++nj) {
      const int col = n0 + 32 * wn + 8 * nj + 2 * t4;
      if (col >= a.n) continue;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int row = m0 + 64 * wm + 16 * mi + g + 8 * hf;
        if (row < a.m)
          *reinterpret_cast<float2*>(C + static_cast<int64_t>(row) * a.ldc + col) =
              make_float2(acc[mi][nj][2 * hf], acc[mi][nj][2 * hf + 1]);
      }
    }
}

// ---- attention -----------------------------------------------------------------------------------

// Grid (key splits, tokens, head groups), kMlaThreads threads, one block per SM (~200 KB smem).
// A block owns kMlaHeads heads of one token and the keys [kbeg, kend) of its split, walked in
// sub-chunks of kMlaKeys keys:
//   setup     Qs[h][:] = [q_lat | q_rope] (zero past qk and for heads >= H)
//   producer  the physical rows of the next sub-chunk, then cp.async of its [latent | k_rot] rows
//             into the other C buffer (zero-filled for keys past kend)
//   GEMM1     S[h][j] = scale · Qs[h]·C[j]: thread tile 8 heads × 4 keys over 1/8 of the columns,
//             reduced over the 8 lanes of a column split
//   softmax   online (running max m, sum l, rescale α per head), P written over S
//   GEMM2     O[h][:] = α·O[h][:] + Σ_j P[h][j] C[j][:R]: thread tile 8 heads × 8 columns
//   epilogue  o_lat = O / l (one split), else O, m, l per split for mla_combine_kernel
// kDt: the cache rows' KvDtype (a template argument, so each load's decode is fixed at compile time).
template <int kDt>
__global__ void __launch_bounds__(kMlaThreads, 1) mla_attn_kernel(const __grid_constant__ MlaAttnArgs a) {
  extern __shared__ float4 smem4[];
  float* const smem = reinterpret_cast<float*>(smem4);
  const int ks = a.tile_stride, R = a.latent_dim, qk = R + a.rope, k32 = (qk + 31) / 32 * 32, H = a.heads;
  float* const Qs = smem;                         // [kMlaHeads][ks]
  float* const Cs = Qs + kMlaHeads * ks;          // [2][kMlaKeys][ks]
  float* const Ss = Cs + 2 * kMlaKeys * ks;       // [kMlaKeys][kMlaHeads]: scores, then P
  float* const m_run = Ss + kMlaKeys * kMlaHeads;  // [kMlaHeads]
  float* const l_run = m_run + kMlaHeads;
  float* const alpha = l_run + kMlaHeads;
  int64_t* const rows = reinterpret_cast<int64_t*>(alpha + kMlaHeads);  // [2][kMlaKeys]

  const int split = blockIdx.x, i = blockIdx.y, h0 = blockIdx.z * kMlaHeads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int seq = a.rows.tok_seq[i];
  int64_t n = 0;
  if (seq >= 0) n = a.sel ? a.sel_count[i] : static_cast<int64_t>(a.rows.tok_pos[i]) + 1;
  const int64_t kbeg = static_cast<int64_t>(split) * a.keys_per_split;
  const int64_t kend = n < kbeg + a.keys_per_split ? n : kbeg + a.keys_per_split;

  if (kbeg >= kend) {  // no keys here (padding token, short context or empty selection)
    if (a.num_splits == 1) {
      for (int e = tid; e < kMlaHeads * R; e += kMlaThreads) {
        const int h = e / R;
        if (h0 + h < H) a.o_lat[(static_cast<int64_t>(i) * H + h0 + h) * R + (e - h * R)] = 0.0f;
      }
    } else if (tid < kMlaHeads && h0 + tid < H) {
      float* ml = a.ml_part + ((static_cast<int64_t>(split) * a.num_tokens + i) * H + h0 + tid) * 2;
      ml[0] = -INFINITY;
      ml[1] = 0.0f;
    }
    return;
  }

  // ---- setup ----
  for (int e = tid; e < kMlaHeads * k32; e += kMlaThreads) {
    const int h = e / k32, c = e - h * k32, hh = h0 + h;
    float v = 0.0f;
    if (hh < H) {
      if (c < R) v = a.q_lat[(static_cast<int64_t>(i) * H + hh) * R + c];
      else if (c < qk) v = a.q[(static_cast<int64_t>(i) * H + hh) * a.qd + a.nope + (c - R)];
    }
    Qs[h * ks + c] = v;
  }
  const int pad = k32 - qk;  // columns the K loop reads but no load writes
  for (int e = tid; e < 2 * kMlaKeys * pad; e += kMlaThreads) Cs[(e / pad) * ks + qk + e % pad] = 0.0f;
  if (tid < kMlaHeads) {
    m_run[tid] = -INFINITY;
    l_run[tid] = 0.0f;
  }

  // ---- producer ----
  const int64_t nkeys = kend - kbeg;
  const int nchunks = static_cast<int>((nkeys + kMlaKeys - 1) / kMlaKeys);
  auto find_rows = [&](int c, int buf) {
    if (tid < kMlaKeys) {
      const int64_t jj = kbeg + static_cast<int64_t>(c) * kMlaKeys + tid;
      int64_t r = -1;
      if (jj < kend) r = a.rows.Row(seq, a.sel ? a.sel[static_cast<int64_t>(i) * a.sel_cap + jj] : jj);
      rows[buf * kMlaKeys + tid] = r;
    }
  };
  auto issue = [&](int buf) {
    const int rq = R / 4, kq = qk / 4;
    if constexpr (kDt == static_cast<int>(KvDtype::kF32)) {
      for (int e = tid; e < kMlaKeys * kq; e += kMlaThreads) {
        const int k = e / kq, c4 = e - k * kq;
        const int64_t r = rows[buf * kMlaKeys + k];
        const char* src = a.latent;
        int bytes = 0;
        if (r >= 0) {
          bytes = 16;
          src = c4 < rq ? a.latent + r * a.lat_row_bytes + 16 * c4 : a.krot + r * a.rot_row_bytes + 16 * (c4 - rq);
        }
        CpAsync16(Cs + (buf * kMlaKeys + k) * ks + 4 * c4, src, bytes);
      }
    } else {  // 8- or 16-bit rows: decoded by the loading thread (plain loads, no cp.async)
      for (int e = tid; e < kMlaKeys * kq; e += kMlaThreads) {
        const int k = e / kq, c4 = e - k * kq;
        const int64_t r = rows[buf * kMlaKeys + k];
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r >= 0)
          v = c4 < rq ? LoadKv4(a.latent + r * a.lat_row_bytes, 4 * c4, R, kDt)
                      : LoadKv4(a.krot + r * a.rot_row_bytes, 4 * (c4 - rq), a.rope, kDt);
        *reinterpret_cast<float4*>(Cs + (buf * kMlaKeys + k) * ks + 4 * c4) = v;
      }
    }
    CpAsyncCommit();
  };
  find_rows(0, 0);
  __syncthreads();
  issue(0);

  // Thread maps. GEMM1: lanes 0-7 split the columns, the 8-lane groups and warp pairs split keys.
  const int g_ks = lane & 7, g_ho = warp >> 1, g_kq = ((warp & 1) << 2) | (lane >> 3);
  // GEMM2: 4 head octets × 64 column groups (columns 4cg.. and 256 + 4cg..).
  const int o_ho = tid >> 6, o_cg = tid & 63;
  const bool col0 = 4 * o_cg < R, col1 = 4 * o_cg + 256 < R;
  float o[8][8];
#pragma unroll
  for (int b = 0; b < 8; ++b)
#pragma unroll
    for (int x = 0; x < 8; ++x) o[b][x] = 0.0f;

  for (int c = 0; c < nchunks; ++c) {
    const int buf = c & 1;
    if (c + 1 < nchunks) {
      find_rows(c + 1, buf ^ 1);
      __syncthreads();
      issue(buf ^ 1);
    } else {
      CpAsyncCommit();  // an empty group keeps "wait until one group is pending" uniform
    }
    CpAsyncWait<1>();
    __syncthreads();
    const float* cb = Cs + buf * kMlaKeys * ks;

    // ---- GEMM1: scores ----
    float s[8][4];
#pragma unroll
    for (int b = 0; b < 8; ++b)
#pragma unroll
      for (int j = 0; j < 4; ++j) s[b][j] = 0.0f;
    {
      const float* qp = Qs + 8 * g_ho * ks + 4 * g_ks;
      const float* cp = cb + g_kq * ks + 4 * g_ks;
      for (int t = 0; t < k32; t += 32) {
        float4 cv[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) cv[j] = *reinterpret_cast<const float4*>(cp + 8 * j * ks + t);
#pragma unroll
        for (int b = 0; b < 8; ++b) {
          const float4 qv = *reinterpret_cast<const float4*>(qp + b * ks + t);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            float acc = s[b][j];
            acc = fmaf(qv.x, cv[j].x, acc);
            acc = fmaf(qv.y, cv[j].y, acc);
            acc = fmaf(qv.z, cv[j].z, acc);
            acc = fmaf(qv.w, cv[j].w, acc);
            s[b][j] = acc;
          }
        }
      }
    }
#pragma unroll
    for (int b = 0; b < 8; ++b)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int off = 1; off < 8; off <<= 1) s[b][j] += __shfl_xor_sync(kFull, s[b][j], off);
    {
      const int64_t chunk0 = kbeg + static_cast<int64_t>(c) * kMlaKeys;
#pragma unroll
      for (int b = 0; b < 8; ++b)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (((b * 4 + j) & 7) == g_ks) {  // each of the 8 lanes stores 4 of the 32 sums
            const int key = g_kq + 8 * j;
            Ss[key * kMlaHeads + 8 * g_ho + b] = chunk0 + key < kend ? s[b][j] * a.scale : -INFINITY;
          }
    }
    __syncthreads();

    // ---- online softmax: 8 lanes per head, 4 keys per lane ----
    {
      const int h = 4 * warp + (lane >> 3), l8 = lane & 7;
      float v[4], mx = -INFINITY;
#pragma unroll
      for (int e = 0; e < 4; ++e) mx = fmaxf(mx, v[e] = Ss[(l8 + 8 * e) * kMlaHeads + h]);
#pragma unroll
      for (int off = 1; off < 8; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, off));
      const float m_old = m_run[h], m_new = fmaxf(m_old, mx);  // finite: the first key of a chunk is valid
      float sum = 0.0f;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = expf(v[e] - m_new);
        Ss[(l8 + 8 * e) * kMlaHeads + h] = p;
        sum += p;
      }
#pragma unroll
      for (int off = 1; off < 8; off <<= 1) sum += __shfl_xor_sync(kFull, sum, off);
      __syncwarp();
      if (l8 == 0) {
        const float al = expf(m_old - m_new);
        alpha[h] = al;
        l_run[h] = l_run[h] * al + sum;
        m_run[h] = m_new;
      }
    }
    __syncthreads();

    // ---- GEMM2: O = α·O + P·C ----
    {
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        const float al = alpha[8 * o_ho + b];
#pragma unroll
        for (int x = 0; x < 8; ++x) o[b][x] *= al;
      }
      const float* pp = Ss + 8 * o_ho;
      const float* cp = cb + 4 * o_cg;
#pragma unroll 4
      for (int k = 0; k < kMlaKeys; ++k) {
        const float4 p0 = *reinterpret_cast<const float4*>(pp + k * kMlaHeads);
        const float4 p1 = *reinterpret_cast<const float4*>(pp + k * kMlaHeads + 4);
        float4 c0 = make_float4(0, 0, 0, 0), c1 = make_float4(0, 0, 0, 0);
        if (col0) c0 = *reinterpret_cast<const float4*>(cp + k * ks);
        if (col1) c1 = *reinterpret_cast<const float4*>(cp + k * ks + 256);
        const float pv[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
        const float cv[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
#pragma unroll
        for (int b = 0; b < 8; ++b)
#pragma unroll
          for (int x = 0; x < 8; ++x) o[b][x] = fmaf(pv[b], cv[x], o[b][x]);
      }
    }
    __syncthreads();  // the next iteration refills this C buffer and S
  }
  CpAsyncWait<0>();

  // ---- epilogue ----
#pragma unroll
  for (int b = 0; b < 8; ++b) {
    const int h = 8 * o_ho + b, hh = h0 + h;
    if (hh >= H) continue;
    float* dst;
    float scale = 1.0f;
    if (a.num_splits == 1) {
      const float l = l_run[h];
      scale = l > 0.0f ? 1.0f / l : 0.0f;
      dst = a.o_lat + (static_cast<int64_t>(i) * H + hh) * R;
    } else {
      dst = a.o_part + ((static_cast<int64_t>(split) * a.num_tokens + i) * H + hh) * R;
    }
    if (col0)
      *reinterpret_cast<float4*>(dst + 4 * o_cg) =
          make_float4(o[b][0] * scale, o[b][1] * scale, o[b][2] * scale, o[b][3] * scale);
    if (col1)
      *reinterpret_cast<float4*>(dst + 256 + 4 * o_cg) =
          make_float4(o[b][4] * scale, o[b][5] * scale, o[b][6] * scale, o[b][7] * scale);
  }
  if (a.num_splits > 1 && tid < kMlaHeads && h0 + tid < H) {
    float* ml = a.ml_part + ((static_cast<int64_t>(split) * a.num_tokens + i) * H + h0 + tid) * 2;
    ml[0] = m_run[tid];
    ml[1] = l_run[tid];
  }
}

// ---- tensor-core attention (bf16 path) -----------------------------------------------------------

// Grid (key splits, tokens, head groups of kTcHeads), kTcThreads threads, one block per SM (up to
// 226 KB of shared memory at qk_pad = 576). Roles:
//   producers (warps 16-19)  the physical rows of the next chunk (one chunk ahead), then per chunk:
//             fp32 [latent | k_rot] rows (zeros for keys past the end and columns past qk) →
//             bf16 → Cs[buf]; 16 float4 loads per lane in flight (32 KB per block).
//   consumers (warps 0-15)    Q = bf16([q_lat | q_rope]) once; per chunk of 64 keys:
//             S      warp (mt = w % 4, kq = w / 4): heads 16mt.., keys 16kq.. (2 mma n-tiles over
//                    qk_pad / 16 k-steps); scaled to log2 units, masked past the split's end
//             max    quad shuffles, then the 4 key quarters through `red`
//             P      exp2(s − m_new) fp32: its sum goes to l, bf16(p) to Ps (64 × 64)
//             O      warp (mt, cq = w / 4): heads 16mt.., columns 128cq.. (16 n-tiles, registers),
//                    O = α·O + P·C[:, :R] over the valid 16-key steps
// Buffers: C double-buffered; named barriers (ids) 1 consumers, 2 producers, 3 + b "C[b] full"
// (producers arrive, consumers wait), 5 + b "C[b] empty" (consumers arrive after their last use,
// producers wait before refilling it). Epilogue: o_lat = O / l (one split) or O, (m, l) per split.
template <int kDt>
__global__ void __launch_bounds__(kTcThreads, 1) mla_attn_tc_kernel(const __grid_constant__ MlaAttnArgs a) {
  extern __shared__ float4 tc_smem4[];
  constexpr int kConsumers = 32 * kTcConsumerWarps, kProducers = 32 * kTcProducerWarps;
  constexpr int kBarCons = 1, kBarProd = 2, kBarFull = 3, kBarEmpty = 5;
  static_assert(kTcHeads == 64 && kTcKeys == 64 && kTcConsumerWarps == 16 && kTcProducerWarps == 4,
                "thread maps below");
  const int qp = a.qk_pad, rb = 2 * qp;  // row bytes of the Q and C tiles
  char* const Qs = reinterpret_cast<char*>(tc_smem4);         // [64 heads][qp] bf16
  char* const Cs = Qs + kTcHeads * rb;                         // [2][64 keys][qp] bf16
  char* const Ps = Cs + 2 * kTcKeys * rb;                      // [64 heads][64 keys] bf16
  float* const red = reinterpret_cast<float*>(Ps + kTcHeads * kTcKeys * 2);  // [4 quarters][64 heads]
  int64_t* const prow = reinterpret_cast<int64_t*>(red + 4 * kTcHeads);     // [2][64] cache rows

  const int split = blockIdx.x, i = blockIdx.y, h0 = blockIdx.z * kTcHeads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int H = a.heads, R = a.latent_dim, qk = R + a.rope;
  const int seq = a.rows.tok_seq[i];
  int64_t n = 0;
  if (seq >= 0) n = a.sel ? a.sel_count[i] : static_cast<int64_t>(a.rows.tok_pos[i]) + 1;
  const int64_t kbeg = static_cast<int64_t>(split) * a.keys_per_split;
  const int64_t kend = n < kbeg + a.keys_per_split ? n : kbeg + a.keys_per_split;

  if (kbeg >= kend) {  // no keys here (padding token, short context or empty selection)
    if (a.num_splits == 1) {
      for (int e = tid; e < kTcHeads * R; e += kTcThreads) {
        const int h = e / R;
        if (h0 + h < H) a.o_lat[(static_cast<int64_t>(i) * H + h0 + h) * R + (e - h * R)] = 0.0f;
      }
    } else if (tid < kTcHeads && h0 + tid < H) {
      float* ml = a.ml_part + ((static_cast<int64_t>(split) * a.num_tokens + i) * H + h0 + tid) * 2;
      ml[0] = -INFINITY;
      ml[1] = 0.0f;
    }
    return;
  }
  const int nchunks = static_cast<int>((kend - kbeg + kTcKeys - 1) / kTcKeys);

  // ---- producers ----
  if (warp >= kTcConsumerWarps) {
    const int pw = warp - kTcConsumerWarps, ptid = tid - kConsumers;
    const int upk = qp / 4, rq = R / 4, qk4 = qk / 4;  // float4 units: padded row, latent, real row
    const int32_t* sel_i = a.sel ? a.sel + static_cast<int64_t>(i) * a.sel_cap : nullptr;
    auto key_pos = [&](int64_t j) -> int32_t { return sel_i ? sel_i[j] : static_cast<int32_t>(j); };
    static_assert(kProducers >= kTcKeys, "one producer thread per key of a chunk finds its row");
    if (ptid < kTcKeys) {
      const int64_t j = kbeg + ptid;
      prow[ptid] = j < kend ? a.rows.Row(seq, key_pos(j)) : -1;
    }
    BarSync(kBarProd, kProducers);
    // Warp pw fills keys pw + 4·kl (kl < 16), walked as the flat unit list kl·upk + c4, lane l taking
    // units l, l + 32, ... in steps of 16 (all 16 loads of a step in flight).
    constexpr int kKeysPerWarp = kTcKeys / kTcProducerWarps, kSlots = 16;
    const int total = kKeysPerWarp * upk;
    for (int c = 0; c < nchunks; ++c) {
      const int b = c & 1;
      if (c >= 2) BarSync(kBarEmpty + b, kTcThreads);
      // The next chunk's selection entry now; its page-table lookup after this chunk's loads.
      const int64_t jn = kbeg + static_cast<int64_t>(c + 1) * kTcKeys + ptid;
      const bool has_next = ptid < kTcKeys && c + 1 < nchunks && jn < kend;
      const int32_t pos_next = has_next ? key_pos(jn) : 0;
      char* const cb = Cs + b * kTcKeys * rb;
      const int64_t* rows_b = prow + b * kTcKeys;
      int kl = 0, c4 = lane;
      while (c4 >= upk) c4 -= upk, ++kl;
      for (int f0 = lane; f0 < total; f0 += 32 * kSlots) {
        // All kSlots loads first, undecoded (16 B fp32, 8 B bf16, 4 B of 8-bit codes + the row's
        // scale), then decode and store: decoding inside the load loop made ptxas wait on each load
        // (measured: bf16 / 8-bit caches 2x slower than fp32 at batch 64, bench/results/kv_cache_gpu).
        uint4 raw[kSlots];
        float sc[kSlots];
        int wk = kl, wc = c4;
#pragma unroll
        for (int x = 0; x < kSlots; ++x) {
          raw[x] = make_uint4(0, 0, 0, 0);
          sc[x] = 0.0f;
          if (f0 + 32 * x < total) {
            const int64_t row = rows_b[pw + kTcProducerWarps * wk];
            if (row >= 0 && wc < qk4) {
              const bool lat = wc < rq;
              const char* rp = lat ? a.latent + row * a.lat_row_bytes : a.krot + row * a.rot_row_bytes;
              const int u = lat ? wc : wc - rq, width = lat ? R : a.rope;
              if constexpr (kDt == static_cast<int>(KvDtype::kF32)) {
                raw[x] = __ldg(reinterpret_cast<const uint4*>(rp + 16 * u));
              } else if constexpr (kDt == static_cast<int>(KvDtype::kBf16)) {
                const uint2 t = __ldg(reinterpret_cast<const uint2*>(rp + 8 * u));
                raw[x].x = t.x, raw[x].y = t.y;
              } else {
                raw[x].x = __ldg(reinterpret_cast<const unsigned*>(rp + 4 * u));
                sc[x] = __ldg(reinterpret_cast<const float*>(rp + ((width + 15) & ~15)));
              }
            }
          }
          wc += 32;
          while (wc >= upk) wc -= upk, ++wk;
        }
#pragma unroll
        for (int x = 0; x < kSlots; ++x) {
          if (f0 + 32 * x < total) {
            const int key = pw + kTcProducerWarps * kl;
            uint2 packed;
            if constexpr (kDt == static_cast<int>(KvDtype::kF32)) {
              packed = make_uint2(PackBf16(__uint_as_float(raw[x].x), __uint_as_float(raw[x].y)),
                                  PackBf16(__uint_as_float(raw[x].z), __uint_as_float(raw[x].w)));
            } else if constexpr (kDt == static_cast<int>(KvDtype::kBf16)) {
              packed = make_uint2(raw[x].x, raw[x].y);  // already bf16: rounding it again is the identity
            } else {
              const uint32_t q = raw[x].x;
              float f[4];
#pragma unroll
              for (int j = 0; j < 4; ++j) {
                const uint32_t code = (q >> (8 * j)) & 0xffu;
                f[j] = __fmul_rn(kDt == static_cast<int>(KvDtype::kFp8)
                                     ? DecodeE4M3(code)
                                     : static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(code))),
                                 sc[x]);
              }
              packed = make_uint2(PackBf16(f[0], f[1]), PackBf16(f[2], f[3]));
            }
            *reinterpret_cast<uint2*>(cb + Swz(key, rb, c4 >> 1) + ((c4 & 1) << 3)) = packed;
          }
          c4 += 32;
          while (c4 >= upk) c4 -= upk, ++kl;
        }
      }
      BarArrive(kBarFull + b, kTcThreads);
      if (c + 1 < nchunks) {
        if (ptid < kTcKeys) prow[(b ^ 1) * kTcKeys + ptid] = has_next ? a.rows.Row(seq, pos_next) : -1;
        BarSync(kBarProd, kProducers);
      }
    }
    return;
  }

  // ---- consumers: Q ----
  for (int e = tid; e < kTcHeads * (qp / 4); e += kConsumers) {
    const int h = e / (qp / 4), c4 = e - h * (qp / 4), hh = h0 + h, col = 4 * c4;
    float4 v = make_float4(0, 0, 0, 0);
    if (hh < H) {
      if (col < R) v = __ldg(reinterpret_cast<const float4*>(a.q_lat + (static_cast<int64_t>(i) * H + hh) * R + col));
      else if (col < qk)
        v = __ldg(reinterpret_cast<const float4*>(a.q + (static_cast<int64_t>(i) * H + hh) * a.qd + a.nope + (col - R)));
    }
    *reinterpret_cast<uint2*>(Qs + Swz(h, rb, c4 >> 1) + ((c4 & 1) << 3)) =
        make_uint2(PackBf16(v.x, v.y), PackBf16(v.z, v.w));
  }
  BarSync(kBarCons, kConsumers);

  const int mt = warp & 3, kq = warp >> 2, g = lane >> 2, t4 = lane & 3;
  const float sl2 = a.scale * 1.4426950408889634f;  // scores in log2 units: exp(x) = exp2(x·log2 e)
  const uint32_t qs_addr = SmemAddr(Qs), ps_addr = SmemAddr(Ps);
  float o[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // rows g, g + 8 of the m-tile

  for (int c = 0; c < nchunks; ++c) {
    const int b = c & 1;
    const int nvalid = static_cast<int>(min(static_cast<int64_t>(kTcKeys), kend - kbeg - static_cast<int64_t>(c) * kTcKeys));
    BarSync(kBarFull + b, kTcThreads);
    const uint32_t cb_addr = SmemAddr(Cs + b * kTcKeys * rb);

    // ---- S = Q · Cᵀ for heads 16mt.., keys 16kq.. ----
    float s[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
    if (16 * kq < nvalid) {
      const int arow = 16 * mt + (lane & 15), brow = 16 * kq + ((lane >> 4) << 3) + (lane & 7);
#pragma unroll 1  // NOTE: unrolling spills at the 96-register budget (o alone is 64)
      for (int t = 0; t < qp / 16; ++t) {
        uint32_t af[4], bf[4];
        Ldsm4(af, qs_addr + Swz(arow, rb, 2 * t + (lane >> 4)));
        Ldsm4(bf, cb_addr + Swz(brow, rb, 2 * t + ((lane >> 3) & 1)));
        Mma16816(s[0], af, bf[0], bf[1]);
        Mma16816(s[1], af, bf[2], bf[3]);
      }
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = 16 * kq + 8 * nt + 2 * t4 + (e & 1);
        const float v = key < nvalid ? s[nt][e] * sl2 : -INFINITY;
        s[nt][e] = v;
        mx[e >> 1] = fmaxf(mx[e >> 1], v);
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFull, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFull, mx[r], 2));
    }
    if (t4 == 0) {
      red[kq * kTcHeads + 16 * mt + g] = mx[0];
      red[kq * kTcHeads + 16 * mt + g + 8] = mx[1];
    }
    BarSync(kBarCons, kConsumers);

    // ---- online softmax; P = bf16(p) ----
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = 16 * mt + g + 8 * r;
      const float cm = fmaxf(fmaxf(red[row], red[kTcHeads + row]), fmaxf(red[2 * kTcHeads + row], red[3 * kTcHeads + row]));
      const float m_new = fmaxf(m_run[r], cm);  // finite: the chunk's first key is valid
      alpha[r] = exp2f(m_run[r] - m_new);
      m_run[r] = m_new;
    }
    float psum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const float p0 = exp2f(s[nt][0] - m_run[0]), p1 = exp2f(s[nt][1] - m_run[0]);
      const float p2 = exp2f(s[nt][2] - m_run[1]), p3 = exp2f(s[nt][3] - m_run[1]);
      psum[0] += p0 + p1;
      psum[1] += p2 + p3;
      const int key = 16 * kq + 8 * nt + 2 * t4, row0 = 16 * mt + g, row1 = row0 + 8;
      *reinterpret_cast<uint32_t*>(Ps + Swz(row0, 128, key >> 3) + ((key & 7) << 1)) = PackBf16(p0, p1);
      *reinterpret_cast<uint32_t*>(Ps + Swz(row1, 128, key >> 3) + ((key & 7) << 1)) = PackBf16(p2, p3);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha[r] + psum[r];
    BarSync(kBarCons, kConsumers);

    // ---- O = α·O + P · C[:, 128cq .. 128cq + 127] ----
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      o[j][0] *= alpha[0];
      o[j][1] *= alpha[0];
      o[j][2] *= alpha[1];
      o[j][3] *= alpha[1];
    }
    const int ksteps = (nvalid + 15) / 16;
    for (int kk = 0; kk < ksteps; ++kk) {
      uint32_t af[4];
      Ldsm4(af, ps_addr + Swz(16 * mt + (lane & 15), 128, 2 * kk + (lane >> 4)));
      const int brow = 16 * kk + (((lane >> 3) & 1) << 3) + (lane & 7);
#pragma unroll
      for (int np = 0; np < 8; ++np) {
        const int col0 = 128 * kq + 16 * np;
        if (col0 < R) {
          uint32_t bf[4];
          Ldsm4T(bf, cb_addr + Swz(brow, rb, (col0 >> 3) + (lane >> 4)));
          Mma16816(o[2 * np], af, bf[0], bf[1]);
          Mma16816(o[2 * np + 1], af, bf[2], bf[3]);
        }
      }
    }
    if (c + 2 < nchunks) BarArrive(kBarEmpty + b, kTcThreads);
  }

  // ---- epilogue ----
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_run[r] += __shfl_xor_sync(kFull, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(kFull, l_run[r], 2);
  }
  BarSync(kBarCons, kConsumers);
  if (t4 == 0) {
    red[kq * kTcHeads + 16 * mt + g] = l_run[0];
    red[kq * kTcHeads + 16 * mt + g + 8] = l_run[1];
  }
  BarSync(kBarCons, kConsumers);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = 16 * mt + g + 8 * r, hh = h0 + row;
    if (hh >= H) continue;
    const float l = (red[row] + red[kTcHeads + row]) + (red[2 * kTcHeads + row] + red[3 * kTcHeads + row]);
    float* dst;
    float inv = 1.0f;
    if (a.num_splits == 1) {
      inv = l > 0.0f ? 1.0f / l : 0.0f;
      dst = a.o_lat + (static_cast<int64_t>(i) * H + hh) * R;
    } else {
      dst = a.o_part + ((static_cast<int64_t>(split) * a.num_tokens + i) * H + hh) * R;
      if (kq == 0 && t4 == 0) {
        float* ml = a.ml_part + ((static_cast<int64_t>(split) * a.num_tokens + i) * H + hh) * 2;
        ml[0] = m_run[r] * 0.6931471805599453f;  // back to natural-log units for the combine
        ml[1] = l;
      }
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int col = 128 * kq + 8 * j + 2 * t4;
      if (col < R) *reinterpret_cast<float2*>(dst + col) = make_float2(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
    }
  }
}

// ---- combine -------------------------------------------------------------------------------------

// Grid (tokens, heads), 128 threads: o_lat = Σ_s e^{m_s − M} O_s / Σ_s e^{m_s − M} l_s over the
// splits that saw keys (l_s > 0); zeros when none did (padding tokens). Warp 0 computes the split
// weights (lanes over splits, fixed shuffle trees), then all threads sum the partial outputs.
__global__ void __launch_bounds__(128) mla_combine_kernel(const __grid_constant__ MlaCombineArgs a) {
  __shared__ float wts[kMlaMaxSplits];
  __shared__ float s_inv;
  const int i = blockIdx.x, h = blockIdx.y, S = a.num_splits, T = a.num_tokens, H = a.heads, R = a.latent_dim;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    float mx = -INFINITY;
    for (int s = lane; s < S; s += 32) {
      const float* ml = a.ml_part + ((static_cast<int64_t>(s) * T + i) * H + h) * 2;
      const float m = ml[1] > 0.0f ? ml[0] : -INFINITY;  // running max, or -inf for an empty split
      wts[s] = m;
      mx = fmaxf(mx, m);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, off));
    float den = 0.0f;
    for (int s = lane; s < S; s += 32) {
      const float l = a.ml_part[((static_cast<int64_t>(s) * T + i) * H + h) * 2 + 1];
      const float w = l > 0.0f ? expf(wts[s] - mx) : 0.0f;
      wts[s] = w;
      den = fmaf(w, l, den);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) den += __shfl_xor_sync(kFull, den, off);
    if (lane == 0) s_inv = den > 0.0f ? 1.0f / den : 0.0f;
  }
  __syncthreads();
  float* dst = a.o_lat + (static_cast<int64_t>(i) * H + h) * R;
  for (int c = 4 * threadIdx.x; c < R; c += 4 * blockDim.x) {
    float4 acc = make_float4(0, 0, 0, 0);
    for (int s = 0; s < S; ++s) {
      const float w = wts[s];
      if (w == 0.0f) continue;  // empty split: its partial O was never written
      const float4 v = *reinterpret_cast<const float4*>(a.o_part + ((static_cast<int64_t>(s) * T + i) * H + h) * R + c);
      acc.x = fmaf(w, v.x, acc.x);
      acc.y = fmaf(w, v.y, acc.y);
      acc.z = fmaf(w, v.z, acc.z);
      acc.w = fmaf(w, v.w, acc.w);
    }
    *reinterpret_cast<float4*>(dst + c) = make_float4(acc.x * s_inv, acc.y * s_inv, acc.z * s_inv, acc.w * s_inv);
  }
}

}  // namespace

// ---- launchers -----------------------------------------------------------------------------------

cudaError_t LaunchHeadGemm(const HeadGemmArgs& a, cudaStream_t s) {
  const dim3 grid((a.n + kHgBN - 1) / kHgBN, (a.m + kHgBM - 1) / kHgBM, a.heads);
  if (a.b_bf16) {
    if (a.b_nk) head_gemm_kernel<true, true><<<grid, kHgThreads, 0, s>>>(a);
    else head_gemm_kernel<true, false><<<grid, kHgThreads, 0, s>>>(a);
  } else {
    if (a.b_nk) head_gemm_kernel<false, true><<<grid, kHgThreads, 0, s>>>(a);
    else head_gemm_kernel<false, false><<<grid, kHgThreads, 0, s>>>(a);
  }
  return cudaGetLastError();
}

template <int kMT, bool kBf16>
cudaError_t LaunchSkinnyT(const HeadGemmArgs& a, cudaStream_t s) {
  if (a.b_nk) {
    static const cudaError_t allowed = AllowMaxDynamicSmem(reinterpret_cast<const void*>(skinny_nk_kernel<kMT, kBf16>));
    if (allowed != cudaSuccess) return allowed;
    const size_t smem = sizeof(float) * kMT * a.k;
    skinny_nk_kernel<kMT, kBf16><<<dim3((a.n + kSkNkRows - 1) / kSkNkRows, a.heads), kSkThreads, smem, s>>>(a);
  } else {
    static const cudaError_t allowed = AllowMaxDynamicSmem(reinterpret_cast<const void*>(skinny_kn_kernel<kMT, kBf16>));
    if (allowed != cudaSuccess) return allowed;
    const size_t smem = sizeof(float) * kMT * (a.k + (kSkThreads / 32) * kSkKnCols);
    skinny_kn_kernel<kMT, kBf16><<<dim3((a.n + kSkKnCols - 1) / kSkKnCols, a.heads), kSkThreads, smem, s>>>(a);
  }
  return cudaGetLastError();
}

template <bool kBf16>
cudaError_t LaunchSkinnyB(const HeadGemmArgs& a, cudaStream_t s) {
  if (a.m <= 1) return LaunchSkinnyT<1, kBf16>(a, s);
  if (a.m <= 4) return LaunchSkinnyT<4, kBf16>(a, s);
  return LaunchSkinnyT<8, kBf16>(a, s);
}

cudaError_t LaunchHeadGemmSkinny(const HeadGemmArgs& a, cudaStream_t s) {
  return a.b_bf16 ? LaunchSkinnyB<true>(a, s) : LaunchSkinnyB<false>(a, s);
}

cudaError_t LaunchHeadGemmTc(const HeadGemmArgs& a, cudaStream_t s) {
  const dim3 grid((a.n + kTgBN - 1) / kTgBN, (a.m + kTgBM - 1) / kTgBM, a.heads);
  const size_t smem = 4 * static_cast<size_t>(kTgBM) * kTgBK * 2;
  if (a.b_nk) {
    static const cudaError_t allowed = AllowMaxDynamicSmem(reinterpret_cast<const void*>(tc_head_gemm_kernel<true>));
    if (allowed != cudaSuccess) return allowed;
    tc_head_gemm_kernel<true><<<grid, kTgThreads, smem, s>>>(a);
  } else {
    static const cudaError_t allowed = AllowMaxDynamicSmem(reinterpret_cast<const void*>(tc_head_gemm_kernel<false>));
    if (allowed != cudaSuccess) return allowed;
    tc_head_gemm_kernel<false><<<grid, kTgThreads, smem, s>>>(a);
  }
  return cudaGetLastError();
}

static_assert(static_cast<int>(KvDtype::kF32) == 0 && static_cast<int>(KvDtype::kBf16) == 1 &&
                  static_cast<int>(KvDtype::kFp8) == 2 && static_cast<int>(KvDtype::kInt8) == 3,
              "the launchers' template arguments");
template <int kDt>
cudaError_t LaunchMlaAttentionTcT(const MlaAttnArgs& a, int head_groups, cudaStream_t s) {
  static const cudaError_t allowed = AllowMaxDynamicSmem(reinterpret_cast<const void*>(mla_attn_tc_kernel<kDt>));
  if (allowed != cudaSuccess) return allowed;
  const dim3 grid(a.num_splits, a.num_tokens, head_groups);
  mla_attn_tc_kernel<kDt><<<grid, kTcThreads, TcAttnSmemBytes(a.qk_pad), s>>>(a);
  return cudaGetLastError();
}
template <int kDt>
cudaError_t LaunchMlaAttentionT(const MlaAttnArgs& a, int head_groups, cudaStream_t s) {
  static const cudaError_t allowed = AllowMaxDynamicSmem(reinterpret_cast<const void*>(mla_attn_kernel<kDt>));
  if (allowed != cudaSuccess) return allowed;
  const size_t smem = MlaAttnSmemBytes(a.latent_dim + a.rope);
  const dim3 grid(a.num_splits, a.num_tokens, head_groups);
  mla_attn_kernel<kDt><<<grid, kMlaThreads, smem, s>>>(a);
  return cudaGetLastError();
}
cudaError_t LaunchMlaAttentionTc(const MlaAttnArgs& a, int head_groups, cudaStream_t s) {
  switch (static_cast<KvDtype>(a.kv_dtype)) {
    case KvDtype::kF32: return LaunchMlaAttentionTcT<0>(a, head_groups, s);
    case KvDtype::kBf16: return LaunchMlaAttentionTcT<1>(a, head_groups, s);
    case KvDtype::kFp8: return LaunchMlaAttentionTcT<2>(a, head_groups, s);
    case KvDtype::kInt8: return LaunchMlaAttentionTcT<3>(a, head_groups, s);
  }
  return cudaErrorInvalidValue;
}
cudaError_t LaunchMlaAttention(const MlaAttnArgs& a, int head_groups, cudaStream_t s) {
  switch (static_cast<KvDtype>(a.kv_dtype)) {
    case KvDtype::kF32: return LaunchMlaAttentionT<0>(a, head_groups, s);
    case KvDtype::kBf16: return LaunchMlaAttentionT<1>(a, head_groups, s);
    case KvDtype::kFp8: return LaunchMlaAttentionT<2>(a, head_groups, s);
    case KvDtype::kInt8: return LaunchMlaAttentionT<3>(a, head_groups, s);
  }
  return cudaErrorInvalidValue;
}
cudaError_t LaunchMlaCombine(const MlaCombineArgs& a, cudaStream_t s) {
  mla_combine_kernel<<<dim3(a.num_tokens, a.heads), 128, 0, s>>>(a);
  return cudaGetLastError();
}

}  // namespace gyre::cuda::internal
