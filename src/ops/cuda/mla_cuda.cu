// Host side of the MLA / DSA kernels (mla_cuda.h, and the variants of mla_kernels.h): validate, plan
// the key splits, slices and workspaces, choose the kernels, launch. Device code:
// sm90_mla_indexer.cu, sm90_mla_attention.cu.
#include "ops/cuda/mla_cuda.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/mla_kernels.h"

namespace gyre::cuda {
namespace {

using internal::kMlaHeads;
using internal::kMlaKeys;
using internal::kTcHeads;

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
size_t Align256(size_t n) { return (n + 255) / 256 * 256; }

int NumSms() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 132;
    return v;
  }();
  return n;
}

int SmemOptin() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
      return 0;
    return v;
  }();
  return n;
}

internal::TokenRows Rows(const PagedBatch& b) {
  return {b.tok_seq, b.tok_pos, b.block_table, b.max_pages, b.page_tokens, b.pos_shift};
}

Status CheckBatch(const PagedBatch& b, const char* op) {
  const std::string o(op);
  if (b.num_tokens < 0 || b.num_tokens > 65535) return Status::InvalidArgument(o + ": num_tokens out of [0, 65535]");
  if (b.num_tokens == 0) return Status::Ok();
  if (!b.tok_seq || !b.tok_pos || !b.block_table) return Status::InvalidArgument(o + ": null batch array");
  if (b.num_seqs < 1 || b.max_pages < 1 || b.page_tokens < 1) return Status::InvalidArgument(o + ": empty page table");
  if (b.pos_shift < 0) return Status::InvalidArgument(o + ": negative pos_shift");
  if (b.max_context < 1 || b.max_context + b.pos_shift > b.max_pages * b.page_tokens ||
      b.max_context >= (int64_t(1) << 31))
    return Status::InvalidArgument(o + ": max_context " + std::to_string(b.max_context) +
                                   " out of [1, max_pages * page_tokens - pos_shift] or >= 2^31");
  return Status::Ok();
}

// Key splits and workspace layout of one MlaAttention call.
struct MlaPlan {
  int head_groups = 1, num_splits = 1, keys_per_split = kMlaKeys;
  size_t q_lat = 0, o_lat = 0, ml = 0, part = 0, bytes = 0;  // byte offsets, total
};

// Splits the keys so that (splits × tokens × head groups) blocks fill the SMs once (one block per
// SM: both attention kernels use ~200 KB of shared memory); splits are whole multiples of 32 keys
// (kMlaKeys = kTcSplitKeys). `group_heads` is the kernel's head group (kMlaHeads or kTcHeads).
// The partial buffers are sized for `cap` splits, which bounds num_splits for every max_keys up to
// this one, so MlaWorkspaceBytes(max_context) covers any sel_cap.
MlaPlan PlanMla(const MlaDims& d, int64_t num_tokens, int64_t max_keys, int group_heads) {
  static_assert(kMlaKeys == internal::kTcSplitKeys, "one split granularity for both kernels");
  MlaPlan p;
  p.head_groups = static_cast<int>((d.num_heads + group_heads - 1) / group_heads);
  const int64_t base = std::max<int64_t>(1, num_tokens * p.head_groups);
  const int64_t chunks = std::max<int64_t>(1, (max_keys + kMlaKeys - 1) / kMlaKeys);
  const int64_t cap = std::min<int64_t>(std::clamp<int64_t>(NumSms() / base, 1, internal::kMlaMaxSplits), chunks);
  const int64_t per = (chunks + cap - 1) / cap;  // chunks per split
  p.keys_per_split = static_cast<int>(per * kMlaKeys);
  p.num_splits = static_cast<int>((chunks + per - 1) / per);
  const size_t thr = sizeof(float) * num_tokens * d.num_heads * d.kv_lora;
  p.q_lat = 0;
  p.o_lat = Align256(thr);
  p.ml = p.o_lat + Align256(thr);
  p.part = p.ml;
  p.bytes = p.ml;
  if (cap > 1) {
    p.part = p.ml + Align256(sizeof(float) * 2 * cap * num_tokens * d.num_heads);
    p.bytes = p.part + Align256(thr * cap);
  }
  return p;
}


}  // namespace

