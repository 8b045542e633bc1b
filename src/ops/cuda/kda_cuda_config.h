// Heuristics for the KDA kernels (style.md §2.7: heuristics live in their own file).
//
// Recurrent decode is bandwidth bound: what matters is enough bytes in flight and few, long-lived
// blocks. Measured on an H200 (bench/results/gpu_kda_2026-12-02*.json, docs/cuda.md): with few
// (sequence, head) pairs, 16-column tiles give more blocks (batch 1, H = 64: 4.6–4.9 µs in a
// graph vs 5.1–5.5 with 32 columns); from ~2 pairs per SM on, 64-column tiles of 256 threads are
// fastest (82–95% of the copy bandwidth at batch 16–512, vs 78–89% with 32 columns).
#pragma once

#include "ops/cuda/kda_cuda.h"

namespace gyre::cuda {

// Smallest padded head size the kernels are built for that holds `head_dim`, or 0 if none.
inline int KdaPaddedHeadDim(int head_dim) {
  if (head_dim <= 32) return 32;
  if (head_dim <= 64) return 64;
  if (head_dim <= 128) return 128;
  return 0;
}

inline KdaRecurrentConfig PickKdaRecurrentConfig(int num_seqs, int num_heads, int k_pad, int num_sms) {
  if (k_pad != 128) return {32, 128};
  const long pairs = static_cast<long>(num_seqs) * num_heads;
  if (pairs < 2L * num_sms) return {16, 128};
  return {64, 256};
}

// V-tile width of the chunked scan: one block (one SM: ~190 KB of shared memory) per
// (V tile, head, sequence), each a sequential chain over the sequence's chunks. 64-column tiles
// read the per-chunk operands half as often; 32-column tiles double the blocks when 64-column ones
// would leave more than half of the SMs idle.
inline int PickKdaChunkScanBlockV(int num_seqs, int num_heads, int k_pad, int num_sms) {
  if (k_pad < 64) return 32;
  const long blocks64 = static_cast<long>(num_seqs) * num_heads * (k_pad / 64);
  return 2 * blocks64 <= num_sms ? 32 : 64;
}

}  // namespace gyre::cuda
