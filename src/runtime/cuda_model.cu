// CudaModel. Sections: small kernels (random init, casts, scaled copies); device weights (layout,
// builder from host or random); pools and step scratch; sequences; the step (upload, layers,
// head); CUDA graphs for decode steps; public API.
#include "runtime/cuda_model.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <tuple>

#include "core/dtype.h"
#include "core/trace.h"
#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/dmat.h"
#include "ops/cuda/elementwise_cuda.h"
#include "ops/cuda/kda_cuda.h"
#include "ops/cuda/mla_cuda.h"
#include "ops/cuda/moe_cuda.h"
#include "ops/cuda/penalties_cuda.h"
#include "ops/cuda/quant_cuda.h"
#include "ops/cuda/sampling_cuda.h"
#include "parallel/device_communicator.h"
#include "quant/quant.h"

namespace gyre {

using cuda::DeviceBuffer;
using cuda::DMat;

namespace {

// ---- small kernels -------------------------------------------------------------------------------

enum class Dist : int { kNormal = 0, kUniform = 1, kLog1p15U = 2 };
struct Init {
  Dist dist = Dist::kNormal;
  float a = 0, b = 1;  // normal: mean a, std b; uniform: [a, b)
};

__device__ __forceinline__ uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void InitKernel(void* out, bool bf16, int64_t n, uint64_t seed, int dist, float a, float b) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t r = SplitMix(seed ^ (static_cast<uint64_t>(i) * 0xD1B54A32D192ED03ull));
    const float u1 = (static_cast<float>(r >> 40) + 0.5f) * (1.0f / 16777216.0f);
    const float u2 = (static_cast<float>((r >> 16) & 0xFFFFFF) + 0.5f) * (1.0f / 16777216.0f);
    float v;
    if (dist == 0) {
      v = a + b * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    } else if (dist == 1) {
      v = a + (b - a) * u1;
    } else {
      v = logf(1.0f + 15.0f * u1);
    }
    if (bf16) {
      static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
    } else {
      static_cast<float*>(out)[i] = v;
    }
  }
}

// y[r, c] (bf16, dense [n, k]) = x[r, c] (fp32, row stride ldx).
// ids[t] == kPrevToken (-1) → the token its sequence's slot sampled last (overlapped steps).
__global__ void ResolvePrevTokenKernel(int32_t* ids, const int32_t* tok_seq, const int32_t* seq_slot, int64_t n,
                                       const int32_t* last_token) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= n || ids[t] != -1) return;
  const int32_t b = tok_seq[t];
  const int32_t slot = b >= 0 ? seq_slot[b] : -1;
  ids[t] = slot >= 0 ? last_token[slot] : 0;
}

// Prompt embeddings (StepPiece::embeds): row i of `rows` [n, D] replaces the table row of token
// tok[i] in y [N, D].
__global__ void ScatterEmbedRowsKernel(const int32_t* tok, const float* rows, int64_t n, int64_t D, float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * D;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[static_cast<int64_t>(tok[i / D]) * D + i % D] = rows[i];
}

// ReplaySSM rings (CudaModel::CommitSpeculative): a ring row holds one token's KDA inputs, the
// segments seg[0..2] (pre-conv u [3P], gate g [P], β [Hh]) at ring offsets off[0..2]. For sequences
// b in [b0, b1) of (cu, slots), the flat rows cu[b] .. cu[b+1] are copied to (to_ring) or from
// ring rows 0.. of slot slots[b] (ring: [slots, ring_rows, ring_row]). grid.y over sequences,
// threads over the row's floats. Plain copies: the ring round trip is exact.
struct RingCopyArgs {
  float* flat[3] = {nullptr, nullptr, nullptr};
  int64_t width[3] = {0, 0, 0}, off[3] = {0, 0, 0};
  float* ring = nullptr;
  int64_t ring_rows = 0, ring_row = 0;
  const int32_t* cu = nullptr;
  const int32_t* slots = nullptr;
  int64_t b0 = 0, b1 = 0;
  bool to_ring = true;
};
__global__ void RingCopyKernel(const __grid_constant__ RingCopyArgs a) {
  const int64_t b = a.b0 + blockIdx.y;
  if (b >= a.b1) return;
  const int32_t slot = a.slots[b];
  if (slot < 0) return;
  const int64_t first = a.cu[b], n = a.cu[b + 1] - first;
  const int64_t total = a.width[0] + a.width[1] + a.width[2];
  for (int64_t t = 0; t < n && t < a.ring_rows; ++t) {
    float* ring_row = a.ring + (int64_t(slot) * a.ring_rows + t) * a.ring_row;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int seg = i < a.width[0] ? 0 : (i < a.width[0] + a.width[1] ? 1 : 2);
      const int64_t c = i - (seg == 0 ? 0 : (seg == 1 ? a.width[0] : a.width[0] + a.width[1]));
      float* f = a.flat[seg] + (first + t) * a.width[seg] + c;
      float* r = ring_row + a.off[seg] + c;
      if (a.to_ring) *r = *f;
      else *f = *r;
    }
  }
}

// last_token[row_slot[r]] ← ids[r] for the sampled rows.
__global__ void RecordLastTokenKernel(const int32_t* ids, const int32_t* row_slot, int64_t rows, int32_t* last_token) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r < rows && row_slot[r] >= 0) last_token[row_slot[r]] = ids[r];
}

__global__ void CastRowsKernel(const float* x, int64_t n, int64_t k, int64_t ldx, __nv_bfloat16* y) {
  const int64_t total = n * k;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / k, c = i - r * k;
    y[i] = __float2bfloat16_rn(x[r * ldx + c]);
  }
}

// y[r, c] (dense [n, k]) = s · x[r, c] (row stride ldx).
__global__ void ScaleCopyKernel(const float* x, int64_t n, int64_t k, int64_t ldx, float s, float* y) {
  const int64_t total = n * k;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / k, c = i - r * k;
    y[i] = s * x[r * ldx + c];
  }
}

// The mHC pre-site (ops::HcPre) in two kernels. HcDotKernel: block (token group, K slice) computes,
// for TT tokens, the (2+n)·n dot products fn·x and the sum of squares of x over its 1024-element
// slice (the rmsnorm is folded: μ = (fn·x)·rsqrt(mean(x²) + eps), fp32), and writes them as
// partials [t, S, mix + 1]. HcMixKernel (one block per token) sums the partials in slice order
// (deterministic), maps μ to pre, post and the Sinkhorn-normalised comb in thread 0 (n <= 4, the CPU
// op's order of operations), then every thread collapses y[c] = Σ_s pre[s]·X[s, c].
constexpr int kHcSlice = 1024;  // 256 threads × 4 consecutive elements
template <int N, int TT>
__global__ void __launch_bounds__(256) HcDotKernel(const float* x, int64_t t, int64_t K, const float* fn, float* part,
                                                   int S) {
  constexpr int MIX = (2 + N) * N, W = MIX + 1;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * TT;
  const int sl = blockIdx.y;
  const int64_t k = static_cast<int64_t>(sl) * kHcSlice + threadIdx.x * 4;
  float acc[TT][W];
#pragma unroll
  for (int a = 0; a < TT; ++a)
#pragma unroll
    for (int j = 0; j < W; ++j) acc[a][j] = 0.0f;
  if (k < K) {
    float4 xv[TT];
#pragma unroll
    for (int a = 0; a < TT; ++a) {
      xv[a] = t0 + a < t ? *reinterpret_cast<const float4*>(x + (t0 + a) * K + k) : make_float4(0, 0, 0, 0);
      acc[a][MIX] = xv[a].x * xv[a].x + xv[a].y * xv[a].y + xv[a].z * xv[a].z + xv[a].w * xv[a].w;
    }
#pragma unroll
    for (int j = 0; j < MIX; ++j) {
      const float4 f = __ldg(reinterpret_cast<const float4*>(fn + j * K + k));
#pragma unroll
      for (int a = 0; a < TT; ++a) acc[a][j] = f.x * xv[a].x + f.y * xv[a].y + f.z * xv[a].z + f.w * xv[a].w;
    }
  }
  __shared__ float red[8][TT * W];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int a = 0; a < TT; ++a)
#pragma unroll
    for (int j = 0; j < W; ++j) {
      float v = acc[a][j];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0) red[warp][a * W + j] = v;
    }
  __syncthreads();
  for (int q = threadIdx.x; q < TT * W; q += blockDim.x) {
    const int a = q / W, j = q - a * W;
    if (t0 + a >= t) continue;
    float v = 0;
    for (int w8 = 0; w8 < 8; ++w8) v += red[w8][q];
    part[((t0 + a) * S + sl) * W + j] = v;
  }
}

// N is compile-time so that the Sinkhorn matrix stays in registers (a runtime n put it in local
// memory: ~40 µs per call on one thread). Lanes of warp 0 sum the slice partials (one value each).
template <int N>
__global__ void __launch_bounds__(256) HcMixKernel(const float* x, const float* part, int S, int64_t K, float norm_eps,
                                                   const float* base, const float* scale, int64_t d, float hc_eps,
                                                   int iters, float* post, float* comb, float* y) {
  constexpr int MIX = (2 + N) * N, W = MIX + 1;
  const int64_t i = blockIdx.x;
  __shared__ float sm[32];
  __shared__ float pre[N];
  if (threadIdx.x < W) {
    float v = 0;
    for (int sl = 0; sl < S; ++sl) v += part[(i * S + sl) * W + threadIdx.x];
    sm[threadIdx.x] = v;
  }
  __syncthreads();
  // Warp 0: lane (r, c) = r·N + c owns C[r, c]; row and column sums gather the N values of the
  // row / column by shuffles and add them in index order, as the CPU op does.
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const float r = rsqrtf(sm[MIX] / static_cast<float>(K) + norm_eps);
    const bool own = lane < N * N;
    const int rr = own ? lane / N : 0, cc = own ? lane % N : 0;
    if (lane < N) {
      pre[lane] = 1.0f / (1.0f + expf(-(sm[lane] * r * scale[0] + base[lane]))) + hc_eps;
      post[i * N + lane] = 2.0f * (1.0f / (1.0f + expf(-(sm[N + lane] * r * scale[1] + base[N + lane]))));
    }
    float v = own ? sm[2 * N + lane] * r * scale[2] + base[2 * N + lane] : 0.0f;
    auto row_sum = [&](float val) {
      float acc = 0;
#pragma unroll
      for (int j = 0; j < N; ++j) acc += __shfl_sync(0xffffffffu, val, rr * N + j);
      return acc;
    };
    auto col_sum = [&](float val) {
      float acc = 0;
#pragma unroll
      for (int j = 0; j < N; ++j) acc += __shfl_sync(0xffffffffu, val, j * N + cc);
      return acc;
    };
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < N; ++j) mx = fmaxf(mx, __shfl_sync(0xffffffffu, v, rr * N + j));
    v = expf(v - mx);
    const float den = row_sum(v);
    v = v / den + hc_eps;
    v /= (col_sum(v) + hc_eps);
    for (int it = 0; it < iters - 1; ++it) {
      v /= (row_sum(v) + hc_eps);
      v /= (col_sum(v) + hc_eps);
    }
    if (own) comb[i * N * N + lane] = v;
  }
  __syncthreads();
  const float* X = x + i * N * d;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = 0;
#pragma unroll
    for (int q = 0; q < N; ++q) acc += pre[q] * X[q * d + c];
    y[i * d + c] = acc;
  }
}

int GridFor(int64_t n, int threads = 256) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, 8192)));
}

int64_t Pad8(int64_t x) { return (x + 7) / 8 * 8; }
int64_t NextPow2(int64_t x) {
  int64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

__global__ void IotaKernel(int32_t* p, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = static_cast<int32_t>(i);
}

// Expert parallelism: idx[i] ← idx[i] − e0 when this rank holds expert idx[i], else −1.
__global__ void LocalExpertIdsKernel(int32_t* idx, int64_t n, int32_t e0, int32_t count) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int32_t e = idx[i];
  idx[i] = e >= e0 && e < e0 + count ? e - e0 : -1;
}

// ---- MTP drafts (CudaModelOptions::mtp_drafts) ----------------------------------------------------

// The MTP rows of a step: token i at position q > 0 of a piece with mtp >= 0 pairs ids[i] with the
// pre-norm hidden state of position q - 1 (the row before, or the slot's saved state for the
// piece's first token) and writes its key at MTP position q - 1 (mseq, mpos; stored at token
// position q through pos_shift 1). Other tokens are padding: mseq -1, zero input. One block per token.
__global__ void MtpPrepKernel(const int32_t* tok_seq, const int32_t* tok_pos, const int32_t* cu, const int32_t* slots,
                              const int32_t* piece_mtp, int64_t d, const float* hid, const float* slot_hidden,
                              float* hin, int32_t* mseq, int32_t* mpos) {
  const int64_t i = blockIdx.x;
  const int b = tok_seq[i];
  const int q = b >= 0 ? tok_pos[i] : 0;
  const bool on = b >= 0 && piece_mtp[b] >= 0 && q > 0;
  if (threadIdx.x == 0) {
    mseq[i] = on ? b : -1;
    mpos[i] = on ? q - 1 : 0;
  }
  const float* src = nullptr;
  if (on) src = i == cu[b] ? slot_hidden + static_cast<int64_t>(slots[b]) * d : hid + (i - 1) * d;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) hin[i * d + c] = src ? src[c] : 0.0f;
}

// After the MTP rows: the hidden state of each MTP piece's last token → its slot; a speculative
// piece's rows → the slot's ring instead (CommitSpeculative settles which). One block per piece.
__global__ void MtpSaveKernel(const int32_t* cu, const int32_t* slots, const int32_t* piece_mtp, const int32_t* spec,
                              int64_t d, const float* hid, float* slot_hidden, float* spec_hidden, int64_t spec_rows) {
  const int b = blockIdx.x;
  const int32_t slot = slots[b];
  if (slot < 0 || piece_mtp[b] < 0) return;
  const int64_t t0 = cu[b], t1 = cu[b + 1];
  if (spec[b]) {
    for (int64_t t = t0; t < t1 && t - t0 < spec_rows; ++t)
      for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
        spec_hidden[(static_cast<int64_t>(slot) * spec_rows + (t - t0)) * d + c] = hid[t * d + c];
  } else {
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) slot_hidden[slot * d + c] = hid[(t1 - 1) * d + c];
  }
}

// Commits of speculative pieces: the slot's hidden state ← its ring row n - 1 (the last accepted
// token's). Passed by value; one block per commit.
constexpr int kMtpCommitsPerLaunch = 64;
struct MtpCommitArgs {
  int32_t slot[kMtpCommitsPerLaunch];
  int32_t n[kMtpCommitsPerLaunch];
};
__global__ void MtpCommitKernel(const MtpCommitArgs a, const float* spec_hidden, int64_t spec_rows, int64_t d,
                                float* slot_hidden) {
  const int64_t slot = a.slot[blockIdx.x], n = a.n[blockIdx.x];
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
    slot_hidden[slot * d + c] = spec_hidden[(slot * spec_rows + n - 1) * d + c];
}

// The start of each draft chain (one block per chain row c, for the piece at batch row
// chain[4c] whose logits rows are chain[4c+1]..chain[4c+2], speculative when chain[4c+3]):
// the chain continues after the piece's last committed token, row a (the last row; or, for a
// speculative piece, the row of its last accepted draft, decided here on the device as the engine
// will: its sampled tokens against the piece's next tokens). It begins with the token sampled at
// row a and the main model's hidden state of row a, at MTP position m0 = start + a. Its keys go
// to positions m0 + 1 .. (pos_shift 1): the chain's block-table row keeps the sequence's pages
// before that position's page f and maps f onward to the chain's scratch pages, the first a
// copy of page f's rows before the position (keys of committed tokens, or nothing when aligned).
// chain[4c+3] == 2: an inactive row (a graph's padding piece), which drafts from nothing.
struct MtpChainArgs {
  const int32_t* ids;       // the step's (resolved) token ids
  const int32_t* tok_pos;
  const int32_t* cu;
  const int32_t* block_table;  // the step's [b, max_pages]
  int64_t max_pages;
  const int32_t* chain;     // [Bc, 4]
  int64_t num_chain;
  const int32_t* next_ids;  // the step's sampled ids per logits row
  const float* hid;         // [N, D] pre-norm hidden rows
  int64_t d, page_tokens, steps;
  int64_t scratch_page0, pages_per_chain, chain_width;
  float* latent;            // the MTP key cache: [pages · page_tokens, R] and [.., rope]
  float* krot;
  int64_t R, rope;
  int32_t* ch_ids;          // [Bc]
  float* ch_hin;            // [Bc, D]
  int32_t* ch_pos;          // [steps, Bc]
  int32_t* ch_table;        // [Bc, chain_width]
};
__global__ void MtpChainSetupKernel(const MtpChainArgs a) {
  const int64_t c = blockIdx.x;
  const int32_t b = a.chain[4 * c], r0 = a.chain[4 * c + 1], r1 = a.chain[4 * c + 2], spec = a.chain[4 * c + 3];
  if (spec == 2) {  // an inactive row of a graph's padded batch: token 0, zero input, scratch pages only
    if (threadIdx.x == 0) a.ch_ids[c] = 0;
    for (int64_t j = threadIdx.x; j < a.steps; j += blockDim.x) a.ch_pos[j * a.num_chain + c] = static_cast<int32_t>(j);
    for (int64_t e = threadIdx.x; e < a.d; e += blockDim.x) a.ch_hin[c * a.d + e] = 0.0f;
    for (int64_t p = threadIdx.x; p < a.chain_width; p += blockDim.x)
      a.ch_table[c * a.chain_width + p] =
          static_cast<int32_t>(a.scratch_page0 + c * a.pages_per_chain + min(p, a.pages_per_chain - 1));
    return;
  }
  // (a speculative piece's own tokens are its rows r0..r1; a graph pads it with more tokens)
  const int64_t t0 = a.cu[b], n = spec ? r1 - r0 + 1 : a.cu[b + 1] - t0, start = a.tok_pos[t0];
  int64_t r = n - 1;
  int32_t y = a.next_ids[r1];
  if (spec) {
    r = 0;
    while (r + 1 < n && a.next_ids[r0 + r] == a.ids[t0 + r + 1]) ++r;
    y = a.next_ids[r0 + r];
  }
  const int64_t m0 = start + r, pt = a.page_tokens, f = (m0 + 1) / pt, off = (m0 + 1) % pt;
  if (threadIdx.x == 0) a.ch_ids[c] = y;
  for (int64_t j = threadIdx.x; j < a.steps; j += blockDim.x) a.ch_pos[j * a.num_chain + c] = static_cast<int32_t>(m0 + j);
  for (int64_t e = threadIdx.x; e < a.d; e += blockDim.x) a.ch_hin[c * a.d + e] = a.hid[(t0 + r) * a.d + e];
  for (int64_t p = threadIdx.x; p < a.chain_width; p += blockDim.x) {
    int64_t page = 0;
    if (p < f) page = p < a.max_pages ? a.block_table[b * a.max_pages + p] : 0;
    else page = a.scratch_page0 + c * a.pages_per_chain + min(p - f, a.pages_per_chain - 1);
    a.ch_table[c * a.chain_width + p] = static_cast<int32_t>(page);
  }
  if (off > 0) {
    const int64_t src = static_cast<int64_t>(a.block_table[b * a.max_pages + f]) * pt;
    const int64_t dst = (a.scratch_page0 + c * a.pages_per_chain) * pt;
    for (int64_t e = threadIdx.x; e < off * a.R; e += blockDim.x) a.latent[dst * a.R + e] = a.latent[src * a.R + e];
    for (int64_t e = threadIdx.x; e < off * a.rope; e += blockDim.x) a.krot[dst * a.rope + e] = a.krot[src * a.rope + e];
  }
}

// ---- device weights ------------------------------------------------------------------------------

struct DHc {
  float* fn = nullptr;  // [(2+n)n, nD]
  float* base = nullptr;
  float* scale = nullptr;
};

struct DLayer {
  AttnKind attn = AttnKind::kKda;
  MlpKind mlp = MlpKind::kDense;
  float* input_norm = nullptr;
  float* post_norm = nullptr;
  DHc attn_hc, ffn_hc;
  // KDA
  DMat kda_qkv;    // [3P, D]
  DMat kda_small;  // [Hp + Kp + Kp, D]: b | f_a | g_a (segments padded to 8 rows)
  int64_t ks_b = 0, ks_fa = 0, ks_ga = 0, ks_width = 0;
  DMat kda_fb, kda_gb;  // [P, K]
  float* conv = nullptr;
  float* dt_bias = nullptr;
  float* a_log = nullptr;
  float* o_norm = nullptr;
  DMat kda_o;  // [D, P]
  // MLA / DSA
  DMat mla_a;  // [q_a | kv_a | idx_wk | idx_gate | idx_wproj, D], segments padded to 8 rows
  int64_t ma_q = -1, ma_kv = 0, ma_ik = -1, ma_ig = -1, ma_iw = -1, ma_width = 0;
  float* q_a_norm = nullptr;
  DMat q_b, q_proj;
  float* kv_a_norm = nullptr;
  DMat kv_b, mla_o;
  bool has_indexer = false;
  DMat idx_wq_b;
  float* k_norm_w = nullptr;
  float* k_norm_b = nullptr;
  float* ape = nullptr;
  // MLP
  DMat gate_up, down;  // dense MLP or the shared expert: [2I, D], [D, I]
  bool has_shared = false;
  DMat router;  // [E, D] fp32
  float* bias = nullptr;
  cuda::MoeExpertWeights experts;
  bool q_experts = false;  // the routed experts run W8A8 (qexperts) instead of `experts`
  cuda::QMoeWeights qexperts;
};

struct DWeights {
  DMat embed, lm_head;
  float* final_norm = nullptr;
  std::vector<DLayer> layers;
  // The MTP layer (CudaModelOptions::mtp_drafts > 0): attention and dense MLP in `mtp` (kMla,
  // kDense, no hyper-connections), eh_proj [D, 2D] over [enorm(embedding) | hnorm(hidden)], the
  // shared head's norm and head [V, D].
  bool has_mtp = false;
  DLayer mtp;
  float *mtp_enorm = nullptr, *mtp_hnorm = nullptr, *mtp_head_norm = nullptr;
  DMat mtp_eh, mtp_head;
};

// Allocates and fills device tensors from host weights (host != null) or random values.
class Builder {
 public:
  Builder(const ModelWeights* host, bool bf16, uint64_t seed, std::vector<DeviceBuffer>* owner, int64_t* bytes)
      : host_(host), bf16_(bf16), seed_(seed), owner_(owner), bytes_(bytes) {}

  struct Part {
    const Matrix* host = nullptr;  // rows × cols, or null (random)
    int64_t rows = 0;
    int64_t row_offset = 0;
    Init init;
  };