Status CheckMlaDims(const MlaDims& d) {
  const auto bad = [](const std::string& m) { return Status::InvalidArgument("mla.attention: " + m); };
  if (d.num_heads < 1 || d.num_heads > 65535) return bad("num_heads out of [1, 65535]");
  if (d.nope < 16 || d.nope % 16 != 0) return bad("nope must be a positive multiple of 16");
  if (d.v < 8 || d.v % 8 != 0) return bad("v must be a positive multiple of 8");
  if (d.kv_lora < 16 || d.kv_lora % 16 != 0 || d.kv_lora > internal::kMlaMaxLatent)
    return bad("kv_lora must be a multiple of 16 in [16, 512]");
  if (d.rope < 0 || d.rope % 4 != 0 || d.kv_lora + d.rope > internal::kMlaMaxQk)
    return bad("rope must be a multiple of 4 with kv_lora + rope <= 576");
  if (!(d.scale > 0.0f) || std::isinf(d.scale)) return bad("scale must be positive and finite");
  return Status::Ok();
}

Status CheckIndexerDims(const IndexerDims& d) {
  const auto bad = [](const std::string& m) { return Status::InvalidArgument("dsa.select: " + m); };
  if (d.num_heads < 1 || d.num_heads > internal::kIdxMaxHeads) return bad("num_heads out of [1, 32]");
  if (d.head_dim < 8 || d.head_dim % 8 != 0 || d.head_dim > 512) return bad("head_dim must be a multiple of 8 in [8, 512]");
  if (d.kpool < 1 || d.kpool > 64) return bad("kpool out of [1, 64]");
  if (d.topk < 0 || d.topk >= (int64_t(1) << 30)) return bad("topk out of range");
  return Status::Ok();
}

// ---- cache write and pooled keys ------------------------------------------------------------------

Status CacheWrite(const float* src, int64_t ld_src, int64_t width, const PagedBatch& b, float* cache,
                  cudaStream_t stream) {
  GYRE_RETURN_IF_ERROR(CheckBatch(b, "cache_write"));
  if (width < 1 || ld_src < width) return Status::InvalidArgument("cache_write: need width >= 1 and ld_src >= width");
  if (b.num_tokens == 0) return Status::Ok();
  if (!src || !cache) return Status::InvalidArgument("cache_write: null pointer");
  GYRE_CUDA_RETURN_IF_ERROR(internal::LaunchCacheWrite({src, ld_src, width, b.num_tokens, Rows(b), cache}, stream));
  return Status::Ok();
}

Status CacheWriteKv(const float* src, int64_t ld_src, int64_t width, const PagedBatch& b, void* cache, KvDtype kv,
                    cudaStream_t stream) {
  if (kv == KvDtype::kF32) return CacheWrite(src, ld_src, width, b, static_cast<float*>(cache), stream);
  GYRE_RETURN_IF_ERROR(CheckBatch(b, "cache_write"));
  if (width < 1 || ld_src < width || width % 4 != 0)
    return Status::InvalidArgument("cache_write: need width >= 1, a multiple of 4, and ld_src >= width");
  if (static_cast<int>(kv) < 0 || static_cast<int>(kv) > static_cast<int>(KvDtype::kInt8))
    return Status::InvalidArgument("cache_write: unknown kv cache dtype");
  if (b.num_tokens == 0) return Status::Ok();
  if (!src || !cache) return Status::InvalidArgument("cache_write: null pointer");
  if (!Aligned16(cache)) return Status::InvalidArgument("cache_write: the cache must be 16-byte aligned");
  const internal::CacheWriteKvArgs a{src, ld_src, width, b.num_tokens, Rows(b), static_cast<uint8_t*>(cache),
                                     KvRowBytes(kv, width), KvScaleOffset(width), static_cast<int>(kv)};
  GYRE_CUDA_RETURN_IF_ERROR(internal::LaunchCacheWriteKv(a, stream));
  return Status::Ok();
}

