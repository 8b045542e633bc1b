// KDA chunked form (prefill) on sm90: two kernels over 64-row chunks (docs/model-kda-kimi-linear.md
// §1.5–1.5.1, FLA's chunk_kda_fwd split of the work), fp32 throughout: every matrix product runs on
// the tensor cores as 3xTF32 (sm90_block_gemm.cuh), everything else is fp32 FFMA/SFU.
//
//   1. intra (parallel over chunk × head, two blocks per SM): in-chunk cumsum G and L2 norms;
//      L and Aqk with exp2(G_i − G_j) per element (SFU) on the four diagonal 16×16 blocks and,
//      below them, as GEMMs of factored operands (q̃_i e^{G_i − G_r})·(k̂_j e^{G_r − G_j}) with the
//      reference row r between j and i, so both factors are ≤ 1 (FLA's sub-chunk factorization);
//      T = (I + L)⁻¹ blockwise (forward substitution on the diagonal blocks, then block products);
//      W = T·diag β·(e^G ⊙ K̂), U = T·diag β·V. Writes W, U, K̂⊙e^{G_C−G}, Q̃⊙e^G, Aqk, e^{G_C}.
//   2. scan (one block per V tile × head × sequence, sequential over the sequence's chunks, the
//      K × kBV state slice in registers and shared memory), per chunk:
//        Ṽ = U − W·S ;  O = (Q̃⊙e^G)·S + Aqk·Ṽ ;  S ← e^{G_C} ⊙ S + (K̂⊙e^{G_C−G})ᵀ·Ṽ
//      with the next chunk's operands arriving by cp.async while the current one is computed.
//
// Sections: shared pieces; intra kernel (phases 1–6); scan kernel; launchers.
// Head sizes below kK are zero-padded on load (exact: zero features add nothing to any product).
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/kda_kernels.h"
#include "ops/cuda/sm90_block_gemm.cuh"

namespace gyre::cuda::internal {
namespace {

// ---- shared pieces -------------------------------------------------------------------------------

constexpr int kC = kKdaChunk;  // rows per chunk
constexpr int kB = 16;         // rows per sub-chunk (diagonal block)
constexpr int kThreads = 256;  // both kernels: 8 warps
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kC == 4 * kB, "four 16-row sub-chunks per chunk");

// Everything a chunk kernel reads; trivially copyable so it can be a __grid_constant__ parameter.
struct ChunkArgs {
  const float* q;
  const float* k;
  const float* v;
  const float* g;
  const float* beta;
  float* state;
  float* o;
  int num_heads;
  int head_dim;
  KdaChunkBuffers b;
};

// ---- intra kernel --------------------------------------------------------------------------------

// Shared memory: three [64][kK + 4] regions reused across phases, plus L in 16×16 blocks.
//   phases 1–4: a = q̃ rows, b = k̂ rows, c = G rows (log2 units)
//   phase 4:    b becomes e^G ⊙ K̂ in place
//   phases 5–6: a = X = (I + L)⁻¹ as [64][kLdX] (then T·diag β) followed by the scratch Y,
//               c = V rows
// L: diagonal block I at I·256, off-diagonal block (I, J), I > J, at 1024 + (I(I−1)/2 + J)·256,
// each [16][16]. During phase 2 the off-diagonal part stages the partial sums of the diagonal blocks.
constexpr int kLDiag = 0, kLOff = 4 * kB * kB;
__device__ __forceinline__ int LOffBlock(int i, int j) { return kLOff + (i * (i - 1) / 2 + j) * kB * kB; }

template <int kK>
struct IntraSmem {
  static constexpr int kLd = kK + 4;  // ≡ 4 (mod 32): conflict-free A-fragment and row-float4 reads
  static constexpr int kLdX = kC + 4;
  static constexpr int kYOffset = kC * kLdX;
  static constexpr int kSlab = kC * kLd;
  static constexpr int kRegionA = kSlab > kYOffset + 3 * 256 ? kSlab : kYOffset + 3 * 256;
  float a[kRegionA];
  float b[kSlab];
  float c[kSlab];
  float l[10 * 256];
  float beta[kC];
};
static_assert(2 * (sizeof(IntraSmem<128>) + 1024) <= 228 * 1024, "two intra blocks fit on one SM");
static_assert(4 * 8 * 34 <= 6 * 256, "phase-2 staging fits in the off-diagonal part of L");

__device__ __forceinline__ float2 Select(bool c, const float2& x, const float2& y) {
  return make_float2(c ? x.x : y.x, c ? x.y : y.y);
}

// One element (i, j), j ≤ i, of a diagonal block over features d, d+1: kj, gj point at k̂_j, G_j;
// (qi, ki, gi) are row i. Every exponent is ≤ 0.
__device__ __forceinline__ void DiagElement(const float* kj_p, const float* gj_p, const float2& qi, const float2& ki,
                                            const float2& gi, float& acc_l, float& acc_q) {
  const float2 kj = *reinterpret_cast<const float2*>(kj_p);
  const float2 gj = *reinterpret_cast<const float2*>(gj_p);
  float e = Exp2(gi.x - gj.x) * kj.x;
  acc_l = fmaf(ki.x, e, acc_l), acc_q = fmaf(qi.x, e, acc_q);
  e = Exp2(gi.y - gj.y) * kj.y;
  acc_l = fmaf(ki.y, e, acc_l), acc_q = fmaf(qi.y, e, acc_q);
}

template <int kK>
__global__ void __launch_bounds__(kThreads, 2) sm90_kda_chunk_intra(const __grid_constant__ ChunkArgs a) {
  using Smem = IntraSmem<kK>;
  constexpr int kLd = Smem::kLd, kLdX = Smem::kLdX;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);