  // A [rows, cols] matrix (bf16 per options unless force_f32), zero where no part writes.
  Result<DMat> Mat(int64_t rows, int64_t cols, const std::vector<Part>& parts, bool force_f32 = false) {
    const bool bf = bf16_ && !force_f32;
    DMat m;
    m.rows = rows;
    m.cols = cols;
    m.bf16 = bf;
    GYRE_ASSIGN_OR_RETURN(void* p, Alloc(rows * cols * m.elem_bytes()));
    m.data = p;
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemset(p, 0, rows * cols * m.elem_bytes()));
    for (const Part& part : parts) {
      void* dst = static_cast<char*>(p) + part.row_offset * cols * m.elem_bytes();
      GYRE_RETURN_IF_ERROR(Fill(dst, bf, part.rows * cols, part.host ? part.host->data.data() : nullptr,
                                part.host ? part.host->rows * part.host->cols : 0, part.init));
    }
    return m;
  }
  Result<DMat> Mat(const Matrix* h, int64_t rows, int64_t cols, Init init, bool force_f32 = false) {
    return Mat(rows, cols, {Part{h, rows, 0, init}}, force_f32);
  }
  // A projection the model runs through Impl::Linear: W8A8 when the host parts are quantized
  // (docs/quantization.md "GPU"). The quantized parts must come first; kept parts after them run
  // in high precision (the DSA indexer's compress gate and weights_proj behind q_a | kv_a | wk).
  // Any other mix (a --keep pattern splitting a fused projection) uploads the dequantized values
  // (weight-only, as before W8A8 ran on the GPU) and is counted in weight_only_fused.
  Result<DMat> QMat(int64_t rows, int64_t cols, const std::vector<Part>& parts) {
    size_t split = 0;
    QuantScheme scheme = QuantScheme::kNone;
    if (host_) {
      for (; split < parts.size(); ++split) {
        const Part& p = parts[split];
        if (!p.host || !p.host->quant) break;
        if (scheme != QuantScheme::kNone && p.host->quant->scheme != scheme) break;
        scheme = p.host->quant->scheme;
      }
    }
    if (scheme == QuantScheme::kNone) return Mat(rows, cols, parts);
    for (size_t i = split; i < parts.size(); ++i) {
      if (parts[i].host && parts[i].host->quant) {
        ++weight_only_fused_;
        return Mat(rows, cols, parts);
      }
    }
    const int64_t q_rows = split == parts.size() ? rows : parts[split].row_offset;
    const cuda::W8A8 ws = scheme == QuantScheme::kFp8Block ? cuda::W8A8::kFp8 : cuda::W8A8::kInt8;
    const int64_t sc = cuda::ActScaleCols(ws, cols);
    std::vector<uint8_t> q(q_rows * cols, 0);
    std::vector<float> scale(q_rows * sc, 0.0f);
    for (size_t i = 0; i < split; ++i) {
      const QuantizedWeight& w = *parts[i].host->quant;
      if (w.rows != parts[i].rows || w.cols != cols)
        return Status::Internal("cuda model: quantized tensor shape differs from its projection slot");
      if (scheme == QuantScheme::kFp8Block && w.block_k != cuda::kQuantGroup)
        return Status::Unimplemented("cuda model: FP8 weight_block_size [*, " + std::to_string(w.block_k) +
                                     "]; the GPU kernels take 128-channel groups");
      std::copy(w.q.begin(), w.q.end(), q.begin() + parts[i].row_offset * cols);
      const std::vector<float> ps = ScalesPerRow(w);
      std::copy(ps.begin(), ps.end(), scale.begin() + parts[i].row_offset * sc);
    }
    DMat m;
    m.rows = rows;
    m.cols = cols;
    m.qscheme = static_cast<int>(ws);
    m.q_rows = q_rows;
    GYRE_ASSIGN_OR_RETURN(void* dq, Alloc(q_rows * cols));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy(dq, q.data(), q.size(), cudaMemcpyHostToDevice));
    GYRE_ASSIGN_OR_RETURN(void* ds, Alloc(q_rows * sc * 4));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy(ds, scale.data(), scale.size() * 4, cudaMemcpyHostToDevice));
    m.data = dq;
    m.scale = static_cast<const float*>(ds);
    m.bf16 = bf16_;
    if (q_rows < rows) {
      std::vector<Part> rest(parts.begin() + split, parts.end());
      for (Part& p : rest) p.row_offset -= q_rows;
      GYRE_ASSIGN_OR_RETURN(DMat hp, Mat(rows - q_rows, cols, rest));
      m.hp = hp.data;
      m.bf16 = hp.bf16;
    }
    return m;
  }
  Result<DMat> QMat(const Matrix* h, int64_t rows, int64_t cols, Init init) {
    return QMat(rows, cols, {Part{h, rows, 0, init}});
  }
  // The routed experts W8A8 when every expert projection is quantized with one scheme (else
  // false: the caller uploads the dequantized experts).
  Result<bool> QExperts(const MoeWeights& mw, int64_t E, int64_t D, int64_t I, cuda::QMoeWeights* out) {
    if (!host_ || static_cast<int64_t>(mw.experts.size()) != E) return false;
    QuantScheme scheme = QuantScheme::kNone;
    for (const MlpWeights& e : mw.experts) {
      for (const Matrix* m : {&e.gate, &e.up, &e.down}) {
        if (!m->quant || (scheme != QuantScheme::kNone && m->quant->scheme != scheme)) return false;
        if (m->quant->scheme == QuantScheme::kFp8Block && m->quant->block_k != cuda::kQuantGroup) return false;
        scheme = m->quant->scheme;
      }
    }
    const cuda::W8A8 ws = scheme == QuantScheme::kFp8Block ? cuda::W8A8::kFp8 : cuda::W8A8::kInt8;
    const int64_t scd = cuda::ActScaleCols(ws, D), sci = cuda::ActScaleCols(ws, I);
    std::vector<uint8_t> guq(E * 2 * I * D), dnq(E * D * I);
    std::vector<float> gus(E * 2 * I * scd), dns(E * D * sci);
    for (int64_t e = 0; e < E; ++e) {
      const MlpWeights& x = mw.experts[e];
      int64_t r = 0;
      for (const Matrix* m : {&x.gate, &x.up}) {
        const QuantizedWeight& w = *m->quant;
        if (w.rows != I || w.cols != D) return Status::Internal("cuda model: expert gate/up shape");
        std::copy(w.q.begin(), w.q.end(), guq.begin() + (e * 2 * I + r) * D);
        const std::vector<float> ps = ScalesPerRow(w);
        std::copy(ps.begin(), ps.end(), gus.begin() + (e * 2 * I + r) * scd);
        r += I;
      }
      const QuantizedWeight& w = *x.down.quant;
      if (w.rows != D || w.cols != I) return Status::Internal("cuda model: expert down shape");
      std::copy(w.q.begin(), w.q.end(), dnq.begin() + e * D * I);
      const std::vector<float> ps = ScalesPerRow(w);
      std::copy(ps.begin(), ps.end(), dns.begin() + e * D * sci);
    }
    auto up = [&](const void* src, size_t bytes) -> Result<void*> {
      GYRE_ASSIGN_OR_RETURN(void* p, Alloc(static_cast<int64_t>(bytes)));
      GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice));
      return p;
    };
    GYRE_ASSIGN_OR_RETURN(void* a, up(guq.data(), guq.size()));
    GYRE_ASSIGN_OR_RETURN(void* b, up(gus.data(), gus.size() * 4));
    GYRE_ASSIGN_OR_RETURN(void* c, up(dnq.data(), dnq.size()));
    GYRE_ASSIGN_OR_RETURN(void* d, up(dns.data(), dns.size() * 4));
    out->gate_up = cuda::QWeight{ws, a, static_cast<const float*>(b), 2 * I, D};
    out->down = cuda::QWeight{ws, c, static_cast<const float*>(d), D, I};
    out->num_experts = E;
    out->hidden = D;
    out->inter = I;
    return true;
  }
  int64_t weight_only_fused() const { return weight_only_fused_; }

  // An fp32 vector of n values.
  Result<float*> Vec(const std::vector<float>* h, int64_t n, Init init) {
    GYRE_ASSIGN_OR_RETURN(void* p, Alloc(n * 4));
    GYRE_RETURN_IF_ERROR(Fill(p, false, n, h ? h->data() : nullptr, h ? static_cast<int64_t>(h->size()) : 0, init));
    return static_cast<float*>(p);
  }

 private:
  Result<void*> Alloc(int64_t bytes) {
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(std::max<int64_t>(bytes, 16)));
    void* p = b.get();
    owner_->push_back(std::move(b));
    *bytes_ += bytes;
    return p;
  }
  Status Fill(void* dst, bool bf, int64_t n, const float* h, int64_t hn, Init init) {
    if (n == 0) return Status::Ok();
    if (host_) {
      if (!h || hn != n) return Status::Internal("cuda model: host tensor of " + std::to_string(hn) +
                                                 " values where " + std::to_string(n) + " are needed");
      if (bf) {
        std::vector<uint16_t> t(n);
        for (int64_t i = 0; i < n; ++i) t[i] = Bf16Bits(h[i]);
        GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, t.data(), n * 2, cudaMemcpyHostToDevice));
      } else {
        GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, h, n * 4, cudaMemcpyHostToDevice));
      }
      return Status::Ok();
    }
    InitKernel<<<GridFor(n), 256>>>(dst, bf, n, seed_ * 0x9E3779B97F4A7C15ull + (++counter_), static_cast<int>(init.dist),
                                    init.a, init.b);
    GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return Status::Ok();
  }
  static uint16_t Bf16Bits(float v) {
    const float r = RoundBf16(v);
    uint32_t u;
    std::memcpy(&u, &r, 4);
    return static_cast<uint16_t>(u >> 16);
  }

  const ModelWeights* host_;
  bool bf16_;
  uint64_t seed_;
  uint64_t counter_ = 0;
  std::vector<DeviceBuffer>* owner_;
  int64_t* bytes_;
  int64_t weight_only_fused_ = 0;
};

Init Lin(int64_t fan_in) { return Init{Dist::kNormal, 0.0f, 1.0f / std::sqrt(static_cast<float>(fan_in))}; }
const Init kNormInit{Dist::kNormal, 1.0f, 0.1f};

}  // namespace

// ---- Impl ----------------------------------------------------------------------------------------

struct CudaModel::Impl {
  ModelConfig c;  // under TP: this rank's shard of the config (parallel/tp_model.h)
  CudaModelOptions opts;
  // Tensor parallelism (opts.tp): the rank's communicator, its LM-head rows and the gather scratch.
  parallel::DeviceCommunicator* tp = nullptr;
  int64_t lm_rows = 0;  // rows of w.lm_head: vocab_size, or the rank's padded vocabulary block
  DeviceBuffer tp_logits, tp_gather;
  // Layer split (opts.pp): this stage's communicator (rank = stage).
  parallel::DeviceCommunicator* pp = nullptr;
  // Sums a partial [n] fp32 output over the TP ranks in place (no-op without TP).
  Status TpSum(float* p, int64_t n) {
    if (!tp) return Status::Ok();
    return tp->AllReduceSum(p, p, n, DType::kF32, stream.get()).WithContext("tensor parallel all-reduce");
  }
  std::vector<DeviceBuffer> buffers;  // every allocation (weights, pools, scratch)
  CudaModelStats stats;
  DWeights w;
  cuda::Stream stream;
  std::unique_ptr<cuda::GemmLt> gemm;