Status IndexerPoolKeys(const float* idx_k, const float* gamma, const float* ape, int64_t m, int64_t di,
                       const PagedBatch& b, float* pool_keys, cudaStream_t stream) {
  return internal::IndexerPoolKeysWith(idx_k, gamma, ape, m, di, b, pool_keys, false, stream);
}

namespace internal {

Status CacheWriteMulti(const CacheWriteItem* items, int num_items, const PagedBatch& b, cudaStream_t stream) {
  GYRE_RETURN_IF_ERROR(CheckBatch(b, "cache_write"));
  if (num_items < 1 || num_items > kMaxCacheWriteItems || !items)
    return Status::InvalidArgument("cache_write: 1 to " + std::to_string(kMaxCacheWriteItems) + " items");
  CacheWriteMultiArgs a{};
  for (int k = 0; k < num_items; ++k) {
    const CacheWriteItem& it = items[k];
    if (it.width < 1 || it.ld_src < it.width)
      return Status::InvalidArgument("cache_write: need width >= 1 and ld_src >= width");
    if (b.num_tokens > 0 && (!it.src || !it.cache)) return Status::InvalidArgument("cache_write: null pointer");
    a.items[k] = it;
  }
  if (b.num_tokens == 0) return Status::Ok();
  a.num_items = num_items;
  a.num_tokens = b.num_tokens;
  a.rows = Rows(b);
  GYRE_CUDA_RETURN_IF_ERROR(LaunchCacheWriteMulti(a, stream));
  return Status::Ok();
}

Status IndexerPoolKeysWith(const float* idx_k, const float* gamma, const float* ape, int64_t m, int64_t di,
                           const PagedBatch& b, float* pool_keys, bool legacy, cudaStream_t stream) {
  GYRE_RETURN_IF_ERROR(CheckBatch(b, "dsa.pool_key"));
  if (m < 1 || m > 64 || di < 1 || di > 65536) return Status::InvalidArgument("dsa.pool_key: m out of [1, 64] or bad di");
  if (b.num_tokens == 0) return Status::Ok();
  if (!idx_k || !gamma || !ape || !pool_keys) return Status::InvalidArgument("dsa.pool_key: null pointer");
  PoolKeyArgs a{idx_k,      gamma,    ape, static_cast<int>(m), static_cast<int>(di), b.num_tokens, Rows(b),
                pool_keys, static_cast<int>(PoolKeyDiv(b.page_tokens, m))};
  GYRE_CUDA_RETURN_IF_ERROR(LaunchPoolKeys(a, legacy, stream));
  return Status::Ok();
}

}  // namespace internal

// ---- indexer select ------------------------------------------------------------------------------

namespace {

// Workspace of one IndexerSelect: the score keys [T, max_pools], then (sliced select) the candidate
// keys and pool indices [T, cand_stride] and the per-token completion counters [T].
struct IndexerLayout {
  int64_t max_pools = 0, slice = 1, cand_per_slice = 0, num_slices = 0, cand_stride = 0;
  size_t keys = 0, cand_key = 0, cand_idx = 0, counter = 0, bytes = 0;
};

int64_t SlicePools(const IndexerDims& d, const internal::IndexerOptions& o) {
  if (o.slice_pools > 0) return o.slice_pools;
  const int64_t budget = d.kpool > 0 ? d.topk / d.kpool : 0;
  int64_t s = internal::kIdxMinSlicePools;
  while (s < 8 * budget && s < (int64_t(1) << 30)) s *= 2;
  return s;
}

IndexerLayout PlanIndexer(const IndexerDims& d, int64_t num_tokens, int64_t max_context, const internal::IndexerOptions& o) {
  IndexerLayout L;
  const int64_t T = std::max<int64_t>(0, num_tokens);
  L.max_pools = d.kpool > 0 ? std::max<int64_t>(0, max_context) / d.kpool : 0;
  L.bytes = L.keys + Align256(sizeof(uint32_t) * T * L.max_pools);
  // kAuto may take either path: its workspace covers the sliced one.
  if (o.kernels == internal::IndexerKernels::kLegacy || L.max_pools == 0) return L;
  const int64_t budget = d.topk / d.kpool;
  L.slice = std::max<int64_t>(1, SlicePools(d, o));
  L.cand_per_slice = std::min(budget, L.slice);
  L.num_slices = (L.max_pools + L.slice - 1) / L.slice;
  L.cand_stride = L.num_slices * L.cand_per_slice;
  L.cand_key = L.bytes;
  L.cand_idx = L.cand_key + Align256(sizeof(uint32_t) * T * L.cand_stride);
  L.counter = L.cand_idx + Align256(sizeof(int32_t) * T * L.cand_stride);
  L.bytes = L.counter + Align256(sizeof(uint32_t) * T);
  return L;
}

}  // namespace

