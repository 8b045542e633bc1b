// W8A8 kernels (quant_cuda.h). Sections: encoders; activation quantization; the mma.sync GEMM
// (dense and grouped); MoE sort, tiles and combine; launchers.
#include "ops/cuda/quant_cuda.h"

#include <algorithm>
#include <string>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/quant_codes.cuh"

namespace gyre::cuda {
namespace {

using internal::EncodeE4M3;
using internal::EncodeInt8;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
size_t Align256(size_t n) { return (n + 255) / 256 * 256; }

// ---- encoders (quant_codes.cuh) and element helpers ----------------------------------------------

// ops::SwiGlu's element: round(silu(min(g, limit))) · clamp(u, ±limit) (no clamp when limit <= 0).
__device__ __forceinline__ float SwiGluAt(float g, float u, float limit) {
  if (limit > 0) {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
  }
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

// ---- activation quantization ---------------------------------------------------------------------

struct ActParams {
  const float* x;
  int64_t n, k, ldx;
  void* q;
  float* s;
  const int32_t* src_rows;
  int32_t src_div;
  const int32_t* num_rows;
  bool swiglu;  // x row holds gate [0, k) and up [k, 2k): the value is SwiGluAt(gate, up)
  float limit;
};

__device__ __forceinline__ const float* ActRow(const ActParams& p, int64_t r) {
  const int64_t src = p.src_rows ? p.src_rows[r] / p.src_div : r;
  return p.x + src * p.ldx;
}
__device__ __forceinline__ float ActAt(const ActParams& p, const float* xr, int64_t j) {
  return p.swiglu ? SwiGluAt(xr[j], xr[p.k + j], p.limit) : xr[j];
}

// FP8: one warp per (row, 128-channel group); each lane holds 4 values.
__global__ void __launch_bounds__(256) QuantActFp8Kernel(ActParams p) {
  const int64_t ng = (p.k + kQuantGroup - 1) / kQuantGroup;
  const int64_t wid = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (wid >= p.n * ng) return;
  const int64_t r = wid / ng, g = wid - r * ng;
  if (p.num_rows && r >= *p.num_rows) return;
  const float* xr = ActRow(p, r);
  const int64_t c0 = g * kQuantGroup;
  float v[4];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t j = c0 + lane + 32 * i;
    v[i] = j < p.k ? ActAt(p, xr, j) : 0.0f;
    amax = fmaxf(amax, fabsf(v[i]));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = __fdiv_rn(fmaxf(amax, 1e-4f), 448.0f);
  if (lane == 0) p.s[r * ng + g] = s;
  uint8_t* q = static_cast<uint8_t*>(p.q) + r * p.k;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t j = c0 + lane + 32 * i;
    if (j < p.k) q[j] = EncodeE4M3(__fdiv_rn(v[i], s));
  }
}

// INT8: one 256-thread block per row.
__global__ void __launch_bounds__(256) QuantActInt8Kernel(ActParams p) {
  const int64_t r = blockIdx.x;
  if (p.num_rows && r >= *p.num_rows) return;
  const float* xr = ActRow(p, r);
  float amax = 0.0f;
  for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) amax = fmaxf(amax, fabsf(ActAt(p, xr, j)));
  __shared__ float red[8];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = amax;
  __syncthreads();
  amax = red[0];
  for (int w = 1; w < 8; ++w) amax = fmaxf(amax, red[w]);
  const float s = __fdiv_rn(fmaxf(amax, 1e-8f), 127.0f);
  if (threadIdx.x == 0) p.s[r] = s;
  int8_t* q = static_cast<int8_t*>(p.q) + r * p.k;
  for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) q[j] = EncodeInt8(__fdiv_rn(ActAt(p, xr, j), s));
}

