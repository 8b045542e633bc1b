// MoE on the GPU, host side and the small kernels: routing, the counting sort of (token, slot)
// pairs by expert, the x cast, the weighted combine, and MoeExperts (validate → sort → two grouped
// GEMMs → combine). The grouped GEMMs live in sm90_moe_gemm.cu (HMMA, SIMT) and
// sm90_moe_wgmma.cu (wgmma).
//
// Sections: workspace layout; routing kernel; sort kernels (and the one-kernel sort of small
// batches); cast and combine kernels; heuristics; launchers.
#include "ops/cuda/moe_cuda.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <string>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/moe_kernels.h"

namespace gyre::cuda {
namespace {

using internal::MoeGemmKind;

size_t Align256(size_t n) { return (n + 255) / 256 * 256; }
bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- workspace layout ----------------------------------------------------------------------------

// Segments (each 256-byte aligned), for n tokens × top_k slots = P pairs:
//   counts    [chunks, E] int32   per sort chunk and expert: count, then exclusive prefix over chunks
//   offsets   [E + 2] int32       expert row offsets [E + 1], then the m-tile count
//   tiles     [P/16 + E] int4     m-tile table {expert, row0, rows, 0} (finest tile: 16 rows)
//   row_pair  [P] int32           sorted row → pair id
//   xb        [n, D] bf16         x as the bf16 operand (bf16 weights only)
//   act       [P, I]              SwiGLU output, bf16 or fp32 as the weights
//   y         [P, D] fp32         down-projection output per pair
//   col_done  [D / 16] int32      fused-combine counters per down n-tile (small batches)
struct Layout {
  int64_t pairs = 0, num_chunks = 0, max_tiles = 0;
  size_t counts = 0, offsets = 0, tiles = 0, row_pair = 0, xb = 0, act = 0, y = 0, col_done = 0, total = 0;
};

Layout MakeLayout(const MoeExpertWeights& ew, int64_t n, int64_t top_k) {
  Layout L;
  L.pairs = n * top_k;
  L.num_chunks = CeilDiv(L.pairs, internal::kMoeSortChunk);
  L.max_tiles = CeilDiv(L.pairs, internal::kMoeSimtBlockM) + ew.num_experts;
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off += Align256(bytes);
    return at;
  };
  const size_t e = static_cast<size_t>(ew.num_experts), p = static_cast<size_t>(L.pairs);
  L.counts = take(4 * static_cast<size_t>(L.num_chunks) * e);
  L.offsets = take(4 * (e + 2));
  L.tiles = take(16 * static_cast<size_t>(L.max_tiles));
  L.row_pair = take(4 * p);
  L.xb = take(ew.bf16 ? 2 * static_cast<size_t>(n * ew.hidden) : 0);
  L.act = take((ew.bf16 ? 2 : 4) * p * static_cast<size_t>(ew.inter));
  L.y = take(4 * p * static_cast<size_t>(ew.hidden));
  L.col_done = take(4 * static_cast<size_t>(CeilDiv(ew.hidden, 16)));
  L.total = off;
  return L;
}

// ---- routing kernel ------------------------------------------------------------------------------

struct RouteParams {
  const float* logits;  // [n, E]
  const float* bias;    // [E] or null
  int32_t* idx;         // [n, K]
  float* w;             // [n, K]
  int64_t n;
  int num_experts, top_k, n_group, topk_group;
  bool norm_topk_prob;
  float scale;
};

// Shared floats per warp: s [E], choice [E], group score [G], keep [G], selection [K].
int RouteWarpFloats(const RouteDims& d) {
  return static_cast<int>(2 * d.num_experts + 2 * d.n_group + d.top_k);
}

// One warp per token, computing exactly ops::Route: every float operation of the CPU op in the
// same order (sigmoid, the top-2 sum per group, the renormalising sum in rank order), and the same
// order of selection: larger choice first, equal choices → lower index.
__global__ void MoeRouteKernel(const __grid_constant__ RouteParams p) {
  extern __shared__ float route_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, E = p.num_experts, G = p.n_group, K = p.top_k;
  const int64_t t = int64_t(blockIdx.x) * (blockDim.x >> 5) + warp;
  if (t >= p.n) return;  // whole warp
  float* s = route_smem + int64_t(warp) * (2 * E + 2 * G + K);
  float* choice = s + E;
  float* gscore = choice + E;
  int* keep = reinterpret_cast<int*>(gscore + G);
  int* sel = keep + G;
  const float* lg = p.logits + t * E;
  for (int e = lane; e < E; e += 32) {
    const float sv = 1.0f / (1.0f + expf(-lg[e]));
    s[e] = sv;
    choice[e] = sv + (p.bias ? p.bias[e] : 0.0f);
  }
  __syncwarp();
  if (G > 1) {
    const int per = E / G;
    for (int g = lane; g < G; g += 32) {
      float a = -INFINITY, b = -INFINITY;
      for (int e = g * per; e < (g + 1) * per; ++e) {
        const float v = choice[e];
        if (v > a) {
          b = a;
          a = v;
        } else if (v > b) {
          b = v;
        }
      }
      gscore[g] = a + b;
    }
    __syncwarp();
    for (int g = lane; g < G; g += 32) {  // stable descending rank of group g
      int rank = 0;
      for (int h = 0; h < G; ++h) rank += gscore[h] > gscore[g] || (gscore[h] == gscore[g] && h < g);
      keep[g] = rank < p.topk_group;
    }
    __syncwarp();
    for (int e = lane; e < E; e += 32)
      if (!keep[e / per]) choice[e] = -INFINITY;
    __syncwarp();
  }
  // K rounds of a warp arg-max over (choice desc, index asc); a taken entry becomes NaN, which no
  // comparison selects.
  for (int r = 0; r < K; ++r) {
    float bv = -INFINITY;
    int be = INT_MAX;
    for (int e = lane; e < E; e += 32) {
      const float v = choice[e];
      if (v > bv || (v == bv && e < be)) {
        bv = v;
        be = e;
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int oe = __shfl_xor_sync(0xffffffffu, be, off);
      if (ov > bv || (ov == bv && oe < be)) {
        bv = ov;
        be = oe;
      }
    }
    if (be >= E) be = 0;  // only with NaN logits
    // Every lane has read choice[] for this round before lane 0 marks the winner: the shuffles
    // converge the warp but order no shared-memory accesses (racecheck's WAR hazard).
    __syncwarp();
    if (lane == 0) {
      sel[r] = be;
      choice[be] = NAN;
    }
    __syncwarp();
  }
  if (lane == 0) {
    float sum = 0.f;
    for (int r = 0; r < K; ++r) sum += s[sel[r]];
    for (int r = 0; r < K; ++r) {
      float v = s[sel[r]];
      if (p.norm_topk_prob) v /= (sum + 1e-20f);
      p.idx[t * K + r] = sel[r];
      p.w[t * K + r] = v * p.scale;
    }
  }
}

// ---- sort kernels --------------------------------------------------------------------------------
// A stable counting sort of the P = n·top_k pairs by expert (then by pair id = token·top_k + slot),
// in chunks of kMoeSortChunk pairs: count per chunk → one block scans (expert offsets, per-chunk
// bases, m-tile table) → each chunk scatters its pairs in order. Entries outside [0, E) are
// skipped. Deterministic: no global atomics; the per-chunk counts are exact integers.

constexpr int kChunk = internal::kMoeSortChunk;

__global__ void __launch_bounds__(kChunk) MoeCountKernel(const int32_t* idx, int64_t pairs, int E, int32_t* counts) {
  extern __shared__ int32_t hist[];
  for (int e = threadIdx.x; e < E; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const int64_t p = int64_t(blockIdx.x) * kChunk + threadIdx.x;
  if (p < pairs) {
    const int e = idx[p];
    if (e >= 0 && e < E) atomicAdd(&hist[e], 1);  // shared-memory integer count: exact
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) counts[int64_t(blockIdx.x) * E + e] = hist[e];
}

// One block. counts[c, e] becomes the number of expert-e pairs in chunks before c; offsets[e] the
// first sorted row of expert e (offsets[E] = valid pairs), offsets[E + 1] the number of m-tiles of
// block_m rows; tiles[] lists them in expert order.
__global__ void __launch_bounds__(1024) MoeScanKernel(int32_t* counts, int64_t num_chunks, int E, int block_m,
                                                      int32_t* offsets, int4* tiles) {
  extern __shared__ int32_t scan_smem[];
  int32_t* total = scan_smem;
  int32_t* first_row = scan_smem + E;
  int32_t* first_tile = scan_smem + 2 * E;
  constexpr int kBatch = 16;  // loads issued before the dependent prefix stores
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t run = 0;
    for (int64_t c0 = 0; c0 < num_chunks; c0 += kBatch) {
      int32_t v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) v[u] = c0 + u < num_chunks ? counts[(c0 + u) * E + e] : 0;
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (c0 + u < num_chunks) counts[(c0 + u) * E + e] = run;
        run += v[u];
      }
    }
    total[e] = run;
  }
  __syncthreads();
  if (threadIdx.x < 32) {  // exclusive scans over experts: lane owns a contiguous run of experts
    const int lane = threadIdx.x, per = (E + 31) / 32, e0 = min(E, lane * per), e1 = min(E, e0 + per);
    int32_t rows = 0, ntiles = 0;
    for (int e = e0; e < e1; ++e) {
      rows += total[e];
      ntiles += (total[e] + block_m - 1) / block_m;
    }
    int32_t rows_incl = rows, tiles_incl = ntiles;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int32_t r = __shfl_up_sync(0xffffffffu, rows_incl, off), t = __shfl_up_sync(0xffffffffu, tiles_incl, off);
      if (lane >= off) {
        rows_incl += r;
        tiles_incl += t;
      }
    }
    int32_t row = rows_incl - rows, tile = tiles_incl - ntiles;
    for (int e = e0; e < e1; ++e) {
      first_row[e] = row;
      first_tile[e] = tile;
      row += total[e];
      tile += (total[e] + block_m - 1) / block_m;
    }
    if (lane == 31) {
      offsets[E] = rows_incl;
      offsets[E + 1] = tiles_incl;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    offsets[e] = first_row[e];
    const int32_t n = total[e];
    for (int32_t i = 0, r = 0; r < n; ++i, r += block_m)
      tiles[first_tile[e] + i] = make_int4(e, first_row[e] + r, min(block_m, n - r), 0);
  }
}

