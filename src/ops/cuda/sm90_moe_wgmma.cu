// Grouped MoE GEMM on wgmma (sm_90a): the same tiles, row tables, loader and epilogues as the
// HMMA kernel in sm90_moe_gemm.cu, with the math issued as warpgroup MMAs that read both operands
// straight from shared memory (no ldmatrix, no fragment registers).
//
// Layout: every stage is 1024-byte aligned and each operand row is 128 bytes with 16-byte chunks
// XOR-swizzled by row % 8 (MoeSwizzle), which is wgmma's canonical K-major layout with the
// 128-byte swizzle: a descriptor with stride 1024 bytes per 8 rows; a k16 step advances its start
// address by 32 bytes inside the swizzle atom.
//
// Pipeline per k-tile (kNumStages deep, one wgmma batch left in flight):
//   wait for the tile's cp.async group → fence.proxy.async (cp.async wrote through the generic
//   proxy, wgmma reads through the async proxy) → barrier → refill the stage read two tiles ago
//   → wgmma.fence, 4 × wgmma (k16 steps), commit → wait until at most one batch is pending.
//
// Warpgroups: 128 × 256 tiles give each of the two warpgroups 64 rows × 256 features (m64n256k16);
// 64 × 256 tiles give each 64 rows × 128 features (m64n128k16).
//
// The warp-specialized kernel (MoeWgmmaWsKernel, sm90_moe_gemm_config.h MoeWsConfig) splits the
// same tiles into a producer warpgroup and two consumer warpgroups over a ring of full/empty
// mbarriers, so loads never wait for a block-wide barrier and the next tile's stages fill while the
// consumers run the epilogue:
//   producer: wait empty[s] → thread 0: arrive.expect_tx(full[s], B bytes) + TMA boxes of the
//             weights → all 128 threads: cp.async gather of the A rows (rows past the tile's count
//             are not loaded: their accumulator rows are never stored) → cp.async.mbarrier.arrive
//             .noinc(full[s]) (full[s] expects 128 + 1 arrivals)
//   consumer: wait full[s] → fence.proxy.async (cp.async wrote through the generic proxy) → 4 ×
//             wgmma, commit → wait until one batch is pending → lane 0 of each warp arrives on
//             empty[s - 1] (expects 8 arrivals) → after the last k-tile, the epilogue from registers.
// A consumer warpgroup whose 64 rows are all past the tile's count skips its wgmma and epilogue
// (the tail m-tile of an expert), but still releases every stage.
#include <cuda.h>  // CUtensorMap (types only; the encoder comes through the runtime's entry point)
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <climits>

#include "ops/cuda/moe_kernels.h"

namespace gyre::cuda::internal {
namespace {

using bf16 = __nv_bfloat16;

// ---- configuration -------------------------------------------------------------------------------

template <int kBlockM_, int kNumStages_>
struct MoeWgmmaConfig {
  static constexpr int kBlockM = kBlockM_, kBlockN = 256, kNumStages = kNumStages_;
  static constexpr int kNumThreads = 256;                       // two warpgroups
  static constexpr int kWgRows = 64;                            // wgmma M
  static constexpr int kWgCols = kBlockM == 128 ? 256 : 128;    // wgmma N per warpgroup
  static constexpr int kNumAcc = kWgCols / 2;                   // fp32 accumulators per thread
  static constexpr int kStageBytesA = kBlockM * kMoeRowBytes, kStageBytesB = kBlockN * kMoeRowBytes;
  static constexpr int kStageBytes = kStageBytesA + kStageBytesB;
  static constexpr int kTableBytes = 2 * kBlockM * 4;
  static constexpr int kSmemBytes = 1024 + kNumStages * kStageBytes + kTableBytes;  // + alignment slack
  static constexpr int kChunksPerThreadA = kBlockM * 8 / kNumThreads;
  static constexpr int kChunksPerThreadB = kBlockN * 8 / kNumThreads;
  static constexpr int kRowsPerPass = kNumThreads / 8;