Status LaunchActQuant(W8A8 scheme, const ActParams& p, cudaStream_t stream) {
  if (p.n == 0) return Status::Ok();
  if (scheme == W8A8::kFp8) {
    const int64_t warps = p.n * QuantGroups(p.k);
    QuantActFp8Kernel<<<static_cast<unsigned>(CeilDiv(warps, 8)), 256, 0, stream>>>(p);
  } else {
    QuantActInt8Kernel<<<static_cast<unsigned>(p.n), 256, 0, stream>>>(p);
  }
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

// ---- the GEMM ------------------------------------------------------------------------------------
//
// Block tile BM × BN over K tiles of 128 (= one scale group). Warps tile the block WM × WN; each
// warp issues (WM/16)·(WN/8) mma.sync.m16n8k32 per 32 of K. Operands are staged in shared memory
// with 144-byte rows (16 bytes of padding: the fragment loads of the 8 row groups then hit 32
// distinct banks); the next K tile's global loads are issued into registers before the current
// tile's mma (one stage of prefetch). Rows / columns / K past the ends load as zero bytes (0.0 in e4m3, 0 in int8).
// FP8: the fp32 accumulators hold one group's inner sums; after each K tile they are scaled by
// sa[row, g] · sw[col, g] and added to the running fp32 totals. INT8: int32 accumulators over
// all of K, scaled once at the end.

constexpr int kBK = 128;
constexpr int kLds = kBK + 16;

struct GemmParams {
  const uint8_t* a;  // [rows, K]
  const float* sa;
  const uint8_t* w;  // [groups, N, K]
  const float* sw;
  int64_t m, n, k, ldy;
  float* y;
  const int4* tiles;  // grouped: {group, row0, row_end, 0}; null: dense
  const int32_t* num_tiles;
  bool vec;  // K % 16 == 0 and 16-byte aligned bases: 16-byte loads
};

__device__ __forceinline__ void MmaFp8(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void MmaS8(int* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// A K tile of rows [0, R) × columns [k0, k0 + 128) of src (row stride K, rows valid below
// `valid`), zero outside, in 16-byte chunks: thread t holds chunks t, t + NT, ... in registers.
// FetchTile issues the global loads (the next tile's, while the current one is computed);
// StoreTile writes them to s[R][kLds].
template <int R, int NT>
struct TileRegs {
  static constexpr int kChunks = R * (kBK / 16), kPer = kChunks / NT;
  static_assert(kChunks % NT == 0, "tile chunks must divide among the threads");
  uint4 v[kPer];
};
template <int R, int NT>
__device__ __forceinline__ void FetchTile(TileRegs<R, NT>& t, const uint8_t* src, int64_t valid, int64_t K, int64_t k0,
                                          bool vec) {
#pragma unroll
  for (int i = 0; i < TileRegs<R, NT>::kPer; ++i) {
    const int c = threadIdx.x + i * NT;
    const int r = c / (kBK / 16), col = (c % (kBK / 16)) * 16;
    uint4 v = make_uint4(0, 0, 0, 0);
    const int64_t gk = k0 + col;
    if (r < valid) {
      const uint8_t* p = src + r * K + gk;
      if (vec && gk + 16 <= K) {
        v = *reinterpret_cast<const uint4*>(p);
      } else {
        alignas(16) uint8_t b[16];
#pragma unroll
        for (int j = 0; j < 16; ++j) b[j] = gk + j < K ? p[j] : 0;
        v = *reinterpret_cast<const uint4*>(b);
      }
    }
    t.v[i] = v;
  }
}
template <int R, int NT>
__device__ __forceinline__ void StoreTile(uint8_t* s, const TileRegs<R, NT>& t) {
#pragma unroll
  for (int i = 0; i < TileRegs<R, NT>::kPer; ++i) {
    const int c = threadIdx.x + i * NT;
    const int r = c / (kBK / 16), col = (c % (kBK / 16)) * 16;
    *reinterpret_cast<uint4*>(s + r * kLds + col) = t.v[i];
  }
}

template <int BM, int BN, int WM, int WN, bool FP8>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32) W8A8GemmKernel(GemmParams p) {
  constexpr int kWarpsN = BN / WN, kThreads = (BM / WM) * (BN / WN) * 32;
  constexpr int MT = WM / 16, NT = WN / 8;
  __shared__ __align__(16) uint8_t As[BM * kLds];
  __shared__ __align__(16) uint8_t Bs[BN * kLds];

  int64_t row0, row_end;
  const uint8_t* w = p.w;
  const float* sw = p.sw;
  const int64_t ng = (p.k + kBK - 1) / kBK;
  const int64_t scols = FP8 ? ng : 1;
  if (p.tiles) {
    if (static_cast<int64_t>(blockIdx.y) >= *p.num_tiles) return;
    const int4 t = p.tiles[blockIdx.y];
    row0 = t.y;
    row_end = t.z;
    w += static_cast<int64_t>(t.x) * p.n * p.k;
    sw += static_cast<int64_t>(t.x) * p.n * scols;
  } else {
    row0 = static_cast<int64_t>(blockIdx.y) * BM;
    row_end = p.m;
  }
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = (warp / kWarpsN) * WM, wn = (warp % kWarpsN) * WN;
  const int gq = lane >> 2, tq = lane & 3;

  float total[MT][NT][4];
  float part[MT][NT][4];
  int iacc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        total[i][j][e] = 0.0f;
        iacc[i][j][e] = 0;
      }

  const uint8_t* a_base = p.a + row0 * p.k;
  const uint8_t* w_base = w + n0 * p.k;
  const int64_t a_valid = row_end - row0, w_valid = p.n - n0;
  TileRegs<BM, kThreads> ra;
  TileRegs<BN, kThreads> rb;
  FetchTile(ra, a_base, a_valid, p.k, 0, p.vec);
  FetchTile(rb, w_base, w_valid, p.k, 0, p.vec);
  for (int64_t kt = 0; kt < ng; ++kt) {
    __syncthreads();  // the previous tile's fragment reads are done
    StoreTile(As, ra);
    StoreTile(Bs, rb);
    __syncthreads();
    if (kt + 1 < ng) {  // the next tile's loads fly while this one is computed
      FetchTile(ra, a_base, a_valid, p.k, (kt + 1) * kBK, p.vec);
      FetchTile(rb, w_base, w_valid, p.k, (kt + 1) * kBK, p.vec);
    }
    if constexpr (FP8) {
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) part[i][j][e] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 32) {
      uint32_t af[MT][4], bf[NT][2];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const uint8_t* s = As + (wm + i * 16 + gq) * kLds + kk + tq * 4;
        af[i][0] = *reinterpret_cast<const uint32_t*>(s);
        af[i][1] = *reinterpret_cast<const uint32_t*>(s + 8 * kLds);
        af[i][2] = *reinterpret_cast<const uint32_t*>(s + 16);
        af[i][3] = *reinterpret_cast<const uint32_t*>(s + 8 * kLds + 16);
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const uint8_t* s = Bs + (wn + j * 8 + gq) * kLds + kk + tq * 4;
        bf[j][0] = *reinterpret_cast<const uint32_t*>(s);
        bf[j][1] = *reinterpret_cast<const uint32_t*>(s + 16);
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          if constexpr (FP8) {
            MmaFp8(part[i][j], af[i], bf[j]);
          } else {
            MmaS8(iacc[i][j], af[i], bf[j]);
          }
        }
    }
    if constexpr (FP8) {
      // total += (part · sa) · sw, in the CPU reference's order.
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const int64_t r_lo = row0 + wm + i * 16 + gq, r_hi = r_lo + 8;
        const float sa_lo = r_lo < row_end ? p.sa[r_lo * ng + kt] : 0.0f;
        const float sa_hi = r_hi < row_end ? p.sa[r_hi * ng + kt] : 0.0f;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const int64_t c = n0 + wn + j * 8 + tq * 2;
          const float sw0 = c < p.n ? sw[c * ng + kt] : 0.0f;
          const float sw1 = c + 1 < p.n ? sw[(c + 1) * ng + kt] : 0.0f;
          total[i][j][0] = __fadd_rn(total[i][j][0], __fmul_rn(__fmul_rn(part[i][j][0], sa_lo), sw0));
          total[i][j][1] = __fadd_rn(total[i][j][1], __fmul_rn(__fmul_rn(part[i][j][1], sa_lo), sw1));
          total[i][j][2] = __fadd_rn(total[i][j][2], __fmul_rn(__fmul_rn(part[i][j][2], sa_hi), sw0));
          total[i][j][3] = __fadd_rn(total[i][j][3], __fmul_rn(__fmul_rn(part[i][j][3], sa_hi), sw1));
        }
      }
    }
  }
  // Store (INT8: y = (acc · sa) · sw, the reference's order, so it is bit-exact with GemmInt8Ref).
