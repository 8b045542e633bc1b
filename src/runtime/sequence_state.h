// SequenceState: everything one sequence carries between CPU forward steps: a page table into a
// KvPageStore for the DSA/MLA per-token rows (latent c, k_rot, indexer k_I and γ) and one
// KdaSlotStore slot for the KDA conv tails and fp32 recurrent states. The pooled indexer keys of
// completed pools (one row per m tokens) are kept per sequence.
//
// Two modes:
//  - standalone (Model::NewSequence): owns small stores that grow as tokens arrive; its pages are
//    0, 1, 2, … of its own store. For tests, parity checks and `gyre forward`.
//  - bound (CpuRunner): borrows the runner's stores at a slot the engine chose; the engine's block
//    table is set with SetPages before each step, and Reset starts a new sequence in the slot.
//    No ids are allocated here: bookkeeping is the engine's (runtime/model_runner.h).
// Thread safety: owned by one sequence; a forward step mutates it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/config.h"
#include "ops/attention.h"
#include "runtime/memory_pools.h"

namespace gyre {

class SequenceState {
 public:
  // Standalone: private growable stores.
  explicit SequenceState(const ModelConfig& c);
  // Bound to `slot` of `kda` and to pages of `kv` (both outlive this).
  SequenceState(const ModelConfig& c, KvPageStore* kv, KdaSlotStore* kda, SlotId slot);
  ~SequenceState() = default;
  SequenceState(SequenceState&&) noexcept = default;
  SequenceState& operator=(SequenceState&&) = delete;
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;

  int64_t num_tokens = 0;  // tokens already processed

  // Bound mode: a new sequence in this slot (zero state, no tokens, no pooled keys).
  void Reset();
  // Bound mode: the slot now holds a sequence of `num_tokens` tokens whose KDA state the caller
  // has put in the slot and whose rows are in the pages of the next SetPages (a prefix-cache hit).
  // Pooled indexer keys are recomputed from those pages as the next step needs them.
  void Restore(int64_t num_tokens);
  // Bound mode: the block table for the next step (page ids of the runner's store).
  void SetPages(std::span<const PageId> pages) { pages_.assign(pages.begin(), pages.end()); }

  // Pages needed to hold `total_tokens` tokens.
  int64_t PagesFor(int64_t total_tokens) const;
  // Ensures pages for `total_tokens` tokens: standalone grows its store; bound returns
  // InvalidArgument when the block table set by SetPages is too short (nothing changes).
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

  // ReplaySSM (speculative pieces, runtime/model_runner.h CommitSpeculative): the per-token KDA
  // inputs of the uncommitted speculative tokens, per layer (empty for non-KDA layers): pre-conv
  // inputs u [T, 3·H·K], post-conv keys k and values v [T, H·K], gates g [T, H·K], betas [T, H].
  // The slot's conv tails and recurrent states are those before these tokens.
  struct Replay {
    int64_t start = -1;  // position of the first speculative token; -1: nothing pending
    int64_t num = 0;     // speculative tokens
    std::vector<std::vector<float>> u, k, v, g, beta;
  };
  Replay replay;
  // Advances the KDA state by the first `n` (0..replay.num) speculative tokens (the fold), and
  // makes this a sequence of replay.start + n tokens: pooled indexer keys of pools that reach past
  // it are dropped (recomputed from the pages when the next step completes them again).
  // REQUIRES: a pending speculation (replay.start >= 0).
  void CommitReplay(const ModelConfig& c, int64_t n);

  // Pooled indexer keys per layer: [num_pools, d].
  std::vector<std::vector<float>> pool_keys;
  std::vector<int64_t> num_pools;

 private:
  std::unique_ptr<KvPageStore> own_kv_;
  std::unique_ptr<KdaSlotStore> own_kda_;
  KvPageStore* kv_ = nullptr;
  KdaSlotStore* kda_ = nullptr;
  SlotId slot_ = -1;
  std::vector<PageId> pages_;
};

}  // namespace gyre
