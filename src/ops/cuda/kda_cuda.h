// KDA on the GPU (docs/model-kda-kimi-linear.md §1.3–1.6): recurrent decode and chunked prefill.
//
// Both compute exactly the function of ops::KdaRecurrent / ops::KdaChunked (src/ops/kda.h), per
// sequence and head, with a fp32 state S[K, V] (K-first: row k, column v):
//   S ← diag(exp(g_t))·S ;  δ = β_t (v_t − Sᵀk_t) ;  S ← S + k_t δᵀ ;  o_t = Sᵀ q̃_t
// where q̃ = l2norm(q)·K^{-1/2} and k = l2norm(k) (eps 1e-6 inside the sqrt), done in-kernel.
//
// States live in a pool [num_slots, H, K, V] fp32 and each sequence names its slot (style.md §2.5:
// KDA state by SlotId); both launchers read the slot and write it back in place.
//
// Supported shapes: K == V, K a multiple of 4 and at most 128 (the kernels are built for padded
// sizes 32, 64, 128 and zero-pad the rest exactly). Inputs are fp32. The launchers validate every
// argument and return InvalidArgument before launching anything; device code assumes valid input.
// Streams: every call enqueues on `stream` and returns without synchronizing; a launch error is
// returned (cudaGetLastError after each launch). Pointers are device pointers unless said otherwise.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace gyre::cuda {

// ---- recurrent (decode) ------------------------------------------------------------------------

struct KdaRecurrentParams {
  const float* q = nullptr;       // [B, T, H, K]   not normalized
  const float* k = nullptr;       // [B, T, H, K]   not normalized
  const float* v = nullptr;       // [B, T, H, V]
  const float* g = nullptr;       // [B, T, H, K]   log decay (≤ 0), fp32
  const float* beta = nullptr;    // [B, T, H]
  const int32_t* slots = nullptr; // [B]            state slot per sequence; < 0: padding row (skipped, o = 0)
  float* state = nullptr;         // [num_slots, H, K, V] fp32, updated in place
  float* o = nullptr;             // [B, T, H, V]   fp32, written; null: not written (a state-only fold)
  int num_seqs = 0;               // B
  int num_tokens = 1;             // T tokens per sequence (1 for decode); state stays on chip across them
  int num_heads = 0;              // H
  int head_dim = 0;               // K = V
  int64_t num_slots = 0;          // pool size (slots must be < num_slots; not checked on device)
  // Optional, device [B + 1]: ragged sequences, sequence b being the rows cu_seqlens[b] ..
  // cu_seqlens[b+1] of q, k, v, g, β and o (laid out [rows, H, K]); num_tokens is then ignored.
  const int32_t* cu_seqlens = nullptr;
  // Optional, device [B]: keep[b] != 0 reads sequence b's state and leaves it as it was (ReplaySSM
  // speculation: the outputs of every token, the state untouched until the commit folds them).
  const int32_t* keep = nullptr;
};

// Tile choice for the recurrent kernel: one block per (V tile of `block_v` columns, sequence, head),
// `num_threads` threads. {0, 0} = pick by heuristic (kda_cuda_config.h). Other supported pairs
// (K padded to 128 only): {16,64} {16,128} {32,128} {32,256} {64,128} {64,256} {128,256} {128,512}.
struct KdaRecurrentConfig {
  int block_v = 0;
  int num_threads = 0;
};

// Enqueues one launch. Returns InvalidArgument for bad shapes or an unsupported config.
// Ok for a head dimension the KDA kernels support (a multiple of 4 in [4, 128]), else
// InvalidArgument saying so.
Status CheckKdaHeadDim(int head_dim);

Status KdaRecurrent(const KdaRecurrentParams& p, cudaStream_t stream, KdaRecurrentConfig cfg = {});

// ---- chunked (prefill) -------------------------------------------------------------------------

// A varlen batch flattened to T = cu_seqlens.back() tokens; chunks of 64 never cross sequences.
// q, k, v, g, state, o (and the workspace) must be 16-byte aligned.
struct KdaChunkParams {
  const float* q = nullptr;       // [T, H, K]   not normalized
  const float* k = nullptr;       // [T, H, K]
  const float* v = nullptr;       // [T, H, V]
  const float* g = nullptr;       // [T, H, K]   log decay (≤ 0)
  const float* beta = nullptr;    // [T, H]
  float* state = nullptr;         // [num_slots, H, K, V] fp32, in place (initial state in, final out)
  float* o = nullptr;             // [T, H, V]   fp32, written
  std::vector<int64_t> cu_seqlens;  // host, [N+1], cu_seqlens[0] == 0, non-decreasing
  std::vector<int32_t> slots;       // host, [N], distinct slots in [0, num_slots)
  int num_heads = 0;
  int head_dim = 0;
  int64_t num_slots = 0;
  // Optional, for benchmarks: recorded on `stream` after the intra kernel and after the scan.
  cudaEvent_t phase_events[2] = {nullptr, nullptr};
};

// Device scratch the chunked form needs for these lengths (intermediates per chunk and head).
size_t KdaChunkWorkspaceBytes(const std::vector<int64_t>& cu_seqlens, int num_heads, int head_dim);

// Enqueues the chunked pipeline (intra-chunk kernel, then the state scan that also writes o).
// `workspace` holds at least KdaChunkWorkspaceBytes(...) bytes. The chunk table is uploaded from
// the host with cudaMemcpyAsync from pageable memory, so this call is not graph-capturable.
// Returns InvalidArgument for bad shapes or lengths.
Status KdaChunk(const KdaChunkParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace gyre::cuda
