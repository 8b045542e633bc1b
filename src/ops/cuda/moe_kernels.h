// Internal to the MoE CUDA files (moe_cuda.cu, sm90_moe_gemm.cu, sm90_moe_wgmma.cu, the bench):
// the grouped-GEMM parameters and launchers, the workspace layout, and MoeExperts with a forced
// kernel and phase events. Public callers use ops/cuda/moe_cuda.h.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "ops/cuda/moe_cuda.h"
#include "ops/cuda/sm90_moe_gemm_config.h"

namespace gyre::cuda::internal {

// One grouped GEMM over the expert-sorted (token, slot) rows. Row r of the sorted order is pair
// row_pair[r] = t·top_k + j; the m-tile table lists, per tile of kBlockM sorted rows, its expert,
// first row and row count (all rows of a tile belong to one expert).
//   gate_up (fused SwiGLU): A row = token pair/top_k of `a` ([n, D], bf16 x or fp32 x), B = rows of
//     gate_up[e]; writes act[r, 0:I] (sorted rows; bf16 when the weights are bf16, else fp32).
//   down: A row = act row r ([P, I]); B = rows of down[e]; writes y[pair, 0:D] (fp32, pair order).
struct MoeGemmParams {
  const void* a = nullptr;
  int64_t lda = 0;                      // elements
  const void* w = nullptr;              // gate_up [E, 2I, D] or down [E, D, I]
  int64_t k = 0;                        // reduction size: D (gate_up) or I (down)
  int64_t inter = 0;                    // I
  int64_t n_out = 0;                    // output features: I (gate_up) or D (down)
  const int4* tiles = nullptr;          // [max_tiles] {expert, first sorted row, rows, 0}
  const int32_t* num_tiles = nullptr;   // device scalar: valid entries of `tiles`
  int64_t max_tiles = 0;                // host bound on *num_tiles (sizes the grid)
  const int32_t* row_pair = nullptr;    // [P]
  int32_t top_k = 0;
  float swiglu_limit = 0;               // <= 0: no clamp
  void* act = nullptr;                  // gate_up output [P, I]
  float* y = nullptr;                   // down output [P, D]
  int64_t num_experts = 0;              // E (the weights' TMA descriptor spans E experts)
  // Combine fused into the down GEMM (HMMA kinds; col_done null = off): each finished tile bumps
  // col_done[n-tile]; the tile that completes a column writes out[t, cols] = Σ_j wts[t, j] ·
  // y[t·top_k + j, cols] for all n_tokens tokens, in slot order, skipping idx outside [0, E).
  int32_t* col_done = nullptr;          // [n_out / feat] counters, zeroed before the launch
  const int32_t* idx = nullptr;         // [n_tokens, top_k]
  const float* wts = nullptr;           // [n_tokens, top_k]
  float* out = nullptr;                 // [n_tokens, n_out]
  int64_t n_tokens = 0;
  // Launched with programmatic stream serialization (HMMA kinds): gate_up waits for the sort grid
  // before its first read; down loads its first weight stages, then waits for gate_up.
  bool pdl = false;
};

// Rows per m-tile and output features per n-tile (gate_up tiles hold half gate, half up rows).
int MoeGemmBlockM(MoeGemmKind kind);
int MoeGemmBlockN(MoeGemmKind kind);
// True if `kind` runs these sizes (tensor-core kinds: bf16 weights, D % kBlockN == 0, I % (kBlockN/2)
// == 0, D and I multiples of 64).
bool MoeGemmFits(MoeGemmKind kind, bool bf16, int64_t hidden, int64_t inter);

// Enqueues one grouped GEMM (gate_up when `gate_up`, else down). Returns the launch error.
// REQUIRES: MoeGemmFits(kind, ...); kind != kAuto.
cudaError_t LaunchMoeGemm(MoeGemmKind kind, bool gate_up, bool bf16, const MoeGemmParams& p, cudaStream_t stream);
// The wgmma kinds, plain and warp-specialized (sm90_moe_wgmma.cu).
cudaError_t LaunchMoeWgmma(MoeGemmKind kind, bool gate_up, const MoeGemmParams& p, cudaStream_t stream);

// True for the kinds that run the fused combine and PDL launches (the mma.sync kernel).
inline bool MoeGemmIsMma(MoeGemmKind k) {
  return k == MoeGemmKind::kMma16x128 || k == MoeGemmKind::kMma64x256 || k == MoeGemmKind::kMma128x256;
}
inline bool MoeGemmIsWs(MoeGemmKind k) {
  return k == MoeGemmKind::kWgmmaWs64x256 || k == MoeGemmKind::kWgmmaWs128x256;
}

// Multiprocessor count of the current device (queried once).
int MoeNumSms();

// Raises `kernel`'s dynamic shared-memory limit to `bytes`, once per device (bit d of `done`).
cudaError_t RaiseSmemLimit(const void* kernel, int bytes, std::atomic<uint32_t>& done);

// The kernel MoeExperts picks for these sizes (never kAuto).
MoeGemmKind PickMoeGemm(const MoeExpertWeights& ew, int64_t n, int64_t top_k);

struct MoeExpertsCall {
  const float* x = nullptr;
  int64_t n = 0;
  const int32_t* idx = nullptr;
  const float* w = nullptr;
  int64_t top_k = 0;
  MoeExpertWeights weights;
  float swiglu_limit = 0;
  float* out = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Paths MoeExperts may take besides the GEMM kind (the bench turns them off to measure the old path).
struct MoeExpertsOptions {
  // P = n·top_k <= kMoeSmallPairs: one kernel sorts the pairs and casts x (instead of count, scan,
  // scatter, cast); with an HMMA kind the combine runs in the down GEMM's last tile per column and
  // both GEMMs are launched with programmatic dependent launch (not while phase events are recorded).
  bool small_path = true;
};

// MoeExperts with a chosen kernel (kAuto = the heuristic). `phase_events` (null = none) are
// recorded after the sort and x cast [0], after gate_up [1] and after down [2] (with the fused
// combine, [2] is after the combine). Returns InvalidArgument if `kind` does not fit the sizes or
// dtype.
Status MoeExpertsWith(const MoeExpertsCall& c, MoeGemmKind kind, const cudaEvent_t* phase_events,
                      cudaStream_t stream, const MoeExpertsOptions& options = {});

}  // namespace gyre::cuda::internal