  // ---- setup ----
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int c = blockIdx.x, h = blockIdx.y, H = a.num_heads, K = a.head_dim;
  const int t0 = a.b.chunk_start[c], len = a.b.chunk_len[c];
  const int64_t base = int64_t(c) * H + h;
  const float scale = 1.0f / sqrtf(static_cast<float>(K));
  float* const aqk = a.b.aqk + base * kC * kC;

  // ---- phase 1a. q, k, g rows by cp.async (zero past the chunk's end and past K); β ----
  {
    constexpr int kPieces = kC * kK / 4;  // 16-byte pieces per array
    for (int i = tid; i < 3 * kPieces; i += kThreads) {
      const int arr = i / kPieces, piece = i % kPieces;
      const int r = piece / (kK / 4), x = (piece % (kK / 4)) * 4;
      const bool ok = r < len && x < K;
      const float* src = arr == 0 ? a.q : (arr == 1 ? a.k : a.g);
      float* dst = (arr == 0 ? sm.a : (arr == 1 ? sm.b : sm.c)) + r * kLd + x;
      CopyAsync16(dst, ok ? src + (int64_t(t0 + r) * H + h) * K + x : src, ok);
    }
    CopyAsyncCommit();
    if (tid < kC) sm.beta[tid] = tid < len ? a.beta[int64_t(t0 + tid) * H + h] : 0.f;
    CopyAsyncWait<0>();
    __syncthreads();
  }

  // ---- phase 1b. L2 norms of the q and k rows (q also × K^-1/2); G = cumsum(g)·log2(e) ----
  if (tid < 2 * kC) {
    float* row = (tid < kC ? sm.a : sm.b) + (tid % kC) * kLd;
    float ss0 = 0.f, ss1 = 0.f;
#pragma unroll 8
    for (int x = 0; x < kK; x += 4) {
      const float4 v = *reinterpret_cast<const float4*>(row + x);
      ss0 = fmaf(v.x, v.x, fmaf(v.y, v.y, ss0));
      ss1 = fmaf(v.z, v.z, fmaf(v.w, v.w, ss1));
    }
    const float s = (tid < kC ? scale : 1.0f) / sqrtf(ss0 + ss1 + 1e-6f);
#pragma unroll 8
    for (int x = 0; x < kK; x += 4) {
      float4 v = *reinterpret_cast<const float4*>(row + x);
      v.x *= s, v.y *= s, v.z *= s, v.w *= s;
      *reinterpret_cast<float4*>(row + x) = v;
    }
  } else if (tid - 2 * kC < kK) {
    float* col = sm.c + (tid - 2 * kC);
    float run = 0.f;
#pragma unroll 16
    for (int r = 0; r < kC; ++r) {
      run = fmaf(col[r * kLd], kLog2e, run);  // padding rows repeat G of the last row (g = 0 there)
      col[r * kLd] = run;
    }
  }
  __syncthreads();

