// Memory for the two caches of a hybrid model (docs/architecture.md "Memory: two pools"), split as
// the model-runner seam splits it: *bookkeeping* (which ids are free, who holds which) is IdPool,
// used by the engine and by RunnerSession; *storage* (the bytes behind the ids) is KvPageStore and
// KdaSlotStore, owned by a model runner (the CPU runner here; the CUDA model keeps its own device
// storage with the same id spaces). A runner never keeps a free list.
//
// KvPageStore: paged storage for the per-token rows of every DSA/MLA layer — the latent c
// (kv_lora), the shared k_rot (rope, kimi_linear), and for full-indexer DSA layers the indexer key
// k_I and pool gate logits γ. A page holds `page_tokens` consecutive tokens of one sequence for all
// attention layers at once, so one page table per sequence serves every layer.
//
// KdaSlotStore: constant-size per-sequence state of every KDA layer (conv tail + fp32 recurrent
// state), one slot per running sequence, sized by the target concurrency — never by attention
// pages.
//
// Storage is fp32 on the CPU backend (the bytes reported are the bytes held).
// Thread safety: none of these is thread-safe; each is owned by one thread (the engine thread, or
// the caller of one Generate / RunnerSession).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace gyre {

using PageId = int32_t;
using SlotId = int32_t;

// Free-list bookkeeping of the ids 0..size-1 (pages or slots). LIFO: the most recently released id
// is handed out first.
class IdPool {
 public:
  // `what` names the resource in errors ("KV pages", "KDA state slots").
  IdPool(int64_t size, std::string what);

  // `n` ids, or ResourceExhausted (nothing taken) when fewer than `n` are free.
  Result<std::vector<int32_t>> Allocate(int64_t n);
  Result<int32_t> AllocateOne();
  // REQUIRES: every id was allocated and is not released twice. Never fails.
  void Release(std::span<const int32_t> ids);
  void Release(int32_t id) { Release(std::span<const int32_t>(&id, 1)); }

  int64_t size() const { return size_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return size_ - num_free(); }

 private:
  int64_t size_;
  std::string what_;
  std::vector<int32_t> free_;
};

// Offsets (in floats) of each attention layer's parts inside one token row; -1 when absent.
struct AttnRowLayout {
  std::vector<int64_t> latent, krot, idx_k, idx_gamma;
  int64_t row_floats = 0;
  explicit AttnRowLayout(const ModelConfig& c);
};

class KvPageStore {
 public:
  KvPageStore(const ModelConfig& c, int64_t page_tokens, int64_t num_pages);
  KvPageStore(const KvPageStore&) = delete;
  KvPageStore& operator=(const KvPageStore&) = delete;

  // Grows to `num_pages` pages (standalone sequences); never shrinks. Existing rows are kept.
  void Grow(int64_t num_pages);

  float* Row(PageId page, int64_t slot) { return &data_[(page * page_tokens_ + slot) * layout_.row_floats]; }
  const float* Row(PageId page, int64_t slot) const {
    return &data_[(page * page_tokens_ + slot) * layout_.row_floats];
  }
  const float* data() const { return data_.data(); }
  // The whole page (page_tokens rows of every attention layer): bytes_per_page bytes.
  std::span<float> Page(PageId page) {
    return std::span<float>(data_).subspan(page * page_tokens_ * layout_.row_floats, page_tokens_ * layout_.row_floats);
  }
  const AttnRowLayout& layout() const { return layout_; }
  int64_t page_tokens() const { return page_tokens_; }
  int64_t num_pages() const { return num_pages_; }
  int64_t bytes_per_page() const { return page_tokens_ * layout_.row_floats * static_cast<int64_t>(sizeof(float)); }

 private:
  AttnRowLayout layout_;
  int64_t page_tokens_;
  int64_t num_pages_;
  std::vector<float> data_;
};

class KdaSlotStore {
 public:
  KdaSlotStore(const ModelConfig& c, int64_t num_slots);
  KdaSlotStore(const KdaSlotStore&) = delete;
  KdaSlotStore& operator=(const KdaSlotStore&) = delete;

  void Grow(int64_t num_slots);  // never shrinks
  void Zero(SlotId s);           // the state of a new sequence

  float* Conv(SlotId s, int64_t layer) { return &data_[s * slot_floats_ + conv_off_[layer]]; }
  float* Recurrent(SlotId s, int64_t layer) { return &data_[s * slot_floats_ + rec_off_[layer]]; }
  // The whole slot (every KDA layer's conv tail and recurrent state): bytes_per_slot bytes.
  std::span<float> Slot(SlotId s) { return std::span<float>(data_).subspan(s * slot_floats_, slot_floats_); }
  // Slot `dst` ← slot `src` of `from` (a store of the same model; KDA checkpoints are a
  // KdaSlotStore too). REQUIRES: ids in range.
  void CopySlot(const KdaSlotStore& from, SlotId src, SlotId dst);
  int64_t num_slots() const { return num_slots_; }
  int64_t bytes_per_slot() const { return slot_floats_ * static_cast<int64_t>(sizeof(float)); }

 private:
  std::vector<int64_t> conv_off_, rec_off_;
  int64_t slot_floats_ = 0;
  int64_t num_slots_;
  std::vector<float> data_;
};

}  // namespace gyre