  static_assert(kBlockM == 64 || kBlockM == 128, "one or two m64 warpgroup rows");
  static_assert(kNumStages >= 3, "two stages in flight plus the one being read");
  static_assert(kStageBytesA % 1024 == 0 && kStageBytesB % 1024 == 0, "1024-byte aligned operand tiles");
  static_assert(kSmemBytes <= 227 * 1024, "fits the sm_90 shared-memory limit");
  static_assert(kRowsPerPass % 16 == 0, "a load pass keeps rr % 16");
};

using MoeWgmma64x256 = MoeWgmmaConfig<64, 5>;    // 5 × 40 KB
using MoeWgmma128x256 = MoeWgmmaConfig<128, 4>;  // 4 × 48 KB

// ---- device helpers ------------------------------------------------------------------------------

__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void FenceProxyAsync() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from touching accumulators across the asynchronous wgmma region.
template <int kN>
__device__ __forceinline__ void FenceAccumulators(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Shared-memory matrix descriptor: K-major, 128-byte swizzle, 1024 bytes between 8-row groups.
__device__ __forceinline__ uint64_t SmemDesc(uint32_t addr) {
  uint64_t d = (addr & 0x3FFFFu) >> 4;  // start address, bits 0-13
  d |= uint64_t(1) << 16;               // leading byte offset (unused for swizzled K-major)
  d |= uint64_t(1024 >> 4) << 32;       // stride byte offset
  d |= uint64_t(1) << 62;               // 128-byte swizzle
  return d;
}

__device__ __forceinline__ float SwiGluValue(float g, float u, float limit) {
  if (limit > 0.f) {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
  }
  return g / (1.0f + expf(-g)) * u;
}

// ---- wgmma wrappers (operand lists generated: d has kN/2 registers) ----

// d[0:128] += A(desc_a: 64 × k16) · B(desc_b: 256 × k16)ᵀ, both K-major with the 128-byte swizzle.
__device__ __forceinline__ void WgmmaM64N256(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, "
      "%128, %129, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

// d[0:64] += A(desc_a: 64 × k16) · B(desc_b: 128 × k16)ᵀ, both K-major with the 128-byte swizzle.
__device__ __forceinline__ void WgmmaM64N128(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, "
      "%64, %65, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

template <int kN>
__device__ __forceinline__ void Wgmma(float (&d)[kN], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (kN == 128) {
    WgmmaM64N256(d, desc_a, desc_b);
  } else {
    static_assert(kN == 64, "m64n256 or m64n128");
    WgmmaM64N128(d, desc_a, desc_b);
  }
}

// ---- kernel --------------------------------------------------------------------------------------

template <class Cfg, bool kGateUp>
__global__ void __launch_bounds__(Cfg::kNumThreads, 1) MoeWgmmaKernel(const __grid_constant__ MoeGemmParams p) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw_u32 = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t smem_u32 = (raw_u32 + 1023u) & ~1023u;
  int32_t* row_src = reinterpret_cast<int32_t*>(smem_raw + (smem_u32 - raw_u32) + Cfg::kNumStages * Cfg::kStageBytes);
  int32_t* row_dst = row_src + Cfg::kBlockM;
  const int tid = threadIdx.x, lane = tid & 31;
  const int wg = tid / 128, wg_warp = (tid / 32) % 4;
  const int wg_row = Cfg::kBlockM == 128 ? wg * Cfg::kWgRows : 0;
  const int wg_col = Cfg::kBlockM == 128 ? 0 : wg * Cfg::kWgCols;
  constexpr int kFeat = kGateUp ? Cfg::kBlockN / 2 : Cfg::kBlockN;
  const int num_n_tiles = static_cast<int>(p.n_out / kFeat);
  const int num_k_tiles = static_cast<int>(p.k / kMoeBlockK);
  const int total = *p.num_tiles * num_n_tiles;
  const bf16* a_base = static_cast<const bf16*>(p.a);
  const bf16* w_base = static_cast<const bf16*>(p.w);
  const int64_t w_expert_stride = (kGateUp ? 2 * p.inter : p.n_out) * p.k;
  const int c = tid & 7, rr0 = tid >> 3;
  const uint32_t a_dst0 = MoeSwizzle(rr0, c), b_dst0 = Cfg::kStageBytesA + MoeSwizzle(rr0, c);
  constexpr uint32_t kPassBytes = Cfg::kRowsPerPass * kMoeRowBytes;

  for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
    const int mt = tile / num_n_tiles, nt = tile - mt * num_n_tiles;
    const int4 info = p.tiles[mt];
    const int expert = info.x, row0 = info.y, rows = info.z;

    // ---- setup: row tables, source pointers ----
    __syncthreads();
    for (int i = tid; i < Cfg::kBlockM; i += Cfg::kNumThreads) {
      int src = -1, dst = -1;
      if (i < rows) {
        const int pair = p.row_pair[row0 + i];
        src = kGateUp ? pair / p.top_k : row0 + i;
        dst = kGateUp ? row0 + i : pair;
      }
      row_src[i] = src;
      row_dst[i] = dst;
    }
    __syncthreads();
    const bf16* a_ptr[Cfg::kChunksPerThreadA];
    uint32_t a_bytes[Cfg::kChunksPerThreadA];
#pragma unroll
    for (int j = 0; j < Cfg::kChunksPerThreadA; ++j) {
      const int src = row_src[rr0 + j * Cfg::kRowsPerPass];
      a_ptr[j] = a_base + (src >= 0 ? int64_t(src) * p.lda : 0) + c * 8;
      a_bytes[j] = src >= 0 ? 16u : 0u;
    }
    const int64_t w_row0 = kGateUp ? MoeGateUpRow(rr0, int64_t(nt) * kFeat, p.inter) : int64_t(nt) * kFeat + rr0;
    const bf16* b_ptr = w_base + int64_t(expert) * w_expert_stride + w_row0 * p.k + c * 8;
    const int64_t b_step = int64_t(kGateUp ? Cfg::kRowsPerPass / 2 : Cfg::kRowsPerPass) * p.k;
    auto load_stage = [&](int kt) {
      const uint32_t stage = smem_u32 + (kt % Cfg::kNumStages) * Cfg::kStageBytes;
      const int64_t koff = int64_t(kt) * kMoeBlockK;
#pragma unroll
      for (int j = 0; j < Cfg::kChunksPerThreadA; ++j)
        CpAsync16(stage + a_dst0 + j * kPassBytes, a_ptr[j] + (a_bytes[j] ? koff : 0), a_bytes[j]);
#pragma unroll
      for (int j = 0; j < Cfg::kChunksPerThreadB; ++j) CpAsync16(stage + b_dst0 + j * kPassBytes, b_ptr + j * b_step + koff, 16u);
    };

    float acc[Cfg::kNumAcc];
#pragma unroll
    for (int i = 0; i < Cfg::kNumAcc; ++i) acc[i] = 0.f;

    // ---- producer prologue: kNumStages - 2 stages in flight ----
#pragma unroll
    for (int s = 0; s < Cfg::kNumStages - 2; ++s) {
      if (s < num_k_tiles) load_stage(s);
      CpAsyncCommit();
    }

    // ---- main loop ----
    for (int kt = 0; kt < num_k_tiles; ++kt) {
      CpAsyncWait<Cfg::kNumStages - 3>();
      FenceProxyAsync();
      __syncthreads();  // tile kt landed for all threads; every warpgroup finished wgmma(kt - 2)
      if (kt + Cfg::kNumStages - 2 < num_k_tiles) load_stage(kt + Cfg::kNumStages - 2);
      CpAsyncCommit();
      const uint32_t sa = smem_u32 + (kt % Cfg::kNumStages) * Cfg::kStageBytes + wg_row * kMoeRowBytes;
      const uint32_t sb = smem_u32 + (kt % Cfg::kNumStages) * Cfg::kStageBytes + Cfg::kStageBytesA + wg_col * kMoeRowBytes;
      WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < kMoeBlockK / 16; ++kk) Wgmma(acc, SmemDesc(sa + kk * 32), SmemDesc(sb + kk * 32));
      WgmmaCommit();
      WgmmaWait<1>();
    }
    WgmmaWait<0>();
    FenceAccumulators(acc);

    // ---- epilogue: acc[4j + 2h + q] is row 16·warp + lane/4 + 8h, column 8j + 2·(lane%4) + q ----
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wg_row + 16 * wg_warp + (lane >> 2) + 8 * h;
      if (r >= rows) continue;
      const int64_t dst = row_dst[r];
      if constexpr (kGateUp) {
        bf16* out = static_cast<bf16*>(p.act) + dst * p.inter + int64_t(nt) * kFeat + wg_col / 2 + 2 * (lane & 3);
#pragma unroll
        for (int b = 0; b < Cfg::kWgCols / 16; ++b) {
          const float a0 = SwiGluValue(acc[8 * b + 2 * h], acc[8 * b + 4 + 2 * h], p.swiglu_limit);
          const float a1 = SwiGluValue(acc[8 * b + 2 * h + 1], acc[8 * b + 4 + 2 * h + 1], p.swiglu_limit);
          *reinterpret_cast<__nv_bfloat162*>(out + b * 8) = __floats2bfloat162_rn(a0, a1);
        }
      } else {
        float* out = p.y + dst * p.n_out + int64_t(nt) * kFeat + wg_col + 2 * (lane & 3);
#pragma unroll
        for (int j = 0; j < Cfg::kWgCols / 8; ++j)
          *reinterpret_cast<float2*>(out + j * 8) = make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      }
    }
  }
}

// ---- warp-specialized kernel: TMA + mbarrier helpers ---------------------------------------------

__device__ __forceinline__ void MbarInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void FenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ bool MbarTryWait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
// Waits until the phase of parity `parity` of the barrier completed. NOTE: a protocol bug would hang
// the device; after ~2^26 polls (seconds) it traps instead, which the launcher reports as an error.
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  uint32_t polls = 0;
  while (!MbarTryWait(bar, parity))
    if (++polls == (1u << 26)) __trap();
}
__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Arrives on `bar` once all of this thread's earlier cp.async copies have landed; .noinc: the
// arrival counts against the barrier's expected count.
__device__ __forceinline__ void CpAsyncArriveNoinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void CpAsyncWaitAll() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// 2D TMA tile load of box {c0 (inner), c1} of `map` into `dst`, completing bytes on `bar`.
__device__ __forceinline__ void TmaLoad2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}
template <int kRegs>
__device__ __forceinline__ void SetMaxRegsDec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void SetMaxRegsInc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Kernel parameters: the weights as a 2D bf16 tensor [E · rows per expert, K] (64 × 64 boxes,
// 128-byte swizzle) and the grouped-GEMM parameters.
struct MoeWsParams {  // 128-byte aligned (CUtensorMap)
  CUtensorMap w_map;
  MoeGemmParams p;
};

// ---- warp-specialized kernel ---------------------------------------------------------------------

template <class Cfg, bool kGateUp>
__global__ void __launch_bounds__(Cfg::kNumThreads, 1) MoeWgmmaWsKernel(const __grid_constant__ MoeWsParams ws) {
  const MoeGemmParams& p = ws.p;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw_u32 = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t smem_u32 = (raw_u32 + 1023u) & ~1023u;
  const uint32_t full0 = smem_u32 + Cfg::kNumStages * Cfg::kStageBytes;  // full[s] = full0 + 8·s
  const uint32_t empty0 = full0 + 8 * Cfg::kNumStages;
  const int tid = threadIdx.x, wg = tid / 128;
  constexpr int kFeat = kGateUp ? Cfg::kBlockN / 2 : Cfg::kBlockN;
  const int num_n_tiles = static_cast<int>(p.n_out / kFeat);
  const int num_k_tiles = static_cast<int>(p.k / kMoeBlockK);

  // ---- barriers ----
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < Cfg::kNumStages; ++s) {
      MbarInit(full0 + 8 * s, Cfg::kProducerThreads + 1);
      MbarInit(empty0 + 8 * s, Cfg::kConsumerWarps);
    }
    FenceBarrierInit();
  }
  __syncthreads();
  const int total = __ldcg(p.num_tiles) * num_n_tiles;

  if (wg == 0) {
    // ---- producer warpgroup ----
    SetMaxRegsDec<56>();
    const int c = tid & 7, rr0 = tid >> 3;
    const bf16* a_base = static_cast<const bf16*>(p.a) + c * 8;
    const int64_t w_rows = kGateUp ? 2 * p.inter : p.n_out;  // weight rows per expert
    int stage = 0;
    uint32_t phase = 0;
    for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
      const int mt = tile / num_n_tiles, nt = tile - mt * num_n_tiles;
      const int4 info = __ldcg(p.tiles + mt);
      const int expert = info.x, row0 = info.y, rows = info.z;
      int src[Cfg::kChunksPerThreadA];  // A row of each of this thread's chunks, -1: not loaded
#pragma unroll
      for (int j = 0; j < Cfg::kChunksPerThreadA; ++j) {
        const int rr = rr0 + j * Cfg::kRowsPerPassA;
        src[j] = rr < rows ? (kGateUp ? __ldcg(p.row_pair + row0 + rr) / p.top_k : row0 + rr) : -1;
      }
      int box_row[Cfg::kNumBoxes];
#pragma unroll
      for (int b = 0; b < Cfg::kNumBoxes; ++b) {
        const int64_t f0 = int64_t(nt) * kFeat;
        box_row[b] = static_cast<int>(int64_t(expert) * w_rows +
                                      (kGateUp ? MoeWsGateUpBoxRow(b, f0, p.inter) : f0 + b * Cfg::kBoxRows));
      }
      for (int kt = 0; kt < num_k_tiles; ++kt) {
        MbarWait(empty0 + 8 * stage, phase ^ 1u);
        const uint32_t sa = smem_u32 + stage * Cfg::kStageBytes, sb = sa + Cfg::kStageBytesA;
        const uint32_t full = full0 + 8 * stage;
        if (tid == 0) {
          MbarArriveExpectTx(full, Cfg::kStageBytesB);
#pragma unroll
          for (int b = 0; b < Cfg::kNumBoxes; ++b)
            TmaLoad2d(sb + b * Cfg::kBoxBytes, &ws.w_map, full, kt * kMoeBlockK, box_row[b]);
        }
#pragma unroll
        for (int j = 0; j < Cfg::kChunksPerThreadA; ++j)
          if (src[j] >= 0)
            CpAsync16(sa + MoeSwizzle(rr0 + j * Cfg::kRowsPerPassA, c),
                      a_base + int64_t(src[j]) * p.lda + int64_t(kt) * kMoeBlockK, 16u);
        CpAsyncArriveNoinc(full);
        if (++stage == Cfg::kNumStages) {
          stage = 0;
          phase ^= 1u;
        }
      }
    }
    CpAsyncWaitAll();  // nothing in flight when the thread exits (the consumers still hold the CTA)
    return;
  }

  // ---- consumer warpgroups ----
  SetMaxRegsInc<224>();
  const int cw = wg - 1, warp = (tid / 32) % 4, lane = tid & 31;
  const int wg_row = Cfg::kBlockM == 128 ? cw * Cfg::kWgRows : 0;
  const int wg_col = Cfg::kBlockM == 128 ? 0 : cw * Cfg::kWgCols;
  int stage = 0;
  uint32_t phase = 0;
  for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
    const int mt = tile / num_n_tiles, nt = tile - mt * num_n_tiles;
    const int4 info = __ldcg(p.tiles + mt);
    const int row0 = info.y, rows = info.z;
    const bool active = wg_row < rows;  // uniform per warpgroup

    float acc[Cfg::kNumAcc];
