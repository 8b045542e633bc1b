// Tile shapes and the shared-memory layout of the grouped bf16 MoE GEMMs (sm90_moe_gemm.cu).
// Host-includable (no CUDA header): sm90_moe_gemm_layout_test.cc checks the layout functions with a
// host simulation of the loader, ldmatrix/mma, the wgmma descriptors and both epilogues.
//
// One GEMM tile computes C[kBlockM tokens, kBlockN features] = A[tokens, K] · B[features, K]ᵀ over
// K in steps of kBlockK = 64 bf16 (one 128-byte row per operand row per stage). Both operands are
// K-contiguous in shared memory, rows of 128 bytes whose eight 16-byte chunks are XOR-swizzled by
// row % 8 (the "128B swizzle" of CUTLASS/wgmma: with a 1024-byte aligned stage it is also the
// canonical K-major layout of wgmma, so both tensor-core paths share the loader).
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define GYRE_MOE_HD __host__ __device__ __forceinline__
#else
#define GYRE_MOE_HD inline
#endif

namespace gyre::cuda::internal {

// Which grouped-GEMM kernel MoeExperts runs. kAuto: the heuristic (moe_cuda.cu, PickMoeGemm).
enum class MoeGemmKind : int {
  kAuto = 0,
  kSimt = 1,        // plain FFMA tiles (any shape, fp32 or bf16 weights)
  kMma16x128 = 2,   // mma.sync, 16 tokens × 128 features, 4 warps (decode)
  kMma64x256 = 3,   // mma.sync, 64 × 256, 8 warps
  kMma128x256 = 4,  // mma.sync, 128 × 256, 8 warps
  kWgmma64x256 = 5,   // wgmma, 64 × 256, 2 warpgroups (n128 each)
  kWgmma128x256 = 6,  // wgmma, 128 × 256, 2 warpgroups (m64 each)
  kWgmmaWs64x256 = 7,   // warp-specialized wgmma: TMA weights, producer warpgroup, 2 consumers (n128 each)
  kWgmmaWs128x256 = 8,  // warp-specialized wgmma, 128 × 256 (consumers m64 each; an empty half skips)
};
const char* MoeGemmKindName(MoeGemmKind k);

constexpr int kMoeBlockK = 64;       // bf16 per operand row per stage (128 bytes)
constexpr int kMoeRowBytes = 128;
constexpr int kMoeSimtBlockM = 16;   // token rows per SIMT tile (and the finest m-tile of the table)
constexpr int kMoeSortChunk = 256;   // (token, slot) pairs per counting-sort chunk
constexpr int kMoeSmallPairs = 256;  // at most this many pairs: the one-kernel sort and the fused combine

// Byte offset of 16-byte chunk `chunk` (0..7) of operand row `row` inside a stage.
GYRE_MOE_HD constexpr int MoeSwizzle(int row, int chunk) { return row * kMoeRowBytes + ((chunk ^ (row & 7)) << 4); }

// ldmatrix.x4 source address (per lane) of the 16×16 A fragment at rows [r0, r0+16), k16 step kk:
// matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15) = a0..a3.
GYRE_MOE_HD constexpr int MoeLdmA(int r0, int kk, int lane) {
  return MoeSwizzle(r0 + (lane & 15), kk * 2 + (lane >> 4));
}
// ldmatrix.x4 source address (per lane) of two n8 B fragments at feature rows [n0, n0+16), step kk:
// matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) = b0,b1 of n8 block 0,
// then b0,b1 of n8 block 1.
GYRE_MOE_HD constexpr int MoeLdmB(int n0, int kk, int lane) {
  return MoeSwizzle(n0 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1));
}

// gate_up tiles interleave gate and up rows in blocks of 8, so that the accumulators of gate and up
// of the same feature sit in one thread (n8 block 2b: gate features, block 2b+1: up features):
// tile row rr of the tile whose first feature is f0 reads weight row
//   (rr/8 odd ? I : 0) + f0 + (rr/16)·8 + rr%8          of gate_up[e] [2I, D].
GYRE_MOE_HD constexpr int64_t MoeGateUpRow(int rr, int64_t f0, int64_t inter) {
  return (((rr >> 3) & 1) ? inter : 0) + f0 + ((rr >> 4) << 3) + (rr & 7);
}

// mma.sync tile configuration (the HMMA path).
template <int kBlockM_, int kBlockN_, int kWarpsM_, int kWarpsN_, int kNumStages_>
struct MoeMmaConfig {
  static constexpr int kBlockM = kBlockM_, kBlockN = kBlockN_, kBlockK = kMoeBlockK;
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_, kNumStages = kNumStages_;
  static constexpr int kNumThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kWarpM = kBlockM / kWarpsM, kWarpN = kBlockN / kWarpsN;
  static constexpr int kMmaM = kWarpM / 16, kMmaN = kWarpN / 8;  // m16 × n8 mma tiles per warp
  static constexpr int kStageBytesA = kBlockM * kMoeRowBytes, kStageBytesB = kBlockN * kMoeRowBytes;
  static constexpr int kStageBytes = kStageBytesA + kStageBytesB;
  static constexpr int kTableBytes = 2 * kBlockM * 4;  // row_src, row_dst
  static constexpr int kSmemBytes = kNumStages * kStageBytes + kTableBytes;
  static constexpr int kChunksPerThreadA = kBlockM * 8 / kNumThreads;
  static constexpr int kChunksPerThreadB = kBlockN * 8 / kNumThreads;
  static constexpr int kRowsPerPass = kNumThreads / 8;  // operand rows one load pass covers