  // ---- phase 2. diagonal 16×16 blocks of L and Aqk, exp2(G_i − G_j) per element ----
  // NOTE: warp pair (2I, 2I+1) owns diagonal block I and splits the features in halves; lane
  // (p, dq) owns rows p and 15 − p (17 elements on or below the diagonal together, so every lane
  // does the same work) over a quarter of its warp's features. Element s of the lane: row 15 − p,
  // column s for s ≤ 15 − p, else row p, column s − 16 + p.
  {
    const int blk = warp / 2, dh = warp % 2, p = lane % 8, dq = lane / 8;
    constexpr int kDPer = kK / 8;
    const int d_begin = dh * (kK / 2) + dq * kDPer;
    const int r_a = kB * blk + p, r_b = kB * blk + 15 - p;
    float acc_l[17], acc_q[17];
#pragma unroll
    for (int s = 0; s < 17; ++s) acc_l[s] = 0.f, acc_q[s] = 0.f;
    // NOTE: float2 steps over the features keep the 34 accumulators and both rows in registers.
    // Elements 0..8 are row 15 − p for every lane (15 − p ≥ 8): column s, the same for all lanes.
    for (int d = d_begin; d < d_begin + kDPer; d += 2) {
      const float2 qb = *reinterpret_cast<const float2*>(sm.a + r_b * kLd + d);
      const float2 kb = *reinterpret_cast<const float2*>(sm.b + r_b * kLd + d);
      const float2 gb = *reinterpret_cast<const float2*>(sm.c + r_b * kLd + d);
#pragma unroll
      for (int s = 0; s < 9; ++s) {
        const int j = kB * blk + s;
        DiagElement(sm.b + j * kLd + d, sm.c + j * kLd + d, qb, kb, gb, acc_l[s], acc_q[s]);
      }
    }
    // Elements 9..16 switch from row 15 − p to row p at s = 16 − p.
    for (int d = d_begin; d < d_begin + kDPer; d += 2) {
      const float2 qa = *reinterpret_cast<const float2*>(sm.a + r_a * kLd + d);
      const float2 ka = *reinterpret_cast<const float2*>(sm.b + r_a * kLd + d);
      const float2 ga = *reinterpret_cast<const float2*>(sm.c + r_a * kLd + d);
      const float2 qb = *reinterpret_cast<const float2*>(sm.a + r_b * kLd + d);
      const float2 kb = *reinterpret_cast<const float2*>(sm.b + r_b * kLd + d);
      const float2 gb = *reinterpret_cast<const float2*>(sm.c + r_b * kLd + d);
#pragma unroll
      for (int s = 9; s < 17; ++s) {
        const bool use_b = s <= 15 - p;
        const int j = kB * blk + (use_b ? s : s - 16 + p);
        DiagElement(sm.b + j * kLd + d, sm.c + j * kLd + d, Select(use_b, qb, qa), Select(use_b, kb, ka),
                    Select(use_b, gb, ga), acc_l[s], acc_q[s]);
      }
    }
#pragma unroll
    for (int s = 0; s < 17; ++s) {
      acc_l[s] += __shfl_xor_sync(0xffffffffu, acc_l[s], 8);
      acc_l[s] += __shfl_xor_sync(0xffffffffu, acc_l[s], 16);
      acc_q[s] += __shfl_xor_sync(0xffffffffu, acc_q[s], 8);
      acc_q[s] += __shfl_xor_sync(0xffffffffu, acc_q[s], 16);
    }
    float* stage = sm.l + kLOff + (blk * 8 + p) * 34;
    if (dh == 1 && dq == 0) {
#pragma unroll
      for (int s = 0; s < 17; ++s) stage[s] = acc_l[s], stage[17 + s] = acc_q[s];
    }
    __syncthreads();
    if (dh == 0 && dq == 0) {
      float* ld = sm.l + kLDiag + blk * 256;
#pragma unroll
      for (int s = 0; s < 17; ++s) {
        const bool use_b = s <= 15 - p;
        const int rl = use_b ? 15 - p : p, jl = use_b ? s : s - 16 + p;
        const float lv = acc_l[s] + stage[s], qv = acc_q[s] + stage[17 + s];
        ld[rl * kB + jl] = jl < rl ? sm.beta[kB * blk + rl] * lv : 0.f;
        aqk[(kB * blk + rl) * kC + kB * blk + jl] = qv;
      }
      // Zeros above the diagonal inside the block (the scan reads whole 16×16 blocks of Aqk).
#pragma unroll
      for (int jl = 1; jl < kB; ++jl) {
        if (jl > p) aqk[(kB * blk + p) * kC + kB * blk + jl] = 0.f;
        if (jl > 15 - p) aqk[(kB * blk + 15 - p) * kC + kB * blk + jl] = 0.f;
      }
    }
    __syncthreads();  // the staging area becomes the off-diagonal blocks of L
  }