// One warp per chunk, 32 pairs per round in pair order: a pair's row is its expert's running base
// plus the number of lower lanes with the same expert.
__global__ void __launch_bounds__(32) MoeScatterKernel(const int32_t* idx, int64_t pairs, int E, const int32_t* counts,
                                                       const int32_t* offsets, int32_t* row_pair) {
  extern __shared__ int32_t base[];
  const int lane = threadIdx.x;
  const int64_t chunk = blockIdx.x;
  for (int e = lane; e < E; e += 32) base[e] = offsets[e] + counts[chunk * E + e];
  __syncwarp();
  for (int r = 0; r < kChunk / 32; ++r) {
    const int64_t p = chunk * kChunk + r * 32 + lane;
    int e = p < pairs ? idx[p] : -1;
    if (e >= E) e = -1;
    if (e < 0) e = -1;
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    if (e >= 0) row_pair[base[e] + rank] = static_cast<int32_t>(p);
    __syncwarp();
    if (e >= 0 && rank == 0) base[e] += __popc(peers);
    __syncwarp();
  }
}

// One kernel for P <= kMoeSmallPairs pairs (decode): block 0 sorts, the other blocks cast x to bf16.
// The sort ranks pair p by the unique key (expert, p) — the same order as the chunked sort — with
// one thread per pair comparing against all keys in shared memory, then lists the m-tiles from the
// sorted experts (a row starts a tile at its expert's first row and every block_m rows after).
// Writes row_pair, tiles, offsets[E] (valid pairs) and offsets[E + 1] (tiles), and zeroes the fused
// combine counters (and `out` when no pair is valid: no tile will write it); offsets[0, E) are not
// written (no kernel reads them on this path).
struct SmallSortParams {
  const int32_t* idx;  // [P]
  int pairs, num_experts, block_m;
  int32_t* row_pair;
  int4* tiles;
  int32_t* offsets;
  int32_t* col_done;  // [num_cols], or null
  int num_cols;
  float* out;  // [out_count]: zeroed if no pair is valid (fused combine), or null
  int64_t out_count;
  const float* x;  // cast: x [count] → xb (null: no cast)
  int64_t count;
  __nv_bfloat16* xb;
};

