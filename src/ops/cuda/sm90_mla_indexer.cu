// Device code of the paged cache write and the DSA indexer (docs/model-glm5-next.md §5.3):
// pooled keys, pool scores, and the exact top-(K/m) pool selection with its tie rule.
//
// Sections: cache write; pooled keys; scores; select building blocks (radix threshold, ordered
// compaction); select, first version (one block per token); sliced select; launchers. The first
// versions of the pooled-key, score and select kernels stay for the bench's before/after and the
// verify path's cross-checks (mla_kernels.h "variants").
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/mla_kernels.h"
#include "ops/cuda/quant_codes.cuh"

namespace gyre::cuda::internal {
namespace {

constexpr unsigned kFull = 0xffffffffu;

// ---- cache write -------------------------------------------------------------------------------

// One block per token: copies its `width` floats to the token's cache row.
__global__ void __launch_bounds__(128) cache_write_kernel(const __grid_constant__ CacheWriteArgs a) {
  const int64_t i = blockIdx.x;
  const int seq = a.rows.tok_seq[i];
  if (seq < 0) return;
  const int64_t row = a.rows.Row(seq, a.rows.tok_pos[i]);
  const float* src = a.src + i * a.ld_src;
  float* dst = a.cache + row * a.width;
  for (int64_t c = threadIdx.x; c < a.width; c += blockDim.x) dst[c] = src[c];
}

// One block per token (128 threads): encodes its `width` floats into the token's cache row as
// quant/kv_cache.h KvEncodeRow does (bf16 RNE; fp8 / int8 with the row's amax scale, quotients
// __fdiv_rn as the CPU's fp32 division), padding bytes zeroed.
__global__ void __launch_bounds__(128) cache_write_kv_kernel(const __grid_constant__ CacheWriteKvArgs a) {
  const int64_t i = blockIdx.x;
  const int seq = a.rows.tok_seq[i];
  if (seq < 0) return;
  const int64_t row = a.rows.Row(seq, a.rows.tok_pos[i]);
  const float* src = a.src + i * a.ld_src;
  uint8_t* dst = a.cache + row * a.row_bytes;
  if (a.kv_dtype == static_cast<int>(KvDtype::kBf16)) {
    auto* d16 = reinterpret_cast<uint16_t*>(dst);
    for (int64_t c = threadIdx.x; c < a.row_bytes / 2; c += blockDim.x)
      d16[c] = c < a.width ? __bfloat16_as_ushort(__float2bfloat16_rn(src[c])) : 0;
    return;
  }
  __shared__ float warp_max[4];
  float amax = 0.0f;
  for (int64_t c = threadIdx.x; c < a.width; c += blockDim.x) amax = fmaxf(amax, fabsf(src[c]));
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFull, amax, o));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = amax;
  __syncthreads();
  amax = fmaxf(fmaxf(warp_max[0], warp_max[1]), fmaxf(warp_max[2], warp_max[3]));
  const bool fp8 = a.kv_dtype == static_cast<int>(KvDtype::kFp8);
  const float s = fp8 ? __fdiv_rn(fmaxf(amax, 1e-4f), 448.0f) : __fdiv_rn(fmaxf(amax, 1e-8f), 127.0f);
  for (int64_t c = threadIdx.x; c < a.row_bytes; c += blockDim.x) {
    uint8_t v = 0;
    if (c < a.width) {
      const float q = __fdiv_rn(src[c], s);
      v = fp8 ? EncodeE4M3(q) : static_cast<uint8_t>(EncodeInt8(q));
    }
    if (c < a.scale_off || c >= a.scale_off + 4) dst[c] = v;
  }
  if (threadIdx.x == 0) *reinterpret_cast<float*>(dst + a.scale_off) = s;
}

// One block per token: copies the token's row of each item (up to kMaxCacheWriteItems).
__global__ void __launch_bounds__(128) cache_write_multi_kernel(const __grid_constant__ CacheWriteMultiArgs a) {
  const int64_t i = blockIdx.x;
  const int seq = a.rows.tok_seq[i];
  if (seq < 0) return;
  const int64_t row = a.rows.Row(seq, a.rows.tok_pos[i]);
  for (int k = 0; k < a.num_items; ++k) {
    const CacheWriteItem& it = a.items[k];
    const float* src = it.src + i * it.ld_src;
    float* dst = it.cache + row * it.width;
    for (int64_t c = threadIdx.x; c < it.width; c += blockDim.x) dst[c] = src[c];
  }
}

// ---- pooled keys -------------------------------------------------------------------------------

