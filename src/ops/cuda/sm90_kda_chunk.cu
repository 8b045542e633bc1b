// KDA chunked form (prefill) on sm90: three kernels over 64-row chunks (docs/model-kda-kimi-linear.md
// §1.5, FLA's chunk_kda_fwd structure), all fp32 FFMA so that the result matches the fp64 reference
// to fp32 reassociation:
//
//   1. intra  (parallel over chunk × head): in-chunk cumsum G, L and Aqk with the exact
//      exp2(G_i − G_j) per element (SFU), T = (I + L)⁻¹ by forward substitution, W and U.
//   2. state  (per V tile × head × sequence, sequential over the sequence's chunks):
//      Ṽ = U − W·S, h[c] = S, S ← e^{G_C} ⊙ S + (K̂ ⊙ e^{G_C − G})ᵀ·Ṽ; final S to the slot.
//   3. output (parallel over chunk × head): O = (Q̃ ⊙ e^G)·h[c] + Aqk·Ṽ.
//
// Sections: shared pieces; intra kernel; state kernel; output kernel; launchers.
// Head sizes below kK are zero-padded on load (exact: zero features add nothing to any dot product).
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/kda_kernels.h"
#include "ops/cuda/sm90_block_gemm.cuh"

namespace gyre::cuda::internal {
namespace {

// ---- shared pieces -------------------------------------------------------------------------------

constexpr int kC = kKdaChunk;  // rows per chunk
constexpr float kLog2e = 1.4426950408889634f;

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

// The 64 × kK GEMMs of the intra and output kernels (256 threads).
template <int kK>
struct RowsByHeadGemm;
template <>
struct RowsByHeadGemm<128> {
  using Gemm = BlockGemm<kC, 128, 8, 4>;
};
template <>
struct RowsByHeadGemm<64> {
  using Gemm = BlockGemm<kC, 64, 4, 4>;
};
template <>
struct RowsByHeadGemm<32> {
  using Gemm = BlockGemm<kC, 32, 4, 4>;  // 128 of the 256 threads take part
};

// ---- intra kernel --------------------------------------------------------------------------------

constexpr int kIntraThreads = 256;
static_assert(kIntraThreads == 4 * kC, "forward substitution: 4 row phases × 64 columns");
constexpr int kNumLowerTiles = (kC / 4) * (kC / 4 + 1) / 2;  // 4×4 tiles on or below the diagonal
static_assert(kNumLowerTiles <= kIntraThreads && kIntraThreads - kNumLowerTiles == kNumLowerTiles - kC / 4,
              "one thread per lower tile; the rest zero the upper tiles of Aqkᵀ");

// Three regions reused across phases so that two blocks fit on one SM (~103 KB each at kK = 128):
//   phase 1–2 (L, Aqk, exports): a = q̃ᵀ, b = k̂ᵀ, c = Gᵀ·log2(e)   ([kK][kLdT], transposed)
//   phase 3–4 (T, W, U):         a = e^G ⊙ K̂ rows [kC][kK], b = L [kC][kLdL] then (T·diag β)ᵀ
//                                [kC][kLdT], c = V rows [kC][kK]
template <int kK>
struct IntraSmem {
  static constexpr int kLdT = kC + 4;  // transposed [feature][row] arrays; +4 keeps float4 alignment
  static constexpr int kLdL = kC + 1;  // L rows (scalar access only)
  static constexpr int kXtOffset = kC * kLdL;  // (T·diag β)ᵀ after L in region b (multiple of 4)
  static constexpr int kRegion = kK * kLdT;
  static constexpr int kRegionB = kRegion > kXtOffset + kC * kLdT ? kRegion : kXtOffset + kC * kLdT;
  static_assert(kXtOffset % 4 == 0 && kRegion >= kC * kK, "phase 3–4 arrays fit their regions");
  float a[kRegion];
  float b[kRegionB];
  float c[kRegion];
  float xrow[2][kC];      // row m of T, published during forward substitution
  float beta[kC];
  float qn[kC], kn[kC];   // per-row norm scales
};
static_assert(2 * sizeof(IntraSmem<128>) <= 227 * 1024, "two intra blocks fit on one SM");

__device__ __forceinline__ void LowerTile(int t, int* ti, int* tj) {  // t-th tile with tj ≤ ti
  int i = static_cast<int>((sqrtf(8.f * t + 1.f) - 1.f) * 0.5f);
  while ((i + 1) * (i + 2) / 2 <= t) ++i;
  while (i * (i + 1) / 2 > t) --i;
  *ti = i;
  *tj = t - i * (i + 1) / 2;
}

// cp.async of 16 bytes, zero-filled when !valid (src must still be a mapped address).
__device__ __forceinline__ void CopyAsync16(float* dst, const float* src, bool valid) {
  const unsigned saddr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

template <int kK>
__global__ void __launch_bounds__(kIntraThreads, 2) sm90_kda_chunk_intra(const __grid_constant__ ChunkArgs a) {
  using Smem = IntraSmem<kK>;
  constexpr int kLdT = Smem::kLdT, kLdL = Smem::kLdL;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  float* const q_t = sm.a;  // phases 1–2
  float* const k_t = sm.b;
  float* const g_t = sm.c;
  float* const kgam = sm.a;  // phases 3–4
  float* const l = sm.b;
  float* const x_t = sm.b + Smem::kXtOffset;
  float* const v = sm.c;

  // ---- setup ----
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int c = blockIdx.x, h = blockIdx.y, H = a.num_heads, K = a.head_dim;
  const int t0 = a.b.chunk_start[c], len = a.b.chunk_len[c];
  const int64_t tok_stride = int64_t(H) * K;
  const int64_t base = int64_t(c) * H + h;
  const float scale = 1.0f / sqrtf(static_cast<float>(K));

  // ---- phase 1a. load q, k transposed; g as a running (log2) cumsum; β ----
  if (tid < 2 * kK) {
    const int d = tid % kK;
    const bool is_k = tid >= kK;
    const float* src = (is_k ? a.k : a.q) + (int64_t(t0) * H + h) * K + d;
    float* dst = (is_k ? k_t : q_t) + d * kLdT;
    // NOTE: unrolled so that many loads are in flight before the first store.
#pragma unroll 16
    for (int r = 0; r < kC; ++r) dst[r] = (r < len && d < K) ? src[r * tok_stride] : 0.f;
  }
  if (tid < kK) {
    const int d = tid;
    const float* src = a.g + (int64_t(t0) * H + h) * K + d;
    float run = 0.f;
#pragma unroll 16
    for (int r = 0; r < kC; ++r) {
      run += ((r < len && d < K) ? src[r * tok_stride] : 0.f) * kLog2e;
      g_t[d * kLdT + r] = run;  // padding rows repeat G of the last row (g = 0 there)
    }
  }
  if (tid < kC) sm.beta[tid] = tid < len ? a.beta[int64_t(t0 + tid) * H + h] : 0.f;
  __syncthreads();

  // ---- phase 1b. l2 norms per row (q also scaled by K^-1/2) ----
  if (tid < 2 * kC) {
    const int r = tid % kC;
    const float* src = (tid < kC ? q_t : k_t) + r;
    float ss = 0.f;
#pragma unroll 8
    for (int d = 0; d < kK; ++d) ss = fmaf(src[d * kLdT], src[d * kLdT], ss);
    (tid < kC ? sm.qn : sm.kn)[r] = (tid < kC ? scale : 1.0f) / sqrtf(ss + 1e-6f);
  }
  __syncthreads();
  for (int i = tid; i < kK * kC; i += kIntraThreads) {
    const int d = i / kC, r = i % kC;
    q_t[d * kLdT + r] *= sm.qn[r];
    k_t[d * kLdT + r] *= sm.kn[r];
  }
  __syncthreads();

  // ---- phase 1c. L and Aqk, exact exp2(G_i − G_j) per element: one 4×4 tile per thread ----
  // NOTE: the 136 tiles on or below the diagonal go to lanes 0..16 of every warp, so the SFU work
  // (the bottleneck here) is spread over all four SM sub-partitions; lanes 17..31 zero the 120
  // upper tiles of Aqkᵀ. L stays in registers until region b is free (phase 3).
  static_assert(kNumLowerTiles == 8 * 17 && kIntraThreads - kNumLowerTiles == 8 * 15, "tile split per warp");
  float* aqk_t = a.b.aqk_t + base * kC * kC;  // [j][i]
  const bool tile_owner = lane < 17;
  int ti = 0, tj = 0;
  float acc_l[4][4] = {};
  if (tile_owner) {
    LowerTile(warp * 17 + lane, &ti, &tj);
    float acc_a[4][4] = {};
#pragma unroll 2
    for (int d = 0; d < kK; ++d) {
      const float4 qi = *reinterpret_cast<const float4*>(q_t + d * kLdT + ti * 4);
      const float4 ki = *reinterpret_cast<const float4*>(k_t + d * kLdT + ti * 4);
      const float4 gi = *reinterpret_cast<const float4*>(g_t + d * kLdT + ti * 4);
      const float4 kj = *reinterpret_cast<const float4*>(k_t + d * kLdT + tj * 4);
      const float4 gj = *reinterpret_cast<const float4*>(g_t + d * kLdT + tj * 4);
      const float qa[4] = {qi.x, qi.y, qi.z, qi.w}, ka[4] = {ki.x, ki.y, ki.z, ki.w}, ga[4] = {gi.x, gi.y, gi.z, gi.w};
      const float kb[4] = {kj.x, kj.y, kj.z, kj.w}, gb[4] = {gj.x, gj.y, gj.z, gj.w};
#pragma unroll
      for (int x = 0; x < 4; ++x)
#pragma unroll
        for (int y = 0; y < 4; ++y) {
          // NOTE: min(·, 0) only matters above the diagonal (masked below); it keeps exp2 finite.
          const float e = Exp2(fminf(ga[x] - gb[y], 0.f));
          const float ke = kb[y] * e;
          acc_l[x][y] = fmaf(ka[x], ke, acc_l[x][y]);
          acc_a[x][y] = fmaf(qa[x], ke, acc_a[x][y]);
        }
    }
#pragma unroll
    for (int y = 0; y < 4; ++y) {
      const int j = tj * 4 + y;
      float out[4];
#pragma unroll
      for (int x = 0; x < 4; ++x) out[x] = ti * 4 + x >= j ? acc_a[x][y] : 0.f;
      *reinterpret_cast<float4*>(aqk_t + j * kC + ti * 4) = {out[0], out[1], out[2], out[3]};
    }
  } else {
    // Strictly-lower tile index u → (row ≥ 1, col < row), mirrored above the diagonal.
    const int u = warp * 15 + lane - 17;
    int row = 1;
    while ((row + 1) * row / 2 <= u) ++row;
    const int col = u - row * (row - 1) / 2;
#pragma unroll
    for (int y = 0; y < 4; ++y)
      *reinterpret_cast<float4*>(aqk_t + (row * 4 + y) * kC + col * 4) = {0.f, 0.f, 0.f, 0.f};
  }
  __syncthreads();

  // ---- phase 2a. exports: (Q̃⊙e^G)ᵀ and e^{G_C} ----
  {
    float* qg_t = a.b.qg_t + base * kK * kC;
    for (int i = tid; i < kK * kC / 4; i += kIntraThreads) {
      const int d = i / (kC / 4), r = (i % (kC / 4)) * 4;
      const float4 q4 = *reinterpret_cast<const float4*>(q_t + d * kLdT + r);
      const float4 g4 = *reinterpret_cast<const float4*>(g_t + d * kLdT + r);
      *reinterpret_cast<float4*>(qg_t + d * kC + r) = {q4.x * Exp2(g4.x), q4.y * Exp2(g4.y), q4.z * Exp2(g4.z),
                                                       q4.w * Exp2(g4.w)};
    }
    if (tid < kK) a.b.gl[base * kK + tid] = Exp2(g_t[tid * kLdT + kC - 1]);
  }
  __syncthreads();  // q̃ᵀ is dead: region a becomes e^G ⊙ K̂

  // ---- phase 2b. K̂⊙e^{G_C−G} (export) and e^G⊙K̂ rows (smem, region a) ----
  {
    float* kg = a.b.kg + base * kC * kK;
    for (int i = tid; i < kC * kK; i += kIntraThreads) {
      const int r = i / kK, d = i % kK;
      const float kv = k_t[d * kLdT + r], gv = g_t[d * kLdT + r], gc = g_t[d * kLdT + kC - 1];
      kg[r * kK + d] = kv * Exp2(gc - gv);
      kgam[r * kK + d] = kv * Exp2(gv);
    }
  }
  __syncthreads();  // k̂ᵀ and Gᵀ are dead: region b becomes L, region c becomes V

  // ---- phase 3. L to smem; V rows start loading (cp.async); T = (I + L)⁻¹ ----
  if (tile_owner) {
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int y = 0; y < 4; ++y) {
        const int i = ti * 4 + x, j = tj * 4 + y;
        if (i > j) l[i * kLdL + j] = sm.beta[i] * acc_l[x][y];
      }
  }
  for (int i = tid; i < kC * kK / 4; i += kIntraThreads) {
    const int r = i / (kK / 4), x = (i % (kK / 4)) * 4;
    const bool ok = r < len && x < K;
    CopyAsync16(v + r * kK + x, ok ? a.v + (int64_t(t0 + r) * H + h) * K + x : a.v, ok);
  }
  __syncthreads();
  // Right-looking forward substitution. Thread owns column j and rows r0 + 4s. At step m row m is
  // final; its owners publish it and every row i > m subtracts L[i][m] · row m. Rows s < m/4 are
  // done, so the loop skips them at compile time.
  {
    const int j = tid % kC, r0 = tid / kC;
    float x[kC / 4];
#pragma unroll
    for (int s = 0; s < kC / 4; ++s) x[s] = (r0 + 4 * s == j) ? 1.f : 0.f;
#pragma unroll
    for (int mq = 0; mq < kC / 4; ++mq) {
#pragma unroll
      for (int mr = 0; mr < 4; ++mr) {
        const int m = 4 * mq + mr;
        if (m < kC - 1) {
          float* xrow = sm.xrow[m & 1];  // double-buffered: one barrier per step
          if (r0 == mr) xrow[j] = x[mq];
          __syncthreads();
          const float xm = xrow[j];
#pragma unroll
          for (int s = mq; s < kC / 4; ++s)
            if (s > mq || r0 > mr) x[s] = fmaf(-l[(r0 + 4 * s) * kLdL + m], xm, x[s]);
        }
      }
    }
    const float bj = sm.beta[j];
#pragma unroll
    for (int s = 0; s < kC / 4; ++s) x_t[j * kLdT + r0 + 4 * s] = x[s] * bj;
  }
  CopyAsyncWait();
  __syncthreads();

  // ---- phase 4. W = (T·diag β)·(e^G ⊙ K̂) stored transposed, U = (T·diag β)·V ----
  using Gemm = typename RowsByHeadGemm<kK>::Gemm;
  constexpr int kTM = kC / Gemm::kThreadsM, kTN = kK / Gemm::kThreadsN;
  if (tid < Gemm::kNumThreads) {
    const int tm = Gemm::Tm(tid), tn = Gemm::Tn(tid);
    float acc[kTM][kTN];
    Gemm::Zero(acc);
    Gemm::template Run<kC>(x_t, kLdT, kgam, kK, tid, acc);
    float* w_t = a.b.w_t + base * kK * kC;
#pragma unroll
    for (int jj = 0; jj < kTN; ++jj)
#pragma unroll
      for (int ic = 0; ic < kTM / 4; ++ic)
        *reinterpret_cast<float4*>(w_t + Gemm::Col(tn, jj) * kC + Gemm::Row(tm, ic * 4)) = {
            acc[ic * 4][jj], acc[ic * 4 + 1][jj], acc[ic * 4 + 2][jj], acc[ic * 4 + 3][jj]};
    Gemm::Zero(acc);
    Gemm::template Run<kC>(x_t, kLdT, v, kK, tid, acc);
    float* u = a.b.u + base * kC * kK;
#pragma unroll
    for (int ii = 0; ii < kTM; ++ii)
#pragma unroll
      for (int jc = 0; jc < kTN / 4; ++jc)
        *reinterpret_cast<float4*>(u + Gemm::Row(tm, ii) * kK + Gemm::Col(tn, jc * 4)) = {
            acc[ii][jc * 4], acc[ii][jc * 4 + 1], acc[ii][jc * 4 + 2], acc[ii][jc * 4 + 3]};
  }
}

// ---- state kernel --------------------------------------------------------------------------------

constexpr int kStateThreads = 128;
constexpr int kStateBlockV = 32;

template <int kK>
struct StateSmem {
  float w_t[kK * kC];
  float kg[kC * kK];
  float s[kK * kStateBlockV];
  float vn[kC * kStateBlockV];
  float gl[kK];
};

template <int kK>
struct StateConfig {
  using VnGemm = BlockGemm<kC, kStateBlockV, 4, 4>;                      // Ṽ tile: 64 × 32 over K
  using SGemm = BlockGemm<kK, kStateBlockV, (kK >= 64 ? kK / 16 : 4), 4>;  // S tile: K × 32 over 64
  static_assert(VnGemm::kNumThreads == kStateThreads && SGemm::kNumThreads <= kStateThreads);
  static constexpr int kSTM = kK / SGemm::kThreadsM;
};

template <int kK>
__global__ void __launch_bounds__(kStateThreads) sm90_kda_chunk_state(const __grid_constant__ ChunkArgs a) {
  using Smem = StateSmem<kK>;
  using VnGemm = typename StateConfig<kK>::VnGemm;
  using SGemm = typename StateConfig<kK>::SGemm;
  constexpr int kSTM = StateConfig<kK>::kSTM;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);

