// Grouped MoE GEMMs: the mma.sync (HMMA) tensor-core kernel for bf16 weights, the plain FFMA
// kernel for any shape and fp32 weights, and the dispatcher LaunchMoeGemm (moe_kernels.h).
//
// Both kernels are persistent: the grid is sized from the worst case on the host (at most
// SMs × resident blocks), and each block walks tile ids blockIdx.x, +gridDim.x, ... up to the
// tile count the sort kernel left on the device, so a graph replay adapts to any routing.
// Tile id = m_tile · n_tiles + n_tile: consecutive blocks share the A rows and one expert's
// weights, which stay in L2 while the expert's m-tiles run.
//
// Decode extras of the HMMA kernel (MoeGemmParams): the combine fused into the down GEMM (the last
// tile of each n-tile column, found with a per-column counter, sums that column for every token),
// and programmatic dependent launch (griddepcontrol: gate_up waits for the sort grid before its
// first read; down streams its first weight stages, then waits for gate_up).
//
// Sections: device helpers; HMMA kernel; SIMT kernel; launchers.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>

#include "ops/cuda/moe_kernels.h"

namespace gyre::cuda::internal {
namespace {

using bf16 = __nv_bfloat16;

// ---- device helpers ------------------------------------------------------------------------------

// 16-byte global → shared copy; src_bytes = 0 fills the 16 bytes with zeros (padding rows).
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// d += a · b over one m16n8k16 tile (bf16 operands, fp32 accumulators).
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ops::SwiGlu for one element, fp32: silu(min(g, L)) · clamp(u, ±L); no clamp when L <= 0.
__device__ __forceinline__ float SwiGluValue(float g, float u, float limit) {
  if (limit > 0.f) {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
  }
  return g / (1.0f + expf(-g)) * u;
}

// Programmatic dependent launch: wait for the preceding grid (complete, memory visible); allow the
// next grid to launch. Both are no-ops without the launch attribute.
__device__ __forceinline__ void GridDepWait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void GridDepLaunch() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(bf16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T FromF32(float v);
template <>
__device__ __forceinline__ float FromF32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 FromF32<bf16>(float v) {
  return __float2bfloat16_rn(v);
}

// Fills the tile's row tables: row_src = the A row each tile row reads (-1: padding), row_dst =
// the output row (gate_up: sorted row; down: pair id).
template <bool kGateUp>
__device__ __forceinline__ void FillRowTables(const MoeGemmParams& p, int row0, int rows, int block_m,
                                              int32_t* row_src, int32_t* row_dst) {
  for (int i = threadIdx.x; i < block_m; i += blockDim.x) {
    int src = -1, dst = -1;
    if (i < rows) {
      const int pair = __ldcg(p.row_pair + row0 + i);  // L2: may be read before a PDL wait
      src = kGateUp ? pair / p.top_k : row0 + i;
      dst = kGateUp ? row0 + i : pair;
    }
    row_src[i] = src;
    row_dst[i] = dst;
  }
}

// The fused combine for output columns [col0, col0 + cols) of every token: the same sum, in the
// same order, as MoeCombineKernel (moe_cuda.cu). y is read through L2 (other blocks wrote it).
__device__ void CombineColumns(const MoeGemmParams& p, int64_t col0, int cols) {
  const int K = p.top_k;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const int64_t col = col0 + c;
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      float acc = 0.f;
      for (int j = 0; j < K; ++j) {
        const int e = p.idx[t * K + j];
        if (e < 0 || e >= p.num_experts) continue;
        const float wj = p.wts[t * K + j];
        acc += wj * __ldcg(p.y + (t * K + j) * p.n_out + col);
      }
      p.out[t * p.n_out + col] = acc;
    }
  }
}

// ---- HMMA kernel ---------------------------------------------------------------------------------

// One block per (m-tile, n-tile) at a time; kNumStages-deep cp.async pipeline over K; warps own
// kWarpM × kWarpN of the tile and issue ldmatrix.x4 + mma.m16n8k16 per k16 step.
template <class Cfg, bool kGateUp>
__global__ void __launch_bounds__(Cfg::kNumThreads, 1) MoeMmaKernel(const __grid_constant__ MoeGemmParams p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ int last_of_column;
  int32_t* row_src = reinterpret_cast<int32_t*>(smem + Cfg::kNumStages * Cfg::kStageBytes);
  int32_t* row_dst = row_src + Cfg::kBlockM;
  const uint32_t smem_u32 = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / Cfg::kWarpsN, warp_n = warp % Cfg::kWarpsN;
  constexpr int kFeat = kGateUp ? Cfg::kBlockN / 2 : Cfg::kBlockN;  // output features per tile
  const int num_n_tiles = static_cast<int>(p.n_out / kFeat);
  const int num_k_tiles = static_cast<int>(p.k / kMoeBlockK);
  // NOTE (PDL): gate_up reads only what the sort grid wrote: wait first. A PDL down launch reads the
  // tile table and row_pair (the sort, two grids back: complete before gate_up passed its own wait
  // and let down launch) and the weights before waiting; act only after.
  bool waited = kGateUp || !p.pdl;
  if (waited) {
    GridDepWait();
    GridDepLaunch();
  }
  const int num_m_tiles = __ldcg(p.num_tiles);
  const int total = num_m_tiles * num_n_tiles;
  const bf16* a_base = static_cast<const bf16*>(p.a);
  const bf16* w_base = static_cast<const bf16*>(p.w);
  const int64_t w_expert_stride = (kGateUp ? 2 * p.inter : p.n_out) * p.k;
  // Fixed load slots: 16-byte chunk c of rows rr0 + j·kRowsPerPass.
  const int c = tid & 7, rr0 = tid >> 3;
  const uint32_t a_dst0 = MoeSwizzle(rr0, c), b_dst0 = Cfg::kStageBytesA + MoeSwizzle(rr0, c);
  constexpr uint32_t kPassBytes = Cfg::kRowsPerPass * kMoeRowBytes;

  for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
    const int mt = tile / num_n_tiles, nt = tile - mt * num_n_tiles;
    const int4 info = __ldcg(p.tiles + mt);
    const int expert = info.x, row0 = info.y, rows = info.z;

    // ---- setup: row tables, then this thread's source pointers ----
    __syncthreads();  // the previous tile is done reading the stages and row tables
    FillRowTables<kGateUp>(p, row0, rows, Cfg::kBlockM, row_src, row_dst);
    __syncthreads();
    const bf16* a_ptr[Cfg::kChunksPerThreadA];
    uint32_t a_bytes[Cfg::kChunksPerThreadA];
#pragma unroll
    for (int j = 0; j < Cfg::kChunksPerThreadA; ++j) {
      const int src = row_src[rr0 + j * Cfg::kRowsPerPass];
      a_ptr[j] = a_base + (src >= 0 ? int64_t(src) * p.lda : 0) + c * 8;
      a_bytes[j] = src >= 0 ? 16u : 0u;
    }
    // NOTE: a pass covers kRowsPerPass rows (a multiple of 16), so tile row rr0 + j·pass reads
    // weight row W(rr0) + j·pass (down) or W(rr0) + j·pass/2 (gate_up interleave).
    const int64_t w_row0 = kGateUp ? MoeGateUpRow(rr0, int64_t(nt) * kFeat, p.inter) : int64_t(nt) * kFeat + rr0;
    const bf16* b_ptr = w_base + int64_t(expert) * w_expert_stride + w_row0 * p.k + c * 8;
    const int64_t b_step = int64_t(kGateUp ? Cfg::kRowsPerPass / 2 : Cfg::kRowsPerPass) * p.k;

    auto load_a = [&](int kt) {
      const uint32_t stage = smem_u32 + (kt % Cfg::kNumStages) * Cfg::kStageBytes;
      const int64_t koff = int64_t(kt) * kMoeBlockK;
#pragma unroll
      for (int j = 0; j < Cfg::kChunksPerThreadA; ++j)
        CpAsync16(stage + a_dst0 + j * kPassBytes, a_ptr[j] + (a_bytes[j] ? koff : 0), a_bytes[j]);
    };
    auto load_b = [&](int kt) {
      const uint32_t stage = smem_u32 + (kt % Cfg::kNumStages) * Cfg::kStageBytes;
      const int64_t koff = int64_t(kt) * kMoeBlockK;
#pragma unroll
      for (int j = 0; j < Cfg::kChunksPerThreadB; ++j) CpAsync16(stage + b_dst0 + j * kPassBytes, b_ptr + j * b_step + koff, 16u);
    };
    auto load_stage = [&](int kt) {
      load_a(kt);
      load_b(kt);
    };

    float acc[Cfg::kMmaM][Cfg::kMmaN][4];
#pragma unroll
    for (int mi = 0; mi < Cfg::kMmaM; ++mi)
#pragma unroll
      for (int ni = 0; ni < Cfg::kMmaN; ++ni)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.f;

    // ---- producer prologue: kNumStages - 1 stages in flight ----
    if (!waited) {  // PDL down, first tile: weights before the wait (group 0 = all their B + A(0))
#pragma unroll
      for (int s = 0; s < Cfg::kNumStages - 1; ++s)
        if (s < num_k_tiles) load_b(s);
      GridDepWait();
      GridDepLaunch();
      waited = true;
#pragma unroll
      for (int s = 0; s < Cfg::kNumStages - 1; ++s) {
        if (s < num_k_tiles) load_a(s);
        CpAsyncCommit();
      }
    } else {
#pragma unroll
      for (int s = 0; s < Cfg::kNumStages - 1; ++s) {
        if (s < num_k_tiles) load_stage(s);
        CpAsyncCommit();
      }
    }

    // ---- main loop: wait for stage kt, refill the stage read at kt - 1, compute on kt ----
    for (int kt = 0; kt < num_k_tiles; ++kt) {
      CpAsyncWait<Cfg::kNumStages - 2>();
      __syncthreads();
      if (kt + Cfg::kNumStages - 1 < num_k_tiles) load_stage(kt + Cfg::kNumStages - 1);
      CpAsyncCommit();
      const uint32_t sa = smem_u32 + (kt % Cfg::kNumStages) * Cfg::kStageBytes, sb = sa + Cfg::kStageBytesA;
#pragma unroll
      for (int kk = 0; kk < kMoeBlockK / 16; ++kk) {
        uint32_t af[Cfg::kMmaM][4], bq[Cfg::kMmaN / 2][4];
#pragma unroll
        for (int mi = 0; mi < Cfg::kMmaM; ++mi) LdMatrixX4(af[mi], sa + MoeLdmA(warp_m * Cfg::kWarpM + mi * 16, kk, lane));
#pragma unroll
        for (int nj = 0; nj < Cfg::kMmaN / 2; ++nj)
          LdMatrixX4(bq[nj], sb + MoeLdmB(warp_n * Cfg::kWarpN + nj * 16, kk, lane));
#pragma unroll
        for (int mi = 0; mi < Cfg::kMmaM; ++mi)
#pragma unroll
          for (int ni = 0; ni < Cfg::kMmaN; ++ni)
            MmaBf16(acc[mi][ni], af[mi], bq[ni / 2][(ni & 1) * 2], bq[ni / 2][(ni & 1) * 2 + 1]);
      }
    }

    // ---- epilogue: registers → global (acc[mi][ni][2h + q]: row g + 8h, column 2·(lane%4) + q) ----
#pragma unroll
    for (int mi = 0; mi < Cfg::kMmaM; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp_m * Cfg::kWarpM + mi * 16 + (lane >> 2) + 8 * h;
        if (r >= rows) continue;
        const int64_t dst = row_dst[r];
        if constexpr (kGateUp) {
          // n8 block 2b holds gate, 2b+1 up, of features f0 + b·8 + 2·(lane%4) + {0, 1}.
          bf16* out = static_cast<bf16*>(p.act) + dst * p.inter + int64_t(nt) * kFeat + warp_n * (Cfg::kWarpN / 2) +
                      2 * (lane & 3);
#pragma unroll
          for (int b = 0; b < Cfg::kMmaN / 2; ++b) {
            const float a0 = SwiGluValue(acc[mi][2 * b][2 * h], acc[mi][2 * b + 1][2 * h], p.swiglu_limit);
            const float a1 = SwiGluValue(acc[mi][2 * b][2 * h + 1], acc[mi][2 * b + 1][2 * h + 1], p.swiglu_limit);
            *reinterpret_cast<__nv_bfloat162*>(out + b * 8) = __floats2bfloat162_rn(a0, a1);
          }
        } else {
          float* out = p.y + dst * p.n_out + int64_t(nt) * kFeat + warp_n * Cfg::kWarpN + 2 * (lane & 3);
#pragma unroll
          for (int ni = 0; ni < Cfg::kMmaN; ++ni)
            *reinterpret_cast<float2*>(out + ni * 8) = make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
        }
      }
    }