  // Pools.
  struct AttnCache {
    KvDtype kv = KvDtype::kF32;  // latent / krot row format (opts.kv_cache)
    uint8_t* latent = nullptr;   // [rows, KvRowBytes(kv, R)]
    uint8_t* krot = nullptr;     // [rows, KvRowBytes(kv, rope)]
    float* idx_k = nullptr;
    float* gamma = nullptr;
    float* pool_keys = nullptr;
  };
  std::vector<AttnCache> cache;                // per layer (attention layers)
  std::vector<float*> kda_state, kda_conv;     // per layer (KDA layers)
  // KDA checkpoints (ReserveCheckpoints): per KDA layer [num_ckpts, state] and [num_ckpts, conv
  // tail], laid out as the slots; copied to and from slots on the step stream.
  std::vector<DeviceBuffer> ckpt_buffers;
  std::vector<float*> ckpt_state, ckpt_conv;
  int64_t num_ckpts = 0;
  // ReplaySSM (opts.speculative_tokens > 0; CudaModel::CommitSpeculative): per KDA layer a ring
  // [max_seqs, spec_rows, ring_row] of the uncommitted speculative piece's per-token inputs:
  // u (pre-conv, 3P) | g (P) | β (Hh, padded to 4 floats).
  std::vector<float*> spec_ring;
  int64_t spec_rows = 0, ring_row = 0;
  std::vector<int64_t> spec_len;                    // per slot: tokens of its uncommitted piece (0: none)
  std::vector<std::pair<int32_t, int32_t>> folds;   // committed (slot, n > 0), not yet enqueued
  // Fold batches' (cu, slots) arrays: pinned host pair (alternating; an event per half says its
  // upload has run), one device copy (stream order protects it).
  int32_t* fold_host[2] = {nullptr, nullptr};
  cudaEvent_t fold_ev[2] = {};
  int fold_next = 0;
  int32_t* fold_dev = nullptr;
  int64_t fold_ints = 0;
  // MTP drafts (opts.mtp_drafts > 0; cuda_model.h): the key cache (fp32 latent / rope rows of
  // num_pages pool pages, then mtp_spp scratch pages per chain row), per slot the pre-norm hidden
  // state of its last token and (speculation) the rows of its uncommitted piece, per checkpoint a
  // hidden state; commits of speculative pieces not yet enqueued; step scratch.
  int64_t mtp_k = 0, mtp_spp = 0;
  AttnCache mtp_cache;
  float* mtp_hidden = nullptr;       // [max_seqs, D]
  float* mtp_spec_hidden = nullptr;  // [max_seqs, spec_rows, D]
  float* ckpt_hidden = nullptr;      // [num_ckpts, D]
  std::vector<std::pair<int32_t, int32_t>> mtp_commits;
  float *m_hid = nullptr, *m_hin = nullptr, *m_cat = nullptr, *m_x = nullptr, *m_x2 = nullptr, *m_logits = nullptr;
  int32_t *m_iota = nullptr, *m_seq = nullptr, *m_pos = nullptr;
  int32_t *ch_ids = nullptr, *ch_pos = nullptr, *ch_table = nullptr, *ch_drafts = nullptr;
  int64_t ch_table_cap = 0;
  Status FlushMtpCommits();
  RingCopyArgs RingArgs(int64_t l, const int32_t* cu, const int32_t* slots, int64_t b0, int64_t b1, bool to_ring) const {
    const int64_t Hh = c.linear_num_heads, P = Hh * c.linear_head_dim;
    RingCopyArgs a;
    a.flat[0] = u;
    a.flat[1] = g;
    a.flat[2] = beta;
    a.width[0] = 3 * P;
    a.width[1] = P;
    a.width[2] = Hh;
    a.off[0] = 0;
    a.off[1] = 3 * P;
    a.off[2] = 4 * P;
    a.ring = spec_ring[l];
    a.ring_rows = spec_rows;
    a.ring_row = ring_row;
    a.cu = cu;
    a.slots = slots;
    a.b0 = b0;
    a.b1 = b1;
    a.to_ring = to_ring;
    return a;
  }
  Status RingCopy(const RingCopyArgs& a) {
    if (a.b1 <= a.b0) return Status::Ok();
    const int64_t total = a.width[0] + a.width[1] + a.width[2];
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 64)), static_cast<unsigned>(a.b1 - a.b0));
    RingCopyKernel<<<grid, 256, 0, s()>>>(a);
    GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return Status::Ok();
  }
  // Enqueues the queued folds on the step stream (see CudaModel::CommitSpeculative).
  Status FlushFolds();
  // KDA layer l's conv (pre-conv u → q, k, v scratch; tails of `slots`) and recurrent kernel
  // (q, k, v, g, β scratch; states of `slots`; outputs to `out`) over `seqs` sequences.
  cuda::ConvParams KdaConv(int64_t l, const int32_t* cu, const int32_t* slots, int64_t tokens, int64_t seqs) const {
    const int64_t P = c.linear_num_heads * c.linear_head_dim;
    cuda::ConvParams cp;
    cp.x = u;
    cp.w = w.layers[l].conv;
    cp.state = kda_conv[l];
    cp.split = P;
    cp.parts[0] = kq;
    cp.parts[1] = kk;
    cp.parts[2] = kv;
    cp.cu_seqlens = cu;
    cp.slots = slots;
    cp.num_tokens = tokens;
    cp.num_seqs = seqs;
    cp.channels = 3 * P;
    cp.width = c.linear_conv_kernel_dim;
    cp.num_slots = opts.max_seqs;
    return cp;
  }
  cuda::KdaRecurrentParams KdaRec(int64_t l, const int32_t* slots, int64_t seqs, float* out) const {
    cuda::KdaRecurrentParams rp;
    rp.q = kq;
    rp.k = kk;
    rp.v = kv;
    rp.g = g;
    rp.beta = beta;
    rp.slots = slots;
    rp.state = kda_state[l];
    rp.o = out;
    rp.num_seqs = static_cast<int>(seqs);
    rp.num_tokens = 1;
    rp.num_heads = static_cast<int>(c.linear_num_heads);
    rp.head_dim = static_cast<int>(c.linear_head_dim);
    rp.num_slots = opts.max_seqs;
    return rp;
  }

  // One slot ↔ checkpoint copy of every KDA layer (to_ckpt: slot → checkpoint), in stream order.
  Status CopyState(SlotId slot, CheckpointId ckpt, bool to_ckpt) {
    const int64_t Hh = c.linear_num_heads, K = c.linear_head_dim, P = Hh * K, W = c.linear_conv_kernel_dim;
    const int64_t st = Hh * K * K, cv = (W - 1) * 3 * P;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      if (!kda_state[l]) continue;
      float* s_state = kda_state[l] + slot * st;
      float* s_conv = kda_conv[l] + slot * cv;
      float* c_state = ckpt_state[l] + ckpt * st;
      float* c_conv = ckpt_conv[l] + ckpt * cv;
      GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(to_ckpt ? c_state : s_state, to_ckpt ? s_state : c_state, st * 4,
                                                cudaMemcpyDeviceToDevice, s()));
      GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(to_ckpt ? c_conv : s_conv, to_ckpt ? s_conv : c_conv, cv * 4,
                                                cudaMemcpyDeviceToDevice, s()));
    }
    if (mtp_k > 0 && ckpt_hidden) {
      const int64_t D = c.hidden_size;
      float* sh = mtp_hidden + slot * D;
      float* ch = ckpt_hidden + ckpt * D;
      GYRE_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(to_ckpt ? ch : sh, to_ckpt ? sh : ch, D * 4, cudaMemcpyDeviceToDevice, s()));
    }
    return Status::Ok();
  }
  // Sequence transfer: every page part of every attention layer as (device base, bytes per row),
  // in host-image order (ReadPages / WritePages), as (device base, bytes of one page). The latent /
  // krot rows are in the layer's KV dtype, so both ends of a transfer must run the same policy
  // (bytes_per_page differs otherwise); the pooled keys are page_tokens / PoolKeyDiv rows per page.
  std::vector<std::pair<uint8_t*, int64_t>> PageParts() const {
    std::vector<std::pair<uint8_t*, int64_t>> parts;
    const int64_t pt = opts.page_tokens;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      if (kda_state[l]) continue;
      const AttnCache& ac = cache[l];
      parts.push_back({ac.latent, pt * KvRowBytes(ac.kv, c.kv_lora_rank)});
      if (ac.krot) parts.push_back({ac.krot, pt * KvRowBytes(ac.kv, c.qk_rope_head_dim)});
      if (ac.idx_k) {
        const int64_t rb = 4 * c.index_head_dim;
        parts.push_back({reinterpret_cast<uint8_t*>(ac.idx_k), pt * rb});
        parts.push_back({reinterpret_cast<uint8_t*>(ac.gamma), pt * rb});
        parts.push_back({reinterpret_cast<uint8_t*>(ac.pool_keys), pt / cuda::PoolKeyDiv(pt, c.index_kpool) * rb});
      }
    }
    if (mtp_k > 0) {  // the MTP key rows (fp32), after every layer's
      parts.push_back({mtp_cache.latent, pt * c.kv_lora_rank * 4});
      if (mtp_cache.krot) parts.push_back({mtp_cache.krot, pt * c.qk_rope_head_dim * 4});
    }
    return parts;
  }
  // (device source, host destination, bytes) of a page image or a slot image, in image order.
  struct CopyPart {
    const uint8_t* dev;
    std::byte* host;
    size_t bytes;
  };
  // Pages ↔ a host image of pages.size() · bytes_per_page bytes, in stream order; synchronizes.
  Status CopyPages(std::span<const PageId> pages, std::byte* host, bool to_host) {
    std::vector<CopyPart> parts;
    PageCopyParts(pages, host, &parts);
    return CopyParts(parts, to_host);
  }
  // A slot <-> a host image of bytes_per_slot bytes, in stream order; synchronizes.
  Status CopySlot(SlotId slot, std::byte* host, bool to_host) {
    std::vector<CopyPart> parts;
    SlotCopyParts(slot, host, &parts);
    return CopyParts(parts, to_host);
  }
  // Each part on the step stream (pageable host memory), then a synchronization.
  Status CopyParts(const std::vector<CopyPart>& parts, bool to_host) {
    for (const CopyPart& q : parts) {
      uint8_t* dev = const_cast<uint8_t*>(q.dev);
      GYRE_CUDA_RETURN_IF_ERROR(to_host ? cudaMemcpyAsync(q.host, dev, q.bytes, cudaMemcpyDeviceToHost, s())
                                        : cudaMemcpyAsync(dev, q.host, q.bytes, cudaMemcpyHostToDevice, s()));
    }
    return stream.Synchronize();
  }
  // ReadFinished: its stream and pinned bounce buffer (made on first use), one reader at a time.
  std::mutex finished_mu;
  cuda::Stream finished_stream;
  std::byte* finished_pinned = nullptr;
  size_t finished_pinned_bytes = 0;
  int device = 0;  // the device the model lives on (a reading thread makes it current)
  void PageCopyParts(std::span<const PageId> pages, std::byte* host, std::vector<CopyPart>* out) {
    size_t off = 0;
    for (PageId p : pages) {
      for (const auto& [base, page_bytes] : PageParts()) {
        out->push_back({base + static_cast<int64_t>(p) * page_bytes, host + off, static_cast<size_t>(page_bytes)});
        off += static_cast<size_t>(page_bytes);
      }
    }
  }
  void SlotCopyParts(SlotId slot, std::byte* host, std::vector<CopyPart>* out) {
    const int64_t Hh = c.linear_num_heads, K = c.linear_head_dim, P = Hh * K, W = c.linear_conv_kernel_dim;
    const int64_t st = Hh * K * K, cv = (W - 1) * 3 * P;
    size_t off = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      if (!kda_state[l]) continue;
      for (const auto& [dev, n] : {std::pair<float*, int64_t>{kda_state[l] + slot * st, st},
                                   std::pair<float*, int64_t>{kda_conv[l] + slot * cv, cv}}) {
        const size_t bytes = static_cast<size_t>(n) * sizeof(float);
        out->push_back({reinterpret_cast<const uint8_t*>(dev), host + off, bytes});
        off += bytes;
      }
    }
    if (mtp_k > 0) {  // the MTP's hidden state of the slot's last token, after every KDA layer's
      const size_t bytes = static_cast<size_t>(c.hidden_size) * sizeof(float);
      out->push_back({reinterpret_cast<const uint8_t*>(mtp_hidden + slot * c.hidden_size), host + off, bytes});
    }
  }
  // Device → host through the pinned buffer on finished_stream: copies are batched until the
  // buffer is full, then the stream is synchronized and the batch moved out.
  Status ReadFinished(const std::vector<CopyPart>& parts) {
    std::lock_guard<std::mutex> l(finished_mu);
    GYRE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    if (!finished_stream.get()) {
      GYRE_ASSIGN_OR_RETURN(finished_stream, cuda::Stream::Create());
    }
    if (!finished_pinned) {
      constexpr size_t kBounce = size_t(32) << 20;
      void* p = nullptr;
      GYRE_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&p, kBounce, cudaHostAllocDefault));
      finished_pinned = static_cast<std::byte*>(p);
      finished_pinned_bytes = kBounce;
    }
    struct Pending {
      std::byte* host;
      size_t off, bytes;
    };
    std::vector<Pending> pending;
    size_t fill = 0;
    auto flush = [&]() -> Status {
      GYRE_RETURN_IF_ERROR(finished_stream.Synchronize());
      for (const Pending& q : pending) std::memcpy(q.host, finished_pinned + q.off, q.bytes);
      pending.clear();
      fill = 0;
      return Status::Ok();
    };
    for (const CopyPart& part : parts) {
      for (size_t done = 0; done < part.bytes;) {
        if (fill == finished_pinned_bytes) GYRE_RETURN_IF_ERROR(flush());
        const size_t n = std::min(part.bytes - done, finished_pinned_bytes - fill);
        GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(finished_pinned + fill, part.dev + done, n, cudaMemcpyDeviceToHost,
                                                  finished_stream.get()));
        pending.push_back({part.host + done, fill, n});
        fill += n;
        done += n;
      }
    }
    return flush();
  }
  int64_t num_pages = 0;      // page ids 0..num_pages-1 (the engine's bookkeeping)
  int64_t max_seq_tokens = 0;  // block-table width in tokens
  // Largest context bucket of a step: max_seq_tokens rounded up to whole pages and index pools.
  // Steps use the next power of two of their context, capped here, so that a longest sequence just
  // past a power of two (--max-model-len 1048640) does not size the context-wide workspaces (the
  // indexer's scores, attention splits, block table) for twice its length.
  int64_t ctx_cap = 0;

  // Step scratch (max_batch_tokens rows).
  int64_t nmax = 0, bmax = 0, n_streams = 1;
  float *X = nullptr, *y = nullptr, *h = nullptr, *a = nullptr, *post = nullptr, *comb = nullptr;
  float* hc_part = nullptr;  // mHC partial dot products [N, S, (2+n)n + 1]
  void* xb = nullptr;  // bf16 GEMM operand
  int64_t xb_elems = 0;
  // W8A8 (any quantized projection): the quantized activations [N, max_in] and their scales.
  void* xq = nullptr;
  float* xs = nullptr;
  DeviceBuffer moe_q_ws;  // MoeExpertsW8A8's workspace
  const float* last_cast_x = nullptr;  // what xb holds (see Linear)
  int64_t last_cast_n = 0, last_cast_k = 0, last_cast_ld = 0;
  // KDA
  float *u = nullptr, *kq = nullptr, *kk = nullptr, *kv = nullptr, *small = nullptr, *f = nullptr,
        *g = nullptr, *beta = nullptr, *z = nullptr, *o = nullptr, *yn = nullptr;
  // MLA
  float *pa = nullptr, *q_resid = nullptr, *q = nullptr, *latent = nullptr, *qi = nullptr, *ki_raw = nullptr,
        *ki = nullptr, *wts = nullptr, *attn = nullptr;
  int32_t *sel = nullptr, *sel_count = nullptr;
  int64_t sel_cap = 0;
  // MLP
  float *gu = nullptr, *act = nullptr, *rlogits = nullptr, *rw = nullptr, *acc = nullptr, *shared_out = nullptr;
  int32_t* ridx = nullptr;
  // Head.
  float *hm = nullptr, *hn = nullptr;
  int32_t* next_ids = nullptr;
  // Device sampling: per logits row, parameters (uploaded with the step) and the sampled id's
  // log-probability; pinned host mirrors.
  cuda::SampleParamsDev* sample_params = nullptr;
  float* row_logprob = nullptr;
  int32_t* last_token = nullptr;  // [max_seqs]: each slot's most recent sample (kPrevToken inputs)
  // Structured output: per logits row the index of its token mask or -1 ([N]), and the masks
  // ([max_seqs, mask_words] uint32), uploaded with a step that has masked pieces.
  int32_t* mask_row = nullptr;
  uint32_t* token_masks = nullptr;
  int64_t mask_words = 0;
  // Logit processing (ops/penalties.h, penalties_cuda.h), allocated by the first step that needs
  // it: per slot the token counts ([max_seqs, V] int32 output occurrences, uint8 prompt presence),
  // per step the rows' parameters, the bias and stop lists and the tokens to count. Steps with
  // processing never replay a graph, so these buffers may grow (after a stream synchronize).
  DeviceBuffer pen_counts, pen_prompt, pen_rows, pen_bias_ids, pen_bias_values, pen_stops, pen_entries;
  // Grows `buf` to hold `bytes` (contents lost; waits for the stream first, steps in flight may use it).
  Status Reserve(DeviceBuffer& buf, size_t bytes) {
    if (buf.bytes() >= bytes && buf.get()) return Status::Ok();
    GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s()));
    buf.Reset();
    GYRE_ASSIGN_OR_RETURN(buf, DeviceBuffer::Create(std::max<size_t>(bytes, 256)));
    return Status::Ok();
  }
  // Host staging of one outstanding step (two alternate, so step n+1 is prepared while step n
  // runs): pinned inputs (the int32 blob, sampling parameters) and pinned outputs (ids, logprobs),
  // and what Collect needs to assemble the results.
  struct Staging {
    int32_t* blob = nullptr;
    cuda::SampleParamsDev* params = nullptr;
    int32_t* mask_row = nullptr;     // [N]
    uint32_t* masks = nullptr;       // [max_seqs, mask_words]
    int32_t* ids = nullptr;
    float* lps = nullptr;
    int32_t* drafts = nullptr;  // MTP drafts [chains, chain_k]
    // The launched step.
    int64_t step = 0;  // launch number: its events are ev_begin/ev_end[step % 4]
    size_t pieces = 0;
    int64_t rows = 0, tokens = 0;
    bool use_graph = false, want_logits = false, want_logprobs = false;
    std::vector<int64_t> row_of_input, nrows_of_input;
    std::vector<uint8_t> sampled, spec;
    std::vector<int32_t> chain_of_input, mtp_of_input;  // per piece: its draft chain (-1: none), StepPiece::mtp
    int64_t chain_k = 0;
    std::vector<int32_t> top_logprobs;
    std::vector<float> all;                                       // want_logits: every row
    // Logit processing inputs of the step (uploaded at launch).
    std::vector<cuda::PenaltyRowDev> pen_rows;
    std::vector<int32_t> pen_bias_ids, pen_stops;
    std::vector<float> pen_bias_values;
    std::vector<cuda::CountEntryDev> pen_entries;
    std::vector<std::pair<size_t, std::vector<float>>> top_rows;  // (piece, its last row)
    // Prompt-embedding rows of the step (StepPiece::embeds): the token each replaces, the rows.
    std::vector<int32_t> img_tok;
    std::vector<float> img_rows;
  };
  Staging staging[2];
  int next_staging = 0;
  std::vector<int> outstanding;  // staging indices, oldest first
  DeviceBuffer logits_buf;
  int64_t logits_rows = 0;
  float* glogits = nullptr;  // [bmax, V]: the logits of graph-replayed decode steps
  // Workspaces.
  DeviceBuffer kda_ws, mla_ws, idx_ws, moe_ws;
  // Step inputs: one int32 blob, pinned on the host, mirrored on the device.
  // o_rslot: per logits row, the slot whose last sample it is (-1: not sampled); last_token ← ids.
  // o_keep / o_tslots (per sequence): 1 for a speculative piece (its KDA state is read, not
  // written) / the slot whose conv tail takes the piece's inputs (-1 for a speculative piece).
  int64_t blob_ints = 0, o_ids = 0, o_seq = 0, o_pos = 0, o_cu = 0, o_slots = 0, o_rows = 0, o_rslot = 0, o_bt = 0,
          o_keep = 0, o_tslots = 0, bt_cap = 0;
  // o_mtp (per sequence): its StepPiece::mtp (-1: no MTP); o_chain: per draft chain (batch row,
  // first and last logits row of its piece, speculative) (MtpChainSetupKernel).
  int64_t o_mtp = 0, o_chain = 0;
  int32_t* dev_blob = nullptr;

  // Step timing: begin/end events of launch n are [n % 4]: with at most two steps outstanding,
  // the previous step's end is still intact when a step is collected (idle gap = its begin − that).
  cudaEvent_t ev_begin[4] = {}, ev_end[4] = {};
  int64_t launched = 0;
  // Layer profiling: events[0] before the embedding, [1] after it, [2 + l] after layer l, last after the head.
  std::vector<cudaEvent_t> events;
  bool profiling = false;
  // Section markers of a profiled step: Sec(name) closes the running section and opens `name`.
  std::vector<cudaEvent_t> sec_events;
  std::vector<std::string> sec_names;
  size_t sec_n = 0;
  std::string sec_prefix;
  // With span recording on (and not capturing a graph), each section is also a CPU span "op" with
  // its layer, so the device trace charges the kernels launched inside it to the section's name.
  const char* span_name = nullptr;
  int64_t span_start = 0, span_layer = -1, cur_layer = -1;
  bool capturing = false;
  void SectionSpan(const char* name) {
    if (!trace::Enabled() || capturing) {
      span_name = nullptr;
      return;
    }
    const int64_t now = trace::NowNs();
    if (span_name)
      trace::Record({span_name, "op", span_start, now - span_start, trace::ThreadId(), trace::Attrs{.layer = span_layer}});
    span_name = std::strcmp(name, "end") == 0 ? nullptr : name;
    span_start = now;
    span_layer = cur_layer;
  }
  Status Sec(const char* name) {
    SectionSpan(name);
    if (!profiling) return Status::Ok();
    if (sec_n == sec_events.size()) {
      cudaEvent_t e = nullptr;
      GYRE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
      sec_events.push_back(e);
      sec_names.emplace_back();
    }
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(sec_events[sec_n], s()));
    sec_names[sec_n++] = sec_prefix + name;
    return Status::Ok();
  }

  // Decode graphs, by (batch bucket, context bucket).
  // (batch, context, sampling, masked, kind): decode steps (kind 0), and verify steps (every piece
  // speculative, padded to spec_rows tokens; their logits rows in vlogits): kind 1, or 2 + k with
  // MTP chains of k drafts.
  std::map<std::tuple<int64_t, int64_t, bool, bool, int64_t>, cudaGraphExec_t> graphs;
  DeviceBuffer img_tok, img_rows;  // the step's prompt-embedding rows (Staging::img_*), uploaded at launch
  DeviceBuffer vlogits;  // [bmax · spec_rows, V], made by the first verify graph (its address is captured)
  bool graphs_broken = false;  // a capture failed once: decode steps run eagerly from then on

  ~Impl() {
    for (auto& [k, g] : graphs) (void)cudaGraphExecDestroy(g);
    for (cudaEvent_t e : events) (void)cudaEventDestroy(e);
    for (cudaEvent_t e : sec_events) (void)cudaEventDestroy(e);

    for (Staging& st : staging) {
      for (void* p : {static_cast<void*>(st.blob), static_cast<void*>(st.params), static_cast<void*>(st.ids),
                      static_cast<void*>(st.lps), static_cast<void*>(st.mask_row), static_cast<void*>(st.masks),
                      static_cast<void*>(st.drafts)})
        if (p) (void)cudaFreeHost(p);
    }
    if (finished_pinned) (void)cudaFreeHost(finished_pinned);
    for (int i = 0; i < 2; ++i) {
      if (fold_host[i]) (void)cudaFreeHost(fold_host[i]);
      if (fold_ev[i]) (void)cudaEventDestroy(fold_ev[i]);
    }
    for (int i = 0; i < 4; ++i)
      for (cudaEvent_t e : {ev_begin[i], ev_end[i]})
        if (e) (void)cudaEventDestroy(e);
  }

  Result<void*> Alloc(int64_t bytes) {
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(std::max<int64_t>(bytes, 16)));
    void* p = b.get();
    buffers.push_back(std::move(b));
    return p;
  }
  template <typename T>
  Result<T*> AllocN(int64_t n, int64_t* counter) {
    *counter += n * static_cast<int64_t>(sizeof(T));
    GYRE_ASSIGN_OR_RETURN(void* p, Alloc(n * static_cast<int64_t>(sizeof(T))));
    return static_cast<T*>(p);
  }

  Status BuildWeights(const ModelWeights* host);
  Status BuildPools();
  Status BuildScratch();
  KvDtype LayerKv(int64_t l) const {
    return opts.kv_cache.layers.empty() ? KvDtype::kF32 : opts.kv_cache.layers[static_cast<size_t>(l)];
  }

  // cuBLASLt's algorithm for every weight shape at every row bucket up to nmax, queried at load:
  // a first request of a new length then costs no heuristic query on its critical path
  // (bench/results/gpu_mcp_example: 25 queries, 47-61 ms of host time in the first prefill).
  Status PrepareGemms() {
    GYRE_SPAN("gemm.prepare", "plan");
    std::set<std::tuple<int64_t, int64_t, bool>> shapes;
    auto add = [&](const DMat& m) {
      if (m.qscheme != 0) {
        if (m.hp && m.q_rows < m.rows) shapes.insert({m.rows - m.q_rows, m.cols, m.bf16});
        return;
      }
      if (m.data && m.rows > 0 && m.cols > 0) shapes.insert({m.rows, m.cols, m.bf16});
    };
    for (const DLayer& L : w.layers)
      for (const DMat* m : {&L.kda_qkv, &L.kda_small, &L.kda_fb, &L.kda_gb, &L.kda_o, &L.mla_a, &L.q_b, &L.q_proj,
                            &L.kv_b, &L.mla_o, &L.idx_wq_b, &L.gate_up, &L.down, &L.router})
        add(*m);
    add(w.lm_head);
    if (w.has_mtp) {
      for (const DMat* m : {&w.mtp.mla_a, &w.mtp.q_b, &w.mtp.q_proj, &w.mtp.kv_b, &w.mtp.mla_o, &w.mtp.gate_up,
                            &w.mtp.down, &w.mtp_eh, &w.mtp_head})
        add(*m);
    }
    for (const auto& [n, k, bf16] : shapes)
      GYRE_RETURN_IF_ERROR(gemm->Prepare(bf16 ? cuda::GemmDType::kBf16F32 : cuda::GemmDType::kF32, n, k, std::max<int64_t>(nmax, 1)));
    return Status::Ok();
  }

  // ---- ops on the stream ----
  cudaStream_t s() const { return stream.get(); }
  // out = x·wᵀ. bf16 weights: x is first rounded to bf16 into xb; `reuse_cast` skips that when the
  // previous Linear call cast the same, unchanged x (same pointer and shape).
  Status Linear(const float* x, int64_t n, const DMat& wt, float* out, int64_t ldx = 0, int64_t ldy = 0,
                bool reuse_cast = false) {
    if (n == 0) return Status::Ok();
    const int64_t k = wt.cols;
    if (ldx == 0) ldx = k;
    if (wt.qscheme != 0) return LinearW8A8(x, n, wt, out, ldx, ldy);
    if (!wt.bf16) return gemm->Run(cuda::GemmDType::kF32, x, wt.data, out, n, wt.rows, k, s(), ldx, ldy);
    if (n * k > xb_elems) return Status::Internal("cuda model: bf16 operand buffer too small");
    const bool same = reuse_cast && last_cast_x == x && last_cast_n == n && last_cast_k == k && last_cast_ld == ldx;
    if (!same) {
      CastRowsKernel<<<GridFor(n * k), 256, 0, s()>>>(x, n, k, ldx, static_cast<__nv_bfloat16*>(xb));
      GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
      last_cast_x = x;
      last_cast_n = n;
      last_cast_k = k;
      last_cast_ld = ldx;
    }
    return gemm->Run(cuda::GemmDType::kBf16F32, xb, wt.data, out, n, wt.rows, k, s(), 0, ldy);
  }
  // W8A8 (quant_cuda.h): x quantized per token (and 128-group for fp8), then the quantized rows'
  // GEMM; kept rows behind them (DMat::hp) through cuBLASLt into the columns after them.
  Status LinearW8A8(const float* x, int64_t n, const DMat& wt, float* out, int64_t ldx, int64_t ldy) {
    const int64_t k = wt.cols;
    if (ldy == 0) ldy = wt.rows;
    const auto scheme = static_cast<cuda::W8A8>(wt.qscheme);
    if (!xq || n * k > xb_elems) return Status::Internal("cuda model: W8A8 operand buffer too small");
    const cuda::ActQuantArgs qa{x, n, k, ldx, xq, xs};
    GYRE_RETURN_IF_ERROR(cuda::QuantizeActivations(scheme, qa, s()));
    const cuda::QWeight qw{scheme, wt.data, wt.scale, wt.q_rows, k};
    GYRE_RETURN_IF_ERROR(cuda::GemmW8A8(xq, xs, n, qw, out, ldy, s()));
    last_cast_x = nullptr;  // xb is not what a reuse_cast caller expects any more
    if (!wt.hp || wt.q_rows >= wt.rows) return Status::Ok();
    DMat rest;
    rest.data = wt.hp;
    rest.rows = wt.rows - wt.q_rows;
    rest.cols = k;
    rest.bf16 = wt.bf16;
    return Linear(x, n, rest, out + wt.q_rows, ldx, ldy);
  }
  // ops::HcPre: HcDotKernel (fn·x and Σx² per 1024-element slice) → HcMixKernel.
  Status HcPre(const DHc& hc, int64_t n) {
    if (n == 0) return Status::Ok();
    const int64_t nS = n_streams, D = c.hidden_size, K = nS * D;
    if (K % 4 != 0) return Status::Unimplemented("cuda model: n·hidden_size must be a multiple of 4");
    const int S = static_cast<int>((K + kHcSlice - 1) / kHcSlice);
    const bool big = n >= 16;
    const dim3 grid(static_cast<unsigned>(big ? (n + 3) / 4 : n), static_cast<unsigned>(S));
    switch (nS) {
#define GYRE_HC_DOT(NS)                                                                          \
  case NS:                                                                                       \
    if (big) HcDotKernel<NS, 4><<<grid, 256, 0, s()>>>(X, n, K, hc.fn, hc_part, S);             \
    else HcDotKernel<NS, 1><<<grid, 256, 0, s()>>>(X, n, K, hc.fn, hc_part, S);                 \
    break;
      GYRE_HC_DOT(1)
      GYRE_HC_DOT(2)
      GYRE_HC_DOT(3)
      GYRE_HC_DOT(4)
#undef GYRE_HC_DOT
      default:
        return Status::Unimplemented("cuda model: hc_mult > 4");
    }
    GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    const int iters = static_cast<int>(c.hc_sinkhorn_iters);
    switch (nS) {
#define GYRE_HC_MIX(NS)                                                                                         \
  case NS:                                                                                                      \
    HcMixKernel<NS><<<static_cast<unsigned>(n), 256, 0, s()>>>(X, hc_part, S, K, c.rms_norm_eps, hc.base,        \
                                                               hc.scale, D, c.hc_eps, iters, post, comb, y); \
    break;
      GYRE_HC_MIX(1)
      GYRE_HC_MIX(2)
      GYRE_HC_MIX(3)
      GYRE_HC_MIX(4)
#undef GYRE_HC_MIX
    }
    GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return Status::Ok();
  }
  Status Copy2D(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t n, int64_t width) {
    if (n == 0) return Status::Ok();
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(dst, ld_dst * 4, src, ld_src * 4, width * 4, n,
                                                cudaMemcpyDeviceToDevice, s()));
    return Status::Ok();
  }

  struct StepDims {
    int64_t n = 0, b = 0, bd = 0;      // tokens, sequences, decode sequences (the first bd, one token each)
    int64_t bs = 0;                    // speculative pieces (the bs after the decode rows; ReplaySSM)
    std::vector<int64_t> cu;           // host cu_seqlens [b+1] (for the chunked KDA)
    std::vector<int32_t> slots;        // host slots [b]
    cuda::PagedBatch pb;
    int64_t rows = 0;                  // logit rows
    bool sampling = false;             // some row samples (SampleRows), else greedy (Argmax)
    bool masked = false;               // some row has a token mask (ApplyTokenMask first)
    bool penalized = false;            // some row has logit processing (ApplyPenaltyRows before the mask)
    int64_t max_ctx = 0;               // longest start + tokens of the step's pieces
    bool mtp = false;                  // some piece runs the MTP layer (StepPiece::mtp >= 0)
    int64_t nchain = 0, chain_k = 0;   // draft chains (blob o_chain) and the steps they run
    int64_t img = 0;                   // prompt-embedding rows replacing table rows (img_tok / img_rows)
  };
  Status RunLayers(const StepDims& d);
  Status KdaLayer(const StepDims& d, const DLayer& L, int64_t li, const float* x, float* out);
  Status AttnLayer(const StepDims& d, const DLayer& L, AttnCache& ac, const float* x, float* out,
                   const int32_t** last_sel);
  // The MTP layer's input rows: eh_proj([enorm(embed(ids)) | hnorm(hin)]) → out [n, D].
  Status MtpInput(const int32_t* ids, const float* hin, int64_t n, float* out);
  // After the head of a step with MTP pieces: their key rows, then the draft chains (ch_drafts).
  Status MtpStep(const StepDims& d);
  Status MlpLayer(const StepDims& d, const DLayer& L, const float* x, float* out);
  Status Head(const StepDims& d, float* logits_out);
  Status CaptureDecode(const StepDims& d, float* logits, cudaGraphExec_t* exec);
};

// ---- weights -------------------------------------------------------------------------------------