#pragma unroll
  for (int i = 0; i < MT; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = row0 + wm + i * 16 + gq + 8 * h;
      if (r >= row_end) continue;
      const float sa_r = FP8 ? 0.0f : p.sa[r];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t c = n0 + wn + j * 8 + tq * 2 + e;
          if (c >= p.n) continue;
          float v;
          if constexpr (FP8) {
            v = total[i][j][2 * h + e];
          } else {
            v = __fmul_rn(__fmul_rn(static_cast<float>(iacc[i][j][2 * h + e]), sa_r), sw[c]);
          }
          p.y[r * p.ldy + c] = v;
        }
      }
    }
  }
}

// Two tile shapes: 16 × 64 (4 warps of 16 × 16) for decode-sized M, 64 × 128 (8 warps of 32 × 32).
constexpr int kSmallBM = 16, kSmallBN = 64, kBigBM = 64, kBigBN = 128;

template <bool FP8>
Status LaunchGemm(const GemmParams& p, int block_m, int64_t grid_y, cudaStream_t stream) {
  if (block_m == kSmallBM) {
    const dim3 grid(static_cast<unsigned>(CeilDiv(p.n, kSmallBN)), static_cast<unsigned>(grid_y));
    W8A8GemmKernel<kSmallBM, kSmallBN, 16, 16, FP8><<<grid, 128, 0, stream>>>(p);
  } else {
    const dim3 grid(static_cast<unsigned>(CeilDiv(p.n, kBigBN)), static_cast<unsigned>(grid_y));
    W8A8GemmKernel<kBigBM, kBigBN, 32, 32, FP8><<<grid, 256, 0, stream>>>(p);
  }
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

Status RunGemm(W8A8 scheme, const GemmParams& p, int block_m, int64_t grid_y, cudaStream_t stream) {
  if (grid_y > 65535) return Status::InvalidArgument("w8a8 gemm: more than 65535 row tiles");
  return scheme == W8A8::kFp8 ? LaunchGemm<true>(p, block_m, grid_y, stream)
                              : LaunchGemm<false>(p, block_m, grid_y, stream);
}

// ---- MoE sort, tiles and combine -----------------------------------------------------------------

// One block: counts per expert, offsets [E + 1] (offsets[E] = valid pairs), then each valid pair
// gets a row of its expert's range: row_pair[row] = pair, pair_row[pair] = row (-1: invalid).
__global__ void __launch_bounds__(1024) MoeSortKernel(const int32_t* idx, int64_t pairs, int32_t E, int32_t* offsets,
                                                      int32_t* row_pair, int32_t* pair_row) {
  extern __shared__ int32_t sm[];
  int32_t* counts = sm;
  int32_t* cursor = sm + E;
  for (int e = threadIdx.x; e < E; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int32_t e = idx[p];
    if (e >= 0 && e < E) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t acc = 0;
    for (int e = 0; e < E; ++e) {
      offsets[e] = acc;
      cursor[e] = acc;
      acc += counts[e];
    }
    offsets[E] = acc;
  }
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int32_t e = idx[p];
    if (e >= 0 && e < E) {
      const int32_t row = atomicAdd(&cursor[e], 1);
      row_pair[row] = static_cast<int32_t>(p);
      pair_row[p] = row;
    } else {
      pair_row[p] = -1;
    }
  }
}

