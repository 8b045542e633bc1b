#include "runtime/sequence_state.h"

#include <algorithm>

#include "ops/kda.h"

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

void SequenceState::CommitReplay(const ModelConfig& c, int64_t n) {
  const int64_t H = c.linear_num_heads, K = c.linear_head_dim, P = H * K;
  for (size_t l = 0; l < replay.u.size(); ++l) {
    if (replay.u[l].empty()) continue;
    const int64_t layer = static_cast<int64_t>(l);
    ops::CausalConvShift(replay.u[l].data(), n, 3 * P, c.linear_conv_kernel_dim, KdaConv(layer));
    ops::KdaFold(replay.k[l].data(), replay.v[l].data(), replay.g[l].data(), replay.beta[l].data(), n, {H, K},
                 KdaRecurrent(layer));
  }
  num_tokens = replay.start + n;
  for (size_t l = 0; l < num_pools.size(); ++l) {
    if (num_pools[l] == 0) continue;
    const int64_t d = static_cast<int64_t>(pool_keys[l].size()) / num_pools[l];
    const int64_t keep = std::min(num_pools[l], c.index_kpool > 0 ? num_tokens / c.index_kpool : 0);
    num_pools[l] = keep;
    pool_keys[l].resize(keep * d);
  }
  replay.start = -1;
  replay.num = 0;
}

void SequenceState::Reset() {
  replay.start = -1;
  replay.num = 0;
  num_tokens = 0;
  kda_->Zero(slot_);
  for (auto& k : pool_keys) k.clear();
  std::fill(num_pools.begin(), num_pools.end(), 0);
  pages_.clear();
}

void SequenceState::Restore(int64_t num_tokens_in) {
  replay.start = -1;
  replay.num = 0;
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