Status CudaModel::Impl::BuildWeights(const ModelWeights* host) {
  Builder b(host, opts.bf16_weights, opts.seed, &buffers, &stats.weight_bytes);
  const int64_t D = c.hidden_size, V = c.vocab_size;
  const bool hc = c.hc_mult > 0;
  const int64_t nS = hc ? c.hc_mult : 1, mix = (2 + nS) * nS;
  auto H = [&](const Matrix& m) -> const Matrix* { return host ? &m : nullptr; };
  auto Hv = [&](const std::vector<float>& v) -> const std::vector<float>* { return host ? &v : nullptr; };
  GYRE_ASSIGN_OR_RETURN(w.embed, b.Mat(host ? &host->embed : nullptr, V, D, Init{Dist::kNormal, 0, 1}));
  GYRE_ASSIGN_OR_RETURN(w.lm_head, b.Mat(host ? &host->lm_head : nullptr, lm_rows, D, Lin(D)));
  GYRE_ASSIGN_OR_RETURN(w.final_norm, b.Vec(host ? &host->final_norm : nullptr, D, kNormInit));
  // An MLA / DSA attention block's weights (a layer's, or the MTP layer's without indexer).
  auto build_mla = [&](DLayer& L, const MlaWeights& m, bool indexer) -> Status {
    const int64_t Hh = c.num_attention_heads, qk = c.qk_head_dim(), R = c.kv_lora_rank, rope = c.qk_rope_head_dim;
    const int64_t ql = c.q_lora_rank;
    L.has_indexer = indexer;
    const int64_t Hi = c.index_n_heads, di = c.index_head_dim;
    std::vector<Builder::Part> parts;
    int64_t off = 0;
    if (ql > 0) {
      L.ma_q = off;
      parts.push_back({H(m.q_a), ql, off, Lin(D)});
      off += Pad8(ql);
    }
    L.ma_kv = off;
    parts.push_back({H(m.kv_a), R + rope, off, Lin(D)});
    off += Pad8(R + rope);
    if (L.has_indexer) {
      const IndexerWeights& iw = m.indexer;
      L.ma_ik = off;
      parts.push_back({H(iw.wk), di, off, Lin(D)});
      off += Pad8(di);
      L.ma_ig = off;
      parts.push_back({H(iw.compress_gate), di, off, Lin(D)});
      off += Pad8(di);
      L.ma_iw = off;
      parts.push_back({H(iw.weights_proj), Hi, off, Lin(D)});
      off += Pad8(Hi);
    }
    L.ma_width = off;
    GYRE_ASSIGN_OR_RETURN(L.mla_a, b.QMat(off, D, parts));
    if (ql > 0) {
      GYRE_ASSIGN_OR_RETURN(L.q_a_norm, b.Vec(Hv(m.q_a_norm), ql, kNormInit));
      GYRE_ASSIGN_OR_RETURN(L.q_b, b.QMat(H(m.q_b), Hh * qk, ql, Lin(ql)));
    } else {
      GYRE_ASSIGN_OR_RETURN(L.q_proj, b.QMat(H(m.q_proj), Hh * qk, D, Lin(D)));
    }
    GYRE_ASSIGN_OR_RETURN(L.kv_a_norm, b.Vec(Hv(m.kv_a_norm), R, kNormInit));
    GYRE_ASSIGN_OR_RETURN(L.kv_b, b.Mat(H(m.kv_b), Hh * (c.qk_nope_head_dim + c.v_head_dim), R, Lin(R)));
    GYRE_ASSIGN_OR_RETURN(L.mla_o, b.QMat(H(m.o), D, Hh * c.v_head_dim, Lin(Hh * c.v_head_dim)));
    if (L.has_indexer) {
      const IndexerWeights& iw = m.indexer;
      GYRE_ASSIGN_OR_RETURN(L.idx_wq_b, b.QMat(H(iw.wq_b), Hi * di, ql, Lin(ql)));
      GYRE_ASSIGN_OR_RETURN(L.k_norm_w, b.Vec(Hv(iw.k_norm_w), di, kNormInit));
      GYRE_ASSIGN_OR_RETURN(L.k_norm_b, b.Vec(Hv(iw.k_norm_b), di, Init{Dist::kNormal, 0, 0.1f}));
      GYRE_ASSIGN_OR_RETURN(DMat ape, b.Mat(H(iw.ape), c.index_kpool, di, Init{Dist::kNormal, 0, 0.5f}, true));
      L.ape = static_cast<float*>(const_cast<void*>(ape.data));
    }
    return Status::Ok();
  };
  auto swiglu = [&](const MlpWeights* mw, int64_t I, DMat* gate_up, DMat* down) -> Status {
    GYRE_ASSIGN_OR_RETURN(*gate_up, b.QMat(2 * I, D, {{mw ? &mw->gate : nullptr, I, 0, Lin(D)},
                                                      {mw ? &mw->up : nullptr, I, I, Lin(D)}}));
    GYRE_ASSIGN_OR_RETURN(*down, b.QMat(mw ? &mw->down : nullptr, D, I, Lin(I)));
    return Status::Ok();
  };
  w.layers.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    DLayer& L = w.layers[l];
    static const LayerWeights kEmpty;
    const LayerWeights& hl = host ? host->layers[l] : kEmpty;
    L.attn = c.layer_types[l];
    L.mlp = c.mlp_layer_types[l];
    GYRE_ASSIGN_OR_RETURN(L.input_norm, b.Vec(Hv(hl.input_norm), D, kNormInit));
    GYRE_ASSIGN_OR_RETURN(L.post_norm, b.Vec(Hv(hl.post_norm), D, kNormInit));
    if (hc) {
      for (auto [dst, src] : {std::pair<DHc*, const HcWeights*>{&L.attn_hc, &hl.attn_hc}, {&L.ffn_hc, &hl.ffn_hc}}) {
        GYRE_ASSIGN_OR_RETURN(DMat fn, b.Mat(H(src->fn), mix, nS * D, Init{Dist::kNormal, 0, 0.02f}, true));
        dst->fn = static_cast<float*>(const_cast<void*>(fn.data));
        GYRE_ASSIGN_OR_RETURN(dst->base, b.Vec(Hv(src->base), mix, Init{Dist::kNormal, 0, 0.5f}));
        GYRE_ASSIGN_OR_RETURN(dst->scale, b.Vec(Hv(src->scale), 3, Init{Dist::kNormal, 0, 0.5f}));
      }
    }
    if (L.attn == AttnKind::kKda) {
      const int64_t Hh = c.linear_num_heads, K = c.linear_head_dim, P = Hh * K, W = c.linear_conv_kernel_dim;
      const KdaWeights& k = hl.kda;
      GYRE_ASSIGN_OR_RETURN(L.kda_qkv, b.QMat(3 * P, D, {{H(k.q), P, 0, Lin(D)}, {H(k.k), P, P, Lin(D)},
                                                         {H(k.v), P, 2 * P, Lin(D)}}));
      L.ks_b = 0;
      L.ks_fa = Pad8(Hh);
      L.ks_ga = L.ks_fa + Pad8(K);
      L.ks_width = L.ks_ga + Pad8(K);
      GYRE_ASSIGN_OR_RETURN(L.kda_small, b.Mat(L.ks_width, D, {{H(k.b), Hh, L.ks_b, Lin(D)}, {H(k.f_a), K, L.ks_fa, Lin(D)},
                                                              {H(k.g_a), K, L.ks_ga, Lin(D)}}));
      GYRE_ASSIGN_OR_RETURN(L.kda_fb, b.Mat(H(k.f_b), P, K, Lin(K)));
      GYRE_ASSIGN_OR_RETURN(L.kda_gb, b.Mat(H(k.g_b), P, K, Lin(K)));
      GYRE_ASSIGN_OR_RETURN(DMat cv, b.Mat(H(k.conv), 3 * P, W, Init{Dist::kNormal, 0, 0.5f}, true));
      L.conv = static_cast<float*>(const_cast<void*>(cv.data));
      GYRE_ASSIGN_OR_RETURN(L.dt_bias, b.Vec(Hv(k.dt_bias), P, Init{Dist::kUniform, -2.0f, 1.0f}));
      GYRE_ASSIGN_OR_RETURN(L.a_log, b.Vec(Hv(k.a_log), Hh, Init{Dist::kLog1p15U, 0, 0}));
      GYRE_ASSIGN_OR_RETURN(L.o_norm, b.Vec(Hv(k.o_norm), K, kNormInit));
      GYRE_ASSIGN_OR_RETURN(L.kda_o, b.QMat(H(k.o), D, P, Lin(P)));
    } else {
      GYRE_RETURN_IF_ERROR(build_mla(L, hl.mla, L.attn == AttnKind::kDsa && c.indexer_types[l] == IndexerKind::kFull));
    }
    // MLP.
    if (L.mlp == MlpKind::kDense) {
      // The host's width (a TP shard's may differ from the config's by the split).
      GYRE_RETURN_IF_ERROR(swiglu(host ? &hl.dense : nullptr, host ? hl.dense.gate.rows : c.intermediate_size,
                                  &L.gate_up, &L.down));
    } else {
      const MoeWeights& mw = hl.moe;
      const int64_t E = c.n_routed_experts, I = c.moe_intermediate_size;
      // The experts this model holds: all, or an expert-parallel rank's range (the router stays whole).
      const int64_t El = opts.tp.comm && opts.tp.expert_count > 0 ? opts.tp.expert_count : E;
      GYRE_ASSIGN_OR_RETURN(L.router, b.Mat(H(mw.router), E, D, Lin(D), true));
      GYRE_ASSIGN_OR_RETURN(L.bias, b.Vec(host && !mw.bias.empty() ? &mw.bias : nullptr, E,
                                          Init{Dist::kNormal, 0, 0.05f}));
      if (host && mw.bias.empty()) GYRE_CUDA_RETURN_IF_ERROR(cudaMemset(L.bias, 0, E * 4));
      std::vector<Builder::Part> gu_parts, dn_parts;
      if (host) {
        GYRE_ASSIGN_OR_RETURN(L.q_experts, b.QExperts(mw, El, D, I, &L.qexperts));
      }
      if (L.q_experts) {
        // No dequantized copy: the W8A8 experts are the only ones.
      } else if (host) {
        for (int64_t e = 0; e < El; ++e) {
          gu_parts.push_back({&mw.experts[e].gate, I, e * 2 * I, {}});
          gu_parts.push_back({&mw.experts[e].up, I, e * 2 * I + I, {}});
          dn_parts.push_back({&mw.experts[e].down, D, e * D, {}});
        }
      } else {
        gu_parts.push_back({nullptr, El * 2 * I, 0, Lin(D)});
        dn_parts.push_back({nullptr, El * D, 0, Lin(I)});
      }
      if (!L.q_experts) {
        GYRE_ASSIGN_OR_RETURN(DMat gu, b.Mat(El * 2 * I, D, gu_parts));
        GYRE_ASSIGN_OR_RETURN(DMat dn, b.Mat(El * D, I, dn_parts));
        L.experts = cuda::MoeExpertWeights{gu.data, dn.data, gu.bf16, El, D, I};
      }
      L.has_shared = host ? mw.has_shared : c.n_shared_experts > 0;
      if (L.has_shared) {
        GYRE_RETURN_IF_ERROR(swiglu(host ? &mw.shared : nullptr,
                                    host ? mw.shared.gate.rows : I * std::max<int64_t>(c.n_shared_experts, 1),
                                    &L.gate_up, &L.down));
      }
    }
  }
  if (opts.mtp_drafts > 0) {
    // The MTP layer (model/weights.h MtpWeights; the CPU's Model::MtpRows is its reference).
    static const MtpWeights kNoMtp;
    const MtpWeights& mw = host ? host->mtp : kNoMtp;
    DLayer& L = w.mtp;
    w.has_mtp = true;
    L.attn = AttnKind::kMla;
    L.mlp = MlpKind::kDense;
    GYRE_ASSIGN_OR_RETURN(w.mtp_enorm, b.Vec(Hv(mw.enorm), D, kNormInit));
    GYRE_ASSIGN_OR_RETURN(w.mtp_hnorm, b.Vec(Hv(mw.hnorm), D, kNormInit));
    GYRE_ASSIGN_OR_RETURN(w.mtp_eh, b.QMat(H(mw.eh_proj), D, 2 * D, Lin(2 * D)));
    GYRE_ASSIGN_OR_RETURN(L.input_norm, b.Vec(Hv(mw.input_norm), D, kNormInit));
    GYRE_ASSIGN_OR_RETURN(L.post_norm, b.Vec(Hv(mw.post_norm), D, kNormInit));
    GYRE_RETURN_IF_ERROR(build_mla(L, mw.mla, /*indexer=*/false));
    GYRE_RETURN_IF_ERROR(swiglu(host ? &mw.mlp : nullptr, host ? mw.mlp.gate.rows : c.intermediate_size, &L.gate_up,
                                &L.down));
    GYRE_ASSIGN_OR_RETURN(w.mtp_head_norm, b.Vec(Hv(mw.head_norm), D, kNormInit));
    GYRE_ASSIGN_OR_RETURN(w.mtp_head, b.Mat(H(mw.head), V, D, Lin(D)));
  }
  if (b.weight_only_fused() > 0)
    std::fprintf(stderr, "cuda model: %lld fused projections mix quantized and kept weights; they run on the "
                 "dequantized weights (weight-only W8A8)\n", static_cast<long long>(b.weight_only_fused()));
  return Status::Ok();
}

// ---- pools and scratch ---------------------------------------------------------------------------

Status CudaModel::Impl::BuildPools() {
  const int64_t pt = opts.page_tokens;
  num_pages = (opts.kv_tokens + pt - 1) / pt;
  const int64_t rows = num_pages * pt;
  cache.resize(c.num_hidden_layers);
  kda_state.assign(c.num_hidden_layers, nullptr);
  kda_conv.assign(c.num_hidden_layers, nullptr);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const DLayer& L = w.layers[l];
    if (L.attn == AttnKind::kKda) {
      const int64_t Hh = c.linear_num_heads, K = c.linear_head_dim, P = Hh * K, W = c.linear_conv_kernel_dim;
      GYRE_ASSIGN_OR_RETURN(kda_state[l], AllocN<float>(opts.max_seqs * Hh * K * K, &stats.state_bytes));
      GYRE_ASSIGN_OR_RETURN(kda_conv[l], AllocN<float>(opts.max_seqs * (W - 1) * 3 * P, &stats.state_bytes));
      if (spec_rows > 0) {
        if (spec_ring.empty()) spec_ring.assign(c.num_hidden_layers, nullptr);
        GYRE_ASSIGN_OR_RETURN(spec_ring[l], AllocN<float>(opts.max_seqs * spec_rows * ring_row, &stats.spec_bytes));
      }
    } else {
      AttnCache& ac = cache[l];
      ac.kv = LayerKv(l);
      GYRE_ASSIGN_OR_RETURN(ac.latent, AllocN<uint8_t>(rows * KvRowBytes(ac.kv, c.kv_lora_rank), &stats.kv_bytes));
      if (c.qk_rope_head_dim > 0) {
        GYRE_ASSIGN_OR_RETURN(ac.krot,
                              AllocN<uint8_t>(rows * KvRowBytes(ac.kv, c.qk_rope_head_dim), &stats.kv_bytes));
      }
      if (L.has_indexer) {
        const int64_t di = c.index_head_dim;
        GYRE_ASSIGN_OR_RETURN(ac.idx_k, AllocN<float>(rows * di, &stats.kv_bytes));
        GYRE_ASSIGN_OR_RETURN(ac.gamma, AllocN<float>(rows * di, &stats.kv_bytes));
        GYRE_ASSIGN_OR_RETURN(ac.pool_keys,
                              AllocN<float>(cuda::PoolKeyRows(rows, pt, c.index_kpool) * di, &stats.kv_bytes));
      }
    }
  }
  if (mtp_k > 0) {
    // The MTP key cache: the pool's pages (in the page images: kv_bytes), then each chain row's
    // scratch pages (bmax as BuildScratch computes it). Zeroed: pages shared from a sequence that
    // ran without MTP read as zero keys, not as NaN.
    const int64_t R = c.kv_lora_rank, rope = c.qk_rope_head_dim;
    const int64_t chains = std::min<int64_t>(opts.max_seqs, opts.max_batch_tokens);
    const int64_t all_rows = (num_pages + chains * mtp_spp) * pt;
    mtp_cache.kv = KvDtype::kF32;
    for (auto [dst, width] : {std::pair<uint8_t**, int64_t>{&mtp_cache.latent, R}, {&mtp_cache.krot, rope}}) {
      if (width == 0) continue;
      GYRE_ASSIGN_OR_RETURN(void* p, Alloc(all_rows * width * 4));
      GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p, 0, all_rows * width * 4, s()));
      *dst = static_cast<uint8_t*>(p);
      stats.kv_bytes += rows * width * 4;
      stats.mtp_bytes += (all_rows - rows) * width * 4;
    }
    GYRE_ASSIGN_OR_RETURN(mtp_hidden, AllocN<float>(opts.max_seqs * c.hidden_size, &stats.state_bytes));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(mtp_hidden, 0, opts.max_seqs * c.hidden_size * 4, s()));
    if (spec_rows > 0) {
      GYRE_ASSIGN_OR_RETURN(mtp_spec_hidden, AllocN<float>(opts.max_seqs * spec_rows * c.hidden_size, &stats.spec_bytes));
    }
  }
  return Status::Ok();
}

