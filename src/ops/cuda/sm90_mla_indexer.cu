// Device code of the paged cache write and the DSA indexer (docs/model-glm5-next.md §5.3):
// pooled keys, pool scores, and the exact top-(K/m) pool selection with its tie rule.
//
// Sections: cache write; pooled keys; scores; select (radix select + ordered compaction).
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/mla_kernels.h"

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
    a.pool_keys[rows[a.m - 1] * a.di + c] = acc;
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
    kp[u] = a.pool_keys + (valid[u] ? a.rows.Row(seq, p * a.m + a.m - 1) : 0) * di;
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

// ---- select ------------------------------------------------------------------------------------

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

cudaError_t LaunchPoolKeys(const PoolKeyArgs& a, cudaStream_t s) {
  pool_key_kernel<<<static_cast<unsigned>(a.num_tokens), 128, 0, s>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchIndexerScores(const IndexerScoreArgs& a, int64_t max_pools, cudaStream_t s) {
  const size_t smem = sizeof(float) * kIdxMaxHeads * a.di;
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