size_t IndexerWorkspaceBytes(const IndexerDims& d, int64_t num_tokens, int64_t max_context) {
  return internal::IndexerWorkspaceBytesWith(d, num_tokens, max_context, internal::IndexerOptions{});
}

namespace internal {

size_t IndexerWorkspaceBytesWith(const IndexerDims& d, int64_t num_tokens, int64_t max_context, const IndexerOptions& o) {
  return PlanIndexer(d, num_tokens, max_context, o).bytes;
}

Status IndexerSelectWith(const float* q_idx, const float* w, const float* pool_keys, const IndexerDims& d,
                         const PagedBatch& b, int32_t* sel, int32_t* sel_count, void* workspace,
                         size_t workspace_bytes, const IndexerOptions& o, cudaStream_t stream) {
  GYRE_RETURN_IF_ERROR(CheckIndexerDims(d));
  GYRE_RETURN_IF_ERROR(CheckBatch(b, "dsa.select"));
  if (b.num_tokens == 0) return Status::Ok();
  if (!q_idx || !w || !pool_keys || !sel || !sel_count) return Status::InvalidArgument("dsa.select: null pointer");
  if (!Aligned16(q_idx) || !Aligned16(pool_keys) || !Aligned16(workspace))
    return Status::InvalidArgument("dsa.select: q_idx, pool_keys and workspace must be 16-byte aligned");
  if (o.smem_keys < 0 || o.slice_pools < 0) return Status::InvalidArgument("dsa.select: negative option");
  const IndexerLayout L = PlanIndexer(d, b.num_tokens, b.max_context, o);
  if (workspace_bytes < L.bytes || (L.bytes > 0 && !workspace))
    return Status::InvalidArgument("dsa.select: workspace " + std::to_string(workspace_bytes) + " < " +
                                   std::to_string(L.bytes) + " bytes");
  char* const ws = static_cast<char*>(workspace);
  auto* keys = reinterpret_cast<uint32_t*>(ws + L.keys);
  const int64_t max_pools = L.max_pools;
  const bool legacy = o.kernels == IndexerKernels::kLegacy ||
                      (o.kernels == IndexerKernels::kAuto && b.num_tokens > kIdxSlicedMaxTokens);
  uint32_t* counter = legacy || max_pools == 0 ? nullptr : reinterpret_cast<uint32_t*>(ws + L.counter);
  if (max_pools > 0) {
    IndexerScoreArgs sa{q_idx,
                        w,
                        pool_keys,
                        static_cast<int>(d.num_heads),
                        static_cast<int>(d.head_dim),
                        static_cast<int>(d.kpool),
                        static_cast<int>(PoolKeyDiv(b.page_tokens, d.kpool)),
                        1.0f / std::sqrt(static_cast<float>(d.head_dim)),
                        b.num_tokens,
                        Rows(b),
                        keys,
                        max_pools,
                        1,
                        counter};
    // Second score kernel: enough blocks to fill the GPU ~8 times, each looping over `passes` pool tiles.
    const int64_t tiles = (max_pools + kIdxScorePools - 1) / kIdxScorePools;
    while (sa.passes < 8 && (tiles / (2 * sa.passes)) * b.num_tokens >= 8 * NumSms()) sa.passes *= 2;
    GYRE_CUDA_RETURN_IF_ERROR(LaunchIndexerScores(sa, max_pools, legacy, stream));
  }
  if (legacy) {
    const int64_t staged = std::min(max_pools, o.smem_keys);
    if (static_cast<int64_t>(sizeof(uint32_t)) * staged + 4096 > SmemOptin())
      return Status::InvalidArgument("dsa.select: staging " + std::to_string(staged) + " keys exceeds shared memory");
    const IndexerSelectArgs la{keys,
                               max_pools,
                               static_cast<int>(d.kpool),
                               static_cast<int>(d.topk / d.kpool),
                               d.tail,
                               b.num_tokens,
                               Rows(b),
                               sel,
                               sel_count,
                               IndexerSelCap(d),
                               staged};
    GYRE_CUDA_RETURN_IF_ERROR(LaunchIndexerSelect(la, max_pools, stream));
    return Status::Ok();
  }
  IndexerSliceArgs la{};
  la.keys = keys;
  la.key_stride = max_pools;
  la.m = static_cast<int>(d.kpool);
  la.budget = static_cast<int>(d.topk / d.kpool);
  la.tail = d.tail;
  la.num_tokens = b.num_tokens;
  la.rows = Rows(b);
  la.sel = sel;
  la.sel_count = sel_count;
  la.sel_cap = IndexerSelCap(d);
  la.slice = L.slice;
  la.cand_per_slice = L.cand_per_slice;
  la.cand_key = reinterpret_cast<uint32_t*>(ws + L.cand_key);
  la.cand_idx = reinterpret_cast<int32_t*>(ws + L.cand_idx);
  la.cand_stride = L.cand_stride;
  la.counter = counter;
  // Staging: a slice's keys (4 B each) or the final candidates (8 B each) when they fit in
  // smem_keys · 4 bytes; the dynamic shared memory is the larger of the two actual needs.
  la.smem_keys = o.smem_keys;
  const int64_t slice_staged = std::min(L.slice, o.smem_keys);
  const int64_t cand_staged = std::min(L.cand_stride, o.smem_keys / 2);
  const size_t smem = sizeof(uint32_t) * static_cast<size_t>(std::max(slice_staged, 2 * cand_staged));
  if (static_cast<int64_t>(smem) + 4096 > SmemOptin())
    return Status::InvalidArgument("dsa.select: staging " + std::to_string(smem) + " bytes exceeds shared memory");
  GYRE_CUDA_RETURN_IF_ERROR(LaunchIndexerSlice(la, std::max<int64_t>(1, L.num_slices), smem, stream));
  return Status::Ok();
}

}  // namespace internal