// One block: tiles of block_m rows per group, in group order; num_tiles = their count.
__global__ void __launch_bounds__(1024) GroupedTilesKernel(const int32_t* offsets, int32_t groups, int32_t block_m,
                                                           int4* tiles, int32_t* num_tiles, int32_t max_tiles) {
  __shared__ int32_t start[1025];
  // Each thread takes a contiguous run of groups; a serial scan over the 1024 run totals.
  const int32_t per = (groups + blockDim.x - 1) / blockDim.x;
  const int32_t g0 = threadIdx.x * per, g1 = min(groups, g0 + per);
  int32_t mine = 0;
  for (int32_t g = g0; g < g1; ++g) mine += (offsets[g + 1] - offsets[g] + block_m - 1) / block_m;
  start[threadIdx.x + 1] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    start[0] = 0;
    for (int i = 1; i <= static_cast<int>(blockDim.x); ++i) start[i] += start[i - 1];
    *num_tiles = min(start[blockDim.x], max_tiles);
  }
  __syncthreads();
  int32_t t = start[threadIdx.x];
  for (int32_t g = g0; g < g1; ++g) {
    const int32_t lo = offsets[g], hi = offsets[g + 1];
    for (int32_t r = lo; r < hi && t < max_tiles; r += block_m) tiles[t++] = make_int4(g, r, min(r + block_m, hi), 0);
  }
}

