// Token-wise kernels (elementwise_cuda.h). Sections: device helpers; kernels (norms, activations,
// KDA gate and conv, hyper-connections, gathers and casts, argmax); launchers.
//
// Every kernel is memory-bound. Plan: rows (norms, embedding, hc.pre, argmax) get one block (one
// warp for the per-head gated norm), element-wise ops a grid-stride loop. Each kernel is templated
// on V, the number of consecutive fp32 elements a thread moves per access: V = 4 (16-byte accesses)
// when every pointer is 16-byte aligned and every row length and stride is a multiple of 4, else
// V = 1. Both instantiations run the same body, so the scalar path is the vector path with narrow
// loads. Math is fp32 with fp32 accumulation and follows the CPU op's expression order (expf,
// logf, 1/sqrtf: no fast-math intrinsics).
#include "ops/cuda/elementwise_cuda.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <string>

#include "ops/cuda/cuda_check.h"

namespace gyre::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kArgmaxThreads = 1024;  // one block per logits row: more loads in flight per row
constexpr int64_t kMaxGrid = 4096;    // grid-stride kernels: ~8 waves of 256-thread blocks on an H200
constexpr int64_t kMaxGridY = 65535;
constexpr int kMaxConvWidth = 16;
constexpr int kMaxHcStreams = 4;

// ---- device helpers ------------------------------------------------------------------------------

template <int V>
struct Vec {
  float v[V];
};

// p must be aligned to V floats (the launchers check).
template <int V>
__device__ __forceinline__ Vec<V> Load(const float* p) {
  Vec<V> r;
  if constexpr (V == 4) {
    const float4 f = *reinterpret_cast<const float4*>(p);
    r.v[0] = f.x;
    r.v[1] = f.y;
    r.v[2] = f.z;
    r.v[3] = f.w;
  } else {
    static_assert(V == 1, "V is 1 or 4");
    r.v[0] = *p;
  }
  return r;
}

template <int V>
__device__ __forceinline__ void Store(float* p, const Vec<V>& r) {
  if constexpr (V == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
  } else {
    *p = r.v[0];
  }
}

template <int V>
__device__ __forceinline__ Vec<V> Zeros() {
  Vec<V> r;
#pragma unroll
  for (int k = 0; k < V; ++k) r.v[k] = 0.0f;
  return r;
}

// As ops::Sigmoid / ops::Silu (accurate expf).
__device__ __forceinline__ float Sig(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float Silu(float x) { return x / (1.0f + expf(-x)); }

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32); every thread gets the total. `red` holds 32
// floats; the leading barrier lets consecutive calls reuse it.
__device__ __forceinline__ float BlockSum(float v, float* red) {
  v = WarpSum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  return WarpSum(lane < static_cast<int>(blockDim.x / 32) ? red[lane] : 0.0f);
}

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridThreads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// ---- norms ---------------------------------------------------------------------------------------

// One block per row.
template <int V>
__global__ void __launch_bounds__(kThreads)
    RmsNormKernel(const float* x, int64_t d, int64_t ldx, const float* w, float eps, float* y, int64_t ldy) {
  __shared__ float red[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * ldx;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * ldy;
  const int64_t nv = d / V;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
    const Vec<V> a = Load<V>(xr + j * V);
#pragma unroll
    for (int k = 0; k < V; ++k) ss += a.v[k] * a.v[k];
  }
  ss = BlockSum(ss, red);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
    Vec<V> a = Load<V>(xr + j * V);
    const Vec<V> wv = w ? Load<V>(w + j * V) : Vec<V>{};
#pragma unroll
    for (int k = 0; k < V; ++k) a.v[k] = w ? wv.v[k] * (a.v[k] * inv) : a.v[k] * inv;
    Store<V>(yr + j * V, a);
  }
}

// One block per row; mean, variance and output in three passes (as the CPU op).
template <int V>
__global__ void __launch_bounds__(kThreads)
    LayerNormKernel(const float* x, int64_t d, const float* w, const float* b, float eps, float* y) {
  __shared__ float red[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * d;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * d;
  const int64_t nv = d / V;
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
    const Vec<V> a = Load<V>(xr + j * V);
#pragma unroll
    for (int k = 0; k < V; ++k) s += a.v[k];
  }
  const float mean = BlockSum(s, red) / static_cast<float>(d);
  float var = 0.0f;
  for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
    const Vec<V> a = Load<V>(xr + j * V);
#pragma unroll
    for (int k = 0; k < V; ++k) var += (a.v[k] - mean) * (a.v[k] - mean);
  }
  var = BlockSum(var, red) / static_cast<float>(d);
  const float inv = 1.0f / sqrtf(var + eps);
  for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
    Vec<V> a = Load<V>(xr + j * V);
    const Vec<V> wv = Load<V>(w + j * V), bv = Load<V>(b + j * V);
#pragma unroll
    for (int k = 0; k < V; ++k) a.v[k] = (a.v[k] - mean) * inv * wv.v[k] + bv.v[k];
    Store<V>(yr + j * V, a);
  }
}