  // ---- setup: the state tile lives in registers (SGemm layout) and in smem (GEMM operand) ----
  const int tid = threadIdx.x;
  const int x0 = blockIdx.x * kStateBlockV, h = blockIdx.y, n = blockIdx.z;
  const int H = a.num_heads, K = a.head_dim;
  float* state = a.state + (int64_t(a.b.slots[n]) * H + h) * K * K;
  const bool s_owner = tid < SGemm::kNumThreads;
  const int stm = SGemm::Tm(tid), stn = SGemm::Tn(tid);
  float s[kSTM][4];
  if (s_owner) {
#pragma unroll
    for (int i = 0; i < kSTM; ++i) {
      const int d = SGemm::Row(stm, i), x = x0 + SGemm::Col(stn, 0);
      float4 v4 = {0.f, 0.f, 0.f, 0.f};
      if (d < K && x < K) v4 = *reinterpret_cast<const float4*>(state + int64_t(d) * K + x);
      s[i][0] = v4.x, s[i][1] = v4.y, s[i][2] = v4.z, s[i][3] = v4.w;
      *reinterpret_cast<float4*>(sm.s + d * kStateBlockV + SGemm::Col(stn, 0)) = v4;
    }
  }

  const int vtm = VnGemm::Tm(tid), vtn = VnGemm::Tn(tid);
  const int c_begin = a.b.seq_chunks[n], c_end = a.b.seq_chunks[n + 1];
  // NOTE: pipelined producer: W of chunk c+1 is fetched while the S update of chunk c runs, and
  // K̂⊙e^{G_C−G}, e^{G_C} of c+1 while h[c] is stored; cp.async keeps every copy in flight.
  auto fetch_w = [&](int ci) {
    CopyAsync<kStateThreads>(sm.w_t, a.b.w_t + (int64_t(ci) * H + h) * kK * kC, kK * kC, tid);
  };
  auto fetch_kg = [&](int ci) {
    CopyAsync<kStateThreads>(sm.kg, a.b.kg + (int64_t(ci) * H + h) * kC * kK, kC * kK, tid);
    CopyAsync<kStateThreads>(sm.gl, a.b.gl + (int64_t(ci) * H + h) * kK, kK, tid);
  };
  if (c_begin < c_end) {
    fetch_w(c_begin);
    fetch_kg(c_begin);
  }
  for (int ci = c_begin; ci < c_end; ++ci) {
    const int64_t base = int64_t(ci) * H + h;
    // ---- publish h[c] = S; prefetch this chunk's U slice into registers ----
    if (s_owner) {
      float* hp = a.b.h + base * kK * kK + x0;
#pragma unroll
      for (int i = 0; i < kSTM; ++i)
        *reinterpret_cast<float4*>(hp + SGemm::Row(stm, i) * kK + SGemm::Col(stn, 0)) = {s[i][0], s[i][1], s[i][2],
                                                                                          s[i][3]};
    }
    float4 u4[4];
    {
      const float* u = a.b.u + base * kC * kK + x0;
#pragma unroll
      for (int i = 0; i < 4; ++i)
        u4[i] = *reinterpret_cast<const float4*>(u + VnGemm::Row(vtm, i) * kK + VnGemm::Col(vtn, 0));
    }
    CopyAsyncWait();
    __syncthreads();  // W, K̂⊙e^{G_C−G}, e^{G_C} of this chunk and S are in smem

    // ---- Ṽ = U − W·S (64 × 32) ----
    {
      float acc[4][4];
      VnGemm::Zero(acc);
      VnGemm::template Run<kK>(sm.w_t, kC, sm.s, kStateBlockV, tid, acc);
      float* vn = a.b.vn + base * kC * kK + x0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = VnGemm::Row(vtm, i), x = VnGemm::Col(vtn, 0);
        const float4 v4 = {u4[i].x - acc[i][0], u4[i].y - acc[i][1], u4[i].z - acc[i][2], u4[i].w - acc[i][3]};
        *reinterpret_cast<float4*>(sm.vn + r * kStateBlockV + x) = v4;
        *reinterpret_cast<float4*>(vn + r * kK + x) = v4;
      }
    }
    __syncthreads();  // Ṽ complete; W and S (smem) no longer read this chunk
    if (ci + 1 < c_end) fetch_w(ci + 1);