Status IndexerSelect(const float* q_idx, const float* w, const float* pool_keys, const IndexerDims& d,
                     const PagedBatch& b, int32_t* sel, int32_t* sel_count, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream) {
  return internal::IndexerSelectWith(q_idx, w, pool_keys, d, b, sel, sel_count, workspace, workspace_bytes,
                                     internal::IndexerOptions{}, stream);
}

// ---- MLA attention -------------------------------------------------------------------------------

size_t MlaWorkspaceBytes(const MlaDims& d, int64_t num_tokens, int64_t max_context) {
  if (num_tokens <= 0 || d.num_heads <= 0 || d.kv_lora <= 0) return 0;
  const int64_t keys = std::max<int64_t>(1, max_context);
  // Either kernel may run (it depends on kv_b's type): the larger of the two layouts. A batch of
  // fewer tokens splits its keys more (the cap grows as the blocks per split shrink), and its
  // partial buffers can outgrow the largest batch's (found by the W8A8 GPU check: 528,384 bytes
  // needed, 524,288 sized): the maximum over every batch size up to num_tokens.
  size_t bytes = 0;
  for (int64_t n = 1; n <= num_tokens; ++n)
    bytes = std::max({bytes, PlanMla(d, n, keys, kMlaHeads).bytes, PlanMla(d, n, keys, internal::kTcHeads).bytes});
  return bytes;
}