  // ---- phase 3. blocks below the diagonal: factored GEMMs on the tensor cores (3xTF32) ----
  // Item (J, I, half): rows of sub-chunk I > J against the 8 columns `half` of sub-chunk J, with the
  // reference row r = 16(J+1) (j < r ≤ i): A = q̃_i e^{G_i − G_r} and k̂_i e^{G_i − G_r},
  // B = k̂_j e^{G_r − G_j}; both exponents ≤ 0. 12 items: warps 0–3 take two, warps 4–7 one.
  for (int item = warp; item < 12; item += 8) {
    const int pair = item / 2, half = item % 2;  // pairs (J, I): (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
    const int bj = pair < 3 ? 0 : (pair < 5 ? 1 : 2);
    const int bi = pair < 3 ? pair + 1 : (pair < 5 ? pair - 1 : 3);
    const int r = kB * (bj + 1);
    const int i0 = kB * bi + g, i1 = i0 + 8, j = kB * bj + 8 * half + g;
    float acc[2][1][4] = {};  // [0]: Aqk, [1]: L (before β)
    float(&acc_q)[4] = acc[0][0];
    float(&acc_k)[4] = acc[1][0];
#pragma unroll 2
    for (int d0 = t; d0 < kK; d0 += 8) {
      const int d1 = d0 + 4;
      const float gr0 = sm.c[r * kLd + d0], gr1 = sm.c[r * kLd + d1];
      const float f00 = Exp2(sm.c[i0 * kLd + d0] - gr0), f10 = Exp2(sm.c[i1 * kLd + d0] - gr0);
      const float f01 = Exp2(sm.c[i0 * kLd + d1] - gr1), f11 = Exp2(sm.c[i1 * kLd + d1] - gr1);
      const FragA fq = MakeFragA(sm.a[i0 * kLd + d0] * f00, sm.a[i1 * kLd + d0] * f10, sm.a[i0 * kLd + d1] * f01,
                                 sm.a[i1 * kLd + d1] * f11);
      const FragA fk = MakeFragA(sm.b[i0 * kLd + d0] * f00, sm.b[i1 * kLd + d0] * f10, sm.b[i0 * kLd + d1] * f01,
                                 sm.b[i1 * kLd + d1] * f11);
      const FragB fb = MakeFragB(sm.b[j * kLd + d0] * Exp2(gr0 - sm.c[j * kLd + d0]),
                                 sm.b[j * kLd + d1] * Exp2(gr1 - sm.c[j * kLd + d1]));
      const FragA fa[2] = {fq, fk};
      const FragB fbs[1] = {fb};
      Mma3xTf32Tile<2, 1>(acc, fa, fbs);
    }
    const int jc = kB * bj + 8 * half + 2 * t;  // C columns jc, jc + 1
    *reinterpret_cast<float2*>(aqk + i0 * kC + jc) = make_float2(acc_q[0], acc_q[1]);
    *reinterpret_cast<float2*>(aqk + i1 * kC + jc) = make_float2(acc_q[2], acc_q[3]);
    float* lb = sm.l + LOffBlock(bi, bj);
    const int jl = 8 * half + 2 * t;
    const float b0 = sm.beta[i0], b1 = sm.beta[i1];
    *reinterpret_cast<float2*>(lb + g * kB + jl) = make_float2(b0 * acc_k[0], b0 * acc_k[1]);
    *reinterpret_cast<float2*>(lb + (g + 8) * kB + jl) = make_float2(b1 * acc_k[2], b1 * acc_k[3]);
  }
  __syncthreads();  // every reader of q̃ through the products is done

  // ---- phase 4. exports Q̃⊙e^G, K̂⊙e^{G_C−G}, e^{G_C}; region b becomes e^G ⊙ K̂ ----
  {
    float* qg = a.b.qg + base * kC * kK;
    float* kg = a.b.kg + base * kC * kK;
    for (int i = tid; i < kC * kK / 4; i += kThreads) {
      const int r = i / (kK / 4), x = (i % (kK / 4)) * 4;
      const float4 q4 = *reinterpret_cast<const float4*>(sm.a + r * kLd + x);
      const float4 k4 = *reinterpret_cast<const float4*>(sm.b + r * kLd + x);
      const float4 g4 = *reinterpret_cast<const float4*>(sm.c + r * kLd + x);
      const float4 gc = *reinterpret_cast<const float4*>(sm.c + (kC - 1) * kLd + x);
      const float4 eg = {Exp2(g4.x), Exp2(g4.y), Exp2(g4.z), Exp2(g4.w)};
      const float4 ec = {Exp2(gc.x - g4.x), Exp2(gc.y - g4.y), Exp2(gc.z - g4.z), Exp2(gc.w - g4.w)};
      *reinterpret_cast<float4*>(qg + r * kK + x) = {q4.x * eg.x, q4.y * eg.y, q4.z * eg.z, q4.w * eg.w};
      *reinterpret_cast<float4*>(kg + r * kK + x) = {k4.x * ec.x, k4.y * ec.y, k4.z * ec.z, k4.w * ec.w};
      *reinterpret_cast<float4*>(sm.b + r * kLd + x) = {k4.x * eg.x, k4.y * eg.y, k4.z * eg.z, k4.w * eg.w};
    }
    if (tid < kK) a.b.gl[base * kK + tid] = Exp2(sm.c[(kC - 1) * kLd + tid]);
  }
  __syncthreads();  // q̃ and G are dead: region a becomes X, region c becomes V