// One block per token; only tokens that complete a pool ((pos + 1) % m == 0) work. Per channel c:
//   α_r = softmax_r(γ_r[c] + ape[r, c]);  K̄[c] = Σ_r α_r · k_r[c]
// with the rounding points of ops::PoolKey (products and quotients rounded, not fused).
__global__ void __launch_bounds__(128) pool_key_kernel(const __grid_constant__ PoolKeyArgs a) {
  __shared__ int64_t rows[64];
  const int64_t i = blockIdx.x;
  const int seq = a.rows.tok_seq[i];
  if (seq < 0) return;
  const int64_t pos = a.rows.tok_pos[i];
  if ((pos + 1) % a.m != 0) return;
  const int64_t first = pos + 1 - a.m;
  for (int r = threadIdx.x; r < a.m; r += blockDim.x) rows[r] = a.rows.Row(seq, first + r);
  __syncthreads();
  for (int c = threadIdx.x; c < a.di; c += blockDim.x) {
    float mx = -INFINITY;
    for (int r = 0; r < a.m; ++r) mx = fmaxf(mx, a.gamma[rows[r] * a.di + c] + a.ape[r * a.di + c]);
    float den = 0.0f;
    for (int r = 0; r < a.m; ++r) den += expf(a.gamma[rows[r] * a.di + c] + a.ape[r * a.di + c] - mx);
    float acc = 0.0f;
    for (int r = 0; r < a.m; ++r) {
      const float e = expf(a.gamma[rows[r] * a.di + c] + a.ape[r * a.di + c] - mx);
      acc = __fadd_rn(acc, __fmul_rn(__fdiv_rn(e, den), a.idx_k[rows[r] * a.di + c]));
    }
    a.pool_keys[(rows[a.m - 1] / a.pool_div) * a.di + c] = acc;
  }
}

// Second version: the m rows of k_I and γ + ape are loaded into shared memory at once (one memory
// round trip instead of a dependent chain of row loads per channel), then thread c reduces channel c
// with the same operations in the same order as pool_key_kernel.
__global__ void __launch_bounds__(128) pool_key_smem_kernel(const __grid_constant__ PoolKeyArgs a) {
  extern __shared__ float pk_smem[];
  float* const ks = pk_smem;             // [m][di] k_I
  float* const zs = pk_smem + a.m * a.di;  // [m][di] γ + ape
  __shared__ int64_t rows[64];
  const int64_t i = blockIdx.x;
  const int seq = a.rows.tok_seq[i];
  if (seq < 0) return;
  const int64_t pos = a.rows.tok_pos[i];
  if ((pos + 1) % a.m != 0) return;
  const int64_t first = pos + 1 - a.m;
  for (int r = threadIdx.x; r < a.m; r += blockDim.x) rows[r] = a.rows.Row(seq, first + r);
  __syncthreads();
  for (int e = threadIdx.x; e < a.m * a.di; e += blockDim.x) {
    const int r = e / a.di, c = e - r * a.di;
    ks[e] = a.idx_k[rows[r] * a.di + c];
    zs[e] = a.gamma[rows[r] * a.di + c] + a.ape[e];
  }
  __syncthreads();
  for (int c = threadIdx.x; c < a.di; c += blockDim.x) {
    float mx = -INFINITY;
    for (int r = 0; r < a.m; ++r) mx = fmaxf(mx, zs[r * a.di + c]);
    float den = 0.0f;
    for (int r = 0; r < a.m; ++r) den += expf(zs[r * a.di + c] - mx);
    float acc = 0.0f;
    for (int r = 0; r < a.m; ++r) {
      const float e = expf(zs[r * a.di + c] - mx);
      acc = __fadd_rn(acc, __fmul_rn(__fdiv_rn(e, den), ks[r * a.di + c]));
    }
    a.pool_keys[(rows[a.m - 1] / a.pool_div) * a.di + c] = acc;
  }
}

// ---- scores ------------------------------------------------------------------------------------