// One warp per (token, head) row of v values; 8 rows per block.
template <int V>
__global__ void __launch_bounds__(kThreads) GatedRmsNormKernel(const float* o, const float* z, int64_t rows,
                                                               int64_t v, const float* w, float eps, float* y) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave; no block barrier follows
  const int lane = threadIdx.x % 32;
  const float* orow = o + row * v;
  const float* zrow = z + row * v;
  float* yrow = y + row * v;
  const int64_t nv = v / V;
  float ss = 0.0f;
  for (int64_t j = lane; j < nv; j += 32) {
    const Vec<V> a = Load<V>(orow + j * V);
#pragma unroll
    for (int k = 0; k < V; ++k) ss += a.v[k] * a.v[k];
  }
  ss = WarpSum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(v) + eps);
  for (int64_t j = lane; j < nv; j += 32) {
    Vec<V> a = Load<V>(orow + j * V);
    const Vec<V> zv = Load<V>(zrow + j * V), wv = Load<V>(w + j * V);
#pragma unroll
    for (int k = 0; k < V; ++k) a.v[k] = wv.v[k] * (a.v[k] * inv) * Sig(zv.v[k]);
    Store<V>(yrow + j * V, a);
  }
}

// ---- activations ---------------------------------------------------------------------------------

// grid.x over column vectors, grid.y over rows (looping past 65535).
template <int V>
__global__ void __launch_bounds__(kThreads) SwiGluKernel(const float* g, int64_t ldg, const float* u, int64_t ldu,
                                                         int64_t n, int64_t width, float limit, float* a) {
  const int64_t nv = width / V;
  for (int64_t r = blockIdx.y; r < n; r += gridDim.y) {
    for (int64_t j = GlobalThread(); j < nv; j += GridThreads()) {
      const Vec<V> gv = Load<V>(g + r * ldg + j * V), uv = Load<V>(u + r * ldu + j * V);
      Vec<V> out;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        float gg = gv.v[k], uu = uv.v[k];
        if (limit > 0.0f) {  // std::min(g, limit) and std::clamp(u, -limit, limit), NaN behaviour included
          gg = limit < gg ? limit : gg;
          uu = uu < -limit ? -limit : (limit < uu ? limit : uu);
        }
        out.v[k] = Silu(gg) * uu;
      }
      Store<V>(a + r * width + j * V, out);
    }
  }
}

template <int V>
__global__ void __launch_bounds__(kThreads) SigmoidKernel(const float* x, int64_t n, float* y) {
  const int64_t nv = n / V;
  for (int64_t j = GlobalThread(); j < nv; j += GridThreads()) {
    Vec<V> a = Load<V>(x + j * V);
#pragma unroll
    for (int k = 0; k < V; ++k) a.v[k] = Sig(a.v[k]);
    Store<V>(y + j * V, a);
  }
  for (int64_t i = nv * V + GlobalThread(); i < n; i += GridThreads()) y[i] = Sig(x[i]);
}

template <int V>
__global__ void __launch_bounds__(kThreads) AddInPlaceKernel(float* x, const float* a, int64_t n) {
  const int64_t nv = n / V;
  for (int64_t j = GlobalThread(); j < nv; j += GridThreads()) {
    Vec<V> xv = Load<V>(x + j * V);
    const Vec<V> av = Load<V>(a + j * V);
#pragma unroll
    for (int k = 0; k < V; ++k) xv.v[k] += av.v[k];
    Store<V>(x + j * V, xv);
  }
  for (int64_t i = nv * V + GlobalThread(); i < n; i += GridThreads()) x[i] += a[i];
}

// ---- KDA gate and short conv ---------------------------------------------------------------------

// Flat over f [n, h*k]; V = 4 only when k % 4 == 0, so the V elements of a vector share a head.
template <int V>
__global__ void __launch_bounds__(kThreads) KdaGateKernel(const float* f, int64_t total, int64_t hk, int64_t k,
                                                          const float* dt_bias, const float* a_log,
                                                          bool has_lower_bound, float lower_bound, float* g) {
  const int64_t nv = total / V;
  for (int64_t j = GlobalThread(); j < nv; j += GridThreads()) {
    const int64_t c0 = (j * V) % hk;
    const float a = expf(a_log[c0 / k]);
    Vec<V> fv = Load<V>(f + j * V);
    const Vec<V> dv = Load<V>(dt_bias + c0);
#pragma unroll
    for (int q = 0; q < V; ++q) {
      const float zz = fv.v[q] + dv.v[q];
      if (has_lower_bound) {
        fv.v[q] = lower_bound * Sig(a * zz);
      } else {
        const float sp = zz > 20.0f ? zz : logf(1.0f + expf(zz));
        fv.v[q] = -a * sp;
      }
    }
    Store<V>(g + j * V, fv);
  }
}

// The sequence owning token i: the largest b < num_seqs with cu[b] <= i; -1 when i is past the
// last sequence (or there is none).
__device__ __forceinline__ int64_t OwnerSeq(const int32_t* cu, int64_t num_seqs, int64_t i) {
  if (num_seqs <= 0 || i < cu[0]) return -1;
  int64_t lo = 0, hi = num_seqs;
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (cu[mid] <= i) lo = mid; else hi = mid;
  }
  return i < cu[lo + 1] ? lo : -1;
}

__device__ __forceinline__ bool SlotValid(int32_t slot, int64_t num_slots) { return slot >= 0 && slot < num_slots; }

// Phase 1: every output token, reading the tails before any is updated. grid.x over channels,
// grid.y over tokens (looping past 65535).
__global__ void __launch_bounds__(kThreads) ConvOutKernel(const __grid_constant__ ConvParams p) {
  const int64_t C = p.channels, hist = p.width - 1;
  for (int64_t i = blockIdx.y; i < p.num_tokens; i += gridDim.y) {
    const int64_t b = OwnerSeq(p.cu_seqlens, p.num_seqs, i);
    const int32_t slot = b >= 0 ? p.slots[b] : -1;
    const bool live = SlotValid(slot, p.num_slots);
    const int64_t start = live ? p.cu_seqlens[b] : 0, pos = i - start;
    const float* tail = live ? p.state + slot * hist * C : nullptr;
    for (int64_t c = GlobalThread(); c < C; c += GridThreads()) {
      float out = 0.0f;
      if (live) {
        const float* wc = p.w + c * p.width;
        float acc = 0.0f;
        for (int64_t j = 0; j < p.width; ++j) {
          const int64_t src = pos - hist + j;  // < 0 reads the tail
          const float in = src >= 0 ? p.x[(start + src) * C + c] : tail[(hist + src) * C + c];
          acc += wc[j] * in;
        }
        out = Silu(acc);
      }
      p.y[i * C + c] = out;
    }
  }
}