constexpr int kSmall = internal::kMoeSmallPairs;

__global__ void __launch_bounds__(kSmall) MoeSmallSortKernel(const __grid_constant__ SmallSortParams p) {
  // The GEMM after this grid waits for all of it (griddepcontrol.wait); let it launch now.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int tid = threadIdx.x;
  if (blockIdx.x > 0) {
    const int64_t stride = int64_t(gridDim.x - 1) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x - 1) * blockDim.x + tid; i < p.count; i += stride)
      p.xb[i] = __float2bfloat16_rn(p.x[i]);
    return;
  }
  __shared__ int key[kSmall], sorted_expert[kSmall], warp_tiles[kSmall / 32];
  const int P = p.pairs, E = p.num_experts;
  for (int i = tid; i < p.num_cols; i += kSmall) p.col_done[i] = 0;
  const int e = tid < P ? p.idx[tid] : -1;
  const bool valid = e >= 0 && e < E;
  key[tid] = valid ? e * P + tid : INT_MAX;  // e·P + p < 4096 · 256: no overflow
  __syncthreads();
  if (valid) {
    int rank = 0;
    for (int q = 0; q < P; ++q) rank += key[q] < key[tid];
    p.row_pair[rank] = tid;
    sorted_expert[rank] = e;
  }
  const int num_valid = __syncthreads_count(valid);
  // Row r = tid of the sorted order: does it start an m-tile, and of how many rows?
  int tile_rows = 0, er = -1;
  if (tid < num_valid) {
    er = sorted_expert[tid];
    int first = tid;
    while (first > 0 && sorted_expert[first - 1] == er) --first;
    if ((tid - first) % p.block_m == 0) {
      int end = tid + 1;  // one past the tile's last row
      while (end < num_valid && end - tid < p.block_m && sorted_expert[end] == er) ++end;
      tile_rows = end - tid;
    }
  }
  // Tile index = exclusive prefix count of tile starts over rows.
  const int lane = tid & 31, warp = tid >> 5;
  const unsigned starts = __ballot_sync(0xffffffffu, tile_rows > 0);
  if (lane == 0) warp_tiles[warp] = __popc(starts);
  __syncthreads();
  int before = __popc(starts & ((1u << lane) - 1u)), num_tiles = 0;
  for (int w = 0; w < kSmall / 32; ++w) {
    if (w < warp) before += warp_tiles[w];
    num_tiles += warp_tiles[w];
  }
  if (tile_rows > 0) p.tiles[before] = make_int4(er, tid, tile_rows, 0);
  if (tid == 0) {
    p.offsets[E] = num_valid;
    p.offsets[E + 1] = num_tiles;
  }
  if (num_valid == 0 && p.out)
    for (int64_t i = tid; i < p.out_count; i += kSmall) p.out[i] = 0.f;
}