// Order-preserving map float -> uint32 (a > b  <=>  key(a) > key(b)); -0 and +0 map to one key so
// that exact zero scores (all heads relu'd away) tie as they do on the CPU.
__device__ __forceinline__ uint32_t OrderedKey(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Grid (pool tiles, tokens); kPP pools per thread, kIdxScoreThreads threads. Each thread keeps the
// kIdxMaxHeads head dot products of its pools in registers; q (zero-padded to kIdxMaxHeads heads,
// zero weights) sits in shared memory and is read as broadcasts:
//   s(p) = Σ_h w_h · relu(q_h · K̄_p · scale)
template <int kPP>
__global__ void __launch_bounds__(kIdxScoreThreads) indexer_score_kernel(const __grid_constant__ IndexerScoreArgs a) {
  extern __shared__ float4 smem4[];
  float* qs = reinterpret_cast<float*>(smem4);  // [kIdxMaxHeads][di]
  __shared__ float ws[kIdxMaxHeads];
  const int64_t i = blockIdx.y;
  if (blockIdx.x == 0 && threadIdx.x == 0 && a.counter) a.counter[i] = 0;
  const int seq = a.rows.tok_seq[i];
  if (seq < 0) return;
  const int64_t ncand = (static_cast<int64_t>(a.rows.tok_pos[i]) + 1) / a.m;
  const int64_t p0 = static_cast<int64_t>(blockIdx.x) * kIdxScoreThreads * kPP;
  if (p0 >= ncand) return;
  const int di = a.di;
  for (int e = threadIdx.x; e < kIdxMaxHeads * di; e += blockDim.x) {
    const int h = e / di;
    qs[e] = h < a.heads ? a.q_idx[(i * a.heads + h) * di + (e - h * di)] : 0.0f;
  }
  if (threadIdx.x < kIdxMaxHeads) ws[threadIdx.x] = threadIdx.x < a.heads ? a.w[i * a.heads + threadIdx.x] : 0.0f;
  __syncthreads();

  const float* kp[kPP];
  bool valid[kPP];
#pragma unroll
  for (int u = 0; u < kPP; ++u) {
    const int64_t p = p0 + u * kIdxScoreThreads + threadIdx.x;
    valid[u] = p < ncand;
    kp[u] = a.pool_keys + (valid[u] ? a.rows.Row(seq, p * a.m + a.m - 1) / a.pool_div : 0) * di;
  }
  float acc[kPP][kIdxMaxHeads];
#pragma unroll
  for (int u = 0; u < kPP; ++u)
#pragma unroll
    for (int h = 0; h < kIdxMaxHeads; ++h) acc[u][h] = 0.0f;

  for (int d = 0; d < di; d += 8) {
    float4 k0[kPP], k1[kPP];
#pragma unroll
    for (int u = 0; u < kPP; ++u) {
      k0[u] = valid[u] ? __ldg(reinterpret_cast<const float4*>(kp[u] + d)) : make_float4(0, 0, 0, 0);
      k1[u] = valid[u] ? __ldg(reinterpret_cast<const float4*>(kp[u] + d + 4)) : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int h = 0; h < kIdxMaxHeads; ++h) {
      const float4 q0 = *reinterpret_cast<const float4*>(qs + h * di + d);
      const float4 q1 = *reinterpret_cast<const float4*>(qs + h * di + d + 4);
#pragma unroll
      for (int u = 0; u < kPP; ++u) {
        float s = acc[u][h];
        s = fmaf(q0.x, k0[u].x, s);
        s = fmaf(q0.y, k0[u].y, s);
        s = fmaf(q0.z, k0[u].z, s);
        s = fmaf(q0.w, k0[u].w, s);
        s = fmaf(q1.x, k1[u].x, s);
        s = fmaf(q1.y, k1[u].y, s);
        s = fmaf(q1.z, k1[u].z, s);
        s = fmaf(q1.w, k1[u].w, s);
        acc[u][h] = s;
      }
    }
  }
#pragma unroll
  for (int u = 0; u < kPP; ++u) {
    if (!valid[u]) continue;
    float score = 0.0f;
#pragma unroll
    for (int h = 0; h < kIdxMaxHeads; ++h) score = fmaf(ws[h], fmaxf(acc[u][h] * a.scale, 0.0f), score);
    a.keys[i * a.key_stride + p0 + u * kIdxScoreThreads + threadIdx.x] = OrderedKey(score);
  }
}

// Second version. Grid (pool tiles, tokens), kIdxScoreThreads threads; a tile is kIdxScorePools
// pools × a.passes. Four threads share a pool: thread q loads the float4 units u ≡ q (mod 4) of the
// pool's row (all of them at once, and the next pass's before this pass computes), keeps the 32
// head partial dots, and the quad adds them by shuffles; thread q = 0 forms the score (heads in
// order). REQUIRES head_dim <= 4·4·kIdxScoreUnits.
__global__ void __launch_bounds__(kIdxScoreThreads) indexer_score4_kernel(const __grid_constant__ IndexerScoreArgs a) {
  extern __shared__ float4 smem4[];
  float* qs = reinterpret_cast<float*>(smem4);  // [kIdxMaxHeads][di]
  __shared__ float ws[kIdxMaxHeads];
  const int64_t i = blockIdx.y;
  if (blockIdx.x == 0 && threadIdx.x == 0 && a.counter) a.counter[i] = 0;
  const int seq = a.rows.tok_seq[i];
  if (seq < 0) return;
  const int64_t ncand = (static_cast<int64_t>(a.rows.tok_pos[i]) + 1) / a.m;
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * kIdxScorePools * a.passes;
  if (tile0 >= ncand) return;
  const int di = a.di, units = di / 4;
  for (int e = threadIdx.x; e < kIdxMaxHeads * di; e += blockDim.x) {
    const int h = e / di;
    qs[e] = h < a.heads ? a.q_idx[(i * a.heads + h) * di + (e - h * di)] : 0.0f;
  }
  if (threadIdx.x < kIdxMaxHeads) ws[threadIdx.x] = threadIdx.x < a.heads ? a.w[i * a.heads + threadIdx.x] : 0.0f;
  __syncthreads();

  const int q4 = threadIdx.x & 3, pl = threadIdx.x >> 2;
  auto load = [&](int64_t p, float4 (&k)[kIdxScoreUnits]) {
    const bool valid = p < ncand;
    const float* kp = a.pool_keys + (valid ? a.rows.Row(seq, p * a.m + a.m - 1) / a.pool_div : 0) * di;
#pragma unroll
    for (int u = 0; u < kIdxScoreUnits; ++u) {
      const int unit = q4 + 4 * u;
      k[u] = valid && unit < units ? __ldg(reinterpret_cast<const float4*>(kp + 4 * unit)) : make_float4(0, 0, 0, 0);
    }
  };
  float4 cur[kIdxScoreUnits], nxt[kIdxScoreUnits];
  load(tile0 + pl, cur);
  for (int pass = 0; pass < a.passes; ++pass) {
    const int64_t p = tile0 + static_cast<int64_t>(pass) * kIdxScorePools + pl;
    if (pass + 1 < a.passes) load(p + kIdxScorePools, nxt);
    float acc[kIdxMaxHeads];
#pragma unroll
    for (int h = 0; h < kIdxMaxHeads; ++h) {
      float s = 0.0f;
#pragma unroll
      for (int u = 0; u < kIdxScoreUnits; ++u) {
        const int unit = q4 + 4 * u;
        if (unit < units) {
          const float4 q = *reinterpret_cast<const float4*>(qs + h * di + 4 * unit);
          s = fmaf(q.x, cur[u].x, s);
          s = fmaf(q.y, cur[u].y, s);
          s = fmaf(q.z, cur[u].z, s);
          s = fmaf(q.w, cur[u].w, s);
        }
      }
      s += __shfl_xor_sync(kFull, s, 1);
      s += __shfl_xor_sync(kFull, s, 2);
      acc[h] = s;
    }
    if (q4 == 0 && p < ncand) {
      float score = 0.0f;
#pragma unroll
      for (int h = 0; h < kIdxMaxHeads; ++h) score = fmaf(ws[h], fmaxf(acc[h] * a.scale, 0.0f), score);
      a.keys[i * a.key_stride + p] = OrderedKey(score);
    }
    if (pass + 1 < a.passes) {
#pragma unroll
      for (int u = 0; u < kIdxScoreUnits; ++u) cur[u] = nxt[u];
    }
  }
}

// ---- select building blocks ----------------------------------------------------------------------

// Block-wide exclusive rank of `flag` in thread order and the block total, from warp ballots.
// REQUIRES: every thread of the block calls it (contains __syncthreads).
__device__ __forceinline__ uint32_t BlockRank(bool flag, uint32_t* warp_counts, uint32_t* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const uint32_t ballot = __ballot_sync(kFull, flag);
  if (lane == 0) warp_counts[warp] = __popc(ballot);
  __syncthreads();
  uint32_t before = 0, all = 0;
  for (int w = 0; w < nwarps; ++w) {
    const uint32_t c = warp_counts[w];
    before += w < warp ? c : 0;
    all += c;
  }
  __syncthreads();  // warp_counts is reused by the next call
  *total = all;
  return before + __popc(ballot & ((1u << lane) - 1u));
}

// Shared state of the block-wide selection helpers.
struct SelectSmem {
  uint32_t hist[256];
  uint32_t warp_counts[32];
  uint32_t digit, krem;
};

// Keys read from shared memory, or from global memory through L2 (ld.cg: the sliced select's last
// block reads candidates other blocks wrote).
struct KeyReader {
  const uint32_t* p;
  bool global;
  __device__ __forceinline__ uint32_t operator()(int64_t idx) const { return global ? __ldcg(p + idx) : p[idx]; }
};

// Radix select over 4 digits of 8 bits (block-wide): *thr = the take-th largest of keys[0, n), *krem =
// how many keys equal to it are among the top `take` (ties → lower index first). REQUIRES 0 < take <= n.
__device__ void RadixThreshold(const KeyReader& keys, int64_t n, uint32_t take, SelectSmem& sm, uint32_t* thr,
                               uint32_t* krem_out) {
  const int tid = threadIdx.x, lane = tid & 31;
  uint32_t prefix = 0, mask = 0, krem = take;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int b = tid; b < 256; b += blockDim.x) sm.hist[b] = 0;
    __syncthreads();
    for (int64_t base = 0; base < n; base += blockDim.x) {
      const int64_t idx = base + tid;
      const uint32_t key = idx < n ? keys(idx) : 0;
      const bool match = idx < n && ((key ^ prefix) & mask) == 0;
      const uint32_t digit = (key >> shift) & 255u;
      // NOTE: the top digits of similar scores collide; aggregate equal digits per warp first.
      const uint32_t active = __ballot_sync(kFull, match);
      if (match) {
        const uint32_t peers = __match_any_sync(active, digit);
        if (lane == __ffs(peers) - 1) atomicAdd(&sm.hist[digit], __popc(peers));
      }
    }
    __syncthreads();
    if (tid < 32) {
      // Lane l owns bins 255 - 8l - j (j < 8): lane 0 the largest digits.
      uint32_t c[8], sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) sum += (c[j] = sm.hist[255 - 8 * lane - j]);
      uint32_t incl = sum;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const uint32_t v = __shfl_up_sync(kFull, incl, off);
        if (lane >= off) incl += v;
      }
      const uint32_t first = __ffs(__ballot_sync(kFull, incl >= krem)) - 1;
      if (lane == static_cast<int>(first)) {
        uint32_t run = incl - sum;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (run + c[j] >= krem) {
            sm.digit = 255 - 8 * lane - j;
            sm.krem = krem - run;
            break;
          }
          run += c[j];
        }
      }
    }
    __syncthreads();
    prefix |= sm.digit << shift;
    mask |= 255u << shift;
    krem = sm.krem;
    __syncthreads();  // sm.digit / sm.krem are rewritten by the next pass
  }
  *thr = prefix;
  *krem_out = krem;
}