#pragma unroll
    for (int i = 0; i < Cfg::kNumAcc; ++i) acc[i] = 0.f;
    int prev = -1;
    for (int kt = 0; kt < num_k_tiles; ++kt) {
      MbarWait(full0 + 8 * stage, phase);
      __syncwarp();  // converged for the .aligned wgmma instructions
      if (active) {
        FenceProxyAsync();
        const uint32_t sa = smem_u32 + stage * Cfg::kStageBytes + wg_row * kMoeRowBytes;
        const uint32_t sb = smem_u32 + stage * Cfg::kStageBytes + Cfg::kStageBytesA + wg_col * kMoeRowBytes;
        WgmmaFence();
#pragma unroll
        for (int kk = 0; kk < kMoeBlockK / 16; ++kk) Wgmma(acc, SmemDesc(sa + kk * 32), SmemDesc(sb + kk * 32));
        WgmmaCommit();
        WgmmaWait<1>();  // the batch that read stage `prev` is complete
      }
      if (prev >= 0 && lane == 0) MbarArrive(empty0 + 8 * prev);
      prev = stage;
      if (++stage == Cfg::kNumStages) {
        stage = 0;
        phase ^= 1u;
      }
    }
    WgmmaWait<0>();
    FenceAccumulators(acc);
    if (prev >= 0 && lane == 0) MbarArrive(empty0 + 8 * prev);
    if (!active) continue;

    // ---- epilogue: acc[4j + 2h + q] is row 16·warp + lane/4 + 8h, column 8j + 2·(lane%4) + q ----
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wg_row + 16 * warp + (lane >> 2) + 8 * h;
      if (r >= rows) continue;
      if constexpr (kGateUp) {
        bf16* out = static_cast<bf16*>(p.act) + int64_t(row0 + r) * p.inter + int64_t(nt) * kFeat + 2 * (lane & 3);
#pragma unroll
        for (int j = 0; j < Cfg::kWgCols / 8; ++j) {
          if ((j & 15) >= 8) continue;  // up columns: read with their gate partner
          const int g = 4 * j + 2 * h, u = 4 * (j + 8) + 2 * h;
          const float a0 = SwiGluValue(acc[g], acc[u], p.swiglu_limit);
          const float a1 = SwiGluValue(acc[g + 1], acc[u + 1], p.swiglu_limit);
          *reinterpret_cast<__nv_bfloat162*>(out + MoeWsGateFeature(wg_col + 8 * j)) = __floats2bfloat162_rn(a0, a1);
        }
      } else {
        const int64_t dst = __ldcg(p.row_pair + row0 + r);
        float* out = p.y + dst * p.n_out + int64_t(nt) * kFeat + wg_col + 2 * (lane & 3);
#pragma unroll
        for (int j = 0; j < Cfg::kWgCols / 8; ++j)
          *reinterpret_cast<float2*>(out + j * 8) = make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      }
    }
  }
}