Status CudaModel::Impl::BuildScratch() {
  const int64_t N = nmax = opts.max_batch_tokens, D = c.hidden_size;
  bmax = std::min<int64_t>(opts.max_seqs, N);
  max_seq_tokens = opts.max_seq_tokens > 0 ? opts.max_seq_tokens : std::min<int64_t>(opts.kv_tokens, int64_t(1) << 17);
  {
    const int64_t unit = c.index_kpool > 0 ? std::lcm<int64_t>(opts.page_tokens, c.index_kpool) : opts.page_tokens;
    ctx_cap = std::min(std::max(NextPow2(max_seq_tokens), opts.page_tokens), (max_seq_tokens + unit - 1) / unit * unit);
  }
  n_streams = c.hc_mult > 0 ? c.hc_mult : 1;
  int64_t* sb = &stats.scratch_bytes;
  GYRE_ASSIGN_OR_RETURN(X, AllocN<float>(N * n_streams * D, sb));
  for (float** p : {&y, &h, &a, &acc, &shared_out, &hm, &hn}) {
    GYRE_ASSIGN_OR_RETURN(*p, AllocN<float>(N * D, sb));
  }
  GYRE_ASSIGN_OR_RETURN(post, AllocN<float>(N * n_streams, sb));
  GYRE_ASSIGN_OR_RETURN(comb, AllocN<float>(N * n_streams * n_streams, sb));
  if (c.hc_mult > 0) {
    const int64_t slices = (n_streams * D + kHcSlice - 1) / kHcSlice;
    GYRE_ASSIGN_OR_RETURN(hc_part, AllocN<float>(N * slices * ((2 + n_streams) * n_streams + 1), sb));
  }
  int64_t max_in = D;
  bool any_kda = false, any_attn = false, any_moe = false, any_idx = false;
  int64_t max_i = 0;
  for (const DLayer& L : w.layers) {
    any_kda |= L.attn == AttnKind::kKda;
    any_attn |= L.attn != AttnKind::kKda;
    any_idx |= L.has_indexer;
    any_moe |= L.mlp == MlpKind::kMoe;
    if (L.gate_up.data) max_i = std::max(max_i, L.gate_up.rows / 2);
  }
  if (any_moe) max_i = std::max(max_i, c.moe_intermediate_size);
  if (w.has_mtp) {  // the MTP layer: an MLA block, a dense MLP, eh_proj over 2D inputs
    any_attn = true;
    max_i = std::max(max_i, w.mtp.gate_up.rows / 2);
    max_in = std::max(max_in, 2 * D);
  }
  max_in = std::max(max_in, max_i);
  if (any_kda) {
    const int64_t P = c.linear_num_heads * c.linear_head_dim, K = c.linear_head_dim, Hh = c.linear_num_heads;
    max_in = std::max({max_in, P, K});
    GYRE_ASSIGN_OR_RETURN(u, AllocN<float>(N * 3 * P, sb));
    for (float** p : {&kq, &kk, &kv, &f, &g, &z, &o, &yn}) {
      GYRE_ASSIGN_OR_RETURN(*p, AllocN<float>(N * P, sb));
    }
    GYRE_ASSIGN_OR_RETURN(small, AllocN<float>(N * (Pad8(Hh) + 2 * Pad8(K)), sb));
    GYRE_ASSIGN_OR_RETURN(beta, AllocN<float>(N * Hh, sb));
  }
  if (any_attn) {
    const int64_t Hh = c.num_attention_heads, qk = c.qk_head_dim(), R = c.kv_lora_rank, ql = c.q_lora_rank;
    const int64_t Hi = c.index_n_heads, di = c.index_head_dim;
    int64_t wa = 0;
    for (const DLayer& L : w.layers) wa = std::max(wa, L.ma_width);
    if (w.has_mtp) wa = std::max(wa, w.mtp.ma_width);
    max_in = std::max({max_in, ql, Hh * c.v_head_dim});
    GYRE_ASSIGN_OR_RETURN(pa, AllocN<float>(N * wa, sb));
    GYRE_ASSIGN_OR_RETURN(q_resid, AllocN<float>(N * std::max<int64_t>(ql, 1), sb));
    GYRE_ASSIGN_OR_RETURN(q, AllocN<float>(N * Hh * qk, sb));
    GYRE_ASSIGN_OR_RETURN(latent, AllocN<float>(N * R, sb));
    GYRE_ASSIGN_OR_RETURN(attn, AllocN<float>(N * Hh * c.v_head_dim, sb));
    cuda::MlaDims md{Hh, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, R, 1.0f};
    // (MTP chains attend over up to mtp_k keys past the longest context)
    GYRE_ASSIGN_OR_RETURN(mla_ws,
                          DeviceBuffer::Create(std::max<size_t>(cuda::MlaWorkspaceBytes(md, N, ctx_cap + mtp_k), 16)));
    *sb += mla_ws.bytes();
    if (any_idx) {
      cuda::IndexerDims id{Hi, di, c.index_kpool, c.index_topk, c.index_kpool_always_select_tail};
      sel_cap = cuda::IndexerSelCap(id);
      GYRE_ASSIGN_OR_RETURN(qi, AllocN<float>(N * Hi * di, sb));
      GYRE_ASSIGN_OR_RETURN(ki_raw, AllocN<float>(N * di, sb));
      GYRE_ASSIGN_OR_RETURN(ki, AllocN<float>(N * di, sb));
      GYRE_ASSIGN_OR_RETURN(wts, AllocN<float>(N * Hi, sb));
      GYRE_ASSIGN_OR_RETURN(sel, AllocN<int32_t>(N * sel_cap, sb));
      GYRE_ASSIGN_OR_RETURN(sel_count, AllocN<int32_t>(N, sb));
      GYRE_ASSIGN_OR_RETURN(idx_ws,
                            DeviceBuffer::Create(std::max<size_t>(cuda::IndexerWorkspaceBytes(id, N, ctx_cap), 16)));
      *sb += idx_ws.bytes();
    }
  }
  GYRE_ASSIGN_OR_RETURN(gu, AllocN<float>(N * 2 * std::max<int64_t>(max_i, 1), sb));
  GYRE_ASSIGN_OR_RETURN(act, AllocN<float>(N * std::max<int64_t>(max_i, 1), sb));
  if (any_moe) {
    const int64_t E = c.n_routed_experts, k = c.num_experts_per_tok;
    GYRE_ASSIGN_OR_RETURN(rlogits, AllocN<float>(N * E, sb));
    GYRE_ASSIGN_OR_RETURN(rw, AllocN<float>(N * k, sb));
    GYRE_ASSIGN_OR_RETURN(ridx, AllocN<int32_t>(N * k, sb));
    for (const DLayer& L : w.layers) {
      if (L.mlp != MlpKind::kMoe || L.q_experts) continue;
      GYRE_ASSIGN_OR_RETURN(moe_ws, DeviceBuffer::Create(std::max<size_t>(cuda::MoeExpertsWorkspaceBytes(L.experts, N, k), 16)));
      *sb += moe_ws.bytes();
      break;
    }
  }
  xb_elems = N * max_in;
  if (opts.bf16_weights) {
    GYRE_ASSIGN_OR_RETURN(xb, Alloc(xb_elems * 2));
  }
  bool any_w8a8 = false;
  if (w.has_mtp) {
    for (const DMat* m : {&w.mtp.mla_a, &w.mtp.q_b, &w.mtp.q_proj, &w.mtp.mla_o, &w.mtp.gate_up, &w.mtp.down, &w.mtp_eh})
      any_w8a8 |= m->qscheme != 0;
  }
  for (const DLayer& L : w.layers) {
    for (const DMat* m : {&L.kda_qkv, &L.kda_o, &L.mla_a, &L.q_b, &L.q_proj, &L.mla_o, &L.idx_wq_b, &L.gate_up,
                          &L.down})
      any_w8a8 |= m->qscheme != 0;
    if (L.q_experts && !moe_q_ws.get()) {
      GYRE_ASSIGN_OR_RETURN(moe_q_ws, DeviceBuffer::Create(std::max<size_t>(
                                          cuda::MoeW8A8WorkspaceBytes(L.qexperts, N, c.num_experts_per_tok), 16)));
      *sb += moe_q_ws.bytes();
    }
  }
  if (any_w8a8) {
    GYRE_ASSIGN_OR_RETURN(void* q8, Alloc(xb_elems));
    xq = q8;
    GYRE_ASSIGN_OR_RETURN(xs, AllocN<float>(N * cuda::QuantGroups(max_in), sb));
  }
  GYRE_ASSIGN_OR_RETURN(next_ids, AllocN<int32_t>(N, sb));
  GYRE_ASSIGN_OR_RETURN(sample_params, AllocN<cuda::SampleParamsDev>(N, sb));
  GYRE_ASSIGN_OR_RETURN(row_logprob, AllocN<float>(N, sb));
  GYRE_ASSIGN_OR_RETURN(last_token, AllocN<int32_t>(opts.max_seqs, sb));
  mask_words = (c.vocab_size + 31) / 32;
  GYRE_ASSIGN_OR_RETURN(mask_row, AllocN<int32_t>(N, sb));
  GYRE_ASSIGN_OR_RETURN(token_masks, AllocN<uint32_t>(opts.max_seqs * mask_words, sb));
  for (Staging& st : staging) {
    GYRE_CUDA_RETURN_IF_ERROR(cudaMallocHost(&st.mask_row, N * sizeof(int32_t)));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMallocHost(&st.masks, opts.max_seqs * mask_words * sizeof(uint32_t)));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMallocHost(&st.params, N * sizeof(cuda::SampleParamsDev)));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMallocHost(&st.ids, N * sizeof(int32_t)));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMallocHost(&st.lps, N * sizeof(float)));
  }
  for (int i = 0; i < 4; ++i) {
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&ev_begin[i]));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&ev_end[i]));
  }
  if (c.vocab_size > cuda::SampleMaxVocab())
    return Status::Unimplemented("cuda model: vocabulary " + std::to_string(c.vocab_size) +
                                 " exceeds the device sampler's limit " + std::to_string(cuda::SampleMaxVocab()));
  // Step inputs.
  bt_cap = bmax * (ctx_cap / opts.page_tokens + 1);
  GYRE_ASSIGN_OR_RETURN(glogits, AllocN<float>(bmax * c.vocab_size, sb));
  o_ids = 0;
  o_seq = o_ids + N;
  o_pos = o_seq + N;
  o_rows = o_pos + N;
  o_cu = o_rows + N;
  o_slots = o_cu + bmax + 1;
  o_rslot = o_slots + bmax;
  o_keep = o_rslot + N;
  o_tslots = o_keep + bmax;
  o_mtp = o_tslots + bmax;
  o_chain = o_mtp + bmax;
  o_bt = o_chain + 4 * bmax;
  blob_ints = o_bt + bt_cap;
  for (Staging& st : staging) GYRE_CUDA_RETURN_IF_ERROR(cudaMallocHost(&st.blob, blob_ints * 4));
  GYRE_ASSIGN_OR_RETURN(dev_blob, AllocN<int32_t>(blob_ints, sb));
  if (spec_rows > 0) {
    // A flush holds at most one fold per slot, split into batches of at most nmax rows: per batch
    // cu [count + 1] and slots [count].
    fold_ints = 3 * opts.max_seqs + 2;
    for (int i = 0; i < 2; ++i) {
      GYRE_CUDA_RETURN_IF_ERROR(cudaMallocHost(&fold_host[i], fold_ints * 4));
      GYRE_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&fold_ev[i], cudaEventDisableTiming));
    }
    GYRE_ASSIGN_OR_RETURN(fold_dev, AllocN<int32_t>(fold_ints, sb));
    spec_len.assign(opts.max_seqs, 0);
  }
  if (mtp_k > 0) {
    for (float** p : {&m_hin, &m_x, &m_x2}) {
      GYRE_ASSIGN_OR_RETURN(*p, AllocN<float>(N * D, sb));
    }
    if (n_streams > 1) {
      GYRE_ASSIGN_OR_RETURN(m_hid, AllocN<float>(N * D, sb));
    }
    GYRE_ASSIGN_OR_RETURN(m_cat, AllocN<float>(N * 2 * D, sb));
    GYRE_ASSIGN_OR_RETURN(m_logits, AllocN<float>(bmax * c.vocab_size, sb));
    for (int32_t** p : {&m_iota, &m_seq, &m_pos}) {
      GYRE_ASSIGN_OR_RETURN(*p, AllocN<int32_t>(N, sb));
    }
    GYRE_ASSIGN_OR_RETURN(ch_ids, AllocN<int32_t>(bmax, sb));
    GYRE_ASSIGN_OR_RETURN(ch_pos, AllocN<int32_t>(bmax * mtp_k, sb));
    GYRE_ASSIGN_OR_RETURN(ch_drafts, AllocN<int32_t>(bmax * mtp_k, sb));
    ch_table_cap = bmax * (ctx_cap / opts.page_tokens + 1 + mtp_spp);
    GYRE_ASSIGN_OR_RETURN(ch_table, AllocN<int32_t>(ch_table_cap, sb));
    IotaKernel<<<GridFor(N), 256, 0, s()>>>(m_iota, N);
    GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    for (Staging& st : staging) GYRE_CUDA_RETURN_IF_ERROR(cudaMallocHost(&st.drafts, bmax * mtp_k * sizeof(int32_t)));
  }
  // Warm the sampler once outside any graph capture (it raises its shared-memory limit on first use).
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(glogits, 0, c.vocab_size * 4, s()));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(sample_params, 0, sizeof(cuda::SampleParamsDev), s()));
  GYRE_RETURN_IF_ERROR(cuda::SampleRows(glogits, 1, c.vocab_size, sample_params, next_ids, s()));
  if (opts.profile_layers) {
    events.resize(c.num_hidden_layers + 3);
    for (cudaEvent_t& e : events) GYRE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
  }
  return Status::Ok();
}

// ---- the step ------------------------------------------------------------------------------------

Status CudaModel::Impl::KdaLayer(const StepDims& d, const DLayer& L, int64_t li, const float* x, float* out) {
  const int64_t N = d.n, Hh = c.linear_num_heads, K = c.linear_head_dim, P = Hh * K;
  GYRE_RETURN_IF_ERROR(Sec("kda.in_proj"));
  GYRE_RETURN_IF_ERROR(Linear(x, N, L.kda_qkv, u));
  GYRE_RETURN_IF_ERROR(Linear(x, N, L.kda_small, small, 0, 0, /*reuse_cast=*/true));
  GYRE_RETURN_IF_ERROR(Sec("kda.gates"));
  GYRE_RETURN_IF_ERROR(Linear(small + L.ks_fa, N, L.kda_fb, f, L.ks_width));
  GYRE_RETURN_IF_ERROR(cuda::KdaGate(f, N, Hh, K, L.dt_bias, L.a_log, c.linear_lower_bound.has_value(),
                                     c.linear_lower_bound.value_or(0.0f), g, s()));
  GYRE_RETURN_IF_ERROR(Copy2D(beta, Hh, small + L.ks_b, L.ks_width, N, Hh));
  GYRE_RETURN_IF_ERROR(cuda::Sigmoid(beta, N * Hh, beta, s()));
  GYRE_RETURN_IF_ERROR(Linear(small + L.ks_ga, N, L.kda_gb, z, L.ks_width));
  GYRE_RETURN_IF_ERROR(Sec("kda.conv"));
  cuda::ConvParams cp = KdaConv(li, dev_blob + o_cu, dev_blob + o_slots, N, d.b);
  if (d.bs > 0) cp.tail_slots = dev_blob + o_tslots;  // speculative pieces keep their tails
  GYRE_RETURN_IF_ERROR(cuda::CausalConv1dSilu(cp, s()));  // writes q, k, v apart
  const int64_t nrec = d.bd + d.bs;  // sequences on the recurrent kernel: decode rows, speculative pieces
  if (d.bs > 0) {
    // ReplaySSM: the speculative pieces' pre-conv inputs, gates and betas to their slots' rings.
    GYRE_RETURN_IF_ERROR(Sec("kda.spec_stash"));
    GYRE_RETURN_IF_ERROR(RingCopy(RingArgs(li, dev_blob + o_cu, dev_blob + o_slots, d.bd, nrec, /*to_ring=*/true)));
  }
  if (nrec > 0) {
    GYRE_RETURN_IF_ERROR(Sec("kda.recurrent"));
    cuda::KdaRecurrentParams rp = KdaRec(li, dev_blob + o_slots, nrec, o);
    if (d.bs > 0) {  // ragged (decode rows have one token each), speculative states kept
      rp.cu_seqlens = dev_blob + o_cu;
      rp.keep = dev_blob + o_keep;
    }
    GYRE_RETURN_IF_ERROR(cuda::KdaRecurrent(rp, s()));
  }
  if (d.b > nrec) {
    GYRE_RETURN_IF_ERROR(Sec("kda.chunk"));
    const int64_t t0 = d.cu[nrec];
    cuda::KdaChunkParams kp;
    kp.q = kq + t0 * P;
    kp.k = kk + t0 * P;
    kp.v = kv + t0 * P;
    kp.g = g + t0 * P;
    kp.beta = beta + t0 * Hh;
    kp.state = kda_state[li];
    kp.o = o + t0 * P;
    for (int64_t b = nrec; b <= d.b; ++b) kp.cu_seqlens.push_back(d.cu[b] - t0);
    kp.slots.assign(d.slots.begin() + nrec, d.slots.end());
    kp.num_heads = static_cast<int>(Hh);
    kp.head_dim = static_cast<int>(K);
    kp.num_slots = opts.max_seqs;
    const size_t need = cuda::KdaChunkWorkspaceBytes(kp.cu_seqlens, kp.num_heads, kp.head_dim);
    if (kda_ws.bytes() < need) {
      GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s()));
      kda_ws.Reset();
      GYRE_ASSIGN_OR_RETURN(kda_ws, DeviceBuffer::Create(need));
    }
    GYRE_RETURN_IF_ERROR(cuda::KdaChunk(kp, kda_ws.get(), kda_ws.bytes(), s()));
  }
  GYRE_RETURN_IF_ERROR(Sec("kda.out"));
  GYRE_RETURN_IF_ERROR(cuda::GatedRmsNorm(o, z, N, Hh, K, L.o_norm, c.rms_norm_eps, yn, s()));
  GYRE_RETURN_IF_ERROR(Linear(yn, N, L.kda_o, out));
  return TpSum(out, N * c.hidden_size);
}

Status CudaModel::Impl::FlushFolds() {
  GYRE_RETURN_IF_ERROR(FlushMtpCommits());
  if (folds.empty()) return Status::Ok();
  GYRE_SPAN("cuda.spec_fold", "step");
  // Batches of at most nmax rows (the flat scratch), each as cu [count + 1] then slots [count].
  struct Batch {
    int64_t off = 0, count = 0, rows = 0;
  };
  std::vector<Batch> batches;
  int32_t* host = fold_host[fold_next];
  GYRE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(fold_ev[fold_next]));  // this half's last upload has run
  int64_t pos = 0;
  for (size_t i = 0; i < folds.size();) {
    Batch bt;
    bt.off = pos;
    size_t j = i;
    while (j < folds.size() && bt.rows + folds[j].second <= nmax) bt.rows += folds[j++].second;
    bt.count = static_cast<int64_t>(j - i);
    if (bt.count == 0) return Status::Internal("cuda model: a speculative fold longer than a step");
    int32_t* cu = host + pos;
    int32_t* sl = cu + bt.count + 1;
    cu[0] = 0;
    for (size_t q = i; q < j; ++q) {
      cu[q - i + 1] = cu[q - i] + folds[q].second;
      sl[q - i] = folds[q].first;
    }
    pos += 2 * bt.count + 1;
    if (pos > fold_ints) return Status::Internal("cuda model: speculative fold table overflow");
    batches.push_back(bt);
    i = j;
  }
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(fold_dev, host, pos * 4, cudaMemcpyHostToDevice, s()));
  GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(fold_ev[fold_next], s()));
  fold_next ^= 1;
  for (const Batch& bt : batches) {
    const int32_t* cu = fold_dev + bt.off;
    const int32_t* sl = cu + bt.count + 1;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      if (!kda_state[l]) continue;
      // The kept inputs back to flat rows, then the decode kernels over them: the conv (outputs
      // as the speculative step computed them, the tail advanced by the n inputs) and the
      // recurrence (the state advanced by the n tokens; no outputs).
      GYRE_RETURN_IF_ERROR(RingCopy(RingArgs(l, cu, sl, 0, bt.count, /*to_ring=*/false)));
      GYRE_RETURN_IF_ERROR(cuda::CausalConv1dSilu(KdaConv(l, cu, sl, bt.rows, bt.count), s()));
      cuda::KdaRecurrentParams rp = KdaRec(l, sl, bt.count, /*out=*/nullptr);
      rp.cu_seqlens = cu;
      GYRE_RETURN_IF_ERROR(cuda::KdaRecurrent(rp, s()));
    }
  }
  stats.spec_folds += static_cast<int64_t>(folds.size());
  stats.spec_fold_batches += static_cast<int64_t>(batches.size());
  folds.clear();
  return Status::Ok();
}

Status CudaModel::Impl::AttnLayer(const StepDims& d, const DLayer& L, AttnCache& ac, const float* x, float* out,
                                  const int32_t** last_sel) {
  const int64_t N = d.n, Hh = c.num_attention_heads, R = c.kv_lora_rank, rope = c.qk_rope_head_dim;
  const int64_t ql = c.q_lora_rank, Wa = L.ma_width;
  const bool dsa = L.attn == AttnKind::kDsa;
  GYRE_RETURN_IF_ERROR(Sec("mla.in_proj"));
  GYRE_RETURN_IF_ERROR(Linear(x, N, L.mla_a, pa));
  if (ql > 0) {
    GYRE_RETURN_IF_ERROR(cuda::RmsNorm(pa + L.ma_q, N, ql, Wa, L.q_a_norm, c.qa_norm_eps, q_resid, ql, s()));
    GYRE_RETURN_IF_ERROR(Linear(q_resid, N, L.q_b, q));
  } else {
    GYRE_RETURN_IF_ERROR(Linear(x, N, L.q_proj, q));
  }
  GYRE_RETURN_IF_ERROR(cuda::RmsNorm(pa + L.ma_kv, N, R, Wa, L.kv_a_norm, c.kva_norm_eps, latent, R, s()));
  GYRE_RETURN_IF_ERROR(Sec("mla.cache_write"));
  GYRE_RETURN_IF_ERROR(cuda::CacheWriteKv(latent, R, R, d.pb, ac.latent, ac.kv, s()));
  if (rope > 0) GYRE_RETURN_IF_ERROR(cuda::CacheWriteKv(pa + L.ma_kv + R, Wa, rope, d.pb, ac.krot, ac.kv, s()));
  const int32_t* sl = nullptr;
  const int32_t* sc = nullptr;
  if (dsa && L.has_indexer) {
    const int64_t Hi = c.index_n_heads, di = c.index_head_dim;
    GYRE_RETURN_IF_ERROR(Sec("dsa.indexer_proj"));
    GYRE_RETURN_IF_ERROR(Linear(q_resid, N, L.idx_wq_b, qi, 0, 0, /*reuse_cast=*/ql > 0));
    GYRE_RETURN_IF_ERROR(Copy2D(ki_raw, di, pa + L.ma_ik, Wa, N, di));
    GYRE_RETURN_IF_ERROR(cuda::LayerNorm(ki_raw, N, di, L.k_norm_w, L.k_norm_b, 1e-6f, ki, s()));
    GYRE_RETURN_IF_ERROR(cuda::CacheWrite(ki, di, di, d.pb, ac.idx_k, s()));
    GYRE_RETURN_IF_ERROR(cuda::CacheWrite(pa + L.ma_ig, Wa, di, d.pb, ac.gamma, s()));
    ScaleCopyKernel<<<GridFor(N * Hi), 256, 0, s()>>>(pa + L.ma_iw, N, Hi, Wa,
                                                       1.0f / std::sqrt(static_cast<float>(Hi)), wts);
    GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    GYRE_RETURN_IF_ERROR(Sec("dsa.pool_keys"));
    GYRE_RETURN_IF_ERROR(cuda::IndexerPoolKeys(ac.idx_k, ac.gamma, L.ape, c.index_kpool, di, d.pb, ac.pool_keys, s()));
    cuda::IndexerDims id{Hi, di, c.index_kpool, c.index_topk, c.index_kpool_always_select_tail};
    GYRE_RETURN_IF_ERROR(cuda::IndexerSelect(qi, wts, ac.pool_keys, id, d.pb, sel, sel_count, idx_ws.get(),
                                             idx_ws.bytes(), s()));
    sl = sel;
    sc = sel_count;
    *last_sel = sel;
  } else if (dsa) {
    // "shared" layer: the selection of the most recent full DSA layer of this step (causal if none,
    // as the CPU engine's default Selection).
    if (*last_sel) {
      sl = sel;
      sc = sel_count;
    }
  }
  GYRE_RETURN_IF_ERROR(Sec("mla.attention"));
  cuda::MlaDims md{Hh, c.qk_nope_head_dim, rope, c.v_head_dim, R,
                   1.0f / std::sqrt(static_cast<float>(c.qk_head_dim()))};
  GYRE_RETURN_IF_ERROR(cuda::MlaAttentionKv(q, ac.latent, ac.krot, ac.kv, L.kv_b, md, d.pb, sl, sc, sel_cap, attn, mla_ws.get(),
                                          mla_ws.bytes(), s()));
  GYRE_RETURN_IF_ERROR(Sec("mla.out"));
  GYRE_RETURN_IF_ERROR(Linear(attn, N, L.mla_o, out));
  return TpSum(out, N * c.hidden_size);
}

Status CudaModel::Impl::MlpLayer(const StepDims& d, const DLayer& L, const float* x, float* out) {
  const int64_t N = d.n;
  const float limit = c.swiglu_limit.value_or(0.0f);
  auto swiglu = [&](const DMat& gate_up, const DMat& down, float* dst) -> Status {
    const int64_t I = gate_up.rows / 2;
    GYRE_RETURN_IF_ERROR(Linear(x, N, gate_up, gu));
    GYRE_RETURN_IF_ERROR(cuda::SwiGlu(gu, 2 * I, gu + I, 2 * I, N, I, limit, act, s()));
    return Linear(act, N, down, dst);
  };
  const bool tp_mlp = tp && opts.tp.mlp_sharded;
  if (L.mlp == MlpKind::kDense) GYRE_RETURN_IF_ERROR(Sec("mlp.dense"));
  if (L.mlp == MlpKind::kDense) {
    GYRE_RETURN_IF_ERROR(swiglu(L.gate_up, L.down, out));
    return tp_mlp ? TpSum(out, N * c.hidden_size) : Status::Ok();
  }
  const int64_t E = c.n_routed_experts, k = c.num_experts_per_tok;
  GYRE_RETURN_IF_ERROR(Sec("moe.router"));
  GYRE_RETURN_IF_ERROR(Linear(x, N, L.router, rlogits));
  cuda::RouteDims rd{E, k, c.n_group, c.topk_group, c.norm_topk_prob, c.routed_scaling_factor};
  GYRE_RETURN_IF_ERROR(cuda::MoeRoute(rlogits, N, L.bias, rd, ridx, rw, s()));
  if (tp && opts.tp.expert_count > 0) {
    // Expert parallelism: global expert ids → this rank's (negative: another rank's, skipped).
    LocalExpertIdsKernel<<<GridFor(N * k), 256, 0, s()>>>(ridx, N * k, static_cast<int32_t>(opts.tp.expert_begin),
                                                         static_cast<int32_t>(opts.tp.expert_count));
    GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  GYRE_RETURN_IF_ERROR(Sec("moe.experts"));
  if (L.q_experts) {
    GYRE_RETURN_IF_ERROR(cuda::MoeExpertsW8A8(x, N, ridx, rw, k, L.qexperts, limit, out, moe_q_ws.get(),
                                              moe_q_ws.bytes(), s()));
  } else {
    GYRE_RETURN_IF_ERROR(
        cuda::MoeExperts(x, N, ridx, rw, k, L.experts, limit, out, moe_ws.get(), moe_ws.bytes(), s()));
  }
  if (L.has_shared) {
    GYRE_RETURN_IF_ERROR(Sec("moe.shared"));
    GYRE_RETURN_IF_ERROR(swiglu(L.gate_up, L.down, shared_out));
    GYRE_RETURN_IF_ERROR(cuda::AddInPlace(out, shared_out, N * c.hidden_size, s()));
  }
  return tp_mlp ? TpSum(out, N * c.hidden_size) : Status::Ok();
}

Status CudaModel::Impl::RunLayers(const StepDims& d) {
  const int64_t N = d.n, D = c.hidden_size, nS = n_streams;
  const bool hc = c.hc_mult > 0;
  auto mark = [&](size_t i) -> Status {
    if (profiling) GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(events[i], s()));
    return Status::Ok();
  };
  GYRE_RETURN_IF_ERROR(mark(0));
  sec_n = 0;
  sec_prefix.clear();
  span_name = nullptr;  // a step that failed half-way left its section open
  cur_layer = -1;
  GYRE_RETURN_IF_ERROR(Sec("embed"));
  if (pp && pp->rank() > 0) {
    // A later stage: the hidden streams come from the stage before.
    GYRE_RETURN_IF_ERROR(pp->Recv(X, N * nS * D, DType::kF32, pp->rank() - 1, s()).WithContext("pipeline receive"));
  } else {
    // kPrevToken inputs ← their slot's most recent sample (device side: the host does not know it yet).
    ResolvePrevTokenKernel<<<GridFor(N), 256, 0, s()>>>(dev_blob + o_ids, dev_blob + o_seq, dev_blob + o_slots, N,
                                                        last_token);
    GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    GYRE_RETURN_IF_ERROR(cuda::Embedding(dev_blob + o_ids, N, w.embed, y, s()));
    if (d.img > 0) {  // never in a graph (Launch keeps such steps eager)
      ScatterEmbedRowsKernel<<<GridFor(d.img * D), 256, 0, s()>>>(img_tok.get<int32_t>(), img_rows.get<float>(), d.img,
                                                                  D, y);
      GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    }
    for (int64_t st = 0; st < nS; ++st) GYRE_RETURN_IF_ERROR(Copy2D(X + st * D, nS * D, y, D, N, D));
  }
  GYRE_RETURN_IF_ERROR(mark(1));
  cuda::HcDims hp{nS, D, c.rms_norm_eps, c.hc_eps, c.hc_sinkhorn_iters};
  const int32_t* last_sel = nullptr;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const DLayer& L = w.layers[l];
    const float* yin = X;
    cur_layer = l;
    sec_prefix = std::string(AttnKindName(L.attn)) + "/";
    if (hc) {
      GYRE_RETURN_IF_ERROR(Sec("hc.pre"));
      GYRE_RETURN_IF_ERROR(HcPre(L.attn_hc, N));
      yin = y;
    }
    GYRE_RETURN_IF_ERROR(Sec("norm"));
    GYRE_RETURN_IF_ERROR(cuda::RmsNorm(yin, N, D, D, L.input_norm, c.rms_norm_eps, h, D, s()));
    if (L.attn == AttnKind::kKda) {
      GYRE_RETURN_IF_ERROR(KdaLayer(d, L, l, h, a));
    } else {
      GYRE_RETURN_IF_ERROR(AttnLayer(d, L, cache[l], h, a, &last_sel));
    }
    if (hc) {
      GYRE_RETURN_IF_ERROR(Sec("hc.post+pre"));
      GYRE_RETURN_IF_ERROR(cuda::HcPost(X, N, a, post, comb, hp, s()));
      GYRE_RETURN_IF_ERROR(HcPre(L.ffn_hc, N));
    } else {
      GYRE_RETURN_IF_ERROR(cuda::AddInPlace(X, a, N * D, s()));
    }
    GYRE_RETURN_IF_ERROR(Sec("norm"));
    GYRE_RETURN_IF_ERROR(cuda::RmsNorm(yin, N, D, D, L.post_norm, c.rms_norm_eps, h, D, s()));
    GYRE_RETURN_IF_ERROR(MlpLayer(d, L, h, a));
    if (hc) {
      GYRE_RETURN_IF_ERROR(Sec("hc.post"));
      GYRE_RETURN_IF_ERROR(cuda::HcPost(X, N, a, post, comb, hp, s()));
    } else {
      GYRE_RETURN_IF_ERROR(cuda::AddInPlace(X, a, N * D, s()));
    }
    GYRE_RETURN_IF_ERROR(mark(2 + l));
  }
  if (pp && pp->rank() + 1 < pp->size())
    GYRE_RETURN_IF_ERROR(pp->Send(X, N * nS * D, DType::kF32, pp->rank() + 1, s()).WithContext("pipeline send"));
  return Status::Ok();
}