  // ---- phase 5. V rows start loading; T = (I + L)⁻¹ blockwise, then T·diag β ----
  {
    constexpr int kPieces = kC * kK / 4;
    for (int i = tid; i < kPieces; i += kThreads) {
      const int r = i / (kK / 4), x = (i % (kK / 4)) * 4;
      const bool ok = r < len && x < K;
      CopyAsync16(sm.c + r * kLd + x, ok ? a.v + (int64_t(t0 + r) * H + h) * K + x : a.v, ok);
    }
    CopyAsyncCommit();
  }
  float* const xm = sm.a;  // X [64][kLdX]
  float* const ym = sm.a + Smem::kYOffset;
  // (a) X_II = (I + L_II)⁻¹: forward substitution, one thread per column, no barriers.
  if (tid < kC) {
    const int bi = tid / kB, j = tid % kB;
    const float* ld = sm.l + kLDiag + bi * 256;
    float x[kB];
#pragma unroll
    for (int m = 0; m < kB; ++m) x[m] = m == j ? 1.f : 0.f;
#pragma unroll
    for (int i = 1; i < kB; ++i) {
      float s = 0.f;
#pragma unroll
      for (int m = 0; m < i; ++m) s = fmaf(ld[i * kB + m], x[m], s);
      if (i > j) x[i] = -s;  // rows above j stay 0, row j stays 1
    }
#pragma unroll
    for (int i = 0; i < kB; ++i) xm[(kB * bi + i) * kLdX + kB * bi + j] = x[i];
  }
  __syncthreads();
  // (b) X_IJ = −X_II · Σ_{J≤m<I} L_Im X_mJ, by distance I − J (each needs only nearer blocks).
  for (int dist = 1; dist < 4; ++dist) {
    const int num_items = (4 - dist) * 256;
    for (int it = tid; it < num_items; it += kThreads) {
      const int bi = dist + it / 256, bj = bi - dist, i = (it / kB) % kB, j = it % kB;
      float s = 0.f;
      for (int m = bj; m < bi; ++m) {
        const float* lb = sm.l + LOffBlock(bi, m) + i * kB;
        const float* xb = xm + kB * m * kLdX + kB * bj + j;
#pragma unroll
        for (int q = 0; q < kB; ++q) s = fmaf(lb[q], xb[q * kLdX], s);
      }
      ym[it] = s;
    }
    __syncthreads();
    for (int it = tid; it < num_items; it += kThreads) {
      const int bi = dist + it / 256, bj = bi - dist, i = (it / kB) % kB, j = it % kB;
      const float* xr = xm + (kB * bi + i) * kLdX + kB * bi;
      const float* yb = ym + (it / 256) * 256 + j;
      float s = 0.f;
#pragma unroll
      for (int q = 0; q < kB; ++q) s = fmaf(xr[q], yb[q * kB], s);
      xm[(kB * bi + i) * kLdX + kB * bj + j] = -s;
    }
    __syncthreads();
  }
  // T·diag β on and below the diagonal blocks (the blocks above are never read).
  for (int it = tid; it < kC * kC; it += kThreads) {
    const int i = it / kC, j = it % kC;
    if (j / kB <= i / kB) xm[i * kLdX + j] *= sm.beta[j];
  }
  CopyAsyncWait<0>();
  __syncthreads();

  // ---- phase 6. W = (T·diag β)·(e^G ⊙ K̂), U = (T·diag β)·V (3xTF32) ----
  // NOTE: warp w takes 32 columns (w % 4) and the row tiles {0, 3} (w < 4) or {1, 2}: T·diag β is
  // lower block-triangular, so row tile m needs k-steps < 2m + 2 and both pairs do 10 of them.
  {
    const int cq = warp % 4;
    if (cq < kK / 32) {
      const int m_lo = warp < 4 ? 0 : 1, m_hi = 3 - m_lo;
      for (int out = 0; out < 2; ++out) {
        const float* src = out == 0 ? sm.b : sm.c;  // [j][d] rows
        float* dst = (out == 0 ? a.b.w : a.b.u) + base * kC * kK;
        float acc[2][4][4];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mi][nt][e] = 0.f;
        for (int ks = 0; ks < 2 * m_hi + 2; ++ks) {
          FragB fb[4];
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) fb[nt] = LoadB(src, kLd, 8 * ks, 32 * cq + 8 * nt, g, t);
          if (ks < 2 * m_lo + 2) {
            const FragA fa[2] = {LoadA(xm, kLdX, kB * m_lo, 8 * ks, g, t), LoadA(xm, kLdX, kB * m_hi, 8 * ks, g, t)};
            Mma3xTf32Tile(acc, fa, fb);
          } else {
            Mma3xTf32Row(acc[1], LoadA(xm, kLdX, kB * m_hi, 8 * ks, g, t), fb);
          }
        }
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          const int r0 = kB * (mi == 0 ? m_lo : m_hi) + g;
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
            const int col = 32 * cq + 8 * nt + 2 * t;
            *reinterpret_cast<float2*>(dst + r0 * kK + col) = make_float2(acc[mi][nt][0], acc[mi][nt][1]);
            *reinterpret_cast<float2*>(dst + (r0 + 8) * kK + col) = make_float2(acc[mi][nt][2], acc[mi][nt][3]);
          }
        }
      }
    }
  }
}

// ---- scan kernel ---------------------------------------------------------------------------------