// ---- launchers ----------------------------------------------------------------------------------

// cuTensorMapEncodeTiled through the runtime's driver entry point (no libcuda link); null if the
// driver lacks it.
PFN_cuTensorMapEncodeTiled_v12000 TensorMapEncoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

template <class Cfg, bool kGateUp>
cudaError_t LaunchWgmmaWs(const MoeGemmParams& p, cudaStream_t stream) {
  const int64_t w_rows = (kGateUp ? 2 * p.inter : p.n_out) * p.num_experts;
  if (p.num_experts < 1 || w_rows > INT32_MAX || p.k % kMoeBlockK != 0) return cudaErrorInvalidValue;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = TensorMapEncoder();
  if (!encode) return cudaErrorNotSupported;
  MoeWsParams ws{};
  ws.p = p;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(p.k), static_cast<cuuint64_t>(w_rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(p.k) * 2};  // bytes between rows
  const cuuint32_t box[2] = {kMoeBlockK, Cfg::kBoxRows};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode(&ws.w_map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(p.w), dims, strides, box,
                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return cudaErrorInvalidValue;
  auto kernel = MoeWgmmaWsKernel<Cfg, kGateUp>;
  static std::atomic<uint32_t> smem_set{0};
  const cudaError_t e = RaiseSmemLimit(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes, smem_set);
  if (e != cudaSuccess) return e;
  constexpr int kFeat = kGateUp ? Cfg::kBlockN / 2 : Cfg::kBlockN;
  const int64_t n_tiles = p.n_out / kFeat;
  const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(p.max_tiles * n_tiles, MoeNumSms()));  // one per SM
  kernel<<<static_cast<unsigned>(grid), Cfg::kNumThreads, Cfg::kSmemBytes, stream>>>(ws);
  return cudaGetLastError();
}

