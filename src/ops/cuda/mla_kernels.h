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

// Tensor-core attention (bf16 kv_b): one block = (key split, token, group of kTcHeads heads), 16
// consumer warps (mma.sync) and 4 producer warps (gather fp32 cache rows, round to bf16, store);
// keys in chunks of kTcKeys, double-buffered. Q/C rows are padded to a multiple of 64 columns.
// NOTE: 18 warps would get the same 96-register budget as 20 (ptxas), so the producers take 4.
constexpr int kTcHeads = 64;
constexpr int kTcKeys = 64;
constexpr int kTcConsumerWarps = 16;
constexpr int kTcProducerWarps = 4;
constexpr int kTcThreads = 32 * (kTcConsumerWarps + kTcProducerWarps);
constexpr int kTcSplitKeys = 32;  // key-split granularity (a split's last chunk may be partly masked)
inline int TcQkPad(int qk) { return (qk + 63) / 64 * 64; }
inline size_t TcAttnSmemBytes(int qk_pad) {
  return sizeof(uint16_t) * (static_cast<size_t>(kTcHeads) * qk_pad + 2 * kTcKeys * qk_pad + kTcHeads * kTcKeys) +
         sizeof(float) * 4 * kTcHeads + sizeof(int64_t) * 2 * kTcKeys;
}

// Indexer: scores for kIdxPoolsPerBlock pools per block; at most kIdxMaxHeads heads (zero-padded).
constexpr int kIdxMaxHeads = 32;
constexpr int kIdxScoreThreads = 128;
constexpr int kIdxSelectThreads = 512;
constexpr int64_t kIdxSelectSmemKeys = 32768;  // candidates staged in shared memory (128 KiB) up to this

// Head-batched GEMM tiles: FFMA (fp32 path, M > kSkMaxTokens), tensor cores (bf16 path, M >
// kSkMaxTokens), and the weight-streaming "skinny" kernels for M <= kSkMaxTokens (both paths).
constexpr int kHgBM = 32, kHgBN = 64, kHgBK = 16, kHgThreads = 128;
constexpr int kTgBM = 128, kTgBN = 128, kTgBK = 64, kTgThreads = 256;
constexpr int kSkThreads = 256;
constexpr int kSkMaxTokens = 16;
constexpr int kSkKnCols = 64;  // [k][n] weights: output columns per block
constexpr int kSkNkRows = 32;  // [n][k] weights: output columns (weight rows) per block

// Indexer scores, second version: 4 threads per pool, kIdxScorePools pools per pass of a block,
// each thread holding up to kIdxScoreUnits float4 units of a pool row (head_dim <= 128).
constexpr int kIdxScorePools = kIdxScoreThreads / 4;
constexpr int kIdxScoreUnits = 8;
// Sliced select: a slice holds at least this many pools (more when the budget is large).
constexpr int64_t kIdxMinSlicePools = 2048;

// ---- arguments ----

// One (source rows → cache) copy of CacheWriteMulti.
struct CacheWriteItem {
  const float* src = nullptr;  // [num_tokens, ld_src]
  int64_t ld_src = 0, width = 0;
  float* cache = nullptr;      // [rows, width]
};

