// Internal: the kernel entry points behind kda_cuda.cu (one launcher per kernel family, each in its
// own sm90_*.cu). Callers outside src/ops/cuda use kda_cuda.h instead. These launchers assume
// validated arguments (kda_cuda.cu checks them) and return the launch's cudaError_t.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/kda_cuda.h"

namespace gyre::cuda::internal {

constexpr int kKdaChunk = 64;  // rows per chunk in the chunked form (FLA's default)

// Recurrent form: padded head size k_pad ∈ {32, 64, 128}; (block_v, num_threads) one of the pairs
// listed in kda_cuda.h (k_pad < 128: only {32, 128}).
cudaError_t LaunchKdaRecurrent(const KdaRecurrentParams& p, int k_pad, int block_v, int num_threads,
                               cudaStream_t stream);

// Chunked form. Per-chunk intermediates, all fp32, padded head size kp (= k_pad), laid out
// [num_chunks, H, ...] so that one (chunk, head) block reads and writes one contiguous piece. Every
// matrix is row-major with rows = the chunk's 64 tokens (zero rows past a partial chunk's end).
struct KdaChunkBuffers {
  const int32_t* chunk_start = nullptr;  // [num_chunks] first token of each chunk
  const int32_t* chunk_len = nullptr;    // [num_chunks] rows in the chunk (1..64)
  const int32_t* seq_chunks = nullptr;   // [N+1] chunk range of each sequence
  const int32_t* slots = nullptr;        // [N]
  float* w = nullptr;    // [NC, H, 64, kp]  W = (T·diag β)·(e^G ⊙ K̂)
  float* u = nullptr;    // [NC, H, 64, kp]  U = (T·diag β)·V
  float* kg = nullptr;   // [NC, H, 64, kp]  K̂ ⊙ e^{G_C − G}
  float* qg = nullptr;   // [NC, H, 64, kp]  Q̃ ⊙ e^G
  float* aqk = nullptr;  // [NC, H, 64, 64]  Aqk on and below the diagonal 16×16 blocks (zeros above the
                         //                  diagonal inside them; the blocks above are never written)
  float* gl = nullptr;   // [NC, H, kp]      e^{G_C}
  int num_chunks = 0;
  int num_seqs = 0;
};

// Floats per (chunk, head) in KdaChunkBuffers for padded head size kp.
constexpr int64_t KdaChunkFloatsPerChunkHead(int kp) { return int64_t(kp) * 64 * 4 + 64 * 64 + kp; }

// Two launches: the intra-chunk kernel (parallel over chunk × head) fills the buffers; the scan
// (per V tile of block_v ∈ {32, 64} ≤ k_pad columns × head × sequence, sequential over the
// sequence's chunks) carries the state, writes o and the final state.
cudaError_t LaunchKdaChunkIntra(const KdaChunkParams& p, const KdaChunkBuffers& b, int k_pad, cudaStream_t stream);
cudaError_t LaunchKdaChunkScan(const KdaChunkParams& p, const KdaChunkBuffers& b, int k_pad, int block_v,
                               cudaStream_t stream);

}  // namespace gyre::cuda::internal
