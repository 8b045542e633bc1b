// The engine's two memory pools (docs/architecture.md "Memory: two pools").
//
// KvPagePool: paged storage for the per-token rows of every DSA/MLA layer — the latent c
// (kv_lora), the shared k_rot (rope, kimi_linear), and for full-indexer DSA layers the indexer key
// k_I and pool gate logits γ. A page holds `page_tokens` consecutive tokens of one sequence for all
// attention layers at once, so one page table per sequence serves every layer.
//
// KdaSlotPool: constant-size per-sequence state of every KDA layer (conv tail + fp32 recurrent
// state), one slot per running sequence, sized by the target concurrency — never by attention
// pages.
//
// Storage is fp32 on the CPU backend (the bytes reported are the bytes held).
// Thread safety: not thread-safe; owned and used by the engine thread (or one Generate call).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace gyre {

using PageId = int32_t;
using SlotId = int32_t;

// Offsets (in floats) of each attention layer's parts inside one token row; -1 when absent.
struct AttnRowLayout {
  std::vector<int64_t> latent, krot, idx_k, idx_gamma;
  int64_t row_floats = 0;
  explicit AttnRowLayout(const ModelConfig& c);
};

class KvPagePool {
 public:
  // `num_pages` pages; when `growable`, Allocate adds pages instead of failing (standalone use).
  KvPagePool(const ModelConfig& c, int64_t page_tokens, int64_t num_pages, bool growable);
  KvPagePool(const KvPagePool&) = delete;
  KvPagePool& operator=(const KvPagePool&) = delete;

  // Allocates `n` pages. If fewer than `n` are free (and the pool is not growable), returns
  // ResourceExhausted and allocates nothing.
  Result<std::vector<PageId>> Allocate(int64_t n);
  // REQUIRES: every id is allocated. Never fails.
  void Release(std::span<const PageId> ids);

  float* Row(PageId page, int64_t slot) { return &data_[(page * page_tokens_ + slot) * layout_.row_floats]; }
  const float* Row(PageId page, int64_t slot) const {
    return &data_[(page * page_tokens_ + slot) * layout_.row_floats];
  }
  const float* data() const { return data_.data(); }
  const AttnRowLayout& layout() const { return layout_; }
  int64_t page_tokens() const { return page_tokens_; }
  int64_t num_pages() const { return num_pages_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return num_pages_ - num_free(); }
  int64_t bytes_per_page() const { return page_tokens_ * layout_.row_floats * static_cast<int64_t>(sizeof(float)); }

 private:
  AttnRowLayout layout_;
  int64_t page_tokens_;
  int64_t num_pages_;
  bool growable_;
  std::vector<float> data_;
  std::vector<PageId> free_;  // LIFO
};

class KdaSlotPool {
 public:
  KdaSlotPool(const ModelConfig& c, int64_t num_slots, bool growable);
  KdaSlotPool(const KdaSlotPool&) = delete;
  KdaSlotPool& operator=(const KdaSlotPool&) = delete;

  // A zeroed slot, or ResourceExhausted when none is free (and not growable).
  Result<SlotId> Allocate();
  void Release(SlotId id);

  float* Conv(SlotId s, int64_t layer) { return &data_[s * slot_floats_ + conv_off_[layer]]; }
  float* Recurrent(SlotId s, int64_t layer) { return &data_[s * slot_floats_ + rec_off_[layer]]; }
  int64_t num_slots() const { return num_slots_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return num_slots_ - num_free(); }
  int64_t bytes_per_slot() const { return slot_floats_ * static_cast<int64_t>(sizeof(float)); }

 private:
  std::vector<int64_t> conv_off_, rec_off_;
  int64_t slot_floats_ = 0;
  int64_t num_slots_;
  bool growable_;
  std::vector<float> data_;
  std::vector<SlotId> free_;
};

}  // namespace gyre
