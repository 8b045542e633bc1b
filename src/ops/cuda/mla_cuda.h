// MLA (NoPE, absorbed) attention and the DSA indexer on the GPU, over a paged per-layer cache
// (docs/model-glm5-next.md §5, docs/model-kda-kimi-linear.md §2.4). Each function computes
// exactly the function of the CPU op named beside it (src/ops/attention.h), in fp32.
//
// Cache layout. Each attention layer owns separate row tensors (one row per token slot):
// latent [rows, R], k_rot [rows, rope] (kimi only), indexer key k_I [rows, di], pool gate γ
// [rows, di] and pooled keys [rows, di]. The indexer's rows are fp32; latent and k_rot are fp32 or,
// through CacheWriteKv / MlaAttentionKv, bf16 / fp8 / int8 rows (quant/kv_cache.h). Token j of batch row b lives at physical row
//   block_table[b * max_pages + j / page_tokens] * page_tokens + j % page_tokens.
// The pooled key K̄_p of pool p (tokens [p·m, p·m + m)) is stored in the pooled-key tensor at row
// Row(p·m + m − 1) / PoolKeyDiv(page_tokens, m), the physical row of the pool's last token divided
// by m when m divides page_tokens (a pool never straddles a page: one row per pool, page_tokens / m
// rows per page), else by 1 (one row per token slot). So pooled keys are paged like everything else,
// and the tensor holds PoolKeyRows(rows, page_tokens, m) rows.
//
// A step's query tokens are described by a PagedBatch (device arrays, so a decode step can be
// captured in a CUDA graph and replayed with new contents): token i belongs to batch row
// tok_seq[i] and sits at absolute position tok_pos[i]; it sees keys 0..tok_pos[i] of its row.
// A token with tok_seq[i] < 0 is padding: skipped, outputs zero / empty selections.
// PagedBatch::pos_shift moves every position of a batch by a constant (the MTP layer's keys).
//
// Conventions: device pointers; sizes validated before any launch (InvalidArgument); enqueue on
// `stream`, launches checked, no synchronization, no allocation.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "ops/cuda/dmat.h"
#include "quant/kv_cache.h"