  static_assert(kBlockM % kWarpsM == 0 && kBlockN % kWarpsN == 0, "warps tile the block");
  static_assert(kWarpM % 16 == 0, "m16 mma tiles");
  static_assert(kWarpN % 16 == 0, "B is loaded 16 feature rows per ldmatrix.x4; gate/up come in n8 pairs");
  static_assert(kBlockM * 8 % kNumThreads == 0 && kBlockN * 8 % kNumThreads == 0, "whole 16-byte chunks per thread");
  static_assert(kRowsPerPass % 16 == 0, "a load pass keeps rr % 16 (swizzle phase and gate/up parity)");
  static_assert(kStageBytes % 1024 == 0, "stages stay 1024-byte aligned");
  static_assert(kSmemBytes <= 227 * 1024, "fits the sm_90 shared-memory limit");
};

using MoeMma16x128 = MoeMmaConfig<16, 128, 1, 4, 5>;    // 90 KB: two blocks per SM
using MoeMma64x256 = MoeMmaConfig<64, 256, 2, 4, 4>;    // 160 KB
using MoeMma128x256 = MoeMmaConfig<128, 256, 2, 4, 4>;  // 192 KB

// Warp-specialized wgmma tiles (sm90_moe_wgmma.cu, MoeWgmmaWsKernel): warpgroup 0 produces — one
// thread issues the TMA loads of the weight tile (kNumBoxes boxes of 64 rows × 128 bytes, 128-byte
// swizzle), all 128 threads gather the activation rows with cp.async — into a kNumStages ring guarded
// by full/empty mbarriers; warpgroups 1 and 2 consume with wgmma (128-row tiles: 64 rows × 256
// columns each; 64-row tiles: 64 rows × 128 columns each).
//
// gate_up B tiles hold four boxes [gate f0.., up f0.., gate f0+64.., up f0+64..] of 64 features
// (MoeWsGateUpBoxRow), so tile column c < 256 with c % 128 < 64 is gate feature
// f0 + (c / 128)·64 + c % 64 and column c + 64 is its up partner: both in one thread's accumulators
// (the wgmma column → thread map repeats every 8 columns).
template <int kBlockM_, int kNumStages_>
struct MoeWsConfig {
  static constexpr int kBlockM = kBlockM_, kBlockN = 256, kBlockK = kMoeBlockK, kNumStages = kNumStages_;
  static constexpr int kProducerThreads = 128, kNumThreads = 384;  // warpgroup 0 produces, 1 and 2 consume
  static constexpr int kConsumerWarps = 8;
  static constexpr int kWgRows = 64;
  static constexpr int kWgCols = kBlockM == 128 ? 256 : 128;  // wgmma N per consumer warpgroup
  static constexpr int kNumAcc = kWgCols / 2;                 // fp32 accumulators per consumer thread
  static constexpr int kBoxRows = 64, kNumBoxes = kBlockN / kBoxRows, kBoxBytes = kBoxRows * kMoeRowBytes;
  static constexpr int kStageBytesA = kBlockM * kMoeRowBytes, kStageBytesB = kBlockN * kMoeRowBytes;
  static constexpr int kStageBytes = kStageBytesA + kStageBytesB;
  static constexpr int kBarrierBytes = 2 * kNumStages * 8;                          // full[], empty[]
  static constexpr int kSmemBytes = 1024 + kNumStages * kStageBytes + kBarrierBytes;  // + alignment slack
  static constexpr int kRowsPerPassA = kProducerThreads / 8;
  static constexpr int kChunksPerThreadA = kBlockM / kRowsPerPassA;

  static_assert(kBlockM == 64 || kBlockM == 128, "one or two m64 consumer rows");
  static_assert(kStageBytesA % 1024 == 0 && kBoxBytes % 1024 == 0, "1024-byte aligned swizzle atoms");
  static_assert(kSmemBytes <= 227 * 1024, "fits the sm_90 shared-memory limit");
};

using MoeWs64x256 = MoeWsConfig<64, 5>;    // 5 × 40 KB
using MoeWs128x256 = MoeWsConfig<128, 4>;  // 4 × 48 KB

// Weight row (within expert e's [2I, D] gate_up block) of box `box` of the gate_up B tile whose
// first feature is f0.
GYRE_MOE_HD constexpr int64_t MoeWsGateUpBoxRow(int box, int64_t f0, int64_t inter) {
  return ((box & 1) ? inter : 0) + f0 + (box >> 1) * 64;
}
// Feature offset (from f0) of gate column c (c % 128 < 64) of a warp-specialized gate_up tile.
GYRE_MOE_HD constexpr int MoeWsGateFeature(int c) { return (c >> 7) * 64 + (c & 63); }

}  // namespace gyre::cuda::internal