// out[t, d] = Σ over t's valid slots in ascending expert id of y[row, d] · w[t, slot] (the CPU adds
// the experts' outputs in expert order). One block per token.
__global__ void __launch_bounds__(256) MoeCombineW8A8Kernel(const float* y, const int32_t* idx, const float* wts,
                                                            const int32_t* pair_row, int32_t top_k, int64_t D,
                                                            float* out) {
  const int64_t t = blockIdx.x;
  int32_t order[16];
  int32_t cnt = 0;
  for (int32_t j = 0; j < top_k && j < 16; ++j) {
    if (pair_row[t * top_k + j] < 0) continue;
    int32_t pos = cnt++;
    order[pos] = j;
    while (pos > 0 && idx[t * top_k + order[pos - 1]] > idx[t * top_k + order[pos]]) {
      const int32_t tmp = order[pos - 1];
      order[pos - 1] = order[pos];
      order[pos] = tmp;
      --pos;
    }
  }
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int32_t i = 0; i < cnt; ++i) {
      const int32_t j = order[i];
      acc = __fadd_rn(acc, __fmul_rn(y[static_cast<int64_t>(pair_row[t * top_k + j]) * D + d], wts[t * top_k + j]));
    }
    out[t * D + d] = acc;
  }
}

// Workspace of MoeExpertsW8A8 for n tokens (each segment 256-byte aligned).
struct MoeLayout {
  int64_t pairs = 0, max_tiles = 0;
  int block_m = kSmallBM;
  size_t offsets = 0, row_pair = 0, pair_row = 0, tiles = 0, num_tiles = 0, xq = 0, xs = 0, h = 0, aq = 0, as = 0,
         y = 0, total = 0;
};
MoeLayout MakeMoeLayout(const QMoeWeights& w, int64_t n, int64_t top_k, int block_m) {
  MoeLayout L;
  L.pairs = n * top_k;
  L.block_m = block_m;
  L.max_tiles = GroupedMaxTiles(L.pairs, w.num_experts, block_m);
  const size_t P = static_cast<size_t>(L.pairs), D = static_cast<size_t>(w.hidden), I = static_cast<size_t>(w.inter);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off += Align256(bytes);
    return at;
  };
  L.offsets = take(4 * (static_cast<size_t>(w.num_experts) + 1));
  L.row_pair = take(4 * P);
  L.pair_row = take(4 * P);
  L.tiles = take(16 * static_cast<size_t>(L.max_tiles));
  L.num_tiles = take(4);
  L.xq = take(P * D);
  L.xs = take(4 * P * static_cast<size_t>(w.gate_up.scale_cols()));
  L.h = take(4 * P * 2 * I);
  L.aq = take(P * I);
  L.as = take(4 * P * static_cast<size_t>(w.down.scale_cols()));
  L.y = take(4 * P * D);
  L.total = off;
  return L;
}

Status CheckWeight(const QWeight& w, const char* what) {
  if (!w.q || !w.scale) return Status::InvalidArgument(std::string(what) + ": null weight");
  if (w.rows < 1 || w.cols < 1) return Status::InvalidArgument(std::string(what) + ": empty weight");
  if (w.scheme != W8A8::kFp8 && w.scheme != W8A8::kInt8) return Status::InvalidArgument(std::string(what) + ": scheme");
  return Status::Ok();
}

}  // namespace

// ---- launchers -----------------------------------------------------------------------------------