namespace gyre::cuda {

inline int64_t PoolKeyDiv(int64_t page_tokens, int64_t m) { return m > 0 && page_tokens % m == 0 ? m : 1; }
inline int64_t PoolKeyRows(int64_t rows, int64_t page_tokens, int64_t m) { return rows / PoolKeyDiv(page_tokens, m); }

struct PagedBatch {
  const int32_t* tok_seq = nullptr;      // [num_tokens]
  const int32_t* tok_pos = nullptr;      // [num_tokens]
  const int32_t* block_table = nullptr;  // [num_seqs, max_pages]
  int64_t num_tokens = 0, num_seqs = 0, max_pages = 0, page_tokens = 0;
  int64_t max_context = 0;  // upper bound on tok_pos + 1 over the batch (sizes grids/workspaces)
  // Cache rows of this batch sit pos_shift positions later in their rows' pages: position j (a
  // token's own row, a key, a selected index) lives at the physical row of j + pos_shift. A token
  // at tok_pos p sees keys 0..p, read from positions pos_shift..p + pos_shift. 0: the usual paging;
  // 1: the MTP layer's keys, whose position j is stored with token position j + 1 (runtime/cuda_model.h).
  // REQUIRES: max_context + pos_shift <= max_pages * page_tokens.
  int64_t pos_shift = 0;
};

// Writes src row i (width floats, row stride ld_src) into `cache` (row stride `width`) at the
// physical row of (tok_seq[i], tok_pos[i]).
Status CacheWrite(const float* src, int64_t ld_src, int64_t width, const PagedBatch& b, float* cache,
                  cudaStream_t stream);

// CacheWrite into a cache stored in `kv` (rows of KvRowBytes(kv, width) bytes, quant/kv_cache.h):
// each row is encoded as KvEncodeRow does it, bit for bit (bf16 round-to-nearest-even; fp8 / int8
// with the row's own fp32 scale). REQUIRES: width % 4 == 0, cache 16-byte aligned.
Status CacheWriteKv(const float* src, int64_t ld_src, int64_t width, const PagedBatch& b, void* cache, KvDtype kv,
                    cudaStream_t stream);

// ops::PoolKey for every pool completed by this step's tokens: for each token i with
// (tok_pos[i] + 1) % m == 0, pool p = (tok_pos[i] + 1)/m − 1 is reduced from the k_I and γ rows
// of its m tokens (already written) with ape [m, di], and K̄_p written to pool_keys at the row of
// tok_pos[i].
Status IndexerPoolKeys(const float* idx_k, const float* gamma, const float* ape, int64_t m, int64_t di,
                       const PagedBatch& b, float* pool_keys, cudaStream_t stream);

struct IndexerDims {
  int64_t num_heads = 0, head_dim = 0;
  int64_t kpool = 1;  // m
  int64_t topk = 0;   // token budget K (K/m pools)
  bool tail = true;
};
// Capacity of one token's selection list: topk + m − 1 (the chosen pools' tokens plus the tail).
inline int64_t IndexerSelCap(const IndexerDims& d) { return d.topk + d.kpool - 1; }

// The shapes the kernels support: Ok, or InvalidArgument naming the dimension and its limit.
// CudaModel checks a config with them at load (CheckGpuConfig), so a model they cannot run is
// refused before anything is allocated.
Status CheckIndexerDims(const IndexerDims& d);

size_t IndexerWorkspaceBytes(const IndexerDims& d, int64_t num_tokens, int64_t max_context);

// ops::IndexerSelect for every token of the batch: q_idx [num_tokens, Hi, di], w [num_tokens, Hi]
// (head weights incl. Hi^{-1/2}); scores over the complete pools visible to the token, top
// min(K/m, #candidates) pools (higher score first, equal → lower pool index), plus the tail.
// Writes sel [num_tokens, IndexerSelCap] token positions, ascending, and sel_count [num_tokens].
Status IndexerSelect(const float* q_idx, const float* w, const float* pool_keys, const IndexerDims& d,
                     const PagedBatch& b, int32_t* sel, int32_t* sel_count, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream);

struct MlaDims {
  int64_t num_heads = 0, nope = 0, rope = 0, v = 0, kv_lora = 0;
  float scale = 1.0f;  // qk_head_dim^{-1/2}
};
// The MLA kernels' shape limits: Ok, or InvalidArgument naming the dimension (CheckGpuConfig).
Status CheckMlaDims(const MlaDims& d);

size_t MlaWorkspaceBytes(const MlaDims& d, int64_t num_tokens, int64_t max_context);

// ops::MlaAttention in the absorbed form for every token of the batch:
//   q [num_tokens, H, nope + rope]; latent [rows, R]; krot [rows, rope] (null when rope == 0);
//   kv_b [H·(nope + v), R] (fp32 or bf16); out [num_tokens, H·v].
// Keys: causal (all j <= tok_pos[i]) when sel is null, else the sel_count[i] positions of
// sel[i * sel_cap ...].
Status MlaAttention(const float* q, const float* latent, const float* krot, const DMat& kv_b, const MlaDims& d,
                    const PagedBatch& b, const int32_t* sel, const int32_t* sel_count, int64_t sel_cap, float* out,
                    void* workspace, size_t workspace_bytes, cudaStream_t stream);

// MlaAttention over latent / krot rows stored in `kv` (CacheWriteKv's rows). Each loaded row is
// decoded to exactly the fp32 values KvDecodeRow gives, then used as the fp32 path (FFMA kernels)
// or the bf16 path (rounded to bf16 on load) uses a cache row: the result equals MlaAttention on an
// fp32 cache that holds the decoded values, bit for bit. kv == kF32 is MlaAttention.
Status MlaAttentionKv(const float* q, const void* latent, const void* krot, KvDtype kv, const DMat& kv_b,
                      const MlaDims& d, const PagedBatch& b, const int32_t* sel, const int32_t* sel_count,
                      int64_t sel_cap, float* out, void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace gyre::cuda