// Phase 1, vectorised (channels and split multiples of 4, width <= 4, 16-byte aligned rows): a
// thread owns 4 channels and a run of kConvTokens tokens, keeping the conv window in registers and
// loading one new row per token while the tokens stay in one sequence. Same sums in the same order
// as ConvOutKernel. Writes y or the split parts.
constexpr int kConvTokens = 16;
__global__ void __launch_bounds__(kThreads) ConvOutVec4Kernel(const __grid_constant__ ConvParams p) {
  const int64_t C = p.channels, hist = p.width - 1, c4 = (blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x) * 4;
  if (c4 >= C) return;
  const int W = static_cast<int>(p.width);
  float wv[4][4];  // [channel][tap]
#pragma unroll
  for (int q = 0; q < 4; ++q)
#pragma unroll
    for (int j = 0; j < 4; ++j) wv[q][j] = j < W ? p.w[(c4 + q) * W + j] : 0.0f;
  float4 win[4];
  int64_t prev_b = -2;
  for (int64_t i0 = blockIdx.y * static_cast<int64_t>(kConvTokens); i0 < p.num_tokens;
       i0 += static_cast<int64_t>(gridDim.y) * kConvTokens) {
    prev_b = -2;
    for (int tt = 0; tt < kConvTokens; ++tt) {
      const int64_t i = i0 + tt;
      if (i >= p.num_tokens) break;
      const int64_t b = OwnerSeq(p.cu_seqlens, p.num_seqs, i);
      const int32_t slot = b >= 0 ? p.slots[b] : -1;
      float4 out = make_float4(0, 0, 0, 0);
      if (SlotValid(slot, p.num_slots)) {
        const int64_t start = p.cu_seqlens[b], pos = i - start;
        const float* tail = p.state + slot * hist * C;
        auto row = [&](int64_t src) -> float4 {  // input at position src of the sequence (< 0: tail)
          return src >= 0 ? *reinterpret_cast<const float4*>(p.x + (start + src) * C + c4)
                          : *reinterpret_cast<const float4*>(tail + (hist + src) * C + c4);
        };
        if (b != prev_b) {
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (j < W) win[j] = row(pos - hist + j);
        } else {
#pragma unroll
          for (int j = 0; j < 3; ++j)
            if (j + 1 < W) win[j] = win[j + 1];
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (j == W - 1) win[j] = row(pos);
        }
        float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (j >= W) break;
          a0 += wv[0][j] * win[j].x;
          a1 += wv[1][j] * win[j].y;
          a2 += wv[2][j] * win[j].z;
          a3 += wv[3][j] * win[j].w;
        }
        out = make_float4(Silu(a0), Silu(a1), Silu(a2), Silu(a3));
        prev_b = b;
      } else {
        prev_b = -2;
      }
      if (p.split > 0) {
        const int64_t part = c4 / p.split, cc = c4 - part * p.split;
        *reinterpret_cast<float4*>(p.parts[part] + i * p.split + cc) = out;
      } else {
        *reinterpret_cast<float4*>(p.y + i * C + c4) = out;
      }
    }
  }
}

// Phase 2: each live sequence's tail ← the last width-1 inputs of [tail; x]. grid.x over
// channels, grid.y over sequences.
__global__ void __launch_bounds__(kThreads) ConvTailKernel(const __grid_constant__ ConvParams p) {
  const int64_t C = p.channels, hist = p.width - 1;
  for (int64_t b = blockIdx.y; b < p.num_seqs; b += gridDim.y) {
    const int32_t slot = p.tail_slots ? p.tail_slots[b] : p.slots[b];
    const int64_t start = p.cu_seqlens[b], len = p.cu_seqlens[b + 1] - start;
    if (!SlotValid(slot, p.num_slots) || start < 0 || len < 0 || start + len > p.num_tokens) continue;
    float* tail = p.state + slot * hist * C;
    for (int64_t c = GlobalThread(); c < C; c += GridThreads()) {
      float tmp[kMaxConvWidth - 1];
#pragma unroll
      for (int j = 0; j < kMaxConvWidth - 1; ++j) {
        if (j < hist) {
          const int64_t src = len - hist + j;
          tmp[j] = src >= 0 ? p.x[(start + src) * C + c] : tail[(hist + src) * C + c];
        }
      }
#pragma unroll
      for (int j = 0; j < kMaxConvWidth - 1; ++j)
        if (j < hist) tail[j * C + c] = tmp[j];
    }
  }
}

// ---- hyper-connections ---------------------------------------------------------------------------

