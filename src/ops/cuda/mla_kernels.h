// Internal interface between the MLA / DSA launchers (mla_cuda.cu) and their kernels
// (sm90_mla_indexer.cu, sm90_mla_attention.cu). Not for callers outside src/ops/cuda: the public
// contract is mla_cuda.h. Launch functions assume validated arguments (mla_cuda.cu checks them)
// and return the launch's cudaError_t.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "ops/cuda/mla_cuda.h"

namespace gyre::cuda::internal {

// ---- tile constants shared by host (grid, smem, workspace sizing) and device ----

// MLA attention: one block = (key split, token, group of kMlaHeads heads); keys in sub-chunks of
// kMlaKeys, double-buffered in shared memory.
constexpr int kMlaHeads = 32;
constexpr int kMlaKeys = 32;
constexpr int kMlaThreads = 256;
constexpr int kMlaMaxLatent = 512;  // R: the output tile covers 512 latent columns
constexpr int kMlaMaxQk = 576;      // R + rope (kimi_linear: 512 + 64)
constexpr int kMlaMaxSplits = 256;

// Row stride (floats) of the Q and C tiles: the K loop runs over qk rounded up to 32 columns; the
// extra 16 make stride/4 ≡ 4 (mod 8), so 16-byte reads of 8 lanes at 8 consecutive column groups
// of a row, and of two rows at once, fall into distinct bank groups.
inline int MlaTileStride(int qk) { return (qk + 31) / 32 * 32 + 16; }
inline size_t MlaAttnSmemBytes(int qk) {
  const size_t ks = MlaTileStride(qk);
  return sizeof(float) * (3 * kMlaKeys * ks + kMlaKeys * kMlaHeads + 3 * kMlaHeads) + sizeof(int64_t) * 2 * kMlaKeys;
}
static_assert(kMlaHeads == kMlaKeys, "the GEMM1 thread map assumes a square 32 x 32 score tile");

// Indexer: scores for kIdxPoolsPerBlock pools per block; at most kIdxMaxHeads heads (zero-padded).
constexpr int kIdxMaxHeads = 32;
constexpr int kIdxScoreThreads = 128;
constexpr int kIdxSelectThreads = 512;
constexpr int64_t kIdxSelectSmemKeys = 32768;  // candidates staged in shared memory (128 KiB) up to this

// Head-batched GEMM tiles.
constexpr int kHgBM = 32, kHgBN = 64, kHgBK = 16, kHgThreads = 128;

// ---- arguments ----

// Token → cache row map of a PagedBatch, passed by value.
struct TokenRows {
  const int32_t* tok_seq = nullptr;
  const int32_t* tok_pos = nullptr;
  const int32_t* block_table = nullptr;
  int64_t max_pages = 0, page_tokens = 1;
#ifdef __CUDACC__
  __device__ __forceinline__ int64_t Row(int seq, int64_t pos) const {
    return static_cast<int64_t>(block_table[seq * max_pages + pos / page_tokens]) * page_tokens + pos % page_tokens;
  }
#endif
};

struct CacheWriteArgs {
  const float* src;
  int64_t ld_src, width, num_tokens;
  TokenRows rows;
  float* cache;
};

struct PoolKeyArgs {
  const float* idx_k;  // [rows, di]
  const float* gamma;  // [rows, di]
  const float* ape;    // [m, di]
  int m, di;
  int64_t num_tokens;
  TokenRows rows;
  float* pool_keys;  // [rows, di]
};

struct IndexerScoreArgs {
  const float* q_idx;      // [T, heads, di]
  const float* w;          // [T, heads]
  const float* pool_keys;  // [rows, di]
  int heads, di, m;
  float scale;             // di^{-1/2}
  int64_t num_tokens;
  TokenRows rows;
  uint32_t* keys;          // [T, key_stride] order-preserving keys of the scores
  int64_t key_stride;
};

struct IndexerSelectArgs {
  const uint32_t* keys;  // [T, key_stride]
  int64_t key_stride;
  int m, budget;         // budget = topk / m pools
  bool tail;
  int64_t num_tokens;
  TokenRows rows;
  int32_t* sel;          // [T, sel_cap]
  int32_t* sel_count;    // [T]
  int64_t sel_cap;
  int64_t smem_keys;     // candidates staged in shared memory when n <= smem_keys, else read from `keys`
};

// C_h[M, N] = A_h[M, K] · B_h(K, N) for h < heads (one block column per head):
//   A(m, k) = a[h*a_head + m*lda + k]                           fp32
//   B(k, n) = b[h*b_head + (b_nk ? n*ldb + k : k*ldb + n)]       fp32 or bf16
//   C(m, n) = c[h*c_head + m*ldc + n]                            fp32
// REQUIRES: K % kHgBK == 0, N % 8 == 0, lda % 4 == 0, ldb % 8 == 0, 16-byte aligned bases.
struct HeadGemmArgs {
  const float* a;
  const void* b;
  float* c;
  int64_t a_head, lda, b_head, ldb, c_head, ldc;
  int m, n, k, heads;
  bool b_bf16, b_nk;
};

struct MlaAttnArgs {
  const float* q_lat;    // [T, H, R]
  const float* q;        // [T, H, qd] (rope part at column nope)
  const float* latent;   // [rows, R]
  const float* krot;     // [rows, rope]
  const int32_t* sel;    // [T, sel_cap] or null (causal)
  const int32_t* sel_count;
  int64_t sel_cap;
  TokenRows rows;
  float* o_lat;          // [T, H, R] (num_splits == 1: normalized output)
  float* o_part;         // [splits, T, H, R] (num_splits > 1)
  float* ml_part;        // [splits, T, H, 2] running max and sum
  int num_tokens, heads, latent_dim, rope, nope, qd;
  int tile_stride;       // MlaTileStride(latent_dim + rope)
  int keys_per_split, num_splits;
  float scale;
};

struct MlaCombineArgs {
  const float* o_part;
  const float* ml_part;
  float* o_lat;
  int num_tokens, heads, latent_dim, num_splits;
};

// Lets `func` use all the dynamic shared memory the device allows per block. Launchers call it once
// per kernel (function-local static), before any stream capture can be active.
inline cudaError_t AllowMaxDynamicSmem(const void* func) {
  int dev = 0, optin = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev); e != cudaSuccess)
    return e;
  cudaFuncAttributes attr{};
  if (cudaError_t e = cudaFuncGetAttributes(&attr, func); e != cudaSuccess) return e;
  return cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              optin - static_cast<int>(attr.sharedSizeBytes));
}

