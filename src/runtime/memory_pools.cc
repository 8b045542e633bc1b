#include "runtime/memory_pools.h"

#include <algorithm>

namespace gyre {

AttnRowLayout::AttnRowLayout(const ModelConfig& c) {
  const int64_t L = c.num_hidden_layers;
  latent.assign(L, -1);
  krot.assign(L, -1);
  idx_k.assign(L, -1);
  idx_gamma.assign(L, -1);
  for (int64_t l = 0; l < L; ++l) {
    if (c.layer_types[l] == AttnKind::kKda) continue;
    latent[l] = row_floats;
    row_floats += c.kv_lora_rank;
    if (c.qk_rope_head_dim > 0) {
      krot[l] = row_floats;
      row_floats += c.qk_rope_head_dim;
    }
    if (c.layer_types[l] == AttnKind::kDsa && c.indexer_types[l] == IndexerKind::kFull) {
      idx_k[l] = row_floats;
      row_floats += c.index_head_dim;
      idx_gamma[l] = row_floats;
      row_floats += c.index_head_dim;
    }
  }
}

KvPagePool::KvPagePool(const ModelConfig& c, int64_t page_tokens, int64_t num_pages, bool growable)
    : layout_(c), page_tokens_(page_tokens), num_pages_(num_pages), growable_(growable) {
  data_.assign(num_pages_ * page_tokens_ * layout_.row_floats, 0.0f);
  for (int64_t p = num_pages_ - 1; p >= 0; --p) free_.push_back(static_cast<PageId>(p));
}

Result<std::vector<PageId>> KvPagePool::Allocate(int64_t n) {
  if (n > num_free()) {
    if (!growable_) {
      return Status::ResourceExhausted("KV page pool: " + std::to_string(n) + " pages requested, " +
                                       std::to_string(num_free()) + " free");
    }
    const int64_t add = std::max(n - num_free(), num_pages_);  // grow geometrically
    data_.resize((num_pages_ + add) * page_tokens_ * layout_.row_floats, 0.0f);
    for (int64_t p = num_pages_ + add - 1; p >= num_pages_; --p) free_.insert(free_.begin(), static_cast<PageId>(p));
    num_pages_ += add;
  }
  std::vector<PageId> out(free_.end() - n, free_.end());
  free_.resize(free_.size() - n);
  return out;
}

void KvPagePool::Release(std::span<const PageId> ids) { free_.insert(free_.end(), ids.begin(), ids.end()); }

KdaSlotPool::KdaSlotPool(const ModelConfig& c, int64_t num_slots, bool growable)
    : num_slots_(num_slots), growable_(growable) {
  const int64_t L = c.num_hidden_layers, P = c.linear_num_heads * c.linear_head_dim;
  conv_off_.assign(L, -1);
  rec_off_.assign(L, -1);
  for (int64_t l = 0; l < L; ++l) {
    if (c.layer_types[l] != AttnKind::kKda) continue;
    conv_off_[l] = slot_floats_;
    slot_floats_ += (c.linear_conv_kernel_dim - 1) * 3 * P;
    rec_off_[l] = slot_floats_;
    slot_floats_ += c.linear_num_heads * c.linear_head_dim * c.linear_head_dim;
  }
  data_.assign(num_slots_ * slot_floats_, 0.0f);
  for (int64_t s = num_slots_ - 1; s >= 0; --s) free_.push_back(static_cast<SlotId>(s));
}

Result<SlotId> KdaSlotPool::Allocate() {
  if (free_.empty()) {
    if (!growable_) return Status::ResourceExhausted("KDA state slots: all " + std::to_string(num_slots_) + " in use");
    data_.resize((num_slots_ + 1) * slot_floats_, 0.0f);
    free_.push_back(static_cast<SlotId>(num_slots_++));
  }
  const SlotId s = free_.back();
  free_.pop_back();
  std::fill(data_.begin() + s * slot_floats_, data_.begin() + (s + 1) * slot_floats_, 0.0f);
  return s;
}

void KdaSlotPool::Release(SlotId id) { free_.push_back(id); }

}  // namespace gyre