// One block per token. Phases: sum of squares of the n·d stream values → μ = fn·(x·inv) (M dot
// products, M = (2+N)·N, each thread accumulating all M over its slice) → one thread maps μ to
// pre/post/comb (sigmoid, row softmax, Sinkhorn) → y = Σ_s pre[s]·X[s].
template <int N, int V>
__global__ void __launch_bounds__(kThreads)
    HcPreKernel(const float* x, int64_t d, const float* fn, const float* base, const float* scale, float norm_eps,
                float hc_eps, int64_t sinkhorn_iters, float* post, float* comb, float* y) {
  constexpr int M = (2 + N) * N;
  constexpr int kWarps = kThreads / 32;
  __shared__ float red[32];
  __shared__ float part[kWarps][M];
  __shared__ float mu[M];
  __shared__ float pre[N];
  const int64_t tok = blockIdx.x, nd = N * d, nv = nd / V;
  const float* X = x + tok * nd;

  // ---- rms of the flattened streams ----
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
    const Vec<V> a = Load<V>(X + j * V);
#pragma unroll
    for (int k = 0; k < V; ++k) ss += a.v[k] * a.v[k];
  }
  ss = BlockSum(ss, red);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(nd) + norm_eps);

  // ---- μ = fn · x̃ ----
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
    Vec<V> xn = Load<V>(X + j * V);
#pragma unroll
    for (int k = 0; k < V; ++k) xn.v[k] *= inv;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const Vec<V> fv = Load<V>(fn + m * nd + j * V);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[m] += fv.v[k] * xn.v[k];
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float s = WarpSum(acc[m]);
    if (lane == 0) part[warp][m] = s;
  }
  __syncthreads();
  if (threadIdx.x < M) {
    float s = 0.0f;
    for (int w = 0; w < kWarps; ++w) s += part[w][threadIdx.x];
    mu[threadIdx.x] = s;
  }
  __syncthreads();

  // ---- pre / post / comb (16 values: one thread) ----
  if (threadIdx.x == 0) {
    for (int s = 0; s < N; ++s) {
      pre[s] = Sig(mu[s] * scale[0] + base[s]) + hc_eps;
      post[tok * N + s] = 2.0f * Sig(mu[N + s] * scale[1] + base[N + s]);
    }
    float C[N][N];
    for (int r = 0; r < N; ++r) {
      float mx = -INFINITY;
      for (int c = 0; c < N; ++c) {
        C[r][c] = mu[2 * N + r * N + c] * scale[2] + base[2 * N + r * N + c];
        mx = fmaxf(mx, C[r][c]);
      }
      float den = 0.0f;
      for (int c = 0; c < N; ++c) {
        C[r][c] = expf(C[r][c] - mx);
        den += C[r][c];
      }
      for (int c = 0; c < N; ++c) C[r][c] = C[r][c] / den + hc_eps;
    }
    auto col_step = [&] {
      for (int c = 0; c < N; ++c) {
        float sum = 0.0f;
        for (int r = 0; r < N; ++r) sum += C[r][c];
        for (int r = 0; r < N; ++r) C[r][c] /= (sum + hc_eps);
      }
    };
    auto row_step = [&] {
      for (int r = 0; r < N; ++r) {
        float sum = 0.0f;
        for (int c = 0; c < N; ++c) sum += C[r][c];
        for (int c = 0; c < N; ++c) C[r][c] /= (sum + hc_eps);
      }
    };
    col_step();
    for (int64_t it = 0; it < sinkhorn_iters - 1; ++it) {
      row_step();
      col_step();
    }
    for (int r = 0; r < N; ++r)
      for (int c = 0; c < N; ++c) comb[tok * N * N + r * N + c] = C[r][c];
  }
  __syncthreads();

  // ---- collapse ----
  for (int64_t j = threadIdx.x; j < d / V; j += blockDim.x) {
    Vec<V> out = Zeros<V>();
#pragma unroll
    for (int s = 0; s < N; ++s) {
      const Vec<V> a = Load<V>(X + s * d + j * V);
#pragma unroll
      for (int k = 0; k < V; ++k) out.v[k] += pre[s] * a.v[k];
    }
    Store<V>(y + tok * d + j * V, out);
  }
}

// In place on x [t, N, d]: a thread reads column j of all N streams, then writes all N. grid.x over
// columns, grid.y over tokens.
template <int N, int V>
__global__ void __launch_bounds__(kThreads)
    HcPostKernel(float* x, int64_t t, int64_t d, const float* a, const float* post, const float* comb) {
  const int64_t nv = d / V;
  for (int64_t tok = blockIdx.y; tok < t; tok += gridDim.y) {
    float P[N], C[N * N];
#pragma unroll
    for (int s = 0; s < N; ++s) P[s] = post[tok * N + s];
#pragma unroll
    for (int i = 0; i < N * N; ++i) C[i] = comb[tok * N * N + i];
    float* X = x + tok * N * d;
    for (int64_t j = GlobalThread(); j < nv; j += GridThreads()) {
      Vec<V> xs[N];
#pragma unroll
      for (int s = 0; s < N; ++s) xs[s] = Load<V>(X + s * d + j * V);
      const Vec<V> av = Load<V>(a + tok * d + j * V);
#pragma unroll
      for (int s = 0; s < N; ++s) {
        Vec<V> out;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          float mix = 0.0f;
#pragma unroll
          for (int i = 0; i < N; ++i) mix += C[i * N + s] * xs[i].v[k];
          out.v[k] = P[s] * av.v[k] + mix;
        }
        Store<V>(X + s * d + j * V, out);
      }
    }
  }
}

// ---- gathers and casts ---------------------------------------------------------------------------