Status MlaAttention(const float* q, const float* latent, const float* krot, const DMat& kv_b, const MlaDims& d,
                    const PagedBatch& b, const int32_t* sel, const int32_t* sel_count, int64_t sel_cap, float* out,
                    void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  return internal::MlaAttentionWith(q, latent, krot, kv_b, d, b, sel, sel_count, sel_cap, out, workspace,
                                    workspace_bytes, internal::MlaOptions{}, stream);
}

Status MlaAttentionKv(const float* q, const void* latent, const void* krot, KvDtype kv, const DMat& kv_b,
                      const MlaDims& d, const PagedBatch& b, const int32_t* sel, const int32_t* sel_count,
                      int64_t sel_cap, float* out, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  return internal::MlaAttentionKvWith(q, latent, krot, kv, kv_b, d, b, sel, sel_count, sel_cap, out, workspace,
                                      workspace_bytes, internal::MlaOptions{}, stream);
}

namespace internal {

bool MlaUsesTensorCores(const MlaDims& d, bool kv_b_bf16, const MlaOptions& o) {
  return kv_b_bf16 && o.kernels == MlaKernels::kAuto &&
         static_cast<int64_t>(TcAttnSmemBytes(TcQkPad(static_cast<int>(d.kv_lora + d.rope)))) <= SmemOptin();
}

Status MlaAttentionWith(const float* q, const float* latent, const float* krot, const DMat& kv_b, const MlaDims& d,
                        const PagedBatch& b, const int32_t* sel, const int32_t* sel_count, int64_t sel_cap,
                        float* out, void* workspace, size_t workspace_bytes, const MlaOptions& o,
                        cudaStream_t stream) {
  return MlaAttentionKvWith(q, latent, krot, KvDtype::kF32, kv_b, d, b, sel, sel_count, sel_cap, out, workspace,
                            workspace_bytes, o, stream);
}

Status MlaAttentionKvWith(const float* q, const void* latent, const void* krot, KvDtype kv, const DMat& kv_b,
                          const MlaDims& d, const PagedBatch& b, const int32_t* sel, const int32_t* sel_count,
                          int64_t sel_cap, float* out, void* workspace, size_t workspace_bytes, const MlaOptions& o,
                          cudaStream_t stream) {
  GYRE_RETURN_IF_ERROR(CheckMlaDims(d));
  if (static_cast<int>(kv) < 0 || static_cast<int>(kv) > static_cast<int>(KvDtype::kInt8))
    return Status::InvalidArgument("mla.attention: unknown kv cache dtype");
  GYRE_RETURN_IF_ERROR(CheckBatch(b, "mla.attention"));
  const int64_t H = d.num_heads, R = d.kv_lora, blk = d.nope + d.v, qd = d.nope + d.rope;
  if (kv_b.rows != H * blk || kv_b.cols != R)
    return Status::InvalidArgument("mla.attention: kv_b is [" + std::to_string(kv_b.rows) + ", " +
                                   std::to_string(kv_b.cols) + "], want [" + std::to_string(H * blk) + ", " +
                                   std::to_string(R) + "]");
  if (b.num_tokens == 0) return Status::Ok();
  if (!q || !latent || !kv_b.data || !out || (d.rope > 0 && !krot))
    return Status::InvalidArgument("mla.attention: null pointer");
  if (sel && (!sel_count || sel_cap < 1)) return Status::InvalidArgument("mla.attention: sel needs sel_count and sel_cap >= 1");
  if (!Aligned16(q) || !Aligned16(latent) || (krot && !Aligned16(krot)) || !Aligned16(kv_b.data) || !Aligned16(out) ||
      !Aligned16(workspace))
    return Status::InvalidArgument("mla.attention: q, latent, krot, kv_b, out and workspace must be 16-byte aligned");
  const bool tc = MlaUsesTensorCores(d, kv_b.bf16, o);
  const int64_t max_keys = sel ? std::min(sel_cap, b.max_context) : b.max_context;
  const MlaPlan plan = PlanMla(d, b.num_tokens, max_keys, tc ? kTcHeads : kMlaHeads);
  if (!workspace || workspace_bytes < plan.bytes)
    return Status::InvalidArgument("mla.attention: workspace " + std::to_string(workspace_bytes) + " < " +
                                   std::to_string(plan.bytes) + " bytes");
  const size_t smem = tc ? TcAttnSmemBytes(TcQkPad(static_cast<int>(R + d.rope)))
                         : MlaAttnSmemBytes(static_cast<int>(R + d.rope));
  if (static_cast<int64_t>(smem) > SmemOptin())
    return Status::InvalidArgument("mla.attention: needs " + std::to_string(smem) + " B of shared memory per block");
  char* ws = static_cast<char*>(workspace);
  auto* q_lat = reinterpret_cast<float*>(ws + plan.q_lat);
  auto* o_lat = reinterpret_cast<float*>(ws + plan.o_lat);
  const int T = static_cast<int>(b.num_tokens);
  const bool skinny = o.kernels != MlaKernels::kLegacy && T <= o.skinny_max_tokens;
  auto head_gemm = [&](HeadGemmArgs g) -> cudaError_t {
    g.round_a = tc;
    if (skinny) return LaunchHeadGemmSkinny(g, stream);
    if (tc) return LaunchHeadGemmTc(g, stream);
    return LaunchHeadGemm(g, stream);
  };

  // q_lat[i, h, :] = W_UK[h]ᵀ q_nope[i, h]   (W_UK[h] = kv_b rows h·blk .. +nope, [nope, R])
  const HeadGemmArgs g1{q,      kv_b.data, q_lat,         qd,  H * qd, blk * R, R, R, H * R, T,
                        static_cast<int>(R), static_cast<int>(d.nope), static_cast<int>(H), kv_b.bf16, false};
  GYRE_CUDA_RETURN_IF_ERROR(head_gemm(g1));

  MlaAttnArgs at{};
  at.q_lat = q_lat;
  at.q = q;
  at.latent = static_cast<const char*>(latent);
  at.krot = static_cast<const char*>(krot);
  at.kv_dtype = static_cast<int>(kv);
  at.lat_row_bytes = KvRowBytes(kv, R);
  at.rot_row_bytes = KvRowBytes(kv, d.rope);
  at.sel = sel;
  at.sel_count = sel_count;
  at.sel_cap = sel_cap;
  at.rows = Rows(b);
  at.o_lat = o_lat;
  at.o_part = reinterpret_cast<float*>(ws + plan.part);
  at.ml_part = reinterpret_cast<float*>(ws + plan.ml);
  at.num_tokens = T;
  at.heads = static_cast<int>(H);
  at.latent_dim = static_cast<int>(R);
  at.rope = static_cast<int>(d.rope);
  at.nope = static_cast<int>(d.nope);
  at.qd = static_cast<int>(qd);
  at.tile_stride = MlaTileStride(static_cast<int>(R + d.rope));
  at.qk_pad = TcQkPad(static_cast<int>(R + d.rope));
  at.keys_per_split = plan.keys_per_split;
  at.num_splits = plan.num_splits;
  at.scale = d.scale;
  if (tc) GYRE_CUDA_RETURN_IF_ERROR(LaunchMlaAttentionTc(at, plan.head_groups, stream));
  else GYRE_CUDA_RETURN_IF_ERROR(LaunchMlaAttention(at, plan.head_groups, stream));
  if (plan.num_splits > 1) {
    const MlaCombineArgs cb{at.o_part, at.ml_part, o_lat, T, at.heads, at.latent_dim, plan.num_splits};
    GYRE_CUDA_RETURN_IF_ERROR(LaunchMlaCombine(cb, stream));
  }

  // out[i, h, :] = W_UV[h] o_lat[i, h]   (W_UV[h] = kv_b rows h·blk + nope .. +v, [v, R])
  const HeadGemmArgs g2{o_lat,   kv_b.row(d.nope), out,   R, H * R, blk * R, R, d.v, H * d.v, T,
                        static_cast<int>(d.v), static_cast<int>(R), static_cast<int>(H), kv_b.bf16, true};
  GYRE_CUDA_RETURN_IF_ERROR(head_gemm(g2));
  return Status::Ok();
}

}  // namespace internal
}  // namespace gyre::cuda
