// KDA recurrent form (decode) on sm90: one block per (V tile, sequence, head).
//
// Bandwidth plan: each state element is read once and written once per launch; everything else
// (q, k, v, g, β, o: a few hundred bytes per head) is noise next to the 64 KiB read + 64 KiB
// written per (sequence, head) at K = V = 128. A block owns the K × kBlockV slice of one state;
// each thread holds kRowsPerThread rows × 4 columns in registers (16-byte loads, a warp covers
// whole 128-byte row segments), and issues all its state loads before the first use.
//
// Per token (docs/model-kda-kimi-linear.md §1.4), with S the decayed state:
//   u = Sᵀk̂ and w = Sᵀq̃ in ONE pass over S (both reductions over K share one shuffle + smem step),
//   δ = β (v − u),   o = (S + k̂δᵀ)ᵀ q̃ = w + δ (k̂·q̃),   S ← S + k̂ δᵀ.
// NOTE: o from w + δ(k̂·q̃) saves a second reduction over K; it is the same function as reading o
// after the update (fp32 reassociation only).
#include <cuda_runtime.h>

#include "ops/cuda/kda_kernels.h"

namespace gyre::cuda::internal {
namespace {

template <int kK, int kBlockV, int kNumThreads>
struct RecurrentTile {
  static constexpr int kColLanes = kBlockV / 4;  // threads across one tile row (a float4 each)
  static constexpr int kRowGroups = kNumThreads / kColLanes;
  static constexpr int kRowsPerThread = kK / kRowGroups;
  static constexpr int kNumWarps = kNumThreads / 32;
  static_assert(kBlockV % 4 == 0 && 32 % kColLanes == 0, "a warp covers whole tile rows");
  static_assert(kNumThreads % 32 == 0, "whole warps");
  static_assert(kK % kRowGroups == 0 && kRowsPerThread >= 1, "rows split evenly over row groups");
};

__device__ __forceinline__ float4 operator*(float4 a, float s) { return {a.x * s, a.y * s, a.z * s, a.w * s}; }
__device__ __forceinline__ void Fma(float4& acc, const float4& a, float s) {
  acc.x = fmaf(a.x, s, acc.x);
  acc.y = fmaf(a.y, s, acc.y);
  acc.z = fmaf(a.z, s, acc.z);
  acc.w = fmaf(a.w, s, acc.w);
}
__device__ __forceinline__ void Add(float4& acc, const float4& a) {
  acc.x += a.x;
  acc.y += a.y;
  acc.z += a.z;
  acc.w += a.w;
}
__device__ __forceinline__ float4 ShflXor(float4 a, int off) {
  return {__shfl_xor_sync(0xffffffffu, a.x, off), __shfl_xor_sync(0xffffffffu, a.y, off),
          __shfl_xor_sync(0xffffffffu, a.z, off), __shfl_xor_sync(0xffffffffu, a.w, off)};
}
__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

template <int kK, int kBlockV, int kNumThreads>
__global__ void __launch_bounds__(kNumThreads) sm90_kda_recurrent(const __grid_constant__ KdaRecurrentParams p) {
  using Tile = RecurrentTile<kK, kBlockV, kNumThreads>;
  // ---- setup ----
  __shared__ float q_s[kK], k_s[kK], g_s[kK];
  __shared__ float4 red_s[Tile::kNumWarps][2][Tile::kColLanes];

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int h = blockIdx.y, b = blockIdx.z;
  const int K = p.head_dim, V = p.head_dim, H = p.num_heads;
  const int col4 = tid % Tile::kColLanes;  // which float4 of the tile row
  const int row0 = tid / Tile::kColLanes;  // rows row0 + i·kRowGroups
  const int col = blockIdx.x * kBlockV + col4 * 4;
  const bool col_ok = col < V;
  const int slot = p.slots[b];
  const float4 zero = {0.f, 0.f, 0.f, 0.f};
  // Rows of this sequence: [first, first + T) (fixed T per sequence, or ragged by cu_seqlens).
  const int64_t first = p.cu_seqlens ? int64_t(p.cu_seqlens[b]) : int64_t(b) * p.num_tokens;
  const int T = p.cu_seqlens ? p.cu_seqlens[b + 1] - p.cu_seqlens[b] : p.num_tokens;

  if (slot < 0) {  // padding row of a fixed-size (graph-captured) batch: o = 0, no state
    if (row0 == 0 && col_ok && p.o)
      for (int t = 0; t < T; ++t) *reinterpret_cast<float4*>(p.o + ((first + t) * H + h) * V + col) = zero;
    return;
  }
  float* state = p.state + (int64_t(slot) * H + h) * K * V;

  // ---- load the state slice (all loads in flight before the first use) ----
  float4 s[Tile::kRowsPerThread];
#pragma unroll
  for (int i = 0; i < Tile::kRowsPerThread; ++i) {
    const int d = row0 + i * Tile::kRowGroups;
    s[i] = (col_ok && d < K) ? *reinterpret_cast<const float4*>(state + int64_t(d) * V + col) : zero;
  }
  const float scale = 1.0f / sqrtf(static_cast<float>(K));

  for (int t = 0; t < T; ++t) {
    const int64_t tok = (first + t) * H + h;
    // ---- stage q, k, g of this head (zero-padded to kK) ----
    for (int d = tid; d < kK; d += kNumThreads) {
      q_s[d] = d < K ? p.q[tok * K + d] : 0.f;
      k_s[d] = d < K ? p.k[tok * K + d] : 0.f;
      g_s[d] = d < K ? p.g[tok * K + d] : 0.f;
    }
    const float beta = p.beta[tok];
    const float4 vv = col_ok ? *reinterpret_cast<const float4*>(p.v + tok * V + col) : zero;
    __syncthreads();

    // ---- norms: every warp computes them (no extra barrier) ----
    float qq = 0.f, kk = 0.f, qk = 0.f;
#pragma unroll
    for (int d = lane; d < kK; d += 32) {
      const float a = q_s[d], c = k_s[d];
      qq = fmaf(a, a, qq);
      kk = fmaf(c, c, kk);
      qk = fmaf(a, c, qk);
    }
    qq = WarpSum(qq);
    kk = WarpSum(kk);
    qk = WarpSum(qk);
    const float q_scale = scale / sqrtf(qq + 1e-6f);
    const float k_scale = 1.0f / sqrtf(kk + 1e-6f);
    const float qk_n = qk * q_scale * k_scale;  // q̃·k̂

    // ---- decay, then u = Sᵀk̂ and w = Sᵀq̃ in one pass ----
    float4 u = zero, w = zero;
#pragma unroll
    for (int i = 0; i < Tile::kRowsPerThread; ++i) {
      const int d = row0 + i * Tile::kRowGroups;
      s[i] = s[i] * expf(g_s[d]);
      Fma(u, s[i], k_s[d] * k_scale);
      Fma(w, s[i], q_s[d] * q_scale);
    }
    // Reduce over the row groups of this warp, then over warps through shared memory.
#pragma unroll
    for (int off = Tile::kColLanes; off < 32; off *= 2) {
      Add(u, ShflXor(u, off));
      Add(w, ShflXor(w, off));
    }
    if (lane < Tile::kColLanes) {
      red_s[warp][0][col4] = u;
      red_s[warp][1][col4] = w;
    }
    __syncthreads();
    u = zero;
    w = zero;
#pragma unroll
    for (int wi = 0; wi < Tile::kNumWarps; ++wi) {
      Add(u, red_s[wi][0][col4]);
      Add(w, red_s[wi][1][col4]);
    }

    // ---- δ, output, rank-1 update ----
    const float4 delta = {beta * (vv.x - u.x), beta * (vv.y - u.y), beta * (vv.z - u.z), beta * (vv.w - u.w)};
    if (row0 == 0 && col_ok && p.o) {
      float4 o = w;
      Fma(o, delta, qk_n);
      *reinterpret_cast<float4*>(p.o + tok * V + col) = o;
    }
#pragma unroll
    for (int i = 0; i < Tile::kRowsPerThread; ++i) {
      const int d = row0 + i * Tile::kRowGroups;
      const float kd = k_s[d] * k_scale;
      Fma(s[i], delta, kd);
    }
    if (t + 1 < T) __syncthreads();  // q_s, k_s, g_s, red_s are rewritten next token
  }

  // ---- epilogue: write the state back in place (not for a kept, speculative sequence) ----
  if (p.keep && p.keep[b]) return;
#pragma unroll
  for (int i = 0; i < Tile::kRowsPerThread; ++i) {
    const int d = row0 + i * Tile::kRowGroups;
    if (col_ok && d < K) *reinterpret_cast<float4*>(state + int64_t(d) * V + col) = s[i];
  }
}

template <int kK, int kBlockV, int kNumThreads>
cudaError_t Launch(const KdaRecurrentParams& p, cudaStream_t stream) {
  const dim3 grid((p.head_dim + kBlockV - 1) / kBlockV, p.num_heads, p.num_seqs);
  sm90_kda_recurrent<kK, kBlockV, kNumThreads><<<grid, kNumThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchKdaRecurrent(const KdaRecurrentParams& p, int k_pad, int block_v, int num_threads,
                               cudaStream_t stream) {
  if (k_pad == 128) {
    if (block_v == 16 && num_threads == 64) return Launch<128, 16, 64>(p, stream);
    if (block_v == 16 && num_threads == 128) return Launch<128, 16, 128>(p, stream);
    if (block_v == 32 && num_threads == 128) return Launch<128, 32, 128>(p, stream);
    if (block_v == 32 && num_threads == 256) return Launch<128, 32, 256>(p, stream);
    if (block_v == 64 && num_threads == 128) return Launch<128, 64, 128>(p, stream);
    if (block_v == 64 && num_threads == 256) return Launch<128, 64, 256>(p, stream);
    if (block_v == 128 && num_threads == 256) return Launch<128, 128, 256>(p, stream);
    if (block_v == 128 && num_threads == 512) return Launch<128, 128, 512>(p, stream);
  } else if (k_pad == 64 && block_v == 32 && num_threads == 128) {
    return Launch<64, 32, 128>(p, stream);
  } else if (k_pad == 32 && block_v == 32 && num_threads == 128) {
    return Launch<32, 32, 128>(p, stream);
  }
  return cudaErrorInvalidConfiguration;
}

}  // namespace gyre::cuda::internal