// One block per token row. bf16 tables: V bf16 values per access (8 bytes for V = 4).
template <int V, bool kBf16>
__global__ void __launch_bounds__(kThreads)
    EmbeddingKernel(const int32_t* ids, const void* table, int64_t vocab, int64_t d, float* y) {
  const int64_t row = blockIdx.x, id = ids[row];
  float* yr = y + row * d;
  const bool valid = id >= 0 && id < vocab;
  for (int64_t j = threadIdx.x; j < d / V; j += blockDim.x) {
    Vec<V> out = Zeros<V>();
    if (valid) {
      if constexpr (kBf16) {
        const uint16_t* src = static_cast<const uint16_t*>(table) + id * d + j * V;
        uint16_t h[V];
        if constexpr (V == 4) {
          const uint2 u = *reinterpret_cast<const uint2*>(src);
          h[0] = u.x & 0xFFFFu;
          h[1] = u.x >> 16;
          h[2] = u.y & 0xFFFFu;
          h[3] = u.y >> 16;
        } else {
          h[0] = *src;
        }
#pragma unroll
        for (int k = 0; k < V; ++k) out.v[k] = __uint_as_float(static_cast<uint32_t>(h[k]) << 16);
      } else {
        out = Load<V>(static_cast<const float*>(table) + id * d + j * V);
      }
    }
    Store<V>(yr + j * V, out);
  }
}

// grid.x over column vectors, grid.y over output rows. rows null: row r. A negative row: zeros.
template <int V>
__global__ void __launch_bounds__(kThreads)
    StreamMeanKernel(const float* x, int64_t n, int64_t d, const int32_t* rows, int64_t r, float* y) {
  const int64_t nv = d / V;
  for (int64_t o = blockIdx.y; o < r; o += gridDim.y) {
    const int64_t src = rows ? rows[o] : o;
    const float* X = x + src * n * d;
    for (int64_t j = GlobalThread(); j < nv; j += GridThreads()) {
      Vec<V> acc = Zeros<V>();
      if (src >= 0) {
        for (int64_t s = 0; s < n; ++s) {
          const Vec<V> a = Load<V>(X + s * d + j * V);
#pragma unroll
          for (int k = 0; k < V; ++k) acc.v[k] += a.v[k];
        }
#pragma unroll
        for (int k = 0; k < V; ++k) acc.v[k] = acc.v[k] / static_cast<float>(n);
      }
      Store<V>(y + o * d + j * V, acc);
    }
  }
}

template <int V>
__global__ void __launch_bounds__(kThreads) GatherRowsKernel(const float* x, int64_t d, const int32_t* rows, int64_t r,
                                                             float* y) {
  const int64_t nv = d / V;
  for (int64_t o = blockIdx.y; o < r; o += gridDim.y) {
    const int64_t src = rows[o];
    for (int64_t j = GlobalThread(); j < nv; j += GridThreads())
      Store<V>(y + o * d + j * V, src >= 0 ? Load<V>(x + src * d + j * V) : Zeros<V>());
  }
}

template <int V>
__global__ void __launch_bounds__(kThreads) CastF32ToBf16Kernel(const float* x, int64_t n, __nv_bfloat16* y) {
  const int64_t nv = n / V;
  for (int64_t j = GlobalThread(); j < nv; j += GridThreads()) {
    const Vec<V> a = Load<V>(x + j * V);
    if constexpr (V == 4) {
      const __nv_bfloat162 lo = __halves2bfloat162(__float2bfloat16_rn(a.v[0]), __float2bfloat16_rn(a.v[1]));
      const __nv_bfloat162 hi = __halves2bfloat162(__float2bfloat16_rn(a.v[2]), __float2bfloat16_rn(a.v[3]));
      uint2 u;
      u.x = *reinterpret_cast<const uint32_t*>(&lo);
      u.y = *reinterpret_cast<const uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(y + j * V) = u;
    } else {
      y[j] = __float2bfloat16_rn(a.v[0]);
    }
  }
  for (int64_t i = nv * V + GlobalThread(); i < n; i += GridThreads()) y[i] = __float2bfloat16_rn(x[i]);
}

// ---- argmax --------------------------------------------------------------------------------------

constexpr int kNoIndex = INT_MAX;

// (bv, bi) ← (v, i) when i is a candidate and beats it: larger value, or equal value at a lower
// index. bi == kNoIndex means no candidate yet.
__device__ __forceinline__ void Better(float& bv, int& bi, float v, int i) {
  if (i != kNoIndex && (bi == kNoIndex || v > bv || (v == bv && i < bi))) {
    bv = v;
    bi = i;
  }
}

// One block per row. ops::Argmax keeps index 0 when logits[0] is NaN and otherwise never picks a
// NaN: NaNs are skipped here and row[0] decides the NaN case at the end.
template <int V>
__global__ void __launch_bounds__(kArgmaxThreads) ArgmaxKernel(const float* logits, int64_t v, int32_t* ids) {
  __shared__ float best_v[32];
  __shared__ int best_i[32];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * v;
  float bv = -INFINITY;
  int bi = kNoIndex;
  for (int64_t j = threadIdx.x; j < v / V; j += blockDim.x) {
    const Vec<V> a = Load<V>(row + j * V);
#pragma unroll
    for (int k = 0; k < V; ++k)
      if (!isnan(a.v[k])) Better(bv, bi, a.v[k], static_cast<int>(j * V + k));
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
    Better(bv, bi, ov, oi);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    best_v[warp] = bv;
    best_i[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    const bool has = lane < static_cast<int>(blockDim.x / 32);
    bv = has ? best_v[lane] : -INFINITY;
    bi = has ? best_i[lane] : kNoIndex;
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
      Better(bv, bi, ov, oi);
    }
    if (lane == 0) ids[blockIdx.x] = (isnan(row[0]) || bi == kNoIndex) ? 0 : bi;
  }
}

// ---- launch helpers ------------------------------------------------------------------------------

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// True when all pointers (null ones ignored) are 16-byte aligned.
template <typename... P>
bool AllAligned16(const P*... p) {
  return ((p == nullptr || Aligned16(p)) && ...);
}