    // ---- fused combine: the last tile of column nt sums it for every token ----
    if constexpr (!kGateUp) {
      if (p.col_done) {
        __threadfence();  // this thread's y stores, device-wide, before the count
        __syncthreads();
        if (tid == 0) last_of_column = atomicAdd(p.col_done + nt, 1) == num_m_tiles - 1;
        __syncthreads();
        if (last_of_column) {
          __threadfence();
          CombineColumns(p, int64_t(nt) * kFeat, kFeat);
        }
      }
    }
  }
  if (!waited) GridDepWait();  // a PDL down block without tiles still completes after gate_up
}

// ---- SIMT kernel ---------------------------------------------------------------------------------

// Plain FFMA tiles of 16 sorted rows × 32 features (gate_up: 32 gate + 32 up rows) or × 64
// features (down), K in steps of 32 through shared memory; any sizes. T is the element type of
// the A operand, the weights and act (float, or bf16 read as exact floats).
constexpr int kSimtThreads = 256, kSimtBlockK = 32;

template <typename T, bool kGateUp>
__global__ void __launch_bounds__(kSimtThreads) MoeSimtKernel(const __grid_constant__ MoeGemmParams p) {
  constexpr int kBM = kMoeSimtBlockM, kBK = kSimtBlockK;
  constexpr int kFeat = kGateUp ? 32 : 64;
  __shared__ float as[kBM][kBK + 1];
  __shared__ float ws[64][kBK + 1];  // gate_up: rows 0-31 gate, 32-63 up; down: 64 output rows
  __shared__ int32_t row_src[kBM], row_dst[kBM];
  const int tid = threadIdx.x, r = tid / 16, q = tid % 16;
  const int num_n_tiles = static_cast<int>((p.n_out + kFeat - 1) / kFeat);
  const int total = *p.num_tiles * num_n_tiles;
  const T* a = static_cast<const T*>(p.a);
  const int64_t rows_per_expert = kGateUp ? 2 * p.inter : p.n_out;

  for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
    const int mt = tile / num_n_tiles, nt = tile - mt * num_n_tiles;
    const int4 info = p.tiles[mt];
    const int expert = info.x, row0 = info.y, rows = info.z;
    __syncthreads();
    FillRowTables<kGateUp>(p, row0, rows, kBM, row_src, row_dst);
    __syncthreads();
    const T* we = static_cast<const T*>(p.w) + int64_t(expert) * rows_per_expert * p.k;
    const int64_t f0 = int64_t(nt) * kFeat;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int64_t k0 = 0; k0 < p.k; k0 += kBK) {
      for (int i = tid; i < kBM * kBK; i += kSimtThreads) {
        const int rr = i / kBK, kk = i % kBK, src = row_src[rr];
        as[rr][kk] = (src >= 0 && k0 + kk < p.k) ? ToF32(a[int64_t(src) * p.lda + k0 + kk]) : 0.f;
      }
      for (int i = tid; i < 64 * kBK; i += kSimtThreads) {
        const int rr = i / kBK, kk = i % kBK;
        int64_t wrow;
        bool ok;
        if (kGateUp) {
          const int64_t f = f0 + (rr & 31);
          ok = f < p.inter;
          wrow = (rr < 32 ? 0 : p.inter) + f;
        } else {
          wrow = f0 + rr;
          ok = wrow < p.n_out;
        }
        ws[rr][kk] = (ok && k0 + kk < p.k) ? ToF32(we[wrow * p.k + k0 + kk]) : 0.f;
      }
      __syncthreads();
#pragma unroll 8
      for (int kk = 0; kk < kBK; ++kk) {
        const float xv = as[r][kk];
        if (kGateUp) {
          acc[0] += xv * ws[2 * q][kk];
          acc[1] += xv * ws[2 * q + 1][kk];
          acc[2] += xv * ws[32 + 2 * q][kk];
          acc[3] += xv * ws[33 + 2 * q][kk];
        } else {
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[i] += xv * ws[4 * q + i][kk];
        }
      }
      __syncthreads();
    }
    if (r >= rows) continue;
    const int64_t dst = row_dst[r];
    if (kGateUp) {
      T* out = static_cast<T*>(p.act) + dst * p.inter;
      for (int i = 0; i < 2; ++i) {
        const int64_t f = f0 + 2 * q + i;
        if (f < p.inter) out[f] = FromF32<T>(SwiGluValue(acc[i], acc[2 + i], p.swiglu_limit));
      }
    } else {
      for (int i = 0; i < 4; ++i) {
        const int64_t f = f0 + 4 * q + i;
        if (f < p.n_out) p.y[dst * p.n_out + f] = acc[i];
      }
    }
  }
}