// One block per (V tile of kBV ∈ {32, 64} columns, head, sequence). Warp roles (32×32 tiles, 3xTF32):
//   phase A: warps [0, kNumVt) Ṽ = U − W·S; warps [4, 4 + kNumVt) O = (Q̃⊙e^G)·S
//   phase B: warps [0, kNumSt) S ← e^{G_C} ⊙ S + (K̂⊙e^{G_C−G})ᵀ·Ṽ (S lives in their registers);
//            the O warps add Aqk·Ṽ and store O.
template <int kK, int kBV_>
struct ScanConfig {
  static constexpr int kBV = kBV_;
  static_assert((kBV == 32 || kBV == 64) && kBV <= kK, "V tile of 32 or 64 columns");
  static constexpr int kNq = kBV / 32;            // 32-column groups in the tile
  static constexpr int kNumVt = 2 * kNq;          // 32×32 tiles of Ṽ (and of O)
  static constexpr int kNumSt = (kK / 32) * kNq;  // 32×32 tiles of S
  static constexpr int kLdA = kK + 4;             // W, Q̃⊙e^G rows: A operand          (≡ 4 mod 32)
  static constexpr int kLdKg = kK + 8;            // K̂⊙e^{G_C−G} rows: A operand, transposed (≡ 8)
  static constexpr int kLdV = kBV + 8;            // S, Ṽ, U rows: B operand / C pattern  (≡ 8)
  static constexpr int kLdAqk = kC + 4;
  static_assert(kNumVt <= 4 && kNumSt <= 8, "warp roles fit in 8 warps");
};

template <int kK, int kBV>
struct ScanSmem {
  using Cfg = ScanConfig<kK, kBV>;
  // Group 1 (chunk c+1 arrives during phase B of chunk c):
  float w[kC * Cfg::kLdA];
  float qg[kC * Cfg::kLdA];
  float u[kC * Cfg::kLdV];
  // Group 2 (chunk c+1 arrives during phase A of chunk c+1):
  float kg[kC * Cfg::kLdKg];
  float aqk[kC * Cfg::kLdAqk];
  float gl[kK];
  // Carried state and this chunk's Ṽ:
  float s[kK * Cfg::kLdV];
  float vn[kC * Cfg::kLdV];
};
static_assert(sizeof(ScanSmem<128, 64>) <= 227 * 1024, "scan block fits in shared memory");

