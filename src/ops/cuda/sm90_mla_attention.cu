// Device code of absorbed MLA attention (docs/model-glm5-next.md §5.1): the per-head absorption
// GEMMs, the split-key attention over the latent cache, and the combine of key splits.
//
// Sections: helpers; head-batched GEMM (q_lat = W_UKᵀ q_nope, out = W_UV o_lat); attention;
// combine; launchers. All math is fp32 FFMA with fp32 accumulation.
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/mla_kernels.h"

namespace gyre::cuda::internal {
namespace {

constexpr unsigned kFull = 0xffffffffu;

// ---- helpers -------------------------------------------------------------------------------------

__device__ __forceinline__ void CpAsync16(float* dst, const float* src, int src_bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ float Bf16ToFloat(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

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
    for (int e = tid; e < kMlaKeys * kq; e += kMlaThreads) {
      const int k = e / kq, c4 = e - k * kq;
      const int64_t r = rows[buf * kMlaKeys + k];
      const float* src = a.latent;
      int bytes = 0;
      if (r >= 0) {
        bytes = 16;
        src = c4 < rq ? a.latent + r * R + 4 * c4 : a.krot + r * a.rope + 4 * (c4 - rq);
      }
      CpAsync16(Cs + (buf * kMlaKeys + k) * ks + 4 * c4, src, bytes);
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

// ---- combine -------------------------------------------------------------------------------------

// Grid (tokens, heads), 128 threads: o_lat = Σ_s e^{m_s − M} O_s / Σ_s e^{m_s − M} l_s over the
// splits that saw keys (l_s > 0); zeros when none did (padding tokens).
__global__ void __launch_bounds__(128) mla_combine_kernel(const __grid_constant__ MlaCombineArgs a) {
  __shared__ float wts[kMlaMaxSplits];
  __shared__ float s_inv;
  const int i = blockIdx.x, h = blockIdx.y, S = a.num_splits, T = a.num_tokens, H = a.heads, R = a.latent_dim;
  for (int s = threadIdx.x; s < S; s += blockDim.x) {
    const float* ml = a.ml_part + ((static_cast<int64_t>(s) * T + i) * H + h) * 2;
    wts[s] = ml[1] > 0.0f ? ml[0] : -INFINITY;  // running max, or -inf for an empty split
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float mx = -INFINITY, den = 0.0f;
    for (int s = 0; s < S; ++s) mx = fmaxf(mx, wts[s]);
    for (int s = 0; s < S; ++s) {
      const float l = a.ml_part[((static_cast<int64_t>(s) * T + i) * H + h) * 2 + 1];
      const float w = l > 0.0f ? expf(wts[s] - mx) : 0.0f;
      wts[s] = w;
      den += w * l;
    }
    s_inv = den > 0.0f ? 1.0f / den : 0.0f;
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

cudaError_t LaunchMlaAttention(const MlaAttnArgs& a, int head_groups, cudaStream_t s) {
  static const cudaError_t allowed = AllowMaxDynamicSmem(reinterpret_cast<const void*>(mla_attn_kernel));
  if (allowed != cudaSuccess) return allowed;
  const size_t smem = MlaAttnSmemBytes(a.latent_dim + a.rope);
  const dim3 grid(a.num_splits, a.num_tokens, head_groups);
  mla_attn_kernel<<<grid, kMlaThreads, smem, s>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchMlaCombine(const MlaCombineArgs& a, cudaStream_t s) {
  mla_combine_kernel<<<dim3(a.num_tokens, a.heads), 128, 0, s>>>(a);
  return cudaGetLastError();
}

}  // namespace gyre::cuda::internal