bool Mult4(int64_t v) { return v % 4 == 0; }

// Blocks for a grid-stride loop over `work` items.
unsigned GridFor(int64_t work, int threads = kThreads) {
  return static_cast<unsigned>(std::clamp<int64_t>((work + threads - 1) / threads, 1, kMaxGrid));
}

unsigned GridY(int64_t rows) { return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, kMaxGridY)); }

Status Launched() {
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

Status Bad(const char* op, const std::string& what) { return Status::InvalidArgument(std::string(op) + ": " + what); }

// Counts that index one grid dimension directly (one block per row).
constexpr int64_t kMaxBlockRows = INT32_MAX;

}  // namespace

// ---- launchers -----------------------------------------------------------------------------------

Status Embedding(const int32_t* ids, int64_t n, const DMat& table, float* y, cudaStream_t stream) {
  if (n < 0 || n > kMaxBlockRows) return Bad("embedding", "n out of range");
  if (table.rows < 1 || table.cols < 1 || !table.data) return Bad("embedding", "empty table");
  if (n == 0) return Status::Ok();
  if (!ids || !y) return Bad("embedding", "null pointer");
  const int64_t d = table.cols;
  const bool vec = Mult4(d) && AllAligned16(y) &&
                   (reinterpret_cast<uintptr_t>(table.data) & (table.bf16 ? 7 : 15)) == 0;
  const unsigned grid = static_cast<unsigned>(n);
  if (table.bf16) {
    if (vec) EmbeddingKernel<4, true><<<grid, kThreads, 0, stream>>>(ids, table.data, table.rows, d, y);
    else EmbeddingKernel<1, true><<<grid, kThreads, 0, stream>>>(ids, table.data, table.rows, d, y);
  } else {
    if (vec) EmbeddingKernel<4, false><<<grid, kThreads, 0, stream>>>(ids, table.data, table.rows, d, y);
    else EmbeddingKernel<1, false><<<grid, kThreads, 0, stream>>>(ids, table.data, table.rows, d, y);
  }
  return Launched();
}

Status RmsNorm(const float* x, int64_t n, int64_t d, int64_t ldx, const float* w, float eps, float* y, int64_t ldy,
               cudaStream_t stream) {
  if (n < 0 || n > kMaxBlockRows) return Bad("rmsnorm", "n out of range");
  if (d < 1 || ldx < d || ldy < d) return Bad("rmsnorm", "need d >= 1, ldx >= d, ldy >= d");
  if (n == 0) return Status::Ok();
  if (!x || !y) return Bad("rmsnorm", "null pointer");
  const bool vec = Mult4(d) && Mult4(ldx) && Mult4(ldy) && AllAligned16(x, w, y);
  if (vec) RmsNormKernel<4><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(x, d, ldx, w, eps, y, ldy);
  else RmsNormKernel<1><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(x, d, ldx, w, eps, y, ldy);
  return Launched();
}

Status LayerNorm(const float* x, int64_t n, int64_t d, const float* w, const float* b, float eps, float* y,
                 cudaStream_t stream) {
  if (n < 0 || n > kMaxBlockRows) return Bad("layernorm", "n out of range");
  if (d < 1) return Bad("layernorm", "d must be >= 1");
  if (n == 0) return Status::Ok();
  if (!x || !w || !b || !y) return Bad("layernorm", "null pointer");
  const bool vec = Mult4(d) && AllAligned16(x, w, b, y);
  if (vec) LayerNormKernel<4><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(x, d, w, b, eps, y);
  else LayerNormKernel<1><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(x, d, w, b, eps, y);
  return Launched();
}

Status SwiGlu(const float* g, int64_t ldg, const float* u, int64_t ldu, int64_t n, int64_t width, float limit,
              float* a, cudaStream_t stream) {
  if (n < 0 || width < 1 || ldg < width || ldu < width) return Bad("swiglu", "need n >= 0, width >= 1, ld >= width");
  if (n == 0) return Status::Ok();
  if (!g || !u || !a) return Bad("swiglu", "null pointer");
  const bool vec = Mult4(width) && Mult4(ldg) && Mult4(ldu) && AllAligned16(g, u, a);
  const dim3 grid(GridFor(vec ? width / 4 : width), GridY(n));
  if (vec) SwiGluKernel<4><<<grid, kThreads, 0, stream>>>(g, ldg, u, ldu, n, width, limit, a);
  else SwiGluKernel<1><<<grid, kThreads, 0, stream>>>(g, ldg, u, ldu, n, width, limit, a);
  return Launched();
}

Status Sigmoid(const float* x, int64_t n, float* y, cudaStream_t stream) {
  if (n < 0) return Bad("sigmoid", "n < 0");
  if (n == 0) return Status::Ok();
  if (!x || !y) return Bad("sigmoid", "null pointer");
  if (AllAligned16(x, y)) SigmoidKernel<4><<<GridFor(n / 4 + 1), kThreads, 0, stream>>>(x, n, y);
  else SigmoidKernel<1><<<GridFor(n), kThreads, 0, stream>>>(x, n, y);
  return Launched();
}

Status AddInPlace(float* x, const float* a, int64_t n, cudaStream_t stream) {
  if (n < 0) return Bad("add", "n < 0");
  if (n == 0) return Status::Ok();
  if (!x || !a) return Bad("add", "null pointer");
  if (AllAligned16(x, a)) AddInPlaceKernel<4><<<GridFor(n / 4 + 1), kThreads, 0, stream>>>(x, a, n);
  else AddInPlaceKernel<1><<<GridFor(n), kThreads, 0, stream>>>(x, a, n);
  return Launched();
}