template <class Cfg, bool kGateUp>
cudaError_t LaunchWgmma(const MoeGemmParams& p, cudaStream_t stream) {
  auto kernel = MoeWgmmaKernel<Cfg, kGateUp>;
  static std::atomic<uint32_t> smem_set{0};
  const cudaError_t e = RaiseSmemLimit(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes, smem_set);
  if (e != cudaSuccess) return e;
  constexpr int kFeat = kGateUp ? Cfg::kBlockN / 2 : Cfg::kBlockN;
  const int64_t n_tiles = p.n_out / kFeat;
  const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(p.max_tiles * n_tiles, MoeNumSms()));  // one per SM
  kernel<<<static_cast<unsigned>(grid), Cfg::kNumThreads, Cfg::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchMoeWgmma(MoeGemmKind kind, bool gate_up, const MoeGemmParams& p, cudaStream_t stream) {
  if (kind == MoeGemmKind::kWgmmaWs128x256)
    return gate_up ? LaunchWgmmaWs<MoeWs128x256, true>(p, stream) : LaunchWgmmaWs<MoeWs128x256, false>(p, stream);
  if (kind == MoeGemmKind::kWgmmaWs64x256)
    return gate_up ? LaunchWgmmaWs<MoeWs64x256, true>(p, stream) : LaunchWgmmaWs<MoeWs64x256, false>(p, stream);
  if (kind == MoeGemmKind::kWgmma64x256)
    return gate_up ? LaunchWgmma<MoeWgmma64x256, true>(p, stream) : LaunchWgmma<MoeWgmma64x256, false>(p, stream);
  return gate_up ? LaunchWgmma<MoeWgmma128x256, true>(p, stream) : LaunchWgmma<MoeWgmma128x256, false>(p, stream);
}

}  // namespace gyre::cuda::internal