// ---- launchers -----------------------------------------------------------------------------------

// Blocks of `kernel` resident per SM (queried once per kernel; at least 1).
template <typename K>
int ResidentBlocks(K kernel, int threads, int smem) {
  int b = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, threads, smem) != cudaSuccess) b = 1;
  return std::max(b, 1);
}

}  // namespace

// Raises `kernel`'s dynamic shared-memory limit to `bytes` once per device (bit d of `done`).
// Acquire/release on `done`: a thread that sees the bit also sees the attribute set.
cudaError_t RaiseSmemLimit(const void* kernel, int bytes, std::atomic<uint32_t>& done) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  const uint32_t bit = dev < 32 ? 1u << dev : 0u;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return cudaSuccess;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) done.fetch_or(bit, std::memory_order_acq_rel);
  return e;
}

namespace {

int64_t GridFor(const MoeGemmParams& p, int feat_per_tile, int resident) {
  const int64_t n_tiles = (p.n_out + feat_per_tile - 1) / feat_per_tile;
  return std::max<int64_t>(1, std::min<int64_t>(p.max_tiles * n_tiles, int64_t(MoeNumSms()) * resident));
}

template <class Cfg, bool kGateUp>
cudaError_t LaunchMma(const MoeGemmParams& p, cudaStream_t stream) {
  auto kernel = MoeMmaKernel<Cfg, kGateUp>;
  static std::atomic<uint32_t> smem_set{0};  // one bit per device: the dynamic smem limit was raised
  const cudaError_t e = RaiseSmemLimit(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes, smem_set);
  if (e != cudaSuccess) return e;
  static const int resident = ResidentBlocks(kernel, Cfg::kNumThreads, Cfg::kSmemBytes);
  // NOTE: the grid never exceeds the resident blocks, so a PDL launch cannot take SM slots from
  // blocks of its own primary that are still waiting to run.
  const int64_t grid = GridFor(p, kGateUp ? Cfg::kBlockN / 2 : Cfg::kBlockN, resident);
  if (p.pdl) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(grid));
    cfg.blockDim = dim3(Cfg::kNumThreads);
    cfg.dynamicSmemBytes = Cfg::kSmemBytes;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, kernel, p);
  }
  kernel<<<static_cast<unsigned>(grid), Cfg::kNumThreads, Cfg::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, bool kGateUp>