Status CudaModel::Impl::Head(const StepDims& d, float* logits_out) {
  const int64_t D = c.hidden_size, R = d.rows;
  sec_prefix.clear();
  cur_layer = -1;
  GYRE_RETURN_IF_ERROR(Sec("head.norm"));
  GYRE_RETURN_IF_ERROR(cuda::StreamMean(X, n_streams, D, dev_blob + o_rows, R, hm, s()));
  GYRE_RETURN_IF_ERROR(cuda::RmsNorm(hm, R, D, D, w.final_norm, c.rms_norm_eps, hn, D, s()));
  GYRE_RETURN_IF_ERROR(Sec("lm_head"));
  if (!tp) {
    GYRE_RETURN_IF_ERROR(Linear(hn, R, w.lm_head, logits_out));
  } else {
    // This rank's vocabulary block [R, Vp], gathered rank-major into [n, R, Vp], then laid out as
    // the rows' [R, V] (the last blocks' zero padding dropped).
    const int64_t n = tp->size(), Vp = lm_rows, V = c.vocab_size;
    if (tp_logits.bytes() < static_cast<size_t>(R * Vp * 4) || tp_gather.bytes() < static_cast<size_t>(n * R * Vp * 4)) {
      GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s()));
      tp_logits.Reset();
      tp_gather.Reset();
      GYRE_ASSIGN_OR_RETURN(tp_logits, DeviceBuffer::Create(R * Vp * 4));
      GYRE_ASSIGN_OR_RETURN(tp_gather, DeviceBuffer::Create(n * R * Vp * 4));
    }
    GYRE_RETURN_IF_ERROR(Linear(hn, R, w.lm_head, tp_logits.get<float>()));
    GYRE_RETURN_IF_ERROR(tp->AllGather(tp_logits.get<float>(), tp_gather.get<float>(), R * Vp, DType::kF32, s())
                             .WithContext("tensor parallel LM-head all-gather"));
    for (int64_t r = 0; r < n; ++r) {
      const int64_t width = std::min(Vp, V - r * Vp);
      if (width <= 0) break;
      GYRE_RETURN_IF_ERROR(Copy2D(logits_out + r * Vp, V, tp_gather.get<float>() + r * R * Vp, Vp, R, width));
    }
  }
  if (d.penalized) {
    GYRE_RETURN_IF_ERROR(Sec("penalties"));
    GYRE_RETURN_IF_ERROR(cuda::ApplyPenaltyRows(logits_out, R, c.vocab_size, pen_rows.get<cuda::PenaltyRowDev>(),
                                                pen_bias_ids.get<int32_t>(), pen_bias_values.get<float>(),
                                                pen_stops.get<int32_t>(), pen_counts.get<int32_t>(),
                                                pen_prompt.get<uint8_t>(), s()));
  }
  if (d.masked) {
    GYRE_RETURN_IF_ERROR(Sec("token_mask"));
    GYRE_RETURN_IF_ERROR(cuda::ApplyTokenMask(logits_out, R, c.vocab_size, mask_row, token_masks, s()));
  }
  if (d.sampling) {
    GYRE_RETURN_IF_ERROR(Sec("sample"));
    GYRE_RETURN_IF_ERROR(cuda::SampleRows(logits_out, R, c.vocab_size, sample_params, next_ids, s()));
  } else {
    GYRE_RETURN_IF_ERROR(Sec("argmax"));
    GYRE_RETURN_IF_ERROR(cuda::Argmax(logits_out, R, c.vocab_size, next_ids, s()));
  }
  if (pp && pp->size() > 1 && (pp->rank() == 0 || pp->rank() + 1 == pp->size())) {
    // The last stage's ids go to the first (sent as fp32-typed bytes: pure data movement), where
    // they replace the first stage's own (unused) samples before RecordLastToken.
    const int last = pp->size() - 1;
    if (pp->rank() == last) {
      GYRE_RETURN_IF_ERROR(pp->Send(next_ids, R, DType::kF32, 0, s()).WithContext("pipeline ids send"));
    } else {
      GYRE_RETURN_IF_ERROR(pp->Recv(next_ids, R, DType::kF32, last, s()).WithContext("pipeline ids receive"));
    }
  }
  RecordLastTokenKernel<<<GridFor(R), 256, 0, s()>>>(next_ids, dev_blob + o_rslot, R, last_token);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  GYRE_RETURN_IF_ERROR(Sec("end"));
  if (profiling) GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(events.back(), s()));
  return Status::Ok();
}

// ---- MTP drafts ----------------------------------------------------------------------------------

Status CudaModel::Impl::MtpInput(const int32_t* ids, const float* hin, int64_t n, float* out) {
  const int64_t D = c.hidden_size;
  GYRE_RETURN_IF_ERROR(cuda::Embedding(ids, n, w.embed, y, s()));
  GYRE_RETURN_IF_ERROR(cuda::RmsNorm(y, n, D, D, w.mtp_enorm, c.rms_norm_eps, m_cat, 2 * D, s()));
  GYRE_RETURN_IF_ERROR(cuda::RmsNorm(hin, n, D, D, w.mtp_hnorm, c.rms_norm_eps, m_cat + D, 2 * D, s()));
  return Linear(m_cat, n, w.mtp_eh, out);
}

Status CudaModel::Impl::MtpStep(const StepDims& d) {
  const int64_t N = d.n, D = c.hidden_size, R = c.kv_lora_rank, rope = c.qk_rope_head_dim, V = c.vocab_size;
  const float eps = c.rms_norm_eps;
  const DLayer& L = w.mtp;
  sec_prefix = "mtp/";
  cur_layer = c.num_hidden_layers;
  // Pre-norm hidden rows of every token: the mean over the streams (the last layer's output
  // without mHC), as SeqInput::hidden on the CPU.
  GYRE_RETURN_IF_ERROR(Sec("hidden"));
  const float* hid = X;
  if (n_streams > 1) {
    GYRE_RETURN_IF_ERROR(cuda::StreamMean(X, n_streams, D, m_iota, N, m_hid, s()));
    hid = m_hid;
  }
  // Key rows of the MTP pieces' tokens (their outputs are not needed: a chain starts from the
  // main model's hidden state), then each piece's last hidden state into its slot.
  GYRE_RETURN_IF_ERROR(Sec("keys"));
  MtpPrepKernel<<<static_cast<unsigned>(N), 128, 0, s()>>>(dev_blob + o_seq, dev_blob + o_pos, dev_blob + o_cu,
                                                          dev_blob + o_slots, dev_blob + o_mtp, D, hid, mtp_hidden,
                                                          m_hin, m_seq, m_pos);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  MtpSaveKernel<<<static_cast<unsigned>(d.b), 128, 0, s()>>>(dev_blob + o_cu, dev_blob + o_slots, dev_blob + o_mtp,
                                                            dev_blob + o_keep, D, hid, mtp_hidden, mtp_spec_hidden,
                                                            spec_rows);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  if (d.max_ctx >= 2) {  // (else every token is at position 0: no MTP row)
    GYRE_RETURN_IF_ERROR(MtpInput(dev_blob + o_ids, m_hin, N, m_x));
    GYRE_RETURN_IF_ERROR(cuda::RmsNorm(m_x, N, D, D, L.input_norm, eps, h, D, s()));
    GYRE_RETURN_IF_ERROR(Linear(h, N, L.mla_a, pa));
    GYRE_RETURN_IF_ERROR(cuda::RmsNorm(pa + L.ma_kv, N, R, L.ma_width, L.kv_a_norm, c.kva_norm_eps, latent, R, s()));
    cuda::PagedBatch kb = d.pb;
    kb.tok_seq = m_seq;
    kb.tok_pos = m_pos;
    kb.pos_shift = 1;
    kb.max_context = std::max<int64_t>(1, d.max_ctx - 1);  // (validation only: the writes are per token)
    GYRE_RETURN_IF_ERROR(cuda::CacheWriteKv(latent, R, R, kb, mtp_cache.latent, KvDtype::kF32, s()));
    if (rope > 0)
      GYRE_RETURN_IF_ERROR(cuda::CacheWriteKv(pa + L.ma_kv + R, L.ma_width, rope, kb, mtp_cache.krot, KvDtype::kF32, s()));
  }
  if (d.nchain == 0 || d.chain_k == 0) return Sec("end");
  // The draft chains: set up on the device (acceptance of speculative pieces, block tables over
  // the scratch pages), then chain_k MTP passes over the chain rows, each drafting one token.
  GYRE_RETURN_IF_ERROR(Sec("chain.setup"));
  const int64_t Bc = d.nchain, k = d.chain_k, pt = opts.page_tokens, cw = d.pb.max_pages + mtp_spp;
  if (Bc * cw > ch_table_cap) return Status::Internal("cuda model: MTP chain table capacity exceeded");
  MtpChainArgs ca;
  ca.ids = dev_blob + o_ids;
  ca.tok_pos = dev_blob + o_pos;
  ca.cu = dev_blob + o_cu;
  ca.block_table = dev_blob + o_bt;
  ca.max_pages = d.pb.max_pages;
  ca.chain = dev_blob + o_chain;
  ca.num_chain = Bc;
  ca.next_ids = next_ids;
  ca.hid = hid;
  ca.d = D;
  ca.page_tokens = pt;
  ca.steps = k;
  ca.scratch_page0 = num_pages;
  ca.pages_per_chain = mtp_spp;
  ca.chain_width = cw;
  ca.latent = reinterpret_cast<float*>(mtp_cache.latent);
  ca.krot = reinterpret_cast<float*>(mtp_cache.krot);
  ca.R = R;
  ca.rope = rope;
  ca.ch_ids = ch_ids;
  ca.ch_hin = m_x2;
  ca.ch_pos = ch_pos;
  ca.ch_table = ch_table;
  MtpChainSetupKernel<<<static_cast<unsigned>(Bc), 128, 0, s()>>>(ca);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  StepDims cd;
  cd.n = cd.b = Bc;
  cd.pb.tok_seq = m_iota;
  cd.pb.block_table = ch_table;
  cd.pb.num_tokens = Bc;
  cd.pb.num_seqs = Bc;
  cd.pb.max_pages = cw;
  cd.pb.page_tokens = pt;
  cd.pb.pos_shift = 1;
  cd.pb.max_context = d.max_ctx + k - 1;
  const float* hin = m_x2;
  float* x = m_x;
  for (int64_t j = 0; j < k; ++j) {
    cd.pb.tok_pos = ch_pos + j * Bc;
    GYRE_RETURN_IF_ERROR(Sec("chain.input"));
    GYRE_RETURN_IF_ERROR(MtpInput(ch_ids, hin, Bc, x));
    GYRE_RETURN_IF_ERROR(cuda::RmsNorm(x, Bc, D, D, L.input_norm, eps, h, D, s()));
    const int32_t* no_sel = nullptr;
    GYRE_RETURN_IF_ERROR(AttnLayer(cd, L, mtp_cache, h, a, &no_sel));
    GYRE_RETURN_IF_ERROR(cuda::AddInPlace(x, a, Bc * D, s()));
    GYRE_RETURN_IF_ERROR(cuda::RmsNorm(x, Bc, D, D, L.post_norm, eps, h, D, s()));
    GYRE_RETURN_IF_ERROR(MlpLayer(cd, L, h, a));
    GYRE_RETURN_IF_ERROR(cuda::AddInPlace(x, a, Bc * D, s()));
    GYRE_RETURN_IF_ERROR(Sec("chain.head"));
    GYRE_RETURN_IF_ERROR(cuda::RmsNorm(x, Bc, D, D, w.mtp_head_norm, eps, hn, D, s()));
    GYRE_RETURN_IF_ERROR(Linear(hn, Bc, w.mtp_head, m_logits));
    GYRE_RETURN_IF_ERROR(cuda::Argmax(m_logits, Bc, V, ch_ids, s()));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(ch_drafts + j, k * 4, ch_ids, 4, 4, Bc, cudaMemcpyDeviceToDevice, s()));
    hin = x;
    x = x == m_x ? m_x2 : m_x;
  }
  return Sec("end");
}

Status CudaModel::Impl::FlushMtpCommits() {
  if (mtp_commits.empty()) return Status::Ok();
  for (size_t i = 0; i < mtp_commits.size(); i += kMtpCommitsPerLaunch) {
    MtpCommitArgs ca{};
    const size_t n = std::min<size_t>(kMtpCommitsPerLaunch, mtp_commits.size() - i);
    for (size_t j = 0; j < n; ++j) {
      ca.slot[j] = mtp_commits[i + j].first;
      ca.n[j] = mtp_commits[i + j].second;
    }
    MtpCommitKernel<<<static_cast<unsigned>(n), 128, 0, s()>>>(ca, mtp_spec_hidden, spec_rows, c.hidden_size, mtp_hidden);
    GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  mtp_commits.clear();
  return Status::Ok();
}

// ---- CUDA graphs for decode steps ----------------------------------------------------------------

Status CudaModel::Impl::CaptureDecode(const StepDims& d, float* logits, cudaGraphExec_t* exec) {
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s()));
  const bool prof = profiling;
  profiling = false;
  capturing = true;
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(s(), cudaStreamCaptureModeThreadLocal));
  const Status body = [&]() -> Status {
    GYRE_RETURN_IF_ERROR(RunLayers(d));
    GYRE_RETURN_IF_ERROR(Head(d, logits));
    return d.mtp ? MtpStep(d) : Status::Ok();
  }();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s(), &graph);
  profiling = prof;
  capturing = false;
  const Status st = [&]() -> Status {
    GYRE_RETURN_IF_ERROR(body);
    GYRE_CUDA_RETURN_IF_ERROR(end);
    GYRE_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(exec, graph, 0));
    return Status::Ok();
  }();
  if (graph) (void)cudaGraphDestroy(graph);
  if (!st.ok()) {
    (void)cudaGetLastError();  // a failed capture leaves a sticky-free error state on the stream only
    graphs_broken = true;
    return st.WithContext("capturing a decode or verify step (such steps now run without graphs)");
  }
  return Status::Ok();
}

// ---- public API ----------------------------------------------------------------------------------

CudaModel::CudaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaModel::~CudaModel() = default;

namespace {
// The kernels' shape limits for every layer kind the config uses, checked before anything is
// allocated: a config the CPU engine runs but the GPU kernels cannot is refused at load, naming the
// config fields, instead of failing in the middle of a forward.
Status CheckGpuConfig(const ModelConfig& c) {
  const auto refuse = [](const std::string& fields, const Status& why) {
    return Status::Unimplemented("cuda model: this config does not run on the GPU backend (" + fields +
                                 "): " + why.message() + "; the CPU backend runs it");
  };
  bool kda = false, attn = false, indexer = false;
  for (AttnKind k : c.layer_types) {
    kda |= k == AttnKind::kKda;
    attn |= k != AttnKind::kKda;
    indexer |= k == AttnKind::kDsa;
  }
  if (kda) {
    if (Status s = cuda::CheckKdaHeadDim(static_cast<int>(c.linear_head_dim)); !s.ok())
      return refuse("linear_head_dim = " + std::to_string(c.linear_head_dim), s);
  }
  if (attn) {
    const cuda::MlaDims md{c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim,
                           c.kv_lora_rank, 1.0f};
    if (Status s = cuda::CheckMlaDims(md); !s.ok())
      return refuse("num_attention_heads = " + std::to_string(c.num_attention_heads) + ", qk_nope_head_dim = " +
                        std::to_string(c.qk_nope_head_dim) + ", qk_rope_head_dim = " +
                        std::to_string(c.qk_rope_head_dim) + ", v_head_dim = " + std::to_string(c.v_head_dim) +
                        ", kv_lora_rank = " + std::to_string(c.kv_lora_rank),
                    s);
  }
  if (indexer) {
    const cuda::IndexerDims id{c.index_n_heads, c.index_head_dim, c.index_kpool, c.index_topk,
                               c.index_kpool_always_select_tail};
    if (Status s = cuda::CheckIndexerDims(id); !s.ok())
      return refuse("index_n_heads = " + std::to_string(c.index_n_heads) + ", index_head_dim = " +
                        std::to_string(c.index_head_dim) + ", index_kpool = " + std::to_string(c.index_kpool),
                    s);
  }
  const int64_t streams = std::max<int64_t>(1, c.hc_mult);
  if (streams > 4)
    return refuse("hc_mult = " + std::to_string(c.hc_mult), Status::Unimplemented("at most 4 streams are built"));
  if (streams * c.hidden_size % 4 != 0)
    return refuse("hidden_size = " + std::to_string(c.hidden_size),
                  Status::Unimplemented("hc_mult · hidden_size must be a multiple of 4"));
  if (c.vocab_size > cuda::SampleMaxVocab())
    return refuse("vocab_size = " + std::to_string(c.vocab_size),
                  Status::Unimplemented("the device sampler takes at most " + std::to_string(cuda::SampleMaxVocab())));
  return Status::Ok();
}

Result<std::unique_ptr<CudaModel::Impl>> MakeImpl(const ModelConfig& config, const ModelWeights* host,
                                                 const CudaModelOptions& opts) {
  // No device first: the config checks below query the device's limits and would read as zero.
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0)
    return Status::Unavailable(std::string("cuda model: no CUDA device (") +
                               (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ")");
  GYRE_RETURN_IF_ERROR(CheckGpuConfig(config));
  if (opts.max_seqs < 1 || opts.max_batch_tokens < 1 || opts.kv_tokens < 1 || opts.page_tokens < 1)
    return Status::InvalidArgument("cuda model: max_seqs, max_batch_tokens, kv_tokens and page_tokens must be >= 1");
  if (opts.gpu_memory_utilization < 0 || opts.gpu_memory_utilization > 1)
    return Status::InvalidArgument("cuda model: gpu_memory_utilization must be in (0, 1]");
  if (opts.reserve_fraction < 0 || opts.reserve_fraction >= 1)
    return Status::InvalidArgument("cuda model: reserve_fraction must be in [0, 1)");
  if (!opts.kv_cache.layers.empty()) {
    if (static_cast<int64_t>(opts.kv_cache.layers.size()) != config.num_hidden_layers)
      return Status::InvalidArgument("cuda model: the kv cache policy has " +
                                     std::to_string(opts.kv_cache.layers.size()) + " layers, the model " +
                                     std::to_string(config.num_hidden_layers));
    for (KvDtype d : opts.kv_cache.layers)
      if (static_cast<int>(d) < 0 || static_cast<int>(d) > static_cast<int>(KvDtype::kInt8))
        return Status::InvalidArgument("cuda model: unknown kv cache dtype in the policy");
  }
  auto impl = std::make_unique<CudaModel::Impl>();
  impl->c = config;
  impl->opts = opts;
  impl->lm_rows = config.vocab_size;
  if (opts.tp.comm) {
    const int64_t n = opts.tp.comm->size();
    if (opts.tp.full_vocab != config.vocab_size || opts.tp.vocab_rows != (config.vocab_size + n - 1) / n)
      return Status::InvalidArgument("cuda model: tensor parallel vocab_rows must be ceil(vocab / ranks) and "
                                     "full_vocab the config's vocabulary (parallel/tp_model.h)");
    if (host && host->lm_head.rows != opts.tp.vocab_rows)
      return Status::InvalidArgument("cuda model: tensor parallel LM head has " + std::to_string(host->lm_head.rows) +
                                     " rows, expected " + std::to_string(opts.tp.vocab_rows));
    impl->tp = opts.tp.comm;
    impl->lm_rows = opts.tp.vocab_rows;
    impl->opts.decode_graphs = false;
  }
  if (opts.pp.comm) {
    if (opts.tp.comm) return Status::Unimplemented("cuda model: tensor parallelism and layer split together");
    impl->pp = opts.pp.comm;
    impl->opts.decode_graphs = false;
  }
  if (opts.speculative_tokens < 0) return Status::InvalidArgument("cuda model: negative speculative_tokens");
  if (opts.speculative_tokens > 0) {
    if (opts.tp.comm || opts.pp.comm)
      return Status::Unimplemented("cuda model: speculative decoding under tensor parallelism or layer split");
    if (opts.speculative_tokens + 1 > opts.max_batch_tokens)
      return Status::InvalidArgument("cuda model: speculative_tokens + 1 exceeds max_batch_tokens");
    impl->spec_rows = 1 + opts.speculative_tokens;
    const int64_t Hh = config.linear_num_heads, P = Hh * config.linear_head_dim;
    impl->ring_row = 4 * P + (Hh + 3) / 4 * 4;
  }
  if (opts.mtp_drafts < 0) return Status::InvalidArgument("cuda model: negative mtp_drafts");
  if (opts.mtp_drafts > 0) {
    if (opts.tp.comm || opts.pp.comm)
      return Status::Unimplemented("cuda model: MTP drafts under tensor parallelism or layer split");
    if (host ? !host->has_mtp : config.num_nextn_predict_layers < 1)
      return Status::InvalidArgument("cuda model: MTP drafts need a model with an MTP layer "
                                     "(num_nextn_predict_layers = 1)");
    if (opts.mtp_drafts > 64) return Status::InvalidArgument("cuda model: mtp_drafts above 64");
    impl->mtp_k = opts.mtp_drafts;
    impl->mtp_spp = (opts.mtp_drafts + opts.page_tokens - 1) / opts.page_tokens + 1;
  }
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&impl->device));
  GYRE_ASSIGN_OR_RETURN(impl->stream, cuda::Stream::Create());
  GYRE_ASSIGN_OR_RETURN(impl->gemm, cuda::GemmLt::Create());
  GYRE_RETURN_IF_ERROR(impl->BuildWeights(host));
  if (opts.gpu_memory_utilization > 0) {
    // Scratch first (its block table needs only the sequence length), then the pool from what is free.
    if (impl->opts.max_seq_tokens <= 0) impl->opts.max_seq_tokens = std::min<int64_t>(opts.kv_tokens, int64_t(1) << 17);
    GYRE_RETURN_IF_ERROR(impl->BuildScratch());
    size_t free_b = 0, total_b = 0;
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
    const ModelConfig& c = config;
    int64_t state_per_slot = 0, ring_per_slot = 0, row_bytes = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      if (c.layer_types[l] == AttnKind::kKda) {
        const int64_t Hh = c.linear_num_heads, K = c.linear_head_dim, W = c.linear_conv_kernel_dim;
        state_per_slot += (Hh * K * K + (W - 1) * 3 * Hh * K) * 4;
        ring_per_slot += impl->spec_rows * impl->ring_row * 4;
      } else {
        const KvDtype kv = impl->LayerKv(l);
        row_bytes += KvRowBytes(kv, c.kv_lora_rank) + (c.qk_rope_head_dim > 0 ? KvRowBytes(kv, c.qk_rope_head_dim) : 0);
        if (impl->w.layers[l].has_indexer)
          row_bytes += 2 * c.index_head_dim * 4 +
                       (c.index_head_dim * 4 + cuda::PoolKeyDiv(opts.page_tokens, c.index_kpool) - 1) /
                           cuda::PoolKeyDiv(opts.page_tokens, c.index_kpool);
      }
    }
    if (impl->mtp_k > 0) {  // the MTP key rows in every page, the hidden state (and its ring) per slot
      row_bytes += (c.kv_lora_rank + c.qk_rope_head_dim) * 4;
      state_per_slot += c.hidden_size * 4;
      ring_per_slot += impl->spec_rows * c.hidden_size * 4;
    }
    int64_t reserve = std::max<int64_t>(opts.reserve_bytes, 0);
    if (reserve == 0 && opts.reserve_fraction > 0) {
      const double budget_b = opts.gpu_memory_utilization * static_cast<double>(free_b);
      const double want = std::max(opts.reserve_fraction * budget_b,
                                   static_cast<double>(std::max<int64_t>(opts.reserve_min_states, 0) * state_per_slot));
      reserve = static_cast<int64_t>(std::min(want, 0.25 * budget_b));
    }
    impl->stats.reserved_bytes = reserve;
    const double usable = std::max(0.0, static_cast<double>(free_b) - static_cast<double>(reserve));
    const double budget = opts.gpu_memory_utilization * usable -
                          static_cast<double>((state_per_slot + ring_per_slot) * opts.max_seqs);
    if (row_bytes > 0) {
      const int64_t tokens = static_cast<int64_t>(budget / static_cast<double>(row_bytes));
      if (tokens < opts.page_tokens)
        return Status::ResourceExhausted("cuda model: " + std::to_string(free_b >> 20) + " MiB free after weights; " +
                                         "gpu_memory_utilization " + std::to_string(opts.gpu_memory_utilization) +
                                         " leaves no page for the KV cache after " + std::to_string(opts.max_seqs) +
                                         " state slots");
      impl->opts.kv_tokens = tokens / opts.page_tokens * opts.page_tokens;
    }
    GYRE_RETURN_IF_ERROR(impl->BuildPools());
  } else {
    GYRE_RETURN_IF_ERROR(impl->BuildPools());
    GYRE_RETURN_IF_ERROR(impl->BuildScratch());
  }
  GYRE_RETURN_IF_ERROR(impl->PrepareGemms());
  GYRE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return Result<std::unique_ptr<CudaModel::Impl>>(std::move(impl));
}
}  // namespace

