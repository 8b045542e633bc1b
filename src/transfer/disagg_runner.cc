#include "transfer/disagg_runner.h"

#include "core/trace.h"

namespace gyre::transfer {

Result<std::unique_ptr<DisaggRunner>> DisaggRunner::Create(ModelRunner& prefill, ModelRunner& decode,
                                                           Connection& to_decode, Connection& from_prefill,
                                                           const DisaggRunnerOptions& opts) {
  const RunnerCapacity a = prefill.capacity(), b = decode.capacity();
  if (a.num_pages != b.num_pages || a.page_tokens != b.page_tokens || a.num_slots != b.num_slots ||
      a.bytes_per_page != b.bytes_per_page || a.bytes_per_slot != b.bytes_per_slot ||
      prefill.backend() != decode.backend())
    return Status::InvalidArgument("disaggregated runner: the prefill and decode runners differ in capacity or backend");
  if (!(FormatOf(prefill) == FormatOf(decode)))
    return Status::InvalidArgument("disaggregated runner: the prefill and decode runners hold different models");
  return std::unique_ptr<DisaggRunner>(new DisaggRunner(prefill, decode, to_decode, from_prefill, opts));
}

DisaggRunner::DisaggRunner(ModelRunner& prefill, ModelRunner& decode, Connection& to_decode, Connection& from_prefill,
                           const DisaggRunnerOptions& opts)
    : prefill_(prefill),
      decode_(decode),
      opts_(opts),
      sender_(to_decode, opts.sender),
      receiver_(std::make_unique<TransferReceiver>(from_prefill, opts.receiver)) {
  on_decode_.assign(prefill.capacity().num_slots, false);
  stay_.assign(prefill.capacity().num_slots, false);
  handoff_.assign(prefill.capacity().num_slots, -1);
}

Status DisaggRunner::ReserveCheckpoints(int64_t count) {
  if (count == 0) return Status::Ok();
  return Unsupported("KDA checkpoints (prefix caching)");
}

Status DisaggRunner::Transfer(SlotId slot, std::span<const PageId> pages, int64_t num_tokens, int32_t next) {
  GYRE_SPAN("disagg.transfer", "transfer");
  const uint64_t id = next_request_id_++;
  GYRE_ASSIGN_OR_RETURN(SequenceImage image, ExportSequence(prefill_, slot, pages, num_tokens, next));
  GYRE_RETURN_IF_ERROR(sender_.Send(id, image));
  GYRE_ASSIGN_OR_RETURN(SequenceImage got, receiver_->Take(id, opts_.take_timeout));
  return ImportSequence(decode_, got, slot, pages);
}

Status DisaggRunner::Launch(std::span<const StepPiece> pieces, bool want_logits) {
  if (want_logits) return Unsupported("logits for verification");
  if (pending_.size() >= 2) return Status::Internal("disaggregated runner: two steps are already outstanding");
  GYRE_RETURN_IF_ERROR(ValidateStep(pieces, capacity(), config().vocab_size));
  // Route: a piece continuing a sequence that lives on the decode runner goes there; any other
  // (a new sequence, or more of a prefill) runs on the prefill runner.
  std::vector<StepPiece> on_prefill, on_decode;
  std::vector<size_t> prefill_index, decode_index;
  std::vector<int32_t> resolved(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    StepPiece p = pieces[i];
    if (p.start > 0 && on_decode_[p.slot]) {
      if (p.ids.size() == 1 && p.ids[0] == kPrevToken && handoff_[p.slot] >= 0) {
        resolved[i] = handoff_[p.slot];  // sampled on the prefill runner, unknown to the decode runner
        p.ids = std::span<const int32_t>(&resolved[i], 1);
      }
      on_decode.push_back(p);
      decode_index.push_back(i);
    } else {
      on_prefill.push_back(p);
      prefill_index.push_back(i);
    }
  }
  Pending pend;
  pend.out.assign(pieces.size(), SampledToken{});
  if (!on_prefill.empty()) {
    // The prefill runner's step completes here, so its finished sequences can move at once.
    ++stats_.prefill_steps;
    GYRE_RETURN_IF_ERROR(prefill_.Launch(on_prefill));
    std::vector<SampledToken> out;
    Status s = prefill_.Collect(&out);
    for (size_t k = 0; k < on_prefill.size(); ++k) {
      const StepPiece& p = on_prefill[k];
      on_decode_[p.slot] = false;
      handoff_[p.slot] = -1;
      if (p.start == 0) stay_[p.slot] = false;  // a new sequence in the slot
      if (!s.ok()) continue;
      pend.out[prefill_index[k]] = out[k];
      if (!p.sample.enabled || out[k].id < 0 || stay_[p.slot]) continue;
      // The prefill is done (the engine samples only after a sequence's last prompt chunk).
      const int64_t n = p.start + static_cast<int64_t>(p.ids.size());
      if (Status t = Transfer(p.slot, p.pages, n, out[k].id); !t.ok()) {
        ++stats_.transfer_failures;
        stay_[p.slot] = true;  // kDecodeOnPrefill: it stays where its cache is complete
        if (opts_.on_transfer_failure == DisaggRunnerOptions::OnTransferFailure::kFailStep && pend.status.ok())
          pend.status = t;
        continue;
      }
      ++stats_.transfers;
      on_decode_[p.slot] = true;
      handoff_[p.slot] = out[k].id;
    }
    if (!s.ok()) pend.status = s;
  }
  if (!on_decode.empty()) {
    ++stats_.decode_steps;
    if (Status s = decode_.Launch(on_decode); !s.ok()) {
      // Nothing was enqueued on the decode runner: the step fails at Collect (the prefill part ran).
      if (pend.status.ok()) pend.status = s;
    } else {
      pend.decode_index = decode_index;
      for (const StepPiece& p : on_decode) handoff_[p.slot] = -1;  // the decode runner samples from now on
    }
  }
  pending_.push_back(std::move(pend));
  return Status::Ok();
}

Status DisaggRunner::CommitSpeculative(SlotId slot, int64_t num_accepted) {
  if (slot < 0 || slot >= static_cast<SlotId>(on_decode_.size()))
    return Status::InvalidArgument("slot " + std::to_string(slot) + " is outside the runner");
  return (on_decode_[slot] ? decode_ : prefill_).CommitSpeculative(slot, num_accepted);
}

Status DisaggRunner::Collect(std::vector<SampledToken>* out, std::vector<float>* logits) {
  if (pending_.empty()) return Status::InvalidArgument("disaggregated runner: no step is outstanding");
  Pending p = std::move(pending_.front());
  pending_.erase(pending_.begin());
  if (!p.decode_index.empty()) {
    std::vector<SampledToken> d;
    Status s = decode_.Collect(&d);
    if (s.ok()) {
      for (size_t k = 0; k < p.decode_index.size(); ++k) p.out[p.decode_index[k]] = std::move(d[k]);
    } else if (p.status.ok()) {
      p.status = s;
    }
  }
  if (out) *out = std::move(p.out);
  if (logits) logits->clear();
  return p.status;
}

}  // namespace gyre::transfer