// Ordered compaction (block-wide): visits keys[0, n) in index order and calls emit(rank, idx) for
// every key > thr and the first `krem` keys == thr; ranks are 0, 1, ... in index order, `take` in all.
template <class Emit>
__device__ void OrderedSelect(const KeyReader& keys, int64_t n, uint32_t thr, uint32_t krem, uint32_t take,
                              SelectSmem& sm, Emit emit) {
  uint32_t eq_base = 0, sel_base = 0;
  for (int64_t base = 0; base < n && sel_base < take; base += blockDim.x) {
    const int64_t idx = base + threadIdx.x;
    const uint32_t key = idx < n ? keys(idx) : 0;
    const bool gt = idx < n && key > thr, eq = idx < n && key == thr;
    uint32_t eq_total = 0, sel_total = 0;
    const uint32_t eq_rank = eq_base + BlockRank(eq, sm.warp_counts, &eq_total);
    const bool chosen = gt || (eq && eq_rank < krem);
    const uint32_t rank = sel_base + BlockRank(chosen, sm.warp_counts, &sel_total);
    if (chosen) emit(rank, idx);
    eq_base += eq_total;
    sel_base += sel_total;
  }
}

// ---- select, first version ---------------------------------------------------------------------

// One block per token. The chosen pools are the top `take` keys, larger first, equal keys → lower
// pool index first (ops::IndexerSelect). Radix select over 4 digits of 8 bits finds the threshold
// key T and how many keys equal to T are taken; one ordered pass then emits the pools in
// ascending index order, expanded to their m token positions, then the tail.
// Candidates are staged in shared memory during the first digit pass when they fit
// (n <= a.smem_keys); otherwise every pass reads them from global memory (L2).
__global__ void __launch_bounds__(kIdxSelectThreads) indexer_select_kernel(const __grid_constant__ IndexerSelectArgs a) {
  extern __shared__ uint32_t skeys[];
  __shared__ uint32_t hist[256];
  __shared__ uint32_t warp_counts[kIdxSelectThreads / 32];
  __shared__ uint32_t s_digit, s_krem;
  const int64_t i = blockIdx.x;
  const int tid = threadIdx.x, lane = tid & 31;
  const int seq = a.rows.tok_seq[i];
  int32_t* out = a.sel + i * a.sel_cap;
  if (seq < 0) {
    if (tid == 0) a.sel_count[i] = 0;
    return;
  }
  const int64_t pos = a.rows.tok_pos[i];
  const int m = a.m;
  const int64_t n = (pos + 1) / m;
  const int64_t take = n < a.budget ? n : a.budget;
  const int tail = a.tail ? static_cast<int>((pos + 1) % m) : 0;

  if (take < n) {
    const uint32_t* gk = a.keys + i * a.key_stride;
    const bool staged = n <= a.smem_keys;
    const uint32_t* keys = staged ? skeys : gk;
    uint32_t prefix = 0, mask = 0, krem = static_cast<uint32_t>(take);
    // ---- radix select: after the 4 digits, prefix = T and krem = keys equal to T to take ----
    for (int pass = 0; pass < 4; ++pass) {
      const int shift = 24 - 8 * pass;
      for (int b = tid; b < 256; b += blockDim.x) hist[b] = 0;
      __syncthreads();
      for (int64_t base = 0; base < n; base += blockDim.x) {
        const int64_t idx = base + tid;
        uint32_t key = 0;
        if (idx < n) {
          key = pass == 0 ? gk[idx] : keys[idx];
          if (pass == 0 && staged) skeys[idx] = key;
        }
        const bool match = idx < n && ((key ^ prefix) & mask) == 0;
        const uint32_t digit = (key >> shift) & 255u;
        // NOTE: the top digits of similar scores collide; aggregate equal digits per warp first.
        const uint32_t active = __ballot_sync(kFull, match);
        if (match) {
          const uint32_t peers = __match_any_sync(active, digit);
          if (lane == __ffs(peers) - 1) atomicAdd(&hist[digit], __popc(peers));
        }
      }
      __syncthreads();
      if (tid < 32) {
        // Lane l owns bins 255 - 8l - j (j < 8): lane 0 the largest digits.
        uint32_t c[8], sum = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) sum += (c[j] = hist[255 - 8 * lane - j]);
        uint32_t incl = sum;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
          const uint32_t v = __shfl_up_sync(kFull, incl, off);
          if (lane >= off) incl += v;
        }
        const uint32_t first = __ffs(__ballot_sync(kFull, incl >= krem)) - 1;
        if (lane == static_cast<int>(first)) {
          uint32_t run = incl - sum;
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            if (run + c[j] >= krem) {
              s_digit = 255 - 8 * lane - j;
              s_krem = krem - run;
              break;
            }
            run += c[j];
          }
        }
      }
      __syncthreads();
      prefix |= s_digit << shift;
      mask |= 255u << shift;
      krem = s_krem;
    }
    // ---- ordered compaction: keys > T, then the first krem keys == T by pool index ----
    const uint32_t thr = prefix;
    uint32_t eq_base = 0, sel_base = 0;
    for (int64_t base = 0; base < n && sel_base < take; base += blockDim.x) {
      const int64_t idx = base + tid;
      const uint32_t key = idx < n ? keys[idx] : 0;
      const bool gt = idx < n && key > thr, eq = idx < n && key == thr;
      uint32_t eq_total = 0, sel_total = 0;
      const uint32_t eq_rank = eq_base + BlockRank(eq, warp_counts, &eq_total);
      const bool chosen = gt || (eq && eq_rank < krem);
      const uint32_t rank = sel_base + BlockRank(chosen, warp_counts, &sel_total);
      if (chosen)
        for (int r = 0; r < m; ++r) out[static_cast<int64_t>(rank) * m + r] = static_cast<int32_t>(idx * m + r);
      eq_base += eq_total;
      sel_base += sel_total;
    }
  } else {
    // Every complete pool is chosen: tokens 0 .. n·m − 1.
    for (int64_t t = tid; t < n * m; t += blockDim.x) out[t] = static_cast<int32_t>(t);
  }
  // ---- tail: the (pos + 1) mod m visible tokens after the last complete pool ----
  for (int r = tid; r < tail; r += blockDim.x) out[take * m + r] = static_cast<int32_t>(pos + 1 - tail + r);
  if (tid == 0) a.sel_count[i] = static_cast<int32_t>(take * m + tail);
}