template <int kK, int kBV>
__global__ void __launch_bounds__(kThreads, 1) sm90_kda_chunk_scan(const __grid_constant__ ChunkArgs a) {
  using Cfg = ScanConfig<kK, kBV>;
  constexpr int kNq = Cfg::kNq, kLdV = Cfg::kLdV;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  ScanSmem<kK, kBV>& sm = *reinterpret_cast<ScanSmem<kK, kBV>*>(smem_raw);

  // ---- setup ----
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int x0 = blockIdx.x * kBV, h = blockIdx.y, n = blockIdx.z;
  const int H = a.num_heads, K = a.head_dim;
  float* state = a.state + (int64_t(a.b.slots[n]) * H + h) * K * K;
  const int c_begin = a.b.seq_chunks[n], c_end = a.b.seq_chunks[n + 1];

  auto fetch_group1 = [&](int ci) {
    const int64_t base = int64_t(ci) * H + h;
    const float* w = a.b.w + base * kC * kK;
    const float* qg = a.b.qg + base * kC * kK;
    const float* u = a.b.u + base * kC * kK + x0;
    for (int i = tid; i < kC * kK / 4; i += kThreads) {
      const int r = i / (kK / 4), x = (i % (kK / 4)) * 4;
      CopyAsync16(sm.w + r * Cfg::kLdA + x, w + r * kK + x, true);
      CopyAsync16(sm.qg + r * Cfg::kLdA + x, qg + r * kK + x, true);
    }
    for (int i = tid; i < kC * kBV / 4; i += kThreads) {
      const int r = i / (kBV / 4), x = (i % (kBV / 4)) * 4;
      CopyAsync16(sm.u + r * kLdV + x, u + r * kK + x, true);
    }
  };
  auto fetch_group2 = [&](int ci) {
    const int64_t base = int64_t(ci) * H + h;
    const float* kg = a.b.kg + base * kC * kK;
    const float* aqk = a.b.aqk + base * kC * kC;
    for (int i = tid; i < kC * kK / 4; i += kThreads) {
      const int r = i / (kK / 4), x = (i % (kK / 4)) * 4;
      CopyAsync16(sm.kg + r * Cfg::kLdKg + x, kg + r * kK + x, true);
    }
    for (int i = tid; i < kC * kC / 4; i += kThreads) {
      const int r = i / (kC / 4), x = (i % (kC / 4)) * 4;
      CopyAsync16(sm.aqk + r * Cfg::kLdAqk + x, aqk + r * kC + x, true);
    }
    if (tid < kK / 4) CopyAsync16(sm.gl + 4 * tid, a.b.gl + base * kK + 4 * tid, true);
  };

  // The S tile of this warp: rows 32·sdm + [0, 32), columns 32·snq + [0, 32) of the block's slice.
  // Register layout = C fragments: s_acc[mt][nt] covers rows 32·sdm + 16·mt + {g, g+8},
  // columns 32·snq + 8·nt + {2t, 2t+1}.
  const bool s_owner = warp < Cfg::kNumSt;
  const int sdm = warp / kNq, snq = warp % kNq;
  float s_acc[2][4][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int d = 32 * sdm + 16 * mt + g + 8 * hr, x = 32 * snq + 8 * nt + 2 * t;
        float2 v = make_float2(0.f, 0.f);
        if (s_owner && d < K && x0 + x < K) v = *reinterpret_cast<const float2*>(state + int64_t(d) * K + x0 + x);
        s_acc[mt][nt][2 * hr] = v.x, s_acc[mt][nt][2 * hr + 1] = v.y;
        if (s_owner) *reinterpret_cast<float2*>(sm.s + d * kLdV + x) = v;
      }

  if (c_begin < c_end) fetch_group1(c_begin);
  CopyAsyncCommit();
  if (c_begin < c_end) fetch_group2(c_begin);
  CopyAsyncCommit();

  // Phase-A/O tile of this warp: rows 32·mh + [0, 32), columns 32·nq + [0, 32).
  const bool v_owner = warp < Cfg::kNumVt, o_owner = warp >= 4 && warp < 4 + Cfg::kNumVt;
  const int mh = (warp % 4) / kNq, nq = (warp % 4) % kNq;

  for (int ci = c_begin; ci < c_end; ++ci) {
    const int t0 = a.b.chunk_start[ci], len = a.b.chunk_len[ci];
    CopyAsyncWait<1>();
    __syncthreads();  // W, Q̃⊙e^G, U of this chunk and S are in shared memory

    // ---- phase A: Ṽ = U − W·S (Ṽ warps), O = (Q̃⊙e^G)·S (O warps) ----
    float acc[2][4][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
    if (v_owner || o_owner) {
      const float* am = v_owner ? sm.w : sm.qg;
#pragma unroll 2
      for (int ks = 0; ks < kK / 8; ++ks) {
        FragB fb[4];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) fb[nt] = LoadB(sm.s, kLdV, 8 * ks, 32 * nq + 8 * nt, g, t);
        const FragA fa[2] = {LoadA(am, Cfg::kLdA, 32 * mh, 8 * ks, g, t), LoadA(am, Cfg::kLdA, 32 * mh + 16, 8 * ks, g, t)};
        Mma3xTf32Tile(acc, fa, fb);
      }
    }
    if (v_owner) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int r = 32 * mh + 16 * mt + g + 8 * hr, x = 32 * nq + 8 * nt + 2 * t;
            const float2 u2 = *reinterpret_cast<const float2*>(sm.u + r * kLdV + x);
            *reinterpret_cast<float2*>(sm.vn + r * kLdV + x) =
                make_float2(u2.x - acc[mt][nt][2 * hr], u2.y - acc[mt][nt][2 * hr + 1]);
          }
    }
    CopyAsyncWait<0>();
    __syncthreads();  // Ṽ complete; K̂⊙e^{G_C−G}, Aqk, e^{G_C} landed; W, Q̃⊙e^G, U, S no longer read
    if (ci + 1 < c_end) fetch_group1(ci + 1);
    CopyAsyncCommit();

    // ---- phase B: S ← e^{G_C} ⊙ S + (K̂⊙e^{G_C−G})ᵀ·Ṽ ; O += Aqk·Ṽ ----
    if (s_owner) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const float decay = sm.gl[32 * sdm + 16 * mt + g + 8 * hr];
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) s_acc[mt][nt][2 * hr] *= decay, s_acc[mt][nt][2 * hr + 1] *= decay;
        }