cudaError_t LaunchSimt(const MoeGemmParams& p, cudaStream_t stream) {
  auto kernel = MoeSimtKernel<T, kGateUp>;
  static const int resident = ResidentBlocks(kernel, kSimtThreads, 0);
  const int64_t grid = GridFor(p, kGateUp ? 32 : 64, resident);
  kernel<<<static_cast<unsigned>(grid), kSimtThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <class Cfg>
cudaError_t LaunchMmaEither(bool gate_up, const MoeGemmParams& p, cudaStream_t stream) {
  return gate_up ? LaunchMma<Cfg, true>(p, stream) : LaunchMma<Cfg, false>(p, stream);
}

}  // namespace

const char* MoeGemmKindName(MoeGemmKind k) {
  switch (k) {
    case MoeGemmKind::kAuto: return "auto";
    case MoeGemmKind::kSimt: return "simt";
    case MoeGemmKind::kMma16x128: return "mma_16x128";
    case MoeGemmKind::kMma64x256: return "mma_64x256";
    case MoeGemmKind::kMma128x256: return "mma_128x256";
    case MoeGemmKind::kWgmma64x256: return "wgmma_64x256";
    case MoeGemmKind::kWgmma128x256: return "wgmma_128x256";
    case MoeGemmKind::kWgmmaWs64x256: return "wgmma_ws_64x256";
    case MoeGemmKind::kWgmmaWs128x256: return "wgmma_ws_128x256";
  }
  return "?";
}