// ---- sliced select ---------------------------------------------------------------------------------

// Grid (slices, tokens), kIdxSelectThreads threads (IndexerSliceArgs). Exact: a pool among the
// token's top `budget` (score desc, pool index asc) is among the top min(budget, n_s) of its own
// slice, so the candidates hold the answer, and the final pass applies the same order to them (they
// are in ascending pool order). Tokens with n <= budget pools take them all (block 0 only).
__global__ void __launch_bounds__(kIdxSelectThreads) indexer_slice_kernel(const __grid_constant__ IndexerSliceArgs a) {
  extern __shared__ uint32_t sl_smem[];
  __shared__ SelectSmem sm;
  __shared__ int s_last;
  const int64_t i = blockIdx.y, s = blockIdx.x;
  const int tid = threadIdx.x;
  const int seq = a.rows.tok_seq[i];
  int32_t* out = a.sel + i * a.sel_cap;
  if (seq < 0) {
    if (s == 0 && tid == 0) a.sel_count[i] = 0;
    return;
  }
  const int64_t pos = a.rows.tok_pos[i];
  const int m = a.m;
  const int64_t n = (pos + 1) / m;
  const int64_t take = n < a.budget ? n : a.budget;
  const int tail = a.tail ? static_cast<int>((pos + 1) % m) : 0;
  auto finish = [&]() {  // the tail: the (pos + 1) mod m visible tokens after the last complete pool
    for (int r = tid; r < tail; r += blockDim.x) out[take * m + r] = static_cast<int32_t>(pos + 1 - tail + r);
    if (tid == 0) a.sel_count[i] = static_cast<int32_t>(take * m + tail);
  };
  if (take == n) {  // every complete pool is chosen: tokens 0 .. n·m − 1
    if (s != 0) return;
    for (int64_t t = tid; t < n * m; t += blockDim.x) out[t] = static_cast<int32_t>(t);
    finish();
    return;
  }
  const int64_t nslices = (n + a.slice - 1) / a.slice;
  if (s >= nslices) return;

  // ---- this slice: its top min(take, n_s) pools → candidates s·cand_per_slice.., ascending ----
  {
    const int64_t p0 = s * a.slice, ns = min(a.slice, n - p0), ts = min(take, ns);
    const uint32_t* gk = a.keys + i * a.key_stride + p0;
    const bool staged = ns <= a.smem_keys;
    if (staged) {
      for (int64_t x = tid; x < ns; x += blockDim.x) sl_smem[x] = gk[x];
      __syncthreads();
    }
    const KeyReader keys{staged ? sl_smem : gk, false};
    uint32_t* ck = a.cand_key + i * a.cand_stride + s * a.cand_per_slice;
    int32_t* ci = a.cand_idx + i * a.cand_stride + s * a.cand_per_slice;
    if (ts < ns) {
      uint32_t thr = 0, krem = 0;
      RadixThreshold(keys, ns, static_cast<uint32_t>(ts), sm, &thr, &krem);
      OrderedSelect(keys, ns, thr, krem, static_cast<uint32_t>(ts), sm, [&](uint32_t rank, int64_t idx) {
        ck[rank] = keys(idx);
        ci[rank] = static_cast<int32_t>(p0 + idx);
      });
    } else {
      for (int64_t x = tid; x < ns; x += blockDim.x) {
        ck[x] = keys(x);
        ci[x] = static_cast<int32_t>(p0 + x);
      }
    }
  }

  // ---- the last block of this token to get here selects among all candidates ----
  __threadfence();  // this thread's candidates are visible device-wide before the count
  __syncthreads();
  if (tid == 0) s_last = atomicAdd(a.counter + i, 1u) == static_cast<uint32_t>(nslices - 1);
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  // Every slice but the last holds exactly cand_per_slice = min(take, slice) candidates: contiguous.
  const int64_t nc = (nslices - 1) * a.cand_per_slice + min(take, n - (nslices - 1) * a.slice);
  const uint32_t* fk = a.cand_key + i * a.cand_stride;
  const int32_t* fi = a.cand_idx + i * a.cand_stride;
  const bool staged = 2 * nc <= a.smem_keys;
  uint32_t* const sk = sl_smem;
  int32_t* const si = reinterpret_cast<int32_t*>(sl_smem + nc);
  if (staged) {
    for (int64_t x = tid; x < nc; x += blockDim.x) {
      sk[x] = __ldcg(fk + x);
      si[x] = __ldcg(fi + x);
    }
    __syncthreads();
  }
  const KeyReader keys{staged ? sk : fk, !staged};
  auto pool_of = [&](int64_t x) -> int64_t { return staged ? si[x] : __ldcg(fi + x); };
  auto emit = [&](uint32_t rank, int64_t x) {
    const int64_t p = pool_of(x);
    for (int r = 0; r < m; ++r) out[static_cast<int64_t>(rank) * m + r] = static_cast<int32_t>(p * m + r);
  };
  if (take < nc) {
    uint32_t thr = 0, krem = 0;
    RadixThreshold(keys, nc, static_cast<uint32_t>(take), sm, &thr, &krem);
    OrderedSelect(keys, nc, thr, krem, static_cast<uint32_t>(take), sm, emit);
  } else {
    for (int64_t x = tid; x < nc; x += blockDim.x) emit(static_cast<uint32_t>(x), x);
  }
  finish();
}

