// Host-memory entry points of the MLA / DSA kernels (mla_cuda.h) for the op registry (`gyre verify
// ops --backend cuda --op mla.attention|dsa.pool_key|dsa.select`). Plain C++: includes no CUDA
// header, so src/ops/registry.cc compiles with the host compiler.
//
// Each call takes the CPU op's contiguous inputs and exercises the paged path: the cached rows are
// written with CacheWrite into a cache of 4-token pages under a shuffled block table, as batch row
// 1 of 2 (row 0 owns other pages), with every unused row NaN; a padding token (tok_seq = −1, NaN
// inputs) is put in front of the queries and must produce nothing (zero output / empty selection).
// Outputs and workspaces are NaN-filled before the run. Then it synchronizes and copies back.
// Returns the first CUDA error as Internal, a launcher's InvalidArgument, or Internal when a
// device-side invariant checked here fails (padding output, order of a selection, rows written).
// Slow by design (allocations and copies per call): for checks, not for serving.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace gyre::cuda {

struct MlaHostArgs {
  const float* q = nullptr;       // [s, H, nope + rope]; query i sits at position t − s + i
  const float* latent = nullptr;  // [t, kv_lora]  cached c of positions 0 .. t−1
  const float* krot = nullptr;    // [t, rope]     (rope > 0)
  const float* kv_b = nullptr;    // [H·(nope + v), kv_lora] fp32
  int64_t s = 0, t = 0;
  int64_t heads = 0, nope = 0, rope = 0, v = 0, kv_lora = 0;
  float scale = 1.0f;
  const int64_t* sel_offsets = nullptr;  // [s + 1] CSR offsets, or null: causal
  const int32_t* sel_indices = nullptr;  // key positions, ascending per query
  // The cache rows sit pos_shift positions later in the pages (PagedBatch::pos_shift; the MTP
  // layer's keys use 1): positions 0..pos_shift-1 stay NaN-poisoned, so a read there shows.
  int64_t pos_shift = 0;
};

// ops::MlaAttention on the GPU; out [s, H·v]. Also runs the other kernels on the same inputs and
// returns Internal when they disagree: the first version (fp32, rel-L2 <= 1e-5 to the default), and
// with kv_b rounded to bf16 the bf16 tensor-core path (skinny and tensor-core head GEMMs) against the
// exact fp32 path on those weights (rel-L2 <= 1e-2: bf16 operands). And for each KV cache dtype
// (bf16, fp8, int8; quant/kv_cache.h): CacheWriteKv's rows must be KvEncodeRow's bytes, and attention
// over them (fp32 kv_b and bf16 kv_b) must equal attention over the decoded fp32 rows bit for bit.
Status MlaAttentionOnDevice(const MlaHostArgs& a, float* out);

// ops::PoolKey of one pool on the GPU, through IndexerPoolKeys over a step that writes the pool's m
// tokens (k and gamma in one CacheWriteMulti): k, gamma, ape [m, d]; out [d]. Also checks that
// exactly one pooled-key row is written and that the first kernel writes the same bits.
Status PoolKeyOnDevice(const float* k, const float* gamma, const float* ape, int64_t m, int64_t d, float* out);

struct IndexerHostArgs {
  const float* q_idx = nullptr;      // [s, heads, head_dim]
  const float* w = nullptr;          // [s, heads]
  const float* pool_keys = nullptr;  // [num_pools, head_dim], pool p = tokens [p·m, p·m + m)
  int64_t s = 0, pos0 = 0, num_pools = 0;
  int64_t heads = 0, head_dim = 0, kpool = 1, topk = 0;
  bool tail = true;
};

// ops::IndexerSelect on the GPU; rows[i] = selected key positions of query i (ascending). Runs the
// sliced select with candidates staged in shared memory and read from global memory, with tiny
// slices (merged candidate lists), and the first version, and returns Internal unless all give the
// same lists.
Status IndexerSelectOnDevice(const IndexerHostArgs& a, std::vector<std::vector<int32_t>>* rows);

}  // namespace gyre::cuda