#pragma unroll 2
      for (int ks = 0; ks < kC / 8; ++ks) {
        FragB fb[4];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) fb[nt] = LoadB(sm.vn, kLdV, 8 * ks, 32 * snq + 8 * nt, g, t);
        const FragA fa[2] = {LoadAT(sm.kg, Cfg::kLdKg, 32 * sdm, 8 * ks, g, t),
                             LoadAT(sm.kg, Cfg::kLdKg, 32 * sdm + 16, 8 * ks, g, t)};
        Mma3xTf32Tile(s_acc, fa, fb);
      }
      // Nobody reads sm.s during phase B: publish the new S for the next phase A right away.
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int d = 32 * sdm + 16 * mt + g + 8 * hr, x = 32 * snq + 8 * nt + 2 * t;
            *reinterpret_cast<float2*>(sm.s + d * kLdV + x) = make_float2(s_acc[mt][nt][2 * hr], s_acc[mt][nt][2 * hr + 1]);
          }
    }
    if (o_owner) {
      // Aqk is lower block-triangular: row tile 2·mh + mt needs k-steps < 2(2·mh + mt) + 2, so the
      // first of the two row tiles stops two k-steps before the second.
      for (int ks = 0; ks < 4 * mh + 4; ++ks) {
        FragB fb[4];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) fb[nt] = LoadB(sm.vn, kLdV, 8 * ks, 32 * nq + 8 * nt, g, t);
        if (ks < 4 * mh + 2) {
          const FragA fa[2] = {LoadA(sm.aqk, Cfg::kLdAqk, 32 * mh, 8 * ks, g, t),
                               LoadA(sm.aqk, Cfg::kLdAqk, 32 * mh + 16, 8 * ks, g, t)};
          Mma3xTf32Tile(acc, fa, fb);
        } else {
          Mma3xTf32Row(acc[1], LoadA(sm.aqk, Cfg::kLdAqk, 32 * mh + 16, 8 * ks, g, t), fb);
        }
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int r = 32 * mh + 16 * mt + g + 8 * hr;
          if (r >= len) continue;
          float* orow = a.o + (int64_t(t0 + r) * H + h) * K + x0;
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
            const int x = 32 * nq + 8 * nt + 2 * t;
            if (x0 + x < K)
              *reinterpret_cast<float2*>(orow + x) = make_float2(acc[mt][nt][2 * hr], acc[mt][nt][2 * hr + 1]);
          }
        }
    }
    __syncthreads();  // K̂⊙e^{G_C−G}, Aqk, e^{G_C} and Ṽ no longer read; the new S is in place
    if (ci + 1 < c_end) fetch_group2(ci + 1);
    CopyAsyncCommit();
  }

  // ---- epilogue: final state back to its slot ----
  if (s_owner) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int d = 32 * sdm + 16 * mt + g + 8 * hr, x = 32 * snq + 8 * nt + 2 * t;
          if (d < K && x0 + x < K)
            *reinterpret_cast<float2*>(state + int64_t(d) * K + x0 + x) =
                make_float2(s_acc[mt][nt][2 * hr], s_acc[mt][nt][2 * hr + 1]);
        }
  }
}

// ---- launchers -----------------------------------------------------------------------------------

ChunkArgs MakeArgs(const KdaChunkParams& p, const KdaChunkBuffers& b) {
  return ChunkArgs{p.q, p.k, p.v, p.g, p.beta, p.state, p.o, p.num_heads, p.head_dim, b};
}

// NOTE: the maximum shared-memory carveout is requested explicitly so that two intra blocks
// (2 × 110 KB) always fit on one SM.
template <typename Kernel>
cudaError_t LaunchWithSmem(Kernel kernel, dim3 grid, size_t smem, const ChunkArgs& args, cudaStream_t stream) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (e != cudaSuccess) return e;
  kernel<<<grid, kThreads, smem, stream>>>(args);
  return cudaGetLastError();
}

template <int kK>
cudaError_t Intra(const KdaChunkParams& p, const KdaChunkBuffers& b, cudaStream_t s) {
  return LaunchWithSmem(sm90_kda_chunk_intra<kK>, dim3(b.num_chunks, p.num_heads), sizeof(IntraSmem<kK>),
                        MakeArgs(p, b), s);
}
template <int kK, int kBV>
cudaError_t Scan(const KdaChunkParams& p, const KdaChunkBuffers& b, cudaStream_t s) {
  return LaunchWithSmem(sm90_kda_chunk_scan<kK, kBV>, dim3(kK / kBV, p.num_heads, b.num_seqs),
                        sizeof(ScanSmem<kK, kBV>), MakeArgs(p, b), s);
}

}  // namespace

cudaError_t LaunchKdaChunkIntra(const KdaChunkParams& p, const KdaChunkBuffers& b, int k_pad, cudaStream_t s) {
  switch (k_pad) {
    case 32: return Intra<32>(p, b, s);
    case 64: return Intra<64>(p, b, s);
    case 128: return Intra<128>(p, b, s);
  }
  return cudaErrorInvalidValue;
}
cudaError_t LaunchKdaChunkScan(const KdaChunkParams& p, const KdaChunkBuffers& b, int k_pad, int block_v,
                               cudaStream_t s) {
  if (k_pad == 32 && block_v == 32) return Scan<32, 32>(p, b, s);
  if (k_pad == 64 && block_v == 32) return Scan<64, 32>(p, b, s);
  if (k_pad == 64 && block_v == 64) return Scan<64, 64>(p, b, s);
  if (k_pad == 128 && block_v == 32) return Scan<128, 32>(p, b, s);
  if (k_pad == 128 && block_v == 64) return Scan<128, 64>(p, b, s);
  return cudaErrorInvalidValue;
}

}  // namespace gyre::cuda::internal