// Token → cache row map of a PagedBatch, passed by value.
struct TokenRows {
  const int32_t* tok_seq = nullptr;
  const int32_t* tok_pos = nullptr;
  const int32_t* block_table = nullptr;
  int64_t max_pages = 0, page_tokens = 1;
  int64_t pos_shift = 0;  // PagedBatch::pos_shift
#ifdef __CUDACC__
  __device__ __forceinline__ int64_t Row(int seq, int64_t pos) const {
    pos += pos_shift;
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

// CacheWriteKv: src rows → cache rows of row_bytes in the KvDtype kv_dtype (bf16 / fp8 / int8; fp32
// goes through CacheWriteArgs). fp8 / int8 rows end with their fp32 scale at scale_off.
struct CacheWriteKvArgs {
  const float* src;
  int64_t ld_src, width, num_tokens;
  TokenRows rows;
  uint8_t* cache;
  int64_t row_bytes, scale_off;
  int kv_dtype;
};

constexpr int kMaxCacheWriteItems = 4;
struct CacheWriteMultiArgs {
  CacheWriteItem items[kMaxCacheWriteItems];
  int num_items;
  int64_t num_tokens;
  TokenRows rows;
};

struct PoolKeyArgs {
  const float* idx_k;  // [rows, di]
  const float* gamma;  // [rows, di]
  const float* ape;    // [m, di]
  int m, di;
  int64_t num_tokens;
  TokenRows rows;
  float* pool_keys;  // [rows / pool_div, di]: pool ending at cache row r at row r / pool_div
  int pool_div;      // PoolKeyDiv(page_tokens, m)
};

struct IndexerScoreArgs {
  const float* q_idx;      // [T, heads, di]
  const float* w;          // [T, heads]
  const float* pool_keys;  // [rows / pool_div, di]
  int heads, di, m;
  int pool_div;            // PoolKeyDiv(page_tokens, m)
  float scale;             // di^{-1/2}
  int64_t num_tokens;
  TokenRows rows;
  uint32_t* keys;          // [T, key_stride] order-preserving keys of the scores
  int64_t key_stride;
  int passes;              // second version: pools per block = kIdxScorePools * passes
  uint32_t* counter;       // [T] or null: zeroed by block 0 of each token (for the sliced select)
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

// Sliced select: grid (slices, tokens). Block s picks the top min(budget, n_s) pools of pools
// [s·slice, s·slice + n_s) into the token's candidate list at s·cand_per_slice (ascending pool
// order); the last block of a token to finish (counter) selects the final top `budget` among the
// candidates, expands them and appends the tail.
struct IndexerSliceArgs {
  const uint32_t* keys;  // [T, key_stride]
  int64_t key_stride;
  int m, budget;
  bool tail;
  int64_t num_tokens;
  TokenRows rows;
  int32_t* sel;          // [T, sel_cap]
  int32_t* sel_count;    // [T]
  int64_t sel_cap;
  int64_t slice;         // pools per slice
  int64_t cand_per_slice;  // min(budget, slice)
  uint32_t* cand_key;    // [T, cand_stride]
  int32_t* cand_idx;     // [T, cand_stride]
  int64_t cand_stride;   // max slices × cand_per_slice
  uint32_t* counter;     // [T], zero on entry
  int64_t smem_keys;     // a slice (keys) or the candidates (keys + indices) are staged when they fit
};

// C_h[M, N] = A_h[M, K] · B_h(K, N) for h < heads (one block column per head):
//   A(m, k) = a[h*a_head + m*lda + k]                           fp32
//   B(k, n) = b[h*b_head + (b_nk ? n*ldb + k : k*ldb + n)]       fp32 or bf16
//   C(m, n) = c[h*c_head + m*ldc + n]                            fp32
// REQUIRES: K % kHgBK == 0, N % 8 == 0, lda % 4 == 0, ldb % 8 == 0, 16-byte aligned bases.
// round_a: A is rounded to bf16 (round-to-nearest-even) before use (the bf16 path; the tensor-core
// kernel always rounds). The skinny kernels take m <= kSkMaxTokens; the tensor-core kernel needs bf16
// B and N % 8 == 0.
struct HeadGemmArgs {
  const float* a;
  const void* b;
  float* c;
  int64_t a_head, lda, b_head, ldb, c_head, ldc;
  int m, n, k, heads;
  bool b_bf16, b_nk;
  bool round_a = false;
};

struct MlaAttnArgs {
  const float* q_lat;    // [T, H, R]
  const float* q;        // [T, H, qd] (rope part at column nope)
  const char* latent;    // [rows, lat_row_bytes]: R values of kv_dtype (quant/kv_cache.h row format)
  const char* krot;      // [rows, rot_row_bytes]: rope values of kv_dtype
  int64_t lat_row_bytes, rot_row_bytes;
  int kv_dtype;          // KvDtype
  const int32_t* sel;    // [T, sel_cap] or null (causal)
  const int32_t* sel_count;
  int64_t sel_cap;
  TokenRows rows;
  float* o_lat;          // [T, H, R] (num_splits == 1: normalized output)
  float* o_part;         // [splits, T, H, R] (num_splits > 1)
  float* ml_part;        // [splits, T, H, 2] running max and sum
  int num_tokens, heads, latent_dim, rope, nope, qd;
  int tile_stride;       // MlaTileStride(latent_dim + rope) (FFMA kernel)
  int qk_pad;            // TcQkPad(latent_dim + rope) (tensor-core kernel)
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
cudaError_t LaunchCacheWriteMulti(const CacheWriteMultiArgs& a, cudaStream_t s);
cudaError_t LaunchCacheWriteKv(const CacheWriteKvArgs& a, cudaStream_t s);
// legacy: the first version (per-channel row loads from global memory); else rows staged in shared
// memory (falls back to the first version when 8·m·di bytes exceed 48 KiB).
cudaError_t LaunchPoolKeys(const PoolKeyArgs& a, bool legacy, cudaStream_t s);
// max_pools sizes the grid (pools per token are (tok_pos + 1) / m <= max_pools). legacy: the first
// score kernel (one or two pools per thread); else 4 threads per pool when head_dim <= 128.
cudaError_t LaunchIndexerScores(const IndexerScoreArgs& a, int64_t max_pools, bool legacy, cudaStream_t s);
cudaError_t LaunchIndexerSelect(const IndexerSelectArgs& a, int64_t max_pools, cudaStream_t s);
cudaError_t LaunchIndexerSlice(const IndexerSliceArgs& a, int64_t num_slices, size_t smem_bytes, cudaStream_t s);
cudaError_t LaunchHeadGemm(const HeadGemmArgs& a, cudaStream_t s);          // FFMA tiles
cudaError_t LaunchHeadGemmSkinny(const HeadGemmArgs& a, cudaStream_t s);    // m <= kSkMaxTokens
cudaError_t LaunchHeadGemmTc(const HeadGemmArgs& a, cudaStream_t s);        // bf16 B, tensor cores
cudaError_t LaunchMlaAttention(const MlaAttnArgs& a, int head_groups, cudaStream_t s);
cudaError_t LaunchMlaAttentionTc(const MlaAttnArgs& a, int head_groups, cudaStream_t s);
cudaError_t LaunchMlaCombine(const MlaCombineArgs& a, cudaStream_t s);

// ---- variants (the public functions of mla_cuda.h use the defaults; the bench and the verify path
// ---- select the others to compare them) ----

// IndexerSelect with its knobs. smem_keys: candidates are staged in shared memory when they fit
// (0 forces the global-memory path); slice_pools: pools per slice of the sliced select (0 = auto:
// max(kIdxMinSlicePools, 8·budget) rounded up to a power of two). Kernels:
//   kSliced  score kernel 2 (4 threads per pool) + the sliced select (several blocks per token)
//   kLegacy  the first version (score kernel 1, one select block per token); ignores slice_pools
//   kAuto    kSliced for calls of at most kIdxSlicedMaxTokens tokens, else kLegacy. NOTE: measured
//            (bench/results/gpu_mla_opt_2026-12-02.json): sliced wins at 1 token (8k-256k context),
//            loses at 32 tokens and at prefill, where score kernel 2's shared-memory reads of q (4
//            distinct 16-byte addresses per warp load, no broadcast) cost more than its latency gain.
enum class IndexerKernels { kAuto, kSliced, kLegacy };
constexpr int64_t kIdxSlicedMaxTokens = 4;
struct IndexerOptions {
  int64_t smem_keys = kIdxSelectSmemKeys;
  int64_t slice_pools = 0;
  IndexerKernels kernels = IndexerKernels::kAuto;
};
size_t IndexerWorkspaceBytesWith(const IndexerDims& d, int64_t num_tokens, int64_t max_context,
                                 const IndexerOptions& o);
Status IndexerSelectWith(const float* q_idx, const float* w, const float* pool_keys, const IndexerDims& d,
                         const PagedBatch& b, int32_t* sel, int32_t* sel_count, void* workspace,
                         size_t workspace_bytes, const IndexerOptions& o, cudaStream_t stream);

// CacheWrite of up to kMaxCacheWriteItems row tensors in one launch (e.g. the step's latent, k_I and
// γ rows: with IndexerPoolKeys the DSA cache update is two launches instead of four).
Status CacheWriteMulti(const CacheWriteItem* items, int num_items, const PagedBatch& b, cudaStream_t stream);

// IndexerPoolKeys with the first kernel (legacy) or the shared-memory one (default).
Status IndexerPoolKeysWith(const float* idx_k, const float* gamma, const float* ape, int64_t m, int64_t di,
                           const PagedBatch& b, float* pool_keys, bool legacy, cudaStream_t stream);

// MlaAttention's kernels:
//   kAuto    bf16 kv_b: the bf16 tensor-core path (docs/cuda.md "bf16 path"); fp32 kv_b: kFp32.
//   kFp32    exact fp32 math (bf16 kv_b widened): skinny or FFMA head GEMMs, FFMA attention.
//   kLegacy  the first version: FFMA head GEMMs for every M, FFMA attention (fp32 math).
// skinny_max_tokens: calls with at most this many tokens use the skinny head GEMMs (kAuto/kFp32).
enum class MlaKernels { kAuto, kFp32, kLegacy };
struct MlaOptions {
  MlaKernels kernels = MlaKernels::kAuto;
  int skinny_max_tokens = kSkMaxTokens;
};
// True when MlaAttention with these dims and kv_b type takes the bf16 tensor-core path.
bool MlaUsesTensorCores(const MlaDims& d, bool kv_b_bf16, const MlaOptions& o);
Status MlaAttentionWith(const float* q, const float* latent, const float* krot, const DMat& kv_b, const MlaDims& d,
                        const PagedBatch& b, const int32_t* sel, const int32_t* sel_count, int64_t sel_cap,
                        float* out, void* workspace, size_t workspace_bytes, const MlaOptions& o,
                        cudaStream_t stream);
// MlaAttentionWith over a cache stored in `kv` (latent and krot rows as quant/kv_cache.h lays them out).
Status MlaAttentionKvWith(const float* q, const void* latent, const void* krot, KvDtype kv, const DMat& kv_b,
                          const MlaDims& d, const PagedBatch& b, const int32_t* sel, const int32_t* sel_count,
                          int64_t sel_cap, float* out, void* workspace, size_t workspace_bytes, const MlaOptions& o,
                          cudaStream_t stream);

}  // namespace gyre::cuda::internal