Result<std::unique_ptr<CudaModel>> CudaModel::FromHost(const ModelConfig& config, const ModelWeights& weights,
                                                       const CudaModelOptions& opts) {
  GYRE_ASSIGN_OR_RETURN(auto impl, MakeImpl(config, &weights, opts));
  return std::unique_ptr<CudaModel>(new CudaModel(std::move(impl)));
}

Result<std::unique_ptr<CudaModel>> CudaModel::Random(const ModelConfig& config, const CudaModelOptions& opts) {
  GYRE_ASSIGN_OR_RETURN(auto impl, MakeImpl(config, nullptr, opts));
  return std::unique_ptr<CudaModel>(new CudaModel(std::move(impl)));
}

const ModelConfig& CudaModel::config() const { return impl_->c; }
CudaModelStats CudaModel::stats() const { return impl_->stats; }

RunnerCapacity CudaModel::capacity() const {
  const Impl& m = *impl_;
  RunnerCapacity r;
  r.num_pages = m.num_pages;
  r.page_tokens = m.opts.page_tokens;
  r.num_slots = m.opts.max_seqs;
  r.max_step_tokens = m.nmax;
  r.max_step_pieces = m.bmax;
  r.speculative = m.spec_rows > 0;
  r.mtp_drafts = m.mtp_k;
  r.prompt_embeds = true;
  r.bytes_per_page = m.num_pages > 0 ? m.stats.kv_bytes / m.num_pages : 0;
  r.bytes_per_slot = m.opts.max_seqs > 0 ? m.stats.state_bytes / m.opts.max_seqs : 0;
  // The KV dtype of every attention layer (0 when all are fp32, as a runner without a policy).
  for (int64_t l = 0; l < m.c.num_hidden_layers; ++l)
    if (!m.kda_state[l] && m.LayerKv(l) != KvDtype::kF32)
      r.cache_layout = (r.cache_layout * 1000003u) ^ (static_cast<uint64_t>(l) << 8 | static_cast<uint64_t>(m.LayerKv(l)));
  if (r.cache_layout == 0 && !m.opts.kv_cache.uniform_fp32()) r.cache_layout = 1;
  return r;
}

Status CudaModel::ReserveCheckpoints(int64_t count) {
  Impl& m = *impl_;
  const ModelConfig& c = m.c;
  if (count < 0) return Status::InvalidArgument("cuda model: a negative number of checkpoints");
  if (!m.outstanding.empty())
    return Status::InvalidArgument("cuda model: checkpoints are reserved with no step outstanding");
  GYRE_RETURN_IF_ERROR(m.stream.Synchronize());
  m.ckpt_buffers.clear();
  m.ckpt_state.assign(c.num_hidden_layers, nullptr);
  m.ckpt_conv.assign(c.num_hidden_layers, nullptr);
  m.ckpt_hidden = nullptr;
  m.num_ckpts = 0;
  const int64_t Hh = c.linear_num_heads, K = c.linear_head_dim, P = Hh * K, W = c.linear_conv_kernel_dim;
  for (int64_t l = 0; l < c.num_hidden_layers && count > 0; ++l) {
    if (!m.kda_state[l]) continue;
    Result<DeviceBuffer> st = DeviceBuffer::Create(count * Hh * K * K * 4);
    Result<DeviceBuffer> cv = DeviceBuffer::Create(count * (W - 1) * 3 * P * 4);
    if (!st.ok() || !cv.ok()) {
      m.ckpt_buffers.clear();
      (void)cudaGetLastError();
      return Status::ResourceExhausted("cuda model: no device memory for " + std::to_string(count) +
                                       " KDA state checkpoints");
    }
    m.ckpt_state[l] = static_cast<float*>(st->get());
    m.ckpt_conv[l] = static_cast<float*>(cv->get());
    m.ckpt_buffers.push_back(std::move(*st));
    m.ckpt_buffers.push_back(std::move(*cv));
  }
  if (m.mtp_k > 0 && count > 0) {  // the MTP's hidden state travels with the KDA state
    Result<DeviceBuffer> hb = DeviceBuffer::Create(count * c.hidden_size * 4);
    if (!hb.ok()) {
      m.ckpt_buffers.clear();
      (void)cudaGetLastError();
      return Status::ResourceExhausted("cuda model: no device memory for " + std::to_string(count) +
                                       " MTP hidden-state checkpoints");
    }
    m.ckpt_hidden = static_cast<float*>(hb->get());
    m.ckpt_buffers.push_back(std::move(*hb));
  }
  m.num_ckpts = count;
  return Status::Ok();
}

Status CudaModel::SaveState(SlotId slot, CheckpointId ckpt) {
  Impl& m = *impl_;
  GYRE_RETURN_IF_ERROR(ValidateCheckpointOp(capacity(), m.num_ckpts, slot, ckpt, 1));
  GYRE_RETURN_IF_ERROR(m.FlushFolds());
  return ckpt >= 0 ? m.CopyState(slot, ckpt, /*to_ckpt=*/true) : Status::Ok();
}

Status CudaModel::RestoreState(CheckpointId ckpt, SlotId slot, int64_t num_tokens) {
  Impl& m = *impl_;
  GYRE_RETURN_IF_ERROR(ValidateCheckpointOp(capacity(), m.num_ckpts, slot, ckpt, num_tokens));
  if (num_tokens > m.max_seq_tokens)
    return Status::InvalidArgument("cuda model: " + std::to_string(num_tokens) +
                                   " restored tokens exceed the longest sequence");
  // The attention rows are in the pages (block tables come with each step); the pooled indexer
  // keys are kept in those pages too, so only the KDA state moves. ckpt -1 (no KDA layer): nothing.
  // The slot's token counts are forgotten: the next piece brings the history (model_runner.h),
  // which resets them at its launch. An uncommitted speculation of the slot is dropped.
  GYRE_RETURN_IF_ERROR(m.FlushFolds());
  if (!m.spec_len.empty()) m.spec_len[slot] = 0;
  return ckpt >= 0 ? m.CopyState(slot, ckpt, /*to_ckpt=*/false) : Status::Ok();
}

Status CudaModel::ReadPages(std::span<const PageId> pages, std::span<std::byte> dst) {
  if (Status v = ValidatePageCopy(capacity(), pages, dst.size()); !v.ok()) return v.WithContext("cuda model");
  return impl_->CopyPages(pages, dst.data(), /*to_host=*/true);
}

Status CudaModel::WritePages(std::span<const PageId> pages, std::span<const std::byte> src) {
  if (Status v = ValidatePageCopy(capacity(), pages, src.size()); !v.ok()) return v.WithContext("cuda model");
  return impl_->CopyPages(pages, const_cast<std::byte*>(src.data()), /*to_host=*/false);
}

Status CudaModel::ReadSlotState(SlotId slot, std::span<std::byte> dst) {
  if (Status v = ValidateSlotCopy(capacity(), slot, dst.size(), 1); !v.ok()) return v.WithContext("cuda model");
  GYRE_RETURN_IF_ERROR(impl_->FlushFolds());
  return impl_->CopySlot(slot, dst.data(), /*to_host=*/true);
}

Status CudaModel::WriteSlotState(SlotId slot, std::span<const std::byte> src, int64_t num_tokens) {
  Impl& m = *impl_;
  if (Status v = ValidateSlotCopy(capacity(), slot, src.size(), num_tokens); !v.ok()) return v.WithContext("cuda model");
  if (num_tokens > m.max_seq_tokens)
    return Status::InvalidArgument("cuda model: " + std::to_string(num_tokens) +
                                   " written tokens exceed the longest sequence");
  // As RestoreState: the rows (pooled keys included) come with the pages, only the state moves.
  GYRE_RETURN_IF_ERROR(m.FlushFolds());
  if (!m.spec_len.empty()) m.spec_len[slot] = 0;
  return m.CopySlot(slot, const_cast<std::byte*>(src.data()), /*to_host=*/false);
}

bool CudaModel::ReadsFinishedConcurrently() const { return !impl_->tp && !impl_->pp && impl_->spec_rows == 0; }

Status CudaModel::ReadFinished(std::span<const PageId> pages, std::span<std::byte> page_dst, SlotId slot,
                               std::span<std::byte> state_dst) {
  if (!ReadsFinishedConcurrently())
    return Status::Unimplemented("cuda model: under tensor parallelism, layer split or speculation, sequences are read "
                                 "on the engine thread");
  if (Status v = ValidatePageCopy(capacity(), pages, page_dst.size()); !v.ok()) return v.WithContext("cuda model");
  if (Status v = ValidateSlotCopy(capacity(), slot, state_dst.size(), 1); !v.ok()) return v.WithContext("cuda model");
  std::vector<Impl::CopyPart> parts;
  impl_->PageCopyParts(pages, page_dst.data(), &parts);
  impl_->SlotCopyParts(slot, state_dst.data(), &parts);
  return impl_->ReadFinished(parts);
}

Status CudaModel::Synchronize() {
  GYRE_RETURN_IF_ERROR(impl_->FlushFolds());
  return impl_->stream.Synchronize();
}

Status CudaModel::CommitSpeculative(SlotId slot, int64_t num_accepted) {
  Impl& m = *impl_;
  if (m.spec_rows == 0) return ModelRunner::CommitSpeculative(slot, num_accepted);  // Unimplemented
  if (slot < 0 || slot >= m.opts.max_seqs)
    return Status::InvalidArgument("cuda model: slot " + std::to_string(slot) + " is outside [0, " +
                                   std::to_string(m.opts.max_seqs) + ")");
  const int64_t len = m.spec_len[slot];
  if (len == 0) return Status::InvalidArgument("cuda model: slot " + std::to_string(slot) + " has no pending speculation");
  if (num_accepted < 0 || num_accepted > len)
    return Status::InvalidArgument("cuda model: CommitSpeculative: " + std::to_string(num_accepted) + " accepted of " +
                                   std::to_string(len) + " speculative tokens");
  m.spec_len[slot] = 0;
  if (num_accepted > 0 && !m.spec_ring.empty()) m.folds.emplace_back(slot, static_cast<int32_t>(num_accepted));
  if (num_accepted > 0 && m.mtp_spec_hidden) m.mtp_commits.emplace_back(slot, static_cast<int32_t>(num_accepted));
  return Status::Ok();
}
void CudaModel::SetDecodeGraphs(bool on) { impl_->opts.decode_graphs = on && !impl_->tp && !impl_->pp; }

