// SequenceState: everything one sequence carries between forward steps, held in the engine's two
// pools (runtime/memory_pools.h): a page table into the KvPagePool for the DSA/MLA per-token rows
// (latent c, k_rot, indexer k_I and γ) and one KdaSlotPool slot for the KDA conv tails and fp32
// recurrent states. The pooled indexer keys of completed pools (one row per m tokens) are kept
// per sequence.
//
// A standalone sequence (Model::NewSequence) owns small growable pools; an engine sequence
// borrows the engine's pools. The destructor returns pages and the slot to their pools.
// Thread safety: owned by one sequence; a forward step mutates it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/config.h"
#include "ops/attention.h"
#include "runtime/memory_pools.h"

namespace gyre {

class SequenceState {
 public:
  // Standalone: private growable pools.
  explicit SequenceState(const ModelConfig& c);
  // Borrows `kv` and `kda`; takes one KDA slot (ResourceExhausted when none is free).
  static Result<std::unique_ptr<SequenceState>> Create(const ModelConfig& c, KvPagePool* kv, KdaSlotPool* kda);
  ~SequenceState();
  SequenceState(SequenceState&&) noexcept;
  SequenceState& operator=(SequenceState&&) = delete;
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;

  int64_t num_tokens = 0;  // tokens already processed

  // Pages needed to hold `total_tokens` tokens, and how many more than held now.
  int64_t PagesFor(int64_t total_tokens) const;
  int64_t ExtraPagesFor(int64_t total_tokens) const;
  // Ensures pages for `total_tokens` tokens. ResourceExhausted (nothing allocated) if the pool
  // cannot supply them.
  Status Reserve(int64_t total_tokens);
  int64_t num_pages() const { return static_cast<int64_t>(pages_.size()); }

  // Row of token `j` (writable) and read views for layer parts.
  float* AttnRow(int64_t j) { return kv_->Row(pages_[j / kv_->page_tokens()], j % kv_->page_tokens()); }
  ops::RowView View(int64_t part_offset) const {
    return {kv_->data(), pages_.data(), kv_->page_tokens(), kv_->layout().row_floats, part_offset};
  }
  const AttnRowLayout& layout() const { return kv_->layout(); }
  float* KdaConv(int64_t layer) { return kda_->Conv(slot_, layer); }
  float* KdaRecurrent(int64_t layer) { return kda_->Recurrent(slot_, layer); }

  // Pooled indexer keys per layer: [num_pools, d].
  std::vector<std::vector<float>> pool_keys;
  std::vector<int64_t> num_pools;

 private:
  SequenceState(const ModelConfig& c, KvPagePool* kv, KdaSlotPool* kda, SlotId slot);
  void ReleaseAll();

  std::unique_ptr<KvPagePool> own_kv_;
  std::unique_ptr<KdaSlotPool> own_kda_;
  KvPagePool* kv_ = nullptr;
  KdaSlotPool* kda_ = nullptr;
  SlotId slot_ = -1;
  std::vector<PageId> pages_;
};

}  // namespace gyre