Status QuantizeActivations(W8A8 scheme, const ActQuantArgs& a, cudaStream_t stream) {
  if (a.n < 0 || a.k < 1) return Status::InvalidArgument("quantize activations: bad sizes");
  if (a.n == 0) return Status::Ok();
  if (!a.x || !a.q || !a.s) return Status::InvalidArgument("quantize activations: null pointer");
  if (a.src_rows && a.src_div < 1) return Status::InvalidArgument("quantize activations: src_div must be >= 1");
  const int64_t ldx = a.ldx == 0 ? a.k : a.ldx;
  if (ldx < a.k) return Status::InvalidArgument("quantize activations: ldx < k");
  ActParams p{a.x, a.n, a.k, ldx, a.q, a.s, a.src_rows, a.src_div, a.num_rows, false, 0.0f};
  return LaunchActQuant(scheme, p, stream);
}

Status GemmW8A8(const void* qa, const float* sa, int64_t m, const QWeight& w, float* y, int64_t ldy,
                cudaStream_t stream) {
  GYRE_RETURN_IF_ERROR(CheckWeight(w, "w8a8 gemm"));
  if (m < 0) return Status::InvalidArgument("w8a8 gemm: negative m");
  if (m == 0) return Status::Ok();
  if (!qa || !sa || !y) return Status::InvalidArgument("w8a8 gemm: null pointer");
  if (ldy == 0) ldy = w.rows;
  if (ldy < w.rows) return Status::InvalidArgument("w8a8 gemm: ldy < N");
  const int block_m = m <= 32 ? kSmallBM : kBigBM;
  GemmParams p{static_cast<const uint8_t*>(qa), sa, static_cast<const uint8_t*>(w.q), w.scale, m, w.rows, w.cols, ldy,
               y, nullptr, nullptr, w.cols % 16 == 0 && Aligned16(qa) && Aligned16(w.q)};
  return RunGemm(w.scheme, p, block_m, CeilDiv(m, block_m), stream);
}

int GroupedBlockM(int64_t avg_rows_per_group) { return avg_rows_per_group < 48 ? kSmallBM : kBigBM; }

int64_t GroupedMaxTiles(int64_t max_rows, int64_t groups, int block_m) {
  return CeilDiv(max_rows, block_m) + groups;
}

