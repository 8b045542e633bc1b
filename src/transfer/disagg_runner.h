// DisaggRunner: two runners driven as one by an unchanged engine (runtime/model_runner.h: "a
// disaggregated model is a runner or a decorator of one, never a second engine"). Prefill pieces
// run on the prefill runner; when a sequence's prefill samples its first token, its cache (pages
// + KDA state) is exported there, sent through the transfer protocol over a Connection pair,
// verified by the receiver, and imported into the decode runner at the same page and slot ids;
// from then on the sequence's pieces run on the decode runner. The engine's id bookkeeping serves
// both runners (they have equal capacities), so this is disaggregation inside one process — the
// step toward separate prefill and decode instances (docs/disaggregation.md), with the same
// export, protocol and import on the path.
//
// Ordering: the prefill runner's step is collected inside Launch and the transfer completes there
// (on the engine thread: no overlap of transfer and compute yet); the decode runner's steps
// overlap as usual. When a transfer fails (after the protocol's retries), the sequence either
// stays on the prefill runner, which decodes it (kDecodeOnPrefill, the default: same tokens,
// colocated), or the step fails at Collect with the transfer's Status (kFailStep: the engine ends
// that step's sequences with the error). Nothing half-transferred is ever decoded.
// Not supported: logits for verification (want_logits), KDA checkpoints (prefix caching), the
// sequence-transfer ops on the decorator itself: Unimplemented. Speculative decoding (n-gram or
// MTP drafts) runs when both runners support it.
// Thread safety: as ModelRunner (one driving thread); the receiver runs its own thread.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "runtime/model_runner.h"
#include "transfer/transfer_engine.h"

namespace gyre::transfer {

struct DisaggRunnerOptions {
  enum class OnTransferFailure { kDecodeOnPrefill, kFailStep };
  OnTransferFailure on_transfer_failure = OnTransferFailure::kDecodeOnPrefill;
  SenderOptions sender;
  ReceiverOptions receiver;
  std::chrono::milliseconds take_timeout{10000};
};

struct DisaggRunnerStats {
  int64_t transfers = 0, transfer_failures = 0, prefill_steps = 0, decode_steps = 0;
};

class DisaggRunner final : public ModelRunner {
 public:
  // `prefill` and `decode` (same config and capacity: InvalidArgument otherwise), and the link's
  // ends `to_decode` (the prefill side sends on it) and `from_prefill` (the decode side receives
  // on it) are borrowed and outlive the runner.
  static Result<std::unique_ptr<DisaggRunner>> Create(ModelRunner& prefill, ModelRunner& decode,
                                                      Connection& to_decode, Connection& from_prefill,
                                                      const DisaggRunnerOptions& opts);

  const ModelConfig& config() const override { return prefill_.config(); }
  // Speculative pieces (verify steps come after the hand-off, so they run where the sequence
  // lives) and MTP drafts (the MTP keys and hidden state travel in the page and slot images) when
  // both runners take them.
  RunnerCapacity capacity() const override {
    RunnerCapacity c = prefill_.capacity();
    const RunnerCapacity d = decode_.capacity();
    c.speculative = c.speculative && d.speculative;
    c.mtp_drafts = std::min(c.mtp_drafts, d.mtp_drafts);
    c.prompt_embeds = c.prompt_embeds && d.prompt_embeds;  // (a preempted prompt is recomputed on decode)
    return c;
  }
  // On the runner that holds the slot's sequence.
  Status CommitSpeculative(SlotId slot, int64_t num_accepted) override;
  std::string backend() const override { return "disagg:" + prefill_.backend(); }
  Status Launch(std::span<const StepPiece> pieces, bool want_logits = false) override;
  Status Collect(std::vector<SampledToken>* out, std::vector<float>* logits = nullptr) override;
  Status ReserveCheckpoints(int64_t count) override;
  Status SaveState(SlotId, CheckpointId) override { return Unsupported("KDA checkpoints"); }
  Status RestoreState(CheckpointId, SlotId, int64_t) override { return Unsupported("KDA checkpoints"); }
  Status ReadPages(std::span<const PageId>, std::span<std::byte>) override { return Unsupported("page reads"); }
  Status WritePages(std::span<const PageId>, std::span<const std::byte>) override {
    return Unsupported("page writes");
  }
  Status ReadSlotState(SlotId, std::span<std::byte>) override { return Unsupported("state reads"); }
  Status WriteSlotState(SlotId, std::span<const std::byte>, int64_t) override { return Unsupported("state writes"); }

  DisaggRunnerStats stats() const { return stats_; }
  SenderStats sender_stats() const { return sender_.stats(); }
  ReceiverStats receiver_stats() const { return receiver_->stats(); }
  int64_t receiver_held_bytes() const { return receiver_->held_bytes(); }

 private:
  DisaggRunner(ModelRunner& prefill, ModelRunner& decode, Connection& to_decode, Connection& from_prefill,
               const DisaggRunnerOptions& opts);
  static Status Unsupported(const char* what) {
    return Status::Unimplemented(std::string("disaggregated runner: ") + what + " are not supported");
  }
  // Moves the sequence in `slot` (num_tokens tokens in `pages`, first sampled token `next`) from
  // the prefill runner to the decode runner.
  Status Transfer(SlotId slot, std::span<const PageId> pages, int64_t num_tokens, int32_t next);

  ModelRunner& prefill_;
  ModelRunner& decode_;
  const DisaggRunnerOptions opts_;
  TransferSender sender_;
  std::unique_ptr<TransferReceiver> receiver_;
  uint64_t next_request_id_ = 1;
  std::vector<bool> on_decode_;    // per slot: the sequence lives on the decode runner
  std::vector<bool> stay_;         // per slot: its transfer failed; it decodes on the prefill runner
  std::vector<int32_t> handoff_;   // per slot: the token sampled on the prefill runner, until the
                                   // decode runner samples (resolves kPrevToken there), else -1
  struct Pending {
    Status status;                      // a transfer failure: the step is lost
    std::vector<SampledToken> out;      // one per piece; prefill pieces filled at Launch
    std::vector<size_t> decode_index;   // piece index of each decode-runner piece, in order
  };
  std::vector<Pending> pending_;  // launched, not collected (oldest first; at most 2)
  DisaggRunnerStats stats_;
};

}  // namespace gyre::transfer