    // ---- S ← e^{G_C} ⊙ S + (K̂⊙e^{G_C−G})ᵀ·Ṽ ----
    if (s_owner) {
      float acc[kSTM][4];
      SGemm::Zero(acc);
      SGemm::template Run<kC>(sm.kg, kK, sm.vn, kStateBlockV, tid, acc);
#pragma unroll
      for (int i = 0; i < kSTM; ++i) {
        const int d = SGemm::Row(stm, i);
        const float decay = sm.gl[d];
#pragma unroll
        for (int j = 0; j < 4; ++j) s[i][j] = fmaf(s[i][j], decay, acc[i][j]);
        *reinterpret_cast<float4*>(sm.s + d * kStateBlockV + SGemm::Col(stn, 0)) = {s[i][0], s[i][1], s[i][2],
                                                                                     s[i][3]};
      }
    }
    __syncthreads();  // K̂⊙e^{G_C−G}, e^{G_C} and Ṽ no longer read
    if (ci + 1 < c_end) fetch_kg(ci + 1);
  }

  // ---- epilogue: final state back to its slot ----
  if (s_owner) {
#pragma unroll
    for (int i = 0; i < kSTM; ++i) {
      const int d = SGemm::Row(stm, i), x = x0 + SGemm::Col(stn, 0);
      if (d < K && x < K) *reinterpret_cast<float4*>(state + int64_t(d) * K + x) = {s[i][0], s[i][1], s[i][2], s[i][3]};
    }
  }
}