Status GroupedTiles(const int32_t* offsets, int64_t groups, int block_m, int4* tiles, int32_t* num_tiles,
                    int64_t max_tiles, cudaStream_t stream) {
  if (groups < 1 || groups > (int64_t(1) << 20)) return Status::InvalidArgument("grouped tiles: groups out of range");
  if (block_m != kSmallBM && block_m != kBigBM) return Status::InvalidArgument("grouped tiles: block_m");
  if (!offsets || !tiles || !num_tiles) return Status::InvalidArgument("grouped tiles: null pointer");
  GroupedTilesKernel<<<1, 1024, 0, stream>>>(offsets, static_cast<int32_t>(groups), block_m, tiles, num_tiles,
                                             static_cast<int32_t>(max_tiles));
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

Status GemmW8A8Grouped(const void* qa, const float* sa, const QWeight& w, int64_t groups, const int4* tiles,
                       const int32_t* num_tiles, int64_t max_tiles, int block_m, int64_t max_rows, float* y,
                       cudaStream_t stream) {
  GYRE_RETURN_IF_ERROR(CheckWeight(w, "w8a8 grouped gemm"));
  if (groups < 1) return Status::InvalidArgument("w8a8 grouped gemm: groups < 1");
  if (max_rows == 0 || max_tiles == 0) return Status::Ok();
  if (!qa || !sa || !y || !tiles || !num_tiles) return Status::InvalidArgument("w8a8 grouped gemm: null pointer");
  if (block_m != kSmallBM && block_m != kBigBM) return Status::InvalidArgument("w8a8 grouped gemm: block_m");
  GemmParams p{static_cast<const uint8_t*>(qa), sa, static_cast<const uint8_t*>(w.q), w.scale, max_rows, w.rows,
               w.cols, w.rows, y, tiles, num_tiles, w.cols % 16 == 0 && Aligned16(qa) && Aligned16(w.q)};
  return RunGemm(w.scheme, p, block_m, max_tiles, stream);
}

size_t MoeW8A8WorkspaceBytes(const QMoeWeights& w, int64_t max_tokens, int64_t top_k) {
  // The larger of the two tile tables (either block size may be picked).
  return std::max(MakeMoeLayout(w, max_tokens, top_k, kSmallBM).total,
                  MakeMoeLayout(w, max_tokens, top_k, kBigBM).total);
}

Status MoeExpertsW8A8(const float* x, int64_t n, const int32_t* idx, const float* wts, int64_t top_k,
                      const QMoeWeights& w, float swiglu_limit, float* out, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream) {
  const int64_t E = w.num_experts, D = w.hidden, I = w.inter;
  if (n < 0) return Status::InvalidArgument("moe w8a8: negative token count");
  if (top_k < 1 || top_k > 16) return Status::InvalidArgument("moe w8a8: top_k must be in [1, 16]");
  if (E < 1 || E > 4096) return Status::InvalidArgument("moe w8a8: num_experts out of [1, 4096]");
  if (D < 1 || I < 1) return Status::InvalidArgument("moe w8a8: hidden and inter must be >= 1");
  if (w.gate_up.rows != 2 * I || w.gate_up.cols != D || w.down.rows != D || w.down.cols != I)
    return Status::InvalidArgument("moe w8a8: weight shapes do not match hidden / inter");
  if (w.gate_up.scheme != w.down.scheme) return Status::InvalidArgument("moe w8a8: gate_up and down schemes differ");
  if (n * top_k > (int64_t(1) << 30)) return Status::InvalidArgument("moe w8a8: too many pairs");
  if (n == 0) return Status::Ok();
  if (!x || !idx || !wts || !out) return Status::InvalidArgument("moe w8a8: null pointer");
  const int block_m = GroupedBlockM(n * top_k / E);
  const MoeLayout L = MakeMoeLayout(w, n, top_k, block_m);
  if (!workspace || workspace_bytes < L.total)
    return Status::InvalidArgument("moe w8a8: workspace of " + std::to_string(workspace_bytes) + " bytes, need " +
                                   std::to_string(L.total));
  if (!Aligned16(workspace)) return Status::InvalidArgument("moe w8a8: workspace must be 16-byte aligned");
  char* ws = static_cast<char*>(workspace);
  auto* offsets = reinterpret_cast<int32_t*>(ws + L.offsets);
  auto* row_pair = reinterpret_cast<int32_t*>(ws + L.row_pair);
  auto* pair_row = reinterpret_cast<int32_t*>(ws + L.pair_row);
  auto* tiles = reinterpret_cast<int4*>(ws + L.tiles);
  auto* num_tiles = reinterpret_cast<int32_t*>(ws + L.num_tiles);
  auto* xs = reinterpret_cast<float*>(ws + L.xs);
  auto* h = reinterpret_cast<float*>(ws + L.h);
  auto* as = reinterpret_cast<float*>(ws + L.as);
  auto* y = reinterpret_cast<float*>(ws + L.y);

  MoeSortKernel<<<1, 1024, 2 * 4 * static_cast<size_t>(E), stream>>>(idx, L.pairs, static_cast<int32_t>(E), offsets,
                                                                    row_pair, pair_row);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  GYRE_RETURN_IF_ERROR(GroupedTiles(offsets, E, block_m, tiles, num_tiles, L.max_tiles, stream));
  // x rows gathered by pair and quantized (rows past offsets[E], the valid pairs, are skipped).
  ActParams xp{x, L.pairs, D, D, ws + L.xq, xs, row_pair, static_cast<int32_t>(top_k), offsets + E, false, 0.0f};
  GYRE_RETURN_IF_ERROR(LaunchActQuant(w.gate_up.scheme, xp, stream));
  GYRE_RETURN_IF_ERROR(GemmW8A8Grouped(ws + L.xq, xs, w.gate_up, E, tiles, num_tiles, L.max_tiles, block_m, L.pairs,
                                       h, stream));
  ActParams ap{h, L.pairs, I, 2 * I, ws + L.aq, as, nullptr, 1, offsets + E, true, swiglu_limit};
  GYRE_RETURN_IF_ERROR(LaunchActQuant(w.down.scheme, ap, stream));
  GYRE_RETURN_IF_ERROR(
      GemmW8A8Grouped(ws + L.aq, as, w.down, E, tiles, num_tiles, L.max_tiles, block_m, L.pairs, y, stream));
  MoeCombineW8A8Kernel<<<static_cast<unsigned>(n), 256, 0, stream>>>(y, idx, wts, pair_row,
                                                                     static_cast<int32_t>(top_k), D, out);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

}  // namespace gyre::cuda