// ---- cast and combine kernels --------------------------------------------------------------------

__global__ void MoeCastKernel(const float* x, int64_t count, __nv_bfloat16* y) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

// out[t, :] = Σ_j w[t, j] · y[t·K + j, :] in slot order (entries with idx outside [0, E) skipped).
// One block per token; float4 columns when kVec.
template <bool kVec>
__global__ void __launch_bounds__(256) MoeCombineKernel(const float* y, const int32_t* idx, const float* w, int K,
                                                        int E, int64_t D, float* out) {
  const int64_t t = blockIdx.x;
  const int32_t* ti = idx + t * K;
  const float* tw = w + t * K;
  const float* yt = y + t * K * D;
  if constexpr (kVec) {
    for (int64_t d = int64_t(threadIdx.x) * 4; d < D; d += int64_t(blockDim.x) * 4) {
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int j = 0; j < K; ++j) {
        const int e = ti[j];
        if (e < 0 || e >= E) continue;
        const float wj = tw[j];
        const float4 v = *reinterpret_cast<const float4*>(yt + j * D + d);
        acc.x += wj * v.x;
        acc.y += wj * v.y;
        acc.z += wj * v.z;
        acc.w += wj * v.w;
      }
      *reinterpret_cast<float4*>(out + t * D + d) = acc;
    }
  } else {
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      float acc = 0.f;
      for (int j = 0; j < K; ++j) {
        const int e = ti[j];
        if (e >= 0 && e < E) acc += tw[j] * yt[j * D + d];
      }
      out[t * D + d] = acc;
    }
  }
}

