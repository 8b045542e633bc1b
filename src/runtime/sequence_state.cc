#include "runtime/sequence_state.h"

namespace gyre {

SequenceState::SequenceState(const ModelConfig& c)
    : own_kv_(std::make_unique<KvPagePool>(c, 64, 0, /*growable=*/true)),
      own_kda_(std::make_unique<KdaSlotPool>(c, 0, /*growable=*/true)) {
  kv_ = own_kv_.get();
  kda_ = own_kda_.get();
  slot_ = *kda_->Allocate();  // growable: cannot fail
  pool_keys.resize(c.num_hidden_layers);
  num_pools.assign(c.num_hidden_layers, 0);
}

SequenceState::SequenceState(const ModelConfig& c, KvPagePool* kv, KdaSlotPool* kda, SlotId slot)
    : kv_(kv), kda_(kda), slot_(slot) {
  pool_keys.resize(c.num_hidden_layers);
  num_pools.assign(c.num_hidden_layers, 0);
}

Result<std::unique_ptr<SequenceState>> SequenceState::Create(const ModelConfig& c, KvPagePool* kv, KdaSlotPool* kda) {
  GYRE_ASSIGN_OR_RETURN(SlotId slot, kda->Allocate());
  return std::unique_ptr<SequenceState>(new SequenceState(c, kv, kda, slot));
}

SequenceState::SequenceState(SequenceState&& o) noexcept
    : num_tokens(o.num_tokens),
      pool_keys(std::move(o.pool_keys)),
      num_pools(std::move(o.num_pools)),
      own_kv_(std::move(o.own_kv_)),
      own_kda_(std::move(o.own_kda_)),
      kv_(o.kv_),
      kda_(o.kda_),
      slot_(o.slot_),
      pages_(std::move(o.pages_)) {
  o.kv_ = nullptr;
  o.kda_ = nullptr;
  o.slot_ = -1;
  o.pages_.clear();
}

SequenceState::~SequenceState() { ReleaseAll(); }

void SequenceState::ReleaseAll() {
  if (kv_ && !pages_.empty()) kv_->Release(pages_);
  pages_.clear();
  if (kda_ && slot_ >= 0) kda_->Release(slot_);
  slot_ = -1;
}

int64_t SequenceState::PagesFor(int64_t total_tokens) const {
  return (total_tokens + kv_->page_tokens() - 1) / kv_->page_tokens();
}

int64_t SequenceState::ExtraPagesFor(int64_t total_tokens) const {
  return std::max<int64_t>(0, PagesFor(total_tokens) - num_pages());
}

Status SequenceState::Reserve(int64_t total_tokens) {
  const int64_t extra = ExtraPagesFor(total_tokens);
  if (extra == 0 || kv_->layout().row_floats == 0) return Status();
  GYRE_ASSIGN_OR_RETURN(std::vector<PageId> got, kv_->Allocate(extra));
  pages_.insert(pages_.end(), got.begin(), got.end());
  return Status();
}

}  // namespace gyre