cudaError_t LaunchCacheWrite(const CacheWriteArgs& a, cudaStream_t s);
cudaError_t LaunchPoolKeys(const PoolKeyArgs& a, cudaStream_t s);
// max_pools sizes the grid (pools per token are (tok_pos + 1) / m <= max_pools).
cudaError_t LaunchIndexerScores(const IndexerScoreArgs& a, int64_t max_pools, cudaStream_t s);
cudaError_t LaunchIndexerSelect(const IndexerSelectArgs& a, int64_t max_pools, cudaStream_t s);
cudaError_t LaunchHeadGemm(const HeadGemmArgs& a, cudaStream_t s);
cudaError_t LaunchMlaAttention(const MlaAttnArgs& a, int head_groups, cudaStream_t s);
cudaError_t LaunchMlaCombine(const MlaCombineArgs& a, cudaStream_t s);

// IndexerSelect (mla_cuda.h) with the shared-memory staging limit as a parameter: tokens with more
// than `smem_keys` candidate pools take the global-memory path (0 forces it for every token; the
// verify path runs both and compares).
Status IndexerSelectStaged(const float* q_idx, const float* w, const float* pool_keys, const IndexerDims& d,
                           const PagedBatch& b, int32_t* sel, int32_t* sel_count, void* workspace,
                           size_t workspace_bytes, int64_t smem_keys, cudaStream_t stream);

}  // namespace gyre::cuda::internal