// ---- checks --------------------------------------------------------------------------------------

constexpr int64_t kMaxExperts = 4096;  // shared-memory bound of the sort kernels

Status CheckRouteDims(const RouteDims& d, int64_t n) {
  if (n < 0) return Status::InvalidArgument("moe.route: negative token count");
  if (d.num_experts < 1 || d.num_experts > kMaxExperts)
    return Status::InvalidArgument("moe.route: num_experts " + std::to_string(d.num_experts) + " out of [1, 4096]");
  if (d.top_k < 1 || d.top_k > d.num_experts)
    return Status::InvalidArgument("moe.route: top_k " + std::to_string(d.top_k) + " out of [1, num_experts]");
  if (d.n_group < 1 || d.num_experts % d.n_group != 0)
    return Status::InvalidArgument("moe.route: n_group must divide num_experts");
  if (d.topk_group < 1 || d.topk_group > d.n_group)
    return Status::InvalidArgument("moe.route: topk_group out of [1, n_group]");
  return Status::Ok();
}

}  // namespace

// ---- launchers -----------------------------------------------------------------------------------

Status MoeRoute(const float* logits, int64_t n, const float* bias, const RouteDims& d, int32_t* idx, float* w,
                cudaStream_t stream) {
  GYRE_RETURN_IF_ERROR(CheckRouteDims(d, n));
  if (n == 0) return Status::Ok();
  if (!logits || !idx || !w) return Status::InvalidArgument("moe.route: null pointer");
  const size_t warp_bytes = 4 * static_cast<size_t>(RouteWarpFloats(d));
  int warps = 4;
  while (warps > 1 && warps * warp_bytes > (48u << 10)) warps /= 2;
  if (warps * warp_bytes > (48u << 10)) return Status::InvalidArgument("moe.route: too many experts for one warp");
  RouteParams p{logits, bias, idx, w, n, static_cast<int>(d.num_experts), static_cast<int>(d.top_k),
                static_cast<int>(d.n_group), static_cast<int>(d.topk_group), d.norm_topk_prob, d.routed_scaling_factor};
  const int64_t blocks = CeilDiv(n, warps);
  if (blocks > INT_MAX) return Status::InvalidArgument("moe.route: too many tokens");
  MoeRouteKernel<<<static_cast<unsigned>(blocks), 32 * warps, warps * warp_bytes, stream>>>(p);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

size_t MoeExpertsWorkspaceBytes(const MoeExpertWeights& w, int64_t max_tokens, int64_t top_k) {
  if (max_tokens < 0 || top_k < 1 || w.num_experts < 1 || w.hidden < 1 || w.inter < 1) return 0;
  return MakeLayout(w, max_tokens, top_k).total;
}

Status MoeExperts(const float* x, int64_t n, const int32_t* idx, const float* w, int64_t top_k,
                  const MoeExpertWeights& ew, float swiglu_limit, float* out, void* workspace, size_t workspace_bytes,
                  cudaStream_t stream) {
  internal::MoeExpertsCall c{x, n, idx, w, top_k, ew, swiglu_limit, out, workspace, workspace_bytes};
  return internal::MoeExpertsWith(c, MoeGemmKind::kAuto, nullptr, stream);
}

namespace internal {

// Heuristic by the mean rows per expert (n·k/E, known on the host), from gpu_moe_opt_2026-12-02.json:
// 16-row HMMA tiles while the GEMMs stream weights (decode); wgmma 64 × 256 from 24 rows; from 96
// rows the warp-specialized 128 × 256 kernel (its TMA ring streams the weights better: 4.54 vs
// 4.71 ms at 114 rows) until the tiles are compute-bound, where the plain wgmma kernel issues
// faster (15.7 vs 17.0 ms at 455 rows). NOTE: the 160-row crossover is not measured (only 114 and
// 455 were); the warp-specialized 64-row kernel is never picked (slower than the plain one at 114
// rows, within 1% of the HMMA kernel where weights dominate).
MoeGemmKind PickMoeGemm(const MoeExpertWeights& ew, int64_t n, int64_t top_k) {
  if (!ew.bf16 || !Aligned16(ew.gate_up) || !Aligned16(ew.down)) return MoeGemmKind::kSimt;
  const double rows_per_expert = static_cast<double>(n) * top_k / ew.num_experts;
  const bool tma_ok = 2 * ew.inter * ew.num_experts <= int64_t(INT32_MAX) &&
                      ew.hidden * ew.num_experts <= int64_t(INT32_MAX);
  MoeGemmKind want = MoeGemmKind::kMma16x128;
  if (rows_per_expert >= 96) {
    want = tma_ok && rows_per_expert < 160 ? MoeGemmKind::kWgmmaWs128x256 : MoeGemmKind::kWgmma128x256;
  } else if (rows_per_expert >= 24) {
    want = MoeGemmKind::kWgmma64x256;
  }
  for (MoeGemmKind k : {want, MoeGemmKind::kMma16x128})
    if (MoeGemmFits(k, true, ew.hidden, ew.inter)) return k;
  return MoeGemmKind::kSimt;
}

Status MoeExpertsWith(const MoeExpertsCall& c, MoeGemmKind kind, const cudaEvent_t* phase_events,
                      cudaStream_t stream, const MoeExpertsOptions& options) {
  const MoeExpertWeights& ew = c.weights;
  const int64_t n = c.n, K = c.top_k, E = ew.num_experts, D = ew.hidden, I = ew.inter;
  // ---- validate ----
  if (n < 0) return Status::InvalidArgument("moe.experts: negative token count");
  if (K < 1) return Status::InvalidArgument("moe.experts: top_k must be >= 1");
  if (E < 1 || E > kMaxExperts) return Status::InvalidArgument("moe.experts: num_experts out of [1, 4096]");
  if (D < 1 || I < 1) return Status::InvalidArgument("moe.experts: hidden and inter must be >= 1");
  if (n * K > (int64_t(1) << 30)) return Status::InvalidArgument("moe.experts: n * top_k exceeds 2^30 pairs");
  if (n == 0) return Status::Ok();
  if (!c.x || !c.idx || !c.w || !c.out || !ew.gate_up || !ew.down)
    return Status::InvalidArgument("moe.experts: null pointer");
  const Layout L = MakeLayout(ew, n, K);
  if (!c.workspace || c.workspace_bytes < L.total)
    return Status::InvalidArgument("moe.experts: workspace of " + std::to_string(c.workspace_bytes) + " bytes, need " +
                                   std::to_string(L.total) + " (MoeExpertsWorkspaceBytes)");
  if (!Aligned16(c.workspace)) return Status::InvalidArgument("moe.experts: workspace must be 16-byte aligned");
  if (kind == MoeGemmKind::kAuto) kind = PickMoeGemm(ew, n, K);
  if (internal::MoeGemmIsWs(kind) && (2 * I * E > int64_t(INT32_MAX) || D * E > int64_t(INT32_MAX)))
    return Status::InvalidArgument("moe.experts: the warp-specialized kernels address at most 2^31 weight rows");
  if (!MoeGemmFits(kind, ew.bf16, D, I))
    return Status::InvalidArgument(std::string("moe.experts: kernel ") + MoeGemmKindName(kind) +
                                   " does not run these sizes / this weight dtype");
  if (kind != MoeGemmKind::kSimt && (!Aligned16(ew.gate_up) || !Aligned16(ew.down)))
    return Status::InvalidArgument("moe.experts: tensor-core kernels need 16-byte aligned weights");

  char* ws = static_cast<char*>(c.workspace);
  int32_t* counts = reinterpret_cast<int32_t*>(ws + L.counts);
  int32_t* offsets = reinterpret_cast<int32_t*>(ws + L.offsets);
  int4* tiles = reinterpret_cast<int4*>(ws + L.tiles);
  int32_t* row_pair = reinterpret_cast<int32_t*>(ws + L.row_pair);
  __nv_bfloat16* xb = reinterpret_cast<__nv_bfloat16*>(ws + L.xb);
  void* act = ws + L.act;
  float* y = reinterpret_cast<float*>(ws + L.y);
  int32_t* col_done = reinterpret_cast<int32_t*>(ws + L.col_done);
  const int block_m = MoeGemmBlockM(kind);
  const size_t e_bytes = 4 * static_cast<size_t>(E);
  // Small batches: one sort+cast kernel; with the HMMA kernel also the fused combine and PDL.
  const bool small = options.small_path && L.pairs <= internal::kMoeSmallPairs;
  const bool fuse_combine = small && internal::MoeGemmIsMma(kind) && D % MoeGemmBlockN(kind) == 0;
  const bool pdl = small && internal::MoeGemmIsMma(kind) && !phase_events;

  // ---- sort (and the x operand cast) ----
  if (small) {
    SmallSortParams sp{c.idx, static_cast<int>(L.pairs), static_cast<int>(E), block_m, row_pair, tiles, offsets,
                       fuse_combine ? col_done : nullptr, fuse_combine ? static_cast<int>(D / MoeGemmBlockN(kind)) : 0,
                       fuse_combine ? c.out : nullptr, n * D, ew.bf16 ? c.x : nullptr, ew.bf16 ? n * D : 0, xb};
    // Cast blocks: at most one per SM, so all of them are resident before a PDL GEMM takes slots.
    const int64_t cast_blocks = ew.bf16 ? std::min<int64_t>(CeilDiv(n * D, 4 * kSmall), MoeNumSms()) : 0;
    MoeSmallSortKernel<<<static_cast<unsigned>(1 + cast_blocks), kSmall, 0, stream>>>(sp);
    GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  } else {
    MoeCountKernel<<<static_cast<unsigned>(L.num_chunks), kChunk, e_bytes, stream>>>(c.idx, L.pairs, E, counts);
    GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    MoeScanKernel<<<1, 1024, 3 * e_bytes, stream>>>(counts, L.num_chunks, E, block_m, offsets, tiles);
    GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    MoeScatterKernel<<<static_cast<unsigned>(L.num_chunks), 32, e_bytes, stream>>>(c.idx, L.pairs, E, counts,
                                                                                   offsets, row_pair);
    GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    if (ew.bf16) {
      const int64_t count = n * D;
      const int64_t blocks = std::min<int64_t>(CeilDiv(count, 256), int64_t(MoeNumSms()) * 16);
      MoeCastKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(c.x, count, xb);
      GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    }
  }
  if (phase_events) GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(phase_events[0], stream));

  // ---- gate_up (fused SwiGLU) and down ----
  MoeGemmParams gp;
  gp.a = ew.bf16 ? static_cast<const void*>(xb) : static_cast<const void*>(c.x);
  gp.lda = D;
  gp.w = ew.gate_up;
  gp.k = D;
  gp.inter = I;
  gp.n_out = I;
  gp.tiles = tiles;
  gp.num_tiles = offsets + E + 1;
  gp.max_tiles = CeilDiv(L.pairs, block_m) + E;
  gp.row_pair = row_pair;
  gp.top_k = static_cast<int32_t>(K);
  gp.swiglu_limit = c.swiglu_limit;
  gp.act = act;
  gp.y = y;
  gp.num_experts = E;
  gp.pdl = pdl;
  GYRE_CUDA_RETURN_IF_ERROR(LaunchMoeGemm(kind, /*gate_up=*/true, ew.bf16, gp, stream));
  if (phase_events) GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(phase_events[1], stream));
  gp.a = act;
  gp.lda = I;
  gp.w = ew.down;
  gp.k = I;
  gp.n_out = D;
  if (fuse_combine) {
    gp.col_done = col_done;
    gp.idx = c.idx;
    gp.wts = c.w;
    gp.out = c.out;
    gp.n_tokens = n;
  }
  GYRE_CUDA_RETURN_IF_ERROR(LaunchMoeGemm(kind, /*gate_up=*/false, ew.bf16, gp, stream));
  if (phase_events) GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(phase_events[2], stream));

  // ---- combine ----
  if (fuse_combine) return Status::Ok();
  if (D % 4 == 0 && Aligned16(c.out)) {
    MoeCombineKernel<true><<<static_cast<unsigned>(n), 256, 0, stream>>>(y, c.idx, c.w, static_cast<int>(K),
                                                                         static_cast<int>(E), D, c.out);
  } else {
    MoeCombineKernel<false><<<static_cast<unsigned>(n), 256, 0, stream>>>(y, c.idx, c.w, static_cast<int>(K),
                                                                          static_cast<int>(E), D, c.out);
  }
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

}  // namespace internal
}  // namespace gyre::cuda