int MoeGemmBlockM(MoeGemmKind kind) {
  switch (kind) {
    case MoeGemmKind::kMma16x128: return MoeMma16x128::kBlockM;
    case MoeGemmKind::kMma64x256:
    case MoeGemmKind::kWgmma64x256:
    case MoeGemmKind::kWgmmaWs64x256: return 64;
    case MoeGemmKind::kMma128x256:
    case MoeGemmKind::kWgmma128x256:
    case MoeGemmKind::kWgmmaWs128x256: return 128;
    default: return kMoeSimtBlockM;
  }
}

int MoeGemmBlockN(MoeGemmKind kind) {
  switch (kind) {
    case MoeGemmKind::kMma16x128: return MoeMma16x128::kBlockN;
    case MoeGemmKind::kMma64x256:
    case MoeGemmKind::kMma128x256:
    case MoeGemmKind::kWgmma64x256:
    case MoeGemmKind::kWgmma128x256:
    case MoeGemmKind::kWgmmaWs64x256:
    case MoeGemmKind::kWgmmaWs128x256: return 256;
    default: return 64;
  }
}

bool MoeGemmFits(MoeGemmKind kind, bool bf16_weights, int64_t hidden, int64_t inter) {
  if (kind == MoeGemmKind::kSimt) return true;
  if (kind == MoeGemmKind::kAuto || !bf16_weights) return false;
  const int bn = MoeGemmBlockN(kind);
  return hidden % kMoeBlockK == 0 && inter % kMoeBlockK == 0 && hidden % bn == 0 && inter % (bn / 2) == 0;
}

cudaError_t LaunchMoeGemm(MoeGemmKind kind, bool gate_up, bool bf16_weights, const MoeGemmParams& p,
                          cudaStream_t stream) {
  switch (kind) {
    case MoeGemmKind::kMma16x128: return LaunchMmaEither<MoeMma16x128>(gate_up, p, stream);
    case MoeGemmKind::kMma64x256: return LaunchMmaEither<MoeMma64x256>(gate_up, p, stream);
    case MoeGemmKind::kMma128x256: return LaunchMmaEither<MoeMma128x256>(gate_up, p, stream);
    case MoeGemmKind::kWgmma64x256:
    case MoeGemmKind::kWgmma128x256:
    case MoeGemmKind::kWgmmaWs64x256:
    case MoeGemmKind::kWgmmaWs128x256: return LaunchMoeWgmma(kind, gate_up, p, stream);
    default:
      if (bf16_weights) return gate_up ? LaunchSimt<bf16, true>(p, stream) : LaunchSimt<bf16, false>(p, stream);
      return gate_up ? LaunchSimt<float, true>(p, stream) : LaunchSimt<float, false>(p, stream);
  }
}

int MoeNumSms() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 132;
    return v;
  }();
  return n;
}

}  // namespace gyre::cuda::internal
