#include "runtime/memory_pools.h"

#include <algorithm>

namespace gyre {

IdPool::IdPool(int64_t size, std::string what) : size_(size), what_(std::move(what)) {
  free_.reserve(size);
  for (int64_t i = size - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

Result<std::vector<int32_t>> IdPool::Allocate(int64_t n) {
  if (n < 0 || n > num_free()) {
    return Status::ResourceExhausted(what_ + ": " + std::to_string(n) + " requested, " + std::to_string(num_free()) +
                                     " of " + std::to_string(size_) + " free");
  }
  std::vector<int32_t> out(free_.end() - n, free_.end());
  std::reverse(out.begin(), out.end());  // ascending ids for a fresh pool: page tables read in order
  free_.resize(free_.size() - n);
  return out;
}

Result<int32_t> IdPool::AllocateOne() {
  GYRE_ASSIGN_OR_RETURN(std::vector<int32_t> one, Allocate(1));
  return one[0];
}

void IdPool::Release(std::span<const int32_t> ids) { free_.insert(free_.end(), ids.rbegin(), ids.rend()); }

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

KvPageStore::KvPageStore(const ModelConfig& c, int64_t page_tokens, int64_t num_pages)
    : layout_(c), page_tokens_(page_tokens), num_pages_(num_pages) {
  data_.assign(num_pages_ * page_tokens_ * layout_.row_floats, 0.0f);
}

void KvPageStore::Grow(int64_t num_pages) {
  if (num_pages <= num_pages_) return;
  num_pages_ = num_pages;
  data_.resize(num_pages_ * page_tokens_ * layout_.row_floats, 0.0f);
}

KdaSlotStore::KdaSlotStore(const ModelConfig& c, int64_t num_slots) : num_slots_(num_slots) {
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
}

void KdaSlotStore::Grow(int64_t num_slots) {
  if (num_slots <= num_slots_) return;
  num_slots_ = num_slots;
  data_.resize(num_slots_ * slot_floats_, 0.0f);
}

void KdaSlotStore::CopySlot(const KdaSlotStore& from, SlotId src, SlotId dst) {
  std::copy(from.data_.begin() + src * slot_floats_, from.data_.begin() + (src + 1) * slot_floats_,
            data_.begin() + dst * slot_floats_);
}

void KdaSlotStore::Zero(SlotId s) {
  std::fill(data_.begin() + s * slot_floats_, data_.begin() + (s + 1) * slot_floats_, 0.0f);
}

}  // namespace gyre