Status KdaGate(const float* f, int64_t n, int64_t h, int64_t k, const float* dt_bias, const float* a_log,
               bool has_lower_bound, float lower_bound, float* g, cudaStream_t stream) {
  if (n < 0 || h < 1 || k < 1) return Bad("kda.gate", "need n >= 0, h >= 1, k >= 1");
  if (n == 0) return Status::Ok();
  if (!f || !dt_bias || !a_log || !g) return Bad("kda.gate", "null pointer");
  const int64_t total = n * h * k;
  if (Mult4(k) && AllAligned16(f, dt_bias, g)) {
    KdaGateKernel<4><<<GridFor(total / 4), kThreads, 0, stream>>>(f, total, h * k, k, dt_bias, a_log, has_lower_bound,
                                                                   lower_bound, g);
  } else {
    KdaGateKernel<1><<<GridFor(total), kThreads, 0, stream>>>(f, total, h * k, k, dt_bias, a_log, has_lower_bound,
                                                               lower_bound, g);
  }
  return Launched();
}

Status GatedRmsNorm(const float* o, const float* z, int64_t n, int64_t h, int64_t v, const float* w, float eps,
                    float* y, cudaStream_t stream) {
  if (n < 0 || h < 1 || v < 1) return Bad("kda.gated_norm", "need n >= 0, h >= 1, v >= 1");
  const int64_t rows = n * h, rows_per_block = kThreads / 32;
  const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  if (blocks > kMaxBlockRows) return Bad("kda.gated_norm", "too many rows");
  if (rows == 0) return Status::Ok();
  if (!o || !z || !w || !y) return Bad("kda.gated_norm", "null pointer");
  const unsigned grid = static_cast<unsigned>(blocks);
  if (Mult4(v) && AllAligned16(o, z, w, y)) GatedRmsNormKernel<4><<<grid, kThreads, 0, stream>>>(o, z, rows, v, w, eps, y);
  else GatedRmsNormKernel<1><<<grid, kThreads, 0, stream>>>(o, z, rows, v, w, eps, y);
  return Launched();
}

Status CausalConv1dSilu(const ConvParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.num_seqs < 0 || p.num_slots < 0) return Bad("kda.conv", "negative count");
  if (p.channels < 1) return Bad("kda.conv", "channels must be >= 1");
  if (p.width < 1 || p.width > kMaxConvWidth)
    return Bad("kda.conv", "width " + std::to_string(p.width) + " out of [1, " + std::to_string(kMaxConvWidth) + "]");
  if (p.num_tokens == 0) return Status::Ok();  // no token: every tail keeps its value
  if (p.num_seqs < 1) return Bad("kda.conv", "tokens without sequences");
  if (!p.x || !p.w || !p.cu_seqlens || !p.slots || (p.width > 1 && !p.state)) return Bad("kda.conv", "null pointer");
  if (p.split > 0) {
    if (p.channels != 3 * p.split || !p.parts[0] || !p.parts[1] || !p.parts[2])
      return Bad("kda.conv", "split output needs channels == 3 * split and three part pointers");
  } else if (!p.y) {
    return Bad("kda.conv", "null pointer");
  }
  auto a16 = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) == 0; };
  const bool vec = p.channels % 4 == 0 && p.width <= 4 && (p.split == 0 || p.split % 4 == 0) && a16(p.x) &&
                   (p.width == 1 || a16(p.state)) &&
                   (p.split > 0 ? a16(p.parts[0]) && a16(p.parts[1]) && a16(p.parts[2]) : a16(p.y));
  if (vec) {
    const dim3 grid(static_cast<unsigned>((p.channels / 4 + kThreads - 1) / kThreads),
                    static_cast<unsigned>(std::min<int64_t>((p.num_tokens + kConvTokens - 1) / kConvTokens, kMaxGridY)));
    ConvOutVec4Kernel<<<grid, kThreads, 0, stream>>>(p);
  } else if (p.split > 0) {
    return Bad("kda.conv", "split output needs the vectorised path (channels and split multiples of 4, width <= 4)");
  } else {
    const dim3 out_grid(GridFor(p.channels), GridY(p.num_tokens));
    ConvOutKernel<<<out_grid, kThreads, 0, stream>>>(p);
  }
  GYRE_RETURN_IF_ERROR(Launched());
  if (p.width == 1) return Status::Ok();  // no tail
  const dim3 tail_grid(GridFor(p.channels), GridY(p.num_seqs));
  ConvTailKernel<<<tail_grid, kThreads, 0, stream>>>(p);
  return Launched();
}

namespace {

template <int N>
void LaunchHcPre(bool vec, const float* x, int64_t t, const float* fn, const float* base, const float* scale,
                 const HcDims& p, float* post, float* comb, float* y, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(t);
  if (vec) {
    HcPreKernel<N, 4><<<grid, kThreads, 0, stream>>>(x, p.d, fn, base, scale, p.norm_eps, p.hc_eps,
                                                       p.sinkhorn_iters, post, comb, y);
  } else {
    HcPreKernel<N, 1><<<grid, kThreads, 0, stream>>>(x, p.d, fn, base, scale, p.norm_eps, p.hc_eps,
                                                       p.sinkhorn_iters, post, comb, y);
  }
}

template <int N>
void LaunchHcPost(bool vec, float* x, int64_t t, const float* a, const float* post, const float* comb, int64_t d,
                  cudaStream_t stream) {
  const dim3 grid(GridFor(vec ? d / 4 : d), GridY(t));
  if (vec) HcPostKernel<N, 4><<<grid, kThreads, 0, stream>>>(x, t, d, a, post, comb);
  else HcPostKernel<N, 1><<<grid, kThreads, 0, stream>>>(x, t, d, a, post, comb);
}

Status CheckHcDims(const char* op, int64_t t, const HcDims& p) {
  if (t < 0 || t > kMaxBlockRows) return Bad(op, "t out of range");
  if (p.n < 1 || p.n > kMaxHcStreams)
    return Bad(op, "n = " + std::to_string(p.n) + " streams unsupported (built for 1..4)");
  if (p.d < 1) return Bad(op, "d must be >= 1");
  return Status::Ok();
}

}  // namespace

