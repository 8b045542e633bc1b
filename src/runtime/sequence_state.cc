#include "runtime/sequence_state.h"

#include <algorithm>

namespace gyre {

SequenceState::SequenceState(const ModelConfig& c)
    : own_kv_(std::make_unique<KvPageStore>(c, 64, 0)), own_kda_(std::make_unique<KdaSlotStore>(c, 1)) {
  kv_ = own_kv_.get();
  kda_ = own_kda_.get();
  slot_ = 0;
  pool_keys.resize(c.num_hidden_layers);
  num_pools.assign(c.num_hidden_layers, 0);
}

SequenceState::SequenceState(const ModelConfig& c, KvPageStore* kv, KdaSlotStore* kda, SlotId slot)
    : kv_(kv), kda_(kda), slot_(slot) {
  pool_keys.resize(c.num_hidden_layers);
  num_pools.assign(c.num_hidden_layers, 0);
}

void SequenceState::Reset() {
  num_tokens = 0;
  kda_->Zero(slot_);
  for (auto& k : pool_keys) k.clear();
  std::fill(num_pools.begin(), num_pools.end(), 0);
  pages_.clear();
}

void SequenceState::Restore(int64_t num_tokens_in) {
  num_tokens = num_tokens_in;
  for (auto& k : pool_keys) k.clear();
  std::fill(num_pools.begin(), num_pools.end(), 0);
  pages_.clear();
}

int64_t SequenceState::PagesFor(int64_t total_tokens) const {
  return (total_tokens + kv_->page_tokens() - 1) / kv_->page_tokens();
}

Status SequenceState::Reserve(int64_t total_tokens) {
  if (kv_->layout().row_floats == 0) return Status();
  const int64_t need = PagesFor(total_tokens);
  if (need <= num_pages()) return Status();
  if (!own_kv_) {
    return Status::InvalidArgument("the block table holds " + std::to_string(num_pages()) + " pages, " +
                                   std::to_string(need) + " are needed for " + std::to_string(total_tokens) +
                                   " tokens");
  }
  const int64_t have = kv_->num_pages();
  kv_->Grow(std::max(need, 2 * have));  // geometric: amortised growth of a standalone sequence
  for (int64_t p = num_pages(); p < need; ++p) pages_.push_back(static_cast<PageId>(p));
  return Status();
}

}  // namespace gyre
