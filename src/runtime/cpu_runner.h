// CpuRunner: the CPU Model as a ModelRunner (runtime/model_runner.h). It owns the storage of both
// caches (a KvPageStore and a KdaSlotStore in host memory) and one bound SequenceState per slot;
// the ids are the engine's. Sampling and logprobs run on the host with the CPU definitions
// (SampleKeyed, LogProbs).
// MTP drafts (CpuRunnerOptions::mtp_drafts > 0, a model with an MTP layer; StepPiece::mtp): each
// page also holds one MTP attention key row per token position q >= 1 (MTP position q - 1: the
// token at q paired with the hidden state at q - 1), and each slot the hidden state of its last
// token; both travel with the page and slot images (ReadPages / ReadSlotState) and checkpoints. A
// draft chain runs on a gathered copy of the sequence's keys, never writing pages past the piece.
// Thread safety: one caller at a time.
#pragma once

#include <memory>
#include <vector>

#include "runtime/model.h"
#include "runtime/model_runner.h"

namespace gyre {

struct CpuRunnerOptions {
  int64_t page_tokens = 16;
  int64_t num_pages = 0;         // page pool size (ignored when the model has no attention layer)
  int64_t num_slots = 16;        // KDA state slots = concurrent sequences
  int64_t max_step_tokens = 1 << 20;
  int64_t mtp_drafts = 0;        // > 0: MTP drafts of up to this many tokens (the model needs an MTP layer)
};

class CpuRunner final : public ModelRunner {
 public:
  // The budget in bytes → pages at this model's page size (what `--kv-memory` means on the CPU).
  // With `mtp`, a page also holds the MTP layer's key rows.
  static int64_t PagesForBytes(const ModelConfig& c, int64_t page_tokens, int64_t bytes, bool mtp = false);

  // `model` must outlive the runner. InvalidArgument for non-positive sizes, or MTP drafts asked
  // of a model without an MTP layer.
  static Result<std::unique_ptr<CpuRunner>> Create(const Model& model, const CpuRunnerOptions& opts);

  const ModelConfig& config() const override { return model_.config(); }
  RunnerCapacity capacity() const override;
  std::string backend() const override { return "cpu"; }
  // The CPU computes in Launch; Collect hands back the results in launch order.
  Status Launch(std::span<const StepPiece> pieces, bool want_logits = false) override;
  Status Collect(std::vector<SampledToken>* out, std::vector<float>* logits = nullptr) override;
  // Checkpoints live in host memory (a KdaSlotStore of `count` slots); copies happen at once.
  Status ReserveCheckpoints(int64_t count) override;
  Status SaveState(SlotId slot, CheckpointId ckpt) override;
  Status RestoreState(CheckpointId ckpt, SlotId slot, int64_t num_tokens) override;
  // Sequence transfer: host memcpy of the page rows (the KvPageStore layout) and slot floats.
  Status ReadPages(std::span<const PageId> pages, std::span<std::byte> dst) override;
  Status WritePages(std::span<const PageId> pages, std::span<const std::byte> src) override;
  Status ReadSlotState(SlotId slot, std::span<std::byte> dst) override;
  Status WriteSlotState(SlotId slot, std::span<const std::byte> src, int64_t num_tokens) override;
  Status CommitSpeculative(SlotId slot, int64_t num_accepted) override;

  const Model& model() const { return model_; }

 private:
  CpuRunner(const Model& model, const CpuRunnerOptions& opts);
  // The MTP layer over piece `p`'s tokens (hidden: its main-model rows), then its draft chain.
  Status RunMtp(const StepPiece& p, const std::vector<float>& hidden, SampledToken* t);
  float* MtpKey(std::span<const PageId> pages, int64_t pos) {
    return &mtp_keys_[(pages[pos / opts_.page_tokens] * opts_.page_tokens + pos % opts_.page_tokens) * mtp_kf_];
  }
  const Model& model_;
  CpuRunnerOptions opts_;
  KvPageStore kv_;
  KdaSlotStore kda_;
  std::unique_ptr<KdaSlotStore> checkpoints_;
  std::vector<std::unique_ptr<SequenceState>> slots_;
  std::vector<int32_t> last_token_;  // per slot: the most recent sampled token (kPrevToken)
  // Per slot: its sequence's token counts (penalties; sized on first use, see model_runner.h).
  std::vector<ops::TokenCounts> counts_;
  struct Done {
    Status status;
    std::vector<SampledToken> out;
    std::vector<float> logits;
  };
  std::vector<Done> done_;  // launched, not collected (oldest first; at most 2)
  // MTP drafts: key rows [num_pages · page_tokens, mtp_kf_] (by token position, see above); per
  // slot the last token's hidden state [D] and a speculative piece's rows (settled at commit);
  // per checkpoint a hidden state.
  int64_t mtp_kf_ = 0;
  std::vector<float> mtp_keys_, mtp_hidden_, ckpt_hidden_;
  std::vector<std::vector<float>> spec_hidden_;
};

}  // namespace gyre