int NumSms() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 132;
    return v;
  }();
  return n;
}

}  // namespace

// ---- launchers -----------------------------------------------------------------------------------

cudaError_t LaunchCacheWrite(const CacheWriteArgs& a, cudaStream_t s) {
  cache_write_kernel<<<static_cast<unsigned>(a.num_tokens), 128, 0, s>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchCacheWriteKv(const CacheWriteKvArgs& a, cudaStream_t s) {
  cache_write_kv_kernel<<<static_cast<unsigned>(a.num_tokens), 128, 0, s>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchCacheWriteMulti(const CacheWriteMultiArgs& a, cudaStream_t s) {
  cache_write_multi_kernel<<<static_cast<unsigned>(a.num_tokens), 128, 0, s>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchPoolKeys(const PoolKeyArgs& a, bool legacy, cudaStream_t s) {
  const size_t smem = 2 * sizeof(float) * static_cast<size_t>(a.m) * a.di;
  if (legacy || smem > 48 * 1024) pool_key_kernel<<<static_cast<unsigned>(a.num_tokens), 128, 0, s>>>(a);
  else pool_key_smem_kernel<<<static_cast<unsigned>(a.num_tokens), 128, smem, s>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchIndexerSlice(const IndexerSliceArgs& a, int64_t num_slices, size_t smem_bytes, cudaStream_t s) {
  static const cudaError_t allowed = AllowMaxDynamicSmem(reinterpret_cast<const void*>(indexer_slice_kernel));
  if (allowed != cudaSuccess) return allowed;
  indexer_slice_kernel<<<dim3(static_cast<unsigned>(num_slices), static_cast<unsigned>(a.num_tokens)),
                         kIdxSelectThreads, smem_bytes, s>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchIndexerScores(const IndexerScoreArgs& a, int64_t max_pools, bool legacy, cudaStream_t s) {
  const size_t smem = sizeof(float) * kIdxMaxHeads * a.di;
  if (!legacy && a.di <= 16 * kIdxScoreUnits) {
    static const cudaError_t allowed = AllowMaxDynamicSmem(reinterpret_cast<const void*>(indexer_score4_kernel));
    if (allowed != cudaSuccess) return allowed;
    const int64_t per_block = static_cast<int64_t>(kIdxScorePools) * a.passes;
    const int64_t tiles = (max_pools + per_block - 1) / per_block;
    indexer_score4_kernel<<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(a.num_tokens)), kIdxScoreThreads,
                            smem, s>>>(a);
    return cudaGetLastError();
  }
  // Two pools per thread halves the shared-memory reads per FMA; one per thread when the grid
  // would otherwise leave SMs idle (decode of a single short sequence).
  const int64_t tiles2 = (max_pools + 2 * kIdxScoreThreads - 1) / (2 * kIdxScoreThreads);
  if (tiles2 * a.num_tokens >= 2 * NumSms()) {
    static const cudaError_t allowed = AllowMaxDynamicSmem(reinterpret_cast<const void*>(indexer_score_kernel<2>));
    if (allowed != cudaSuccess) return allowed;
    indexer_score_kernel<2><<<dim3(static_cast<unsigned>(tiles2), static_cast<unsigned>(a.num_tokens)), kIdxScoreThreads,
                              smem, s>>>(a);
  } else {
    const int64_t tiles1 = (max_pools + kIdxScoreThreads - 1) / kIdxScoreThreads;
    static const cudaError_t allowed = AllowMaxDynamicSmem(reinterpret_cast<const void*>(indexer_score_kernel<1>));
    if (allowed != cudaSuccess) return allowed;
    indexer_score_kernel<1><<<dim3(static_cast<unsigned>(tiles1), static_cast<unsigned>(a.num_tokens)), kIdxScoreThreads,
                              smem, s>>>(a);
  }
  return cudaGetLastError();
}

cudaError_t LaunchIndexerSelect(const IndexerSelectArgs& a, int64_t max_pools, cudaStream_t s) {
  const int64_t staged = max_pools < a.smem_keys ? max_pools : a.smem_keys;
  const size_t smem = sizeof(uint32_t) * static_cast<size_t>(staged > 0 ? staged : 0);
  static const cudaError_t allowed = AllowMaxDynamicSmem(reinterpret_cast<const void*>(indexer_select_kernel));
  if (allowed != cudaSuccess) return allowed;
  IndexerSelectArgs b = a;
  b.smem_keys = staged;
  indexer_select_kernel<<<static_cast<unsigned>(a.num_tokens), kIdxSelectThreads, smem, s>>>(b);
  return cudaGetLastError();
}

}  // namespace gyre::cuda::internal