Status CudaModel::Launch(std::span<const StepPiece> batch, bool want_logits) {
  GYRE_SPAN("cuda.launch", "step");
  Impl& m = *impl_;
  const ModelConfig& c = m.c;
  const int64_t V = c.vocab_size, pt = m.opts.page_tokens;
  if (m.outstanding.size() >= 2) return Status::Internal("cuda model: two steps are already outstanding");
  if (Status v = ValidateStep(batch, capacity(), V); !v.ok()) return v.WithContext("cuda model");
  // Multimodal pieces (StepPiece::embeds): rows of the model's width; a step where some fall in
  // a piece's range runs eagerly (no graph: such steps are prefills anyway).
  bool has_img = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    const StepPiece& p = batch[i];
    if (!p.embeds) continue;
    const PromptEmbeds& e = *p.embeds;
    if (e.width != c.hidden_size || e.rows.size() != e.positions.size() * static_cast<size_t>(c.hidden_size))
      return Status::InvalidArgument("cuda model: piece " + std::to_string(i) + ": prompt embeddings of width " +
                                     std::to_string(e.width) + " (" + std::to_string(e.rows.size()) + " floats for " +
                                     std::to_string(e.positions.size()) + " positions) for a model of hidden size " +
                                     std::to_string(c.hidden_size));
    const auto rows = e.RowsIn(p.start, static_cast<int64_t>(p.ids.size()));
    has_img |= rows.first < rows.second;
  }
  // Order: decode rows (history, one token) first, then speculative pieces, then prefill pieces.
  auto is_decode = [](const StepPiece& p) { return p.start > 0 && p.ids.size() == 1 && !p.speculative; };
  for (size_t i = 0; i < batch.size(); ++i) {
    const StepPiece& in = batch[i];
    if (m.spec_rows > 0 && in.start != 0 && m.spec_len[in.slot] > 0)
      return Status::InvalidArgument("cuda model: piece " + std::to_string(i) + ": slot " + std::to_string(in.slot) +
                                     " has a speculation not committed yet");
    if (in.speculative && static_cast<int64_t>(in.ids.size()) > m.spec_rows)
      return Status::InvalidArgument("cuda model: piece " + std::to_string(i) + ": a speculative piece of " +
                                     std::to_string(in.ids.size()) + " tokens exceeds 1 + speculative_tokens (" +
                                     std::to_string(m.spec_rows) + ")");
  }
  std::vector<size_t> order;
  int64_t total = 0, max_ctx = 1;
  for (size_t i = 0; i < batch.size(); ++i) {
    const StepPiece& in = batch[i];
    const int64_t ctx = in.start + static_cast<int64_t>(in.ids.size());
    if (ctx > m.max_seq_tokens)
      return Status::InvalidArgument("cuda model: piece " + std::to_string(i) + ": " + std::to_string(ctx) +
                                     " tokens exceed the longest sequence (" + std::to_string(m.max_seq_tokens) +
                                     ", max_seq_tokens)");
    total += static_cast<int64_t>(in.ids.size());
    max_ctx = std::max(max_ctx, ctx);
  }
  for (size_t i = 0; i < batch.size(); ++i)
    if (is_decode(batch[i])) order.push_back(i);
  const int64_t bd = static_cast<int64_t>(order.size());
  for (size_t i = 0; i < batch.size(); ++i)
    if (batch[i].speculative) order.push_back(i);
  const int64_t bs = static_cast<int64_t>(order.size()) - bd;
  for (size_t i = 0; i < batch.size(); ++i)
    if (!is_decode(batch[i]) && !batch[i].speculative) order.push_back(i);
  const int sidx = m.next_staging;
  Impl::Staging& sg = m.staging[sidx];
  sg.step = m.launched;
  GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(m.ev_begin[sg.step % 4], m.s()));
  // Committed speculations fold first (a new sequence below may take a slot that just folded).
  GYRE_RETURN_IF_ERROR(m.FlushFolds());
  // New sequences: zero their slots' KDA state (conv tail + recurrent).
  for (const StepPiece& in : batch) {
    if (in.start != 0) continue;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      if (!m.kda_state[l]) continue;
      const int64_t Hh = c.linear_num_heads, K = c.linear_head_dim, P = Hh * K, W = c.linear_conv_kernel_dim;
      GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(m.kda_state[l] + in.slot * Hh * K * K, 0, Hh * K * K * 4, m.s()));
      GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(m.kda_conv[l] + in.slot * (W - 1) * 3 * P, 0, (W - 1) * 3 * P * 4, m.s()));
    }
  }
  // Logit processing (model_runner.h): the slots whose counts restart, the tokens to count, and
  // per sampled row its parameters (filled with the rows below).
  auto processes = [](const StepPiece& in) {
    const SampleSpec& sp = in.sample;
    return sp.enabled && (ops::HasPenalties(sp.params) || !sp.logit_bias.empty() ||
                          (!sp.stop_ids.empty() && sp.offset < static_cast<uint64_t>(sp.params.min_tokens)));
  };
  bool counting = false, any_processing = false;
  for (const StepPiece& in : batch) {
    counting |= ops::HasPenalties(in.sample.params);
    any_processing |= processes(in);
  }
  // Verify steps replay a CUDA graph too: every piece speculative (no MTP, no logit processing, no
  // token mask), padded to spec_rows tokens (those past the piece's own are padding: sequence -1,
  // which the attention layers skip; the KDA layers run them after the piece's tokens, where no
  // real output reads them and the state is kept anyway; their rows sample greedily, unread), and
  // the batch padded to its bucket with empty pieces (slot -1).
  const int64_t vbucket = std::min<int64_t>(NextPow2(static_cast<int64_t>(batch.size())), m.bmax);
  // With MTP: every piece drafts the same k > 0 after its sample (the chains fill the bucket, the
  // padding pieces' rows inactive), or none runs the MTP layer.
  bool vgraph = m.opts.decode_graphs && !m.graphs_broken && !has_img && m.spec_rows > 0 && vbucket * m.spec_rows <= m.nmax;
  const int32_t vmtp = m.mtp_k > 0 && !batch.empty() ? batch[0].mtp : -1;
  for (const StepPiece& in : batch)
    vgraph = vgraph && in.speculative && !processes(in) && in.sample.allowed.empty() &&
             (m.mtp_k > 0 ? in.mtp == vmtp && (vmtp < 0 || (vmtp > 0 && in.sample.enabled)) : true);
  sg.pen_entries.clear();
  if ((counting || any_processing) && !m.pen_counts.get()) {
    // First use: zero counts (a sequence that needs them restarts its slot's anyway).
    GYRE_RETURN_IF_ERROR(m.Reserve(m.pen_counts, m.opts.max_seqs * V * sizeof(int32_t)));
    GYRE_RETURN_IF_ERROR(m.Reserve(m.pen_prompt, m.opts.max_seqs * V));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(m.pen_counts.get(), 0, m.pen_counts.bytes(), m.s()));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(m.pen_prompt.get(), 0, m.pen_prompt.bytes(), m.s()));
  }
  if (counting) {
    for (const StepPiece& in : batch) {
      if (!ops::HasPenalties(in.sample.params)) continue;
      if (in.start == 0 || !in.history.empty()) {
        GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(m.pen_counts.get<int32_t>() + in.slot * V, 0, V * sizeof(int32_t), m.s()));
        GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(m.pen_prompt.get<uint8_t>() + in.slot * V, 0, V, m.s()));
      }
      auto add = [&](int32_t id, int64_t pos) {
        sg.pen_entries.push_back(cuda::CountEntryDev{in.slot, id, pos < in.num_prompt ? 1 : 0});
      };
      for (size_t j = 0; j < in.history.size(); ++j) add(in.history[j], static_cast<int64_t>(j));
      for (size_t j = 0; j < in.ids.size(); ++j) add(in.ids[j], in.start + static_cast<int64_t>(j));  // kPrevToken: -1
    }
  }
  sg.img_tok.clear();
  sg.img_rows.clear();
  sg.pen_rows.clear();
  sg.pen_bias_ids.clear();
  sg.pen_bias_values.clear();
  sg.pen_stops.clear();
  // Host arrays.
  Impl::StepDims d;
  d.n = total;
  d.b = static_cast<int64_t>(batch.size());
  d.bd = bd;
  d.bs = bs;
  const int64_t ctx_bucket = std::min(std::max<int64_t>(NextPow2(max_ctx), pt), m.ctx_cap);
  const int64_t max_pages = ctx_bucket / pt;
  if (d.b * max_pages > m.bt_cap) return Status::Internal("cuda model: block table capacity exceeded");
  int32_t* hb = sg.blob;
  cuda::SampleParamsDev* hp = sg.params;
  int32_t* hm = sg.mask_row;
  int32_t num_masks = 0;
  d.cu.push_back(0);
  int64_t t = 0;
  std::vector<int64_t> row_of_input(batch.size()), nrows_of_input(batch.size());
  std::vector<int32_t> chain_of_input(batch.size(), -1);
  int64_t r = 0;
  for (int64_t bi = 0; bi < d.b; ++bi) {
    const StepPiece& in = batch[order[bi]];
    for (size_t j = 0; j < in.ids.size(); ++j, ++t) {
      hb[m.o_ids + t] = in.ids[j];
      hb[m.o_seq + t] = static_cast<int32_t>(bi);
      hb[m.o_pos + t] = static_cast<int32_t>(in.start + static_cast<int64_t>(j));
    }
    d.cu.push_back(t);
    hb[m.o_cu + bi] = static_cast<int32_t>(d.cu[bi]);
    if (in.embeds) {  // its rows in [start, start + ids): they replace tokens d.cu[bi] + (position - start)
      const PromptEmbeds& e = *in.embeds;
      const int64_t D = c.hidden_size;
      const auto rows = e.RowsIn(in.start, static_cast<int64_t>(in.ids.size()));
      for (size_t k = rows.first; k < rows.second; ++k) {
        sg.img_tok.push_back(static_cast<int32_t>(d.cu[bi] + (e.positions[k] - in.start)));
        const float* row = e.rows.data() + k * D;
        sg.img_rows.insert(sg.img_rows.end(), row, row + D);
      }
    }
    hb[m.o_slots + bi] = in.slot;
    hb[m.o_keep + bi] = in.speculative ? 1 : 0;
    hb[m.o_tslots + bi] = in.speculative ? -1 : in.slot;
    hb[m.o_mtp + bi] = m.mtp_k > 0 ? in.mtp : -1;
    if (m.mtp_k > 0 && in.mtp >= 0) d.mtp = true;
    d.slots.push_back(in.slot);
    for (int64_t p = 0; p < max_pages; ++p)
      hb[m.o_bt + bi * max_pages + p] = p < static_cast<int64_t>(in.pages.size()) ? in.pages[p] : 0;
    row_of_input[order[bi]] = r;
    const int64_t first = in.all_logits || in.speculative ? d.cu[bi] : t - 1;  // speculative: every row samples
    nrows_of_input[order[bi]] = t - first;
    if (m.mtp_k > 0 && in.mtp > 0 && in.sample.enabled) {  // a draft chain after the piece's sample
      chain_of_input[order[bi]] = static_cast<int32_t>(d.nchain);
      int32_t* ch = hb + m.o_chain + 4 * d.nchain++;
      ch[0] = static_cast<int32_t>(bi);
      ch[1] = static_cast<int32_t>(r);
      ch[2] = static_cast<int32_t>(r + (t - first) - 1);
      ch[3] = in.speculative ? 1 : 0;
      d.chain_k = std::max<int64_t>(d.chain_k, in.mtp);
    }
    for (int64_t q = first; q < t; ++q) {
      // Greedy unless this is the sampled (last) row, or a row of a sampled speculative piece:
      // row j draws at offset + j against the piece's token j + 1 as its draft (none after the
      // last), as ops SampleSpeculativeKeyed does.
      cuda::SampleParamsDev sp;
      const bool spec_row = in.speculative && in.sample.enabled;
      if ((q == t - 1 || spec_row) && in.sample.enabled && in.sample.params.temperature > 0) {
        const ops::SamplingParams& g = in.sample.params;
        sp.temperature = g.temperature;
        sp.top_k = static_cast<int32_t>(std::min<int64_t>(std::max<int64_t>(g.top_k, 0), INT32_MAX));
        sp.top_p = g.top_p;
        sp.min_p = g.min_p;
        sp.seed = g.seed;
        sp.offset = in.sample.offset + (spec_row ? static_cast<uint64_t>(q - first) : 0);
        if (spec_row && q + 1 < t) sp.draft = in.ids[q - first + 1];
        d.sampling = true;
      }
      hp[r] = sp;
      hm[r] = -1;
      if (q == t - 1 && in.sample.enabled && !in.sample.allowed.empty()) {
        std::copy(in.sample.allowed.begin(), in.sample.allowed.end(), sg.masks + num_masks * m.mask_words);
        hm[r] = num_masks++;
        d.masked = true;
      }
      // (a speculative piece's last sample is not the slot's next token until its commit says so)
      hb[m.o_rslot + r] = q == t - 1 && in.sample.enabled && !in.speculative ? in.slot : -1;
      cuda::PenaltyRowDev pr;
      if (q == t - 1 && processes(in)) {
        const SampleSpec& sp = in.sample;
        pr.active = 1;
        pr.slot = ops::HasPenalties(sp.params) ? in.slot : -1;
        pr.presence = sp.params.presence_penalty;
        pr.frequency = sp.params.frequency_penalty;
        pr.repetition = sp.params.repetition_penalty;
        pr.bias_begin = static_cast<int32_t>(sg.pen_bias_ids.size());
        for (const ops::LogitBias& b : sp.logit_bias) {
          sg.pen_bias_ids.push_back(b.id);
          sg.pen_bias_values.push_back(b.bias);
        }
        pr.bias_end = static_cast<int32_t>(sg.pen_bias_ids.size());
        pr.stop_begin = static_cast<int32_t>(sg.pen_stops.size());
        if (sp.offset < static_cast<uint64_t>(sp.params.min_tokens))
          sg.pen_stops.insert(sg.pen_stops.end(), sp.stop_ids.begin(), sp.stop_ids.end());
        pr.stop_end = static_cast<int32_t>(sg.pen_stops.size());
        d.penalized = true;
      }
      sg.pen_rows.push_back(pr);
      hb[m.o_rows + r++] = static_cast<int32_t>(q);
    }
    if (vgraph) {  // the piece's padding tokens, each with an unread greedy row
      for (int64_t j = static_cast<int64_t>(in.ids.size()); j < m.spec_rows; ++j, ++t) {
        hb[m.o_ids + t] = 0;
        hb[m.o_seq + t] = -1;
        hb[m.o_pos + t] = static_cast<int32_t>(in.start);
        hp[r] = cuda::SampleParamsDev{};
        hm[r] = -1;
        hb[m.o_rslot + r] = -1;
        sg.pen_rows.push_back(cuda::PenaltyRowDev{});
        hb[m.o_rows + r++] = static_cast<int32_t>(t);
      }
      d.cu.back() = t;
    }
  }
  if (vgraph) {  // empty pieces up to the bucket (slot -1: every sequence-wise kernel skips them)
    for (int64_t bi = d.b; bi < vbucket; ++bi) {
      hb[m.o_cu + bi] = static_cast<int32_t>(t);
      hb[m.o_slots + bi] = -1;
      hb[m.o_keep + bi] = 1;
      hb[m.o_tslots + bi] = -1;
      hb[m.o_mtp + bi] = -1;
      for (int64_t p = 0; p < max_pages; ++p) hb[m.o_bt + bi * max_pages + p] = 0;
      for (int64_t j = 0; j < m.spec_rows; ++j, ++t) {
        hb[m.o_ids + t] = 0;
        hb[m.o_seq + t] = -1;
        hb[m.o_pos + t] = 0;
        hp[r] = cuda::SampleParamsDev{};
        hm[r] = -1;
        hb[m.o_rslot + r] = -1;
        sg.pen_rows.push_back(cuda::PenaltyRowDev{});
        hb[m.o_rows + r++] = static_cast<int32_t>(t);
      }
      d.cu.push_back(t);
      d.slots.push_back(-1);
      if (d.nchain > 0) {  // an inactive chain row, so the chains keep the bucket's shape
        int32_t* ch = hb + m.o_chain + 4 * d.nchain++;
        ch[0] = static_cast<int32_t>(bi);
        ch[1] = ch[2] = static_cast<int32_t>(r - 1);
        ch[3] = 2;
      }
    }
    d.b = d.bs = vbucket;
    d.bd = 0;
    d.n = t;
  }
  hb[m.o_cu + d.b] = static_cast<int32_t>(t);
  d.rows = r;
  d.max_ctx = max_ctx;
  if (vgraph) d.max_ctx = ctx_bucket;  // a graph's shapes follow the context bucket, not this step
  // A chain attends over up to max_ctx + chain_k - 1 keys: the attention workspace holds
  // ctx_cap + mtp_k (BuildScratch), and max_ctx <= ctx_cap.
  // Decode-only steps replay a CUDA graph of the bucket's size; padding rows are skipped by every
  // sequence-wise kernel (negative sequence and slot) and computed but ignored by token-wise ones.
  d.img = static_cast<int64_t>(sg.img_tok.size());
  const bool use_graph =
      vgraph || (m.opts.decode_graphs && !m.graphs_broken && d.bd == d.b && !d.penalized && !d.mtp && d.img == 0);
  if (use_graph && !vgraph) {
    const int64_t bucket = std::min<int64_t>(NextPow2(d.b), m.bmax);
    for (int64_t bi = d.b; bi < bucket; ++bi) {
      hb[m.o_ids + bi] = 0;
      hb[m.o_seq + bi] = -1;
      hb[m.o_pos + bi] = 0;
      hb[m.o_cu + bi] = static_cast<int32_t>(bi);
      hb[m.o_slots + bi] = -1;
      hb[m.o_rows + bi] = static_cast<int32_t>(bi);
      hp[bi] = cuda::SampleParamsDev{};
      hm[bi] = -1;
      hb[m.o_rslot + bi] = -1;
      for (int64_t p = 0; p < max_pages; ++p) hb[m.o_bt + bi * max_pages + p] = 0;
    }
    hb[m.o_cu + bucket] = static_cast<int32_t>(bucket);
    d.n = d.b = d.bd = d.rows = bucket;
  }
  d.pb.tok_seq = m.dev_blob + m.o_seq;
  d.pb.tok_pos = m.dev_blob + m.o_pos;
  d.pb.block_table = m.dev_blob + m.o_bt;
  d.pb.num_tokens = d.n;
  d.pb.num_seqs = d.b;
  d.pb.max_pages = max_pages;
  d.pb.page_tokens = pt;
  d.pb.max_context = ctx_bucket;
  GYRE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(m.dev_blob, hb, (m.o_bt + d.b * max_pages) * 4, cudaMemcpyHostToDevice, m.s()));
  if (d.img > 0) {  // (pageable copies: the staging vectors are copied out before cudaMemcpyAsync returns)
    GYRE_RETURN_IF_ERROR(m.Reserve(m.img_tok, sg.img_tok.size() * sizeof(int32_t)));
    GYRE_RETURN_IF_ERROR(m.Reserve(m.img_rows, sg.img_rows.size() * sizeof(float)));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.img_tok.get(), sg.img_tok.data(), sg.img_tok.size() * sizeof(int32_t),
                                              cudaMemcpyHostToDevice, m.s()));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.img_rows.get(), sg.img_rows.data(),
                                              sg.img_rows.size() * sizeof(float), cudaMemcpyHostToDevice, m.s()));
  }
  if (d.sampling)
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.sample_params, hp, d.rows * sizeof(cuda::SampleParamsDev),
                                              cudaMemcpyHostToDevice, m.s()));
  if (d.penalized || !sg.pen_entries.empty()) {
    // (pageable copies: the staging vectors are copied out before cudaMemcpyAsync returns)
    auto upload = [&](DeviceBuffer& buf, const void* src, size_t bytes) -> Status {
      GYRE_RETURN_IF_ERROR(m.Reserve(buf, bytes));
      if (bytes > 0) GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buf.get(), src, bytes, cudaMemcpyHostToDevice, m.s()));
      return Status::Ok();
    };
    GYRE_RETURN_IF_ERROR(upload(m.pen_rows, sg.pen_rows.data(), sg.pen_rows.size() * sizeof(cuda::PenaltyRowDev)));
    GYRE_RETURN_IF_ERROR(upload(m.pen_bias_ids, sg.pen_bias_ids.data(), sg.pen_bias_ids.size() * sizeof(int32_t)));
    GYRE_RETURN_IF_ERROR(upload(m.pen_bias_values, sg.pen_bias_values.data(), sg.pen_bias_values.size() * sizeof(float)));
    GYRE_RETURN_IF_ERROR(upload(m.pen_stops, sg.pen_stops.data(), sg.pen_stops.size() * sizeof(int32_t)));
    GYRE_RETURN_IF_ERROR(
        upload(m.pen_entries, sg.pen_entries.data(), sg.pen_entries.size() * sizeof(cuda::CountEntryDev)));
    // Count the step's tokens before its head reads the counts (kPrevToken: the slot's last sample,
    // which the previous step recorded earlier in stream order).
    GYRE_RETURN_IF_ERROR(cuda::CountTokens(m.pen_entries.get<cuda::CountEntryDev>(),
                                           static_cast<int64_t>(sg.pen_entries.size()), m.last_token, V,
                                           m.pen_counts.get<int32_t>(), m.pen_prompt.get<uint8_t>(), m.s()));
  }
  if (d.masked) {
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.mask_row, hm, d.rows * sizeof(int32_t), cudaMemcpyHostToDevice, m.s()));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.token_masks, sg.masks, num_masks * m.mask_words * sizeof(uint32_t),
                                              cudaMemcpyHostToDevice, m.s()));
  }
  if (!use_graph && m.logits_rows < d.rows) {
    GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.s()));
    m.logits_buf.Reset();
    GYRE_ASSIGN_OR_RETURN(m.logits_buf, DeviceBuffer::Create(d.rows * V * 4));
    m.logits_rows = d.rows;
  }
  // What comes back: ids and logprobs of every row (pinned, asynchronous); the logits rows of
  // pieces that want alternatives (top_logprobs), or all rows when the caller asks for logits
  // (pageable copies: such steps do not overlap with the next one).
  sg.pieces = batch.size();
  sg.rows = d.rows;
  sg.tokens = total;
  sg.use_graph = use_graph;
  sg.want_logits = want_logits;
  sg.row_of_input = std::move(row_of_input);
  sg.nrows_of_input = std::move(nrows_of_input);
  sg.chain_of_input = std::move(chain_of_input);
  sg.mtp_of_input.assign(batch.size(), -1);
  for (size_t i = 0; i < batch.size(); ++i) sg.mtp_of_input[i] = batch[i].mtp;
  sg.chain_k = d.chain_k;
  sg.sampled.assign(batch.size(), 0);
  sg.spec.assign(batch.size(), 0);
  sg.top_logprobs.assign(batch.size(), 0);
  sg.want_logprobs = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    sg.sampled[i] = batch[i].sample.enabled;
    sg.spec[i] = batch[i].speculative;
    sg.top_logprobs[i] = batch[i].sample.enabled ? batch[i].sample.top_logprobs : 0;
    sg.want_logprobs |= batch[i].sample.enabled;
  }
  sg.all.clear();
  sg.top_rows.clear();
  if (vgraph && !m.vlogits.get()) {
    GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.s()));
    GYRE_ASSIGN_OR_RETURN(m.vlogits, DeviceBuffer::Create(m.bmax * m.spec_rows * V * 4));
  }
  float* graph_logits = vgraph ? m.vlogits.get<float>() : m.glogits;
  const float* dev_logits = use_graph ? graph_logits : m.logits_buf.get<float>();
  auto run = [&]() -> Status {
    if (use_graph) {
      const int64_t kind = !vgraph ? 0 : (d.mtp ? 2 + d.chain_k : 1);
      const auto key = std::make_tuple(d.b, ctx_bucket, d.sampling, d.masked, kind);
      auto it = m.graphs.find(key);
      if (it == m.graphs.end()) {
        cudaGraphExec_t exec = nullptr;
        GYRE_RETURN_IF_ERROR(m.CaptureDecode(d, graph_logits, &exec));
        it = m.graphs.emplace(key, exec).first;
        m.stats.graphs++;
      }
      GYRE_SPAN("cuda.graph_launch", "op");
      GYRE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, m.s()));
      m.stats.graph_replays++;
    } else {
      GYRE_RETURN_IF_ERROR(m.RunLayers(d));
      GYRE_RETURN_IF_ERROR(m.Head(d, m.logits_buf.get<float>()));
      if (d.mtp) GYRE_RETURN_IF_ERROR(m.MtpStep(d));
    }
    if (d.nchain > 0 && d.chain_k > 0) {
      GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sg.drafts, m.ch_drafts, d.nchain * d.chain_k * 4,
                                                cudaMemcpyDeviceToHost, m.s()));
      m.stats.mtp_chain_steps += d.chain_k;
    }
    if (sg.want_logprobs) {
      GYRE_RETURN_IF_ERROR(cuda::RowLogProbs(dev_logits, d.rows, V, m.next_ids, m.row_logprob, m.s()));
      GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sg.lps, m.row_logprob, d.rows * 4, cudaMemcpyDeviceToHost, m.s()));
    }
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sg.ids, m.next_ids, d.rows * 4, cudaMemcpyDeviceToHost, m.s()));
    if (want_logits) {
      sg.all.resize(d.rows * V);
      GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sg.all.data(), dev_logits, d.rows * V * 4, cudaMemcpyDeviceToHost, m.s()));
    } else {
      for (size_t i = 0; i < batch.size(); ++i) {
        if (sg.top_logprobs[i] <= 0) continue;
        sg.top_rows.emplace_back(i, std::vector<float>(V));
        const int64_t row = sg.row_of_input[i] + sg.nrows_of_input[i] - 1;
        GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sg.top_rows.back().second.data(), dev_logits + row * V, V * 4,
                                                  cudaMemcpyDeviceToHost, m.s()));
      }
    }
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(m.ev_end[sg.step % 4], m.s()));
    return Status::Ok();
  };
  m.profiling = !m.events.empty() && !use_graph;
  GYRE_RETURN_IF_ERROR(run());
  if (m.spec_rows > 0) {
    for (const StepPiece& in : batch) {
      if (in.start == 0) m.spec_len[in.slot] = 0;  // a new sequence drops an uncommitted speculation
      if (in.speculative) m.spec_len[in.slot] = static_cast<int64_t>(in.ids.size());
    }
  }
  m.outstanding.push_back(sidx);
  m.next_staging ^= 1;
  m.launched++;
  return Status::Ok();
}

Status CudaModel::Collect(std::vector<SampledToken>* out, std::vector<float>* logits) {
  GYRE_SPAN("cuda.collect", "step");
  Impl& m = *impl_;
  const ModelConfig& c = m.c;
  const int64_t V = c.vocab_size;
  if (m.outstanding.empty()) return Status::InvalidArgument("cuda model: no step is outstanding");
  const int sidx = m.outstanding.front();
  m.outstanding.erase(m.outstanding.begin());
  Impl::Staging& sg = m.staging[sidx];
  const cudaEvent_t begin = m.ev_begin[sg.step % 4], end = m.ev_end[sg.step % 4];
  GYRE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(end));
  // GPU busy time of this step and idle time since the previous one ended, from the events.
  const int64_t now = trace::NowNs();
  float busy = 0, idle = 0;
  GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&busy, begin, end));
  const bool gap = sg.step > 0;
  if (gap) GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&idle, m.ev_end[(sg.step - 1) % 4], begin));
  idle = std::max(idle, 0.0f);  // overlapped steps: queued before the previous one ended
  CudaModelStats& stt = m.stats;
  stt.steps++;
  stt.busy_ms_total += busy;
  if (gap) {
    stt.idle_ms_total += idle;
    stt.idle_ms_max = std::max<double>(stt.idle_ms_max, idle);
    if (stt.idle_us.size() < (size_t(1) << 20)) stt.idle_us.push_back(idle * 1000.0f);
  }
  if (trace::Enabled()) {
    const int64_t busy_ns = static_cast<int64_t>(busy * 1e6), idle_ns = static_cast<int64_t>(idle * 1e6);
    trace::Record({"gpu.busy", "gpu", now - busy_ns, busy_ns, kGpuTraceTid,
                   trace::Attrs{.tokens = sg.tokens, .detail = "pieces=" + std::to_string(sg.pieces) +
                                                               (sg.use_graph ? " graph" : " eager")}});
    if (gap) trace::Record({"gpu.idle", "gpu", now - busy_ns - idle_ns, idle_ns, kGpuTraceTid, {}});
  }
  if (m.profiling && !sg.use_graph) {
    auto ms = [&](size_t a, size_t b) {
      float v = 0;
      return cudaEventElapsedTime(&v, m.events[a], m.events[b]) == cudaSuccess ? static_cast<double>(v) : -1.0;
    };
    m.stats.embed_ms = ms(0, 1);
    m.stats.layer_ms.assign(c.num_hidden_layers, 0.0);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) m.stats.layer_ms[l] = ms(1 + l, 2 + l);
    m.stats.head_ms = ms(1 + c.num_hidden_layers, m.events.size() - 1);
    m.stats.op_ms.clear();
    for (size_t i = 0; i + 1 < m.sec_n; ++i) {
      float v = 0;
      if (cudaEventElapsedTime(&v, m.sec_events[i], m.sec_events[i + 1]) == cudaSuccess) m.stats.op_ms[m.sec_names[i]] += v;
    }
  }
  if (logits) {
    logits->clear();
    for (size_t i = 0; i < sg.pieces && sg.want_logits; ++i) {
      const int64_t r0 = sg.row_of_input[i];
      logits->insert(logits->end(), sg.all.begin() + r0 * V, sg.all.begin() + (r0 + sg.nrows_of_input[i]) * V);
    }
  }
  if (out) {
    out->assign(sg.pieces, SampledToken{});
    for (size_t i = 0; i < sg.pieces; ++i) {
      if (!sg.sampled[i]) continue;
      const int64_t row = sg.row_of_input[i] + sg.nrows_of_input[i] - 1;
      SampledToken& tk = (*out)[i];
      tk.id = sg.ids[row];
      tk.logprob = sg.lps[row];
      if (const int32_t cr = sg.chain_of_input[i]; cr >= 0) {
        const int64_t k = std::min<int64_t>(sg.mtp_of_input[i], sg.chain_k);
        tk.drafts.assign(sg.drafts + cr * sg.chain_k, sg.drafts + cr * sg.chain_k + k);
      }
      if (sg.spec[i]) {  // (id, logprob) after every token of the piece (greedy or against its draft)
        for (int64_t r = sg.row_of_input[i]; r <= row; ++r) tk.rows.emplace_back(sg.ids[r], sg.lps[r]);
        continue;
      }
      if (sg.top_logprobs[i] > 0) {
        std::span<const float> lrow;
        if (sg.want_logits) {
          lrow = std::span<const float>(sg.all.data() + row * V, V);
        } else {
          for (const auto& [pi, v] : sg.top_rows)
            if (pi == i) lrow = v;
        }
        const float lp = tk.logprob;
        LogProbs(lrow, tk.id, sg.top_logprobs[i], &tk);
        tk.logprob = lp;  // the device value: the same figure with or without alternatives
      }
    }
  }
  return Status::Ok();
}

}  // namespace gyre