Status HcPre(const float* x, int64_t t, const float* fn, const float* base, const float* scale, const HcDims& p,
             float* post, float* comb, float* y, cudaStream_t stream) {
  GYRE_RETURN_IF_ERROR(CheckHcDims("hc.pre", t, p));
  if (t == 0) return Status::Ok();
  if (!x || !fn || !base || !scale || !post || !comb || !y) return Bad("hc.pre", "null pointer");
  const bool vec = Mult4(p.d) && AllAligned16(x, fn, y);
  switch (p.n) {
    case 1: LaunchHcPre<1>(vec, x, t, fn, base, scale, p, post, comb, y, stream); break;
    case 2: LaunchHcPre<2>(vec, x, t, fn, base, scale, p, post, comb, y, stream); break;
    case 3: LaunchHcPre<3>(vec, x, t, fn, base, scale, p, post, comb, y, stream); break;
    default: LaunchHcPre<4>(vec, x, t, fn, base, scale, p, post, comb, y, stream); break;
  }
  return Launched();
}

Status HcPost(float* x, int64_t t, const float* a, const float* post, const float* comb, const HcDims& p,
              cudaStream_t stream) {
  GYRE_RETURN_IF_ERROR(CheckHcDims("hc.post", t, p));
  if (t == 0) return Status::Ok();
  if (!x || !a || !post || !comb) return Bad("hc.post", "null pointer");
  const bool vec = Mult4(p.d) && AllAligned16(x, a);
  switch (p.n) {
    case 1: LaunchHcPost<1>(vec, x, t, a, post, comb, p.d, stream); break;
    case 2: LaunchHcPost<2>(vec, x, t, a, post, comb, p.d, stream); break;
    case 3: LaunchHcPost<3>(vec, x, t, a, post, comb, p.d, stream); break;
    default: LaunchHcPost<4>(vec, x, t, a, post, comb, p.d, stream); break;
  }
  return Launched();
}

Status StreamMean(const float* x, int64_t n, int64_t d, const int32_t* rows, int64_t r, float* y,
                  cudaStream_t stream) {
  if (n < 1 || d < 1 || r < 0) return Bad("stream_mean", "need n >= 1, d >= 1, r >= 0");
  if (r == 0) return Status::Ok();
  if (!x || !y) return Bad("stream_mean", "null pointer");
  const bool vec = Mult4(d) && AllAligned16(x, y);
  const dim3 grid(GridFor(vec ? d / 4 : d), GridY(r));
  if (vec) StreamMeanKernel<4><<<grid, kThreads, 0, stream>>>(x, n, d, rows, r, y);
  else StreamMeanKernel<1><<<grid, kThreads, 0, stream>>>(x, n, d, rows, r, y);
  return Launched();
}

Status GatherRows(const float* x, int64_t d, const int32_t* rows, int64_t r, float* y, cudaStream_t stream) {
  if (d < 1 || r < 0) return Bad("gather_rows", "need d >= 1, r >= 0");
  if (r == 0) return Status::Ok();
  if (!x || !rows || !y) return Bad("gather_rows", "null pointer");
  const bool vec = Mult4(d) && AllAligned16(x, y);
  const dim3 grid(GridFor(vec ? d / 4 : d), GridY(r));
  if (vec) GatherRowsKernel<4><<<grid, kThreads, 0, stream>>>(x, d, rows, r, y);
  else GatherRowsKernel<1><<<grid, kThreads, 0, stream>>>(x, d, rows, r, y);
  return Launched();
}

Status CastF32ToBf16(const float* x, int64_t n, void* y, cudaStream_t stream) {
  if (n < 0) return Bad("cast_bf16", "n < 0");
  if (n == 0) return Status::Ok();
  if (!x || !y) return Bad("cast_bf16", "null pointer");
  auto* out = static_cast<__nv_bfloat16*>(y);
  if ((reinterpret_cast<uintptr_t>(y) & 7) == 0 && Aligned16(x)) {
    CastF32ToBf16Kernel<4><<<GridFor(n / 4 + 1), kThreads, 0, stream>>>(x, n, out);
  } else {
    CastF32ToBf16Kernel<1><<<GridFor(n), kThreads, 0, stream>>>(x, n, out);
  }
  return Launched();
}

Status Argmax(const float* logits, int64_t r, int64_t v, int32_t* ids, cudaStream_t stream) {
  if (r < 0 || r > kMaxBlockRows) return Bad("argmax", "r out of range");
  if (v < 1 || v >= kNoIndex) return Bad("argmax", "v out of [1, 2^31 - 1)");
  if (r == 0) return Status::Ok();
  if (!logits || !ids) return Bad("argmax", "null pointer");
  const unsigned grid = static_cast<unsigned>(r);
  if (Mult4(v) && AllAligned16(logits)) ArgmaxKernel<4><<<grid, kArgmaxThreads, 0, stream>>>(logits, v, ids);
  else ArgmaxKernel<1><<<grid, kArgmaxThreads, 0, stream>>>(logits, v, ids);
  return Launched();
}

}  // namespace gyre::cuda