// ---- output kernel -------------------------------------------------------------------------------

constexpr int kOutputThreads = 256;

// Shared memory of the output kernel: region A holds (Q̃⊙e^G)ᵀ [kK][64], then Aqkᵀ [64][64];
// region B holds h[c] [kK][kK], then Ṽ [64][kK].
template <int kK>
struct OutputSmem {
  static constexpr int kAFloats = kK > kC ? kK * kC : kC * kC;
  static constexpr int kBFloats = kK > kC ? kK * kK : kC * kK;
  static constexpr size_t kBytes = sizeof(float) * (kAFloats + kBFloats);
};

template <int kK>
__global__ void __launch_bounds__(kOutputThreads) sm90_kda_chunk_output(const __grid_constant__ ChunkArgs a) {
  using Gemm = typename RowsByHeadGemm<kK>::Gemm;
  constexpr int kTM = kC / Gemm::kThreadsM, kTN = kK / Gemm::kThreadsN;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* sm_a = reinterpret_cast<float*>(smem_raw);
  float* sm_b = sm_a + OutputSmem<kK>::kAFloats;

  const int tid = threadIdx.x;
  const int c = blockIdx.x, h = blockIdx.y, H = a.num_heads, K = a.head_dim;
  const int t0 = a.b.chunk_start[c], len = a.b.chunk_len[c];
  const int64_t base = int64_t(c) * H + h;
  float acc[kTM][kTN];
  Gemm::Zero(acc);

  // ---- inter-chunk part: (Q̃⊙e^G)·h[c] ----
  CopyAsync<kOutputThreads>(sm_a, a.b.qg_t + base * kK * kC, kK * kC, tid);
  CopyAsync<kOutputThreads>(sm_b, a.b.h + base * kK * kK, kK * kK, tid);
  CopyAsyncWait();
  __syncthreads();
  if (tid < Gemm::kNumThreads) Gemm::template Run<kK>(sm_a, kC, sm_b, kK, tid, acc);
  __syncthreads();
  // ---- intra-chunk part: Aqk·Ṽ ----
  CopyAsync<kOutputThreads>(sm_a, a.b.aqk_t + base * kC * kC, kC * kC, tid);
  CopyAsync<kOutputThreads>(sm_b, a.b.vn + base * kC * kK, kC * kK, tid);
  CopyAsyncWait();
  __syncthreads();
  if (tid >= Gemm::kNumThreads) return;
  Gemm::template Run<kC>(sm_a, kC, sm_b, kK, tid, acc);

  // ---- epilogue: rows of this chunk that exist, columns < V ----
  const int tm = Gemm::Tm(tid), tn = Gemm::Tn(tid);
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    const int r = Gemm::Row(tm, i);
    if (r >= len) continue;
    float* orow = a.o + (int64_t(t0 + r) * H + h) * K;
#pragma unroll
    for (int jc = 0; jc < kTN / 4; ++jc) {
      const int x = Gemm::Col(tn, jc * 4);
      if (x < K)
        *reinterpret_cast<float4*>(orow + x) = {acc[i][jc * 4], acc[i][jc * 4 + 1], acc[i][jc * 4 + 2],
                                                acc[i][jc * 4 + 3]};
    }
  }
}

// ---- launchers -----------------------------------------------------------------------------------

ChunkArgs MakeArgs(const KdaChunkParams& p, const KdaChunkBuffers& b) {
  return ChunkArgs{p.q, p.k, p.v, p.g, p.beta, p.state, p.o, p.num_heads, p.head_dim, b};
}

template <typename Kernel>
cudaError_t LaunchWithSmem(Kernel kernel, dim3 grid, int threads, size_t smem, const ChunkArgs& args,
                           cudaStream_t stream) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  kernel<<<grid, threads, smem, stream>>>(args);
  return cudaGetLastError();
}

template <int kK>
cudaError_t Intra(const KdaChunkParams& p, const KdaChunkBuffers& b, cudaStream_t s) {
  return LaunchWithSmem(sm90_kda_chunk_intra<kK>, dim3(b.num_chunks, p.num_heads), kIntraThreads,
                        sizeof(IntraSmem<kK>), MakeArgs(p, b), s);
}
template <int kK>
cudaError_t State(const KdaChunkParams& p, const KdaChunkBuffers& b, cudaStream_t s) {
  return LaunchWithSmem(sm90_kda_chunk_state<kK>, dim3(kK / kStateBlockV, p.num_heads, b.num_seqs), kStateThreads,
                        sizeof(StateSmem<kK>), MakeArgs(p, b), s);
}
template <int kK>
cudaError_t Output(const KdaChunkParams& p, const KdaChunkBuffers& b, cudaStream_t s) {
  return LaunchWithSmem(sm90_kda_chunk_output<kK>, dim3(b.num_chunks, p.num_heads), kOutputThreads,
                        OutputSmem<kK>::kBytes, MakeArgs(p, b), s);
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
cudaError_t LaunchKdaChunkState(const KdaChunkParams& p, const KdaChunkBuffers& b, int k_pad, cudaStream_t s) {
  switch (k_pad) {
    case 32: return State<32>(p, b, s);
    case 64: return State<64>(p, b, s);
    case 128: return State<128>(p, b, s);
  }
  return cudaErrorInvalidValue;
}
cudaError_t LaunchKdaChunkOutput(const KdaChunkParams& p, const KdaChunkBuffers& b, int k_pad, cudaStream_t s) {
  switch (k_pad) {
    case 32: return Output<32>(p, b, s);
    case 64: return Output<64>(p, b, s);
    case 128: return Output<128>(p, b, s);
  }
  return cudaErrorInvalidValue;
}

}  // namespace gyre::cuda::internal
