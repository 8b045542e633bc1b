#include "runtime/cpu_runner.h"

#include <algorithm>
#include <cstring>

#include "core/trace.h"
#include "ops/basic.h"

namespace gyre {

int64_t CpuRunner::PagesForBytes(const ModelConfig& c, int64_t page_tokens, int64_t bytes, bool mtp) {
  const int64_t row = AttnRowLayout(c).row_floats, mtp_row = mtp && row > 0 ? c.kv_lora_rank + c.qk_rope_head_dim : 0;
  const int64_t page_bytes = page_tokens * (row + mtp_row) * static_cast<int64_t>(sizeof(float));
  return page_bytes > 0 ? bytes / page_bytes : 0;
}

Result<std::unique_ptr<CpuRunner>> CpuRunner::Create(const Model& model, const CpuRunnerOptions& o) {
  if (o.page_tokens < 1) return Status::InvalidArgument("page_tokens must be >= 1");
  if (o.num_slots < 1) return Status::InvalidArgument("num_slots must be >= 1");
  if (o.num_pages < 0) return Status::InvalidArgument("num_pages must be >= 0");
  if (o.max_step_tokens < 1) return Status::InvalidArgument("max_step_tokens must be >= 1");
  if (o.mtp_drafts < 0) return Status::InvalidArgument("mtp_drafts must be >= 0");
  if (o.mtp_drafts > 0 && !model.has_mtp())
    return Status::InvalidArgument("MTP drafts need a model with an MTP layer (this checkpoint has "
                                   "num_nextn_predict_layers = 0)");
  if (o.mtp_drafts > 0 && AttnRowLayout(model.config()).row_floats == 0)
    return Status::InvalidArgument("MTP drafts need a model with attention layers (their pages hold the MTP keys)");
  return std::unique_ptr<CpuRunner>(new CpuRunner(model, o));
}

CpuRunner::CpuRunner(const Model& model, const CpuRunnerOptions& o)
    : model_(model),
      opts_(o),
      kv_(model.config(), o.page_tokens, AttnRowLayout(model.config()).row_floats > 0 ? o.num_pages : 0),
      kda_(model.config(), o.num_slots) {
  for (int64_t s = 0; s < o.num_slots; ++s) {
    slots_.push_back(std::make_unique<SequenceState>(model.config(), &kv_, &kda_, static_cast<SlotId>(s)));
  }
  last_token_.assign(o.num_slots, kPrevToken);
  counts_.resize(o.num_slots);
  if (o.mtp_drafts > 0) {
    mtp_kf_ = model.mtp_key_floats();
    mtp_keys_.assign(static_cast<size_t>(kv_.num_pages() * o.page_tokens * mtp_kf_), 0.0f);
    mtp_hidden_.assign(static_cast<size_t>(o.num_slots * model.config().hidden_size), 0.0f);
    spec_hidden_.resize(o.num_slots);
  }
}

RunnerCapacity CpuRunner::capacity() const {
  RunnerCapacity c;
  c.num_pages = kv_.num_pages();
  c.page_tokens = opts_.page_tokens;
  c.num_slots = opts_.num_slots;
  c.max_step_tokens = opts_.max_step_tokens;
  c.max_step_pieces = opts_.num_slots;
  c.bytes_per_page = kv_.bytes_per_page() + opts_.page_tokens * mtp_kf_ * static_cast<int64_t>(sizeof(float));
  c.bytes_per_slot = kda_.bytes_per_slot() + (mtp_kf_ > 0 ? model_.config().hidden_size * 4 : 0);
  c.speculative = true;
  c.mtp_drafts = opts_.mtp_drafts;
  c.prompt_embeds = true;
  return c;
}

Status CpuRunner::ReserveCheckpoints(int64_t count) {
  if (count < 0) return Status::InvalidArgument("a negative number of checkpoints");
  if (!done_.empty()) return Status::InvalidArgument("cpu runner: checkpoints are reserved with no step outstanding");
  checkpoints_ = std::make_unique<KdaSlotStore>(model_.config(), count);
  if (mtp_kf_ > 0) ckpt_hidden_.assign(static_cast<size_t>(count * model_.config().hidden_size), 0.0f);
  return Status::Ok();
}

Status CpuRunner::SaveState(SlotId slot, CheckpointId ckpt) {
  const int64_t n = checkpoints_ ? checkpoints_->num_slots() : 0;
  GYRE_RETURN_IF_ERROR(ValidateCheckpointOp(capacity(), n, slot, ckpt, 1));
  if (ckpt >= 0) checkpoints_->CopySlot(kda_, slot, ckpt);
  if (ckpt >= 0 && mtp_kf_ > 0) {
    const int64_t D = model_.config().hidden_size;
    std::copy_n(&mtp_hidden_[slot * D], D, &ckpt_hidden_[ckpt * D]);
  }
  return Status::Ok();
}

Status CpuRunner::RestoreState(CheckpointId ckpt, SlotId slot, int64_t num_tokens) {
  const int64_t n = checkpoints_ ? checkpoints_->num_slots() : 0;
  GYRE_RETURN_IF_ERROR(ValidateCheckpointOp(capacity(), n, slot, ckpt, num_tokens));
  if (ckpt >= 0) {
    kda_.CopySlot(*checkpoints_, ckpt, slot);
  } else {
    kda_.Zero(slot);
  }
  if (mtp_kf_ > 0) {
    const int64_t D = model_.config().hidden_size;
    if (ckpt >= 0) {
      std::copy_n(&ckpt_hidden_[ckpt * D], D, &mtp_hidden_[slot * D]);
    } else {
      std::fill_n(&mtp_hidden_[slot * D], D, 0.0f);
    }
  }
  slots_[slot]->Restore(num_tokens);
  last_token_[slot] = kPrevToken;
  counts_[slot] = ops::TokenCounts{};  // unknown until a piece brings the history
  return Status::Ok();
}

Status CpuRunner::ReadPages(std::span<const PageId> pages, std::span<std::byte> dst) {
  GYRE_RETURN_IF_ERROR(ValidatePageCopy(capacity(), pages, dst.size()));
  const size_t kvb = kv_.bytes_per_page(), bpp = capacity().bytes_per_page, mb = bpp - kvb;
  for (size_t i = 0; i < pages.size(); ++i) {
    std::memcpy(dst.data() + i * bpp, kv_.Page(pages[i]).data(), kvb);
    if (mb > 0) std::memcpy(dst.data() + i * bpp + kvb, MtpKey(pages.subspan(i, 1), 0), mb);
  }
  return Status::Ok();
}

Status CpuRunner::WritePages(std::span<const PageId> pages, std::span<const std::byte> src) {
  GYRE_RETURN_IF_ERROR(ValidatePageCopy(capacity(), pages, src.size()));
  const size_t kvb = kv_.bytes_per_page(), bpp = capacity().bytes_per_page, mb = bpp - kvb;
  for (size_t i = 0; i < pages.size(); ++i) {
    std::memcpy(kv_.Page(pages[i]).data(), src.data() + i * bpp, kvb);
    if (mb > 0) std::memcpy(MtpKey(pages.subspan(i, 1), 0), src.data() + i * bpp + kvb, mb);
  }
  return Status::Ok();
}

Status CpuRunner::ReadSlotState(SlotId slot, std::span<std::byte> dst) {
  GYRE_RETURN_IF_ERROR(ValidateSlotCopy(capacity(), slot, dst.size(), 1));
  const size_t kb = kda_.bytes_per_slot();
  if (kb > 0) std::memcpy(dst.data(), kda_.Slot(slot).data(), kb);
  if (dst.size() > kb) std::memcpy(dst.data() + kb, &mtp_hidden_[slot * model_.config().hidden_size], dst.size() - kb);
  return Status::Ok();
}

Status CpuRunner::WriteSlotState(SlotId slot, std::span<const std::byte> src, int64_t num_tokens) {
  GYRE_RETURN_IF_ERROR(ValidateSlotCopy(capacity(), slot, src.size(), num_tokens));
  const size_t kb = kda_.bytes_per_slot();
  if (kb > 0) std::memcpy(kda_.Slot(slot).data(), src.data(), kb);
  if (src.size() > kb) std::memcpy(&mtp_hidden_[slot * model_.config().hidden_size], src.data() + kb, src.size() - kb);
  slots_[slot]->Restore(num_tokens);  // pooled indexer keys are recomputed from the pages
  last_token_[slot] = kPrevToken;
  return Status::Ok();
}

Status CpuRunner::CommitSpeculative(SlotId slot, int64_t num_accepted) {
  if (slot < 0 || slot >= opts_.num_slots)
    return Status::InvalidArgument("slot " + std::to_string(slot) + " is outside [0, " +
                                   std::to_string(opts_.num_slots) + ")");
  SequenceState& s = *slots_[slot];
  if (s.replay.start < 0) return Status::InvalidArgument("slot " + std::to_string(slot) + " has no pending speculation");
  if (num_accepted < 0 || num_accepted > s.replay.num)
    return Status::InvalidArgument("CommitSpeculative: " + std::to_string(num_accepted) + " accepted of " +
                                   std::to_string(s.replay.num) + " speculative tokens");
  s.CommitReplay(model_.config(), num_accepted);  // a step has completed in Launch: at once
  last_token_[slot] = kPrevToken;
  if (mtp_kf_ > 0) {  // the hidden state of the sequence's new last token
    const int64_t D = model_.config().hidden_size;
    std::vector<float>& h = spec_hidden_[slot];
    if (num_accepted > 0 && static_cast<int64_t>(h.size()) >= num_accepted * D)
      std::copy_n(&h[(num_accepted - 1) * D], D, &mtp_hidden_[slot * D]);
    h.clear();
  }
  return Status::Ok();
}

Status CpuRunner::Collect(std::vector<SampledToken>* out, std::vector<float>* logits) {
  if (done_.empty()) return Status::InvalidArgument("cpu runner: no step is outstanding");
  Done d = std::move(done_.front());
  done_.erase(done_.begin());
  if (out) *out = std::move(d.out);
  if (logits) *logits = std::move(d.logits);
  return d.status;
}

Status CpuRunner::Launch(std::span<const StepPiece> pieces_in, bool want_logits) {
  const int64_t V = model_.config().vocab_size;
  if (done_.size() >= 2) return Status::Internal("cpu runner: two steps are already outstanding");
  GYRE_RETURN_IF_ERROR(ValidateStep(pieces_in, capacity(), V));
  // Resolve kPrevToken from the slots' last samples (the previous step ran to completion).
  std::vector<StepPiece> pieces(pieces_in.begin(), pieces_in.end());
  std::vector<int32_t> resolved(pieces.size());
  std::vector<SeqInput> batch;
  for (size_t i = 0; i < pieces.size(); ++i) {
    StepPiece& p = pieces[i];
    if (p.ids.size() == 1 && p.ids[0] == kPrevToken) {
      if (last_token_[p.slot] < 0)
        return Status::InvalidArgument("piece " + std::to_string(i) + ": kPrevToken without an earlier sample in slot " +
                                       std::to_string(p.slot));
      resolved[i] = last_token_[p.slot];
      p.ids = std::span<const int32_t>(&resolved[i], 1);
    }
    const SequenceState& s = *slots_[p.slot];
    if (p.start != 0 && s.replay.start >= 0)
      return Status::InvalidArgument("piece " + std::to_string(i) + ": slot " + std::to_string(p.slot) +
                                     " has a speculation not committed yet");
    if (p.start != 0 && p.start != s.num_tokens)
      return Status::InvalidArgument("piece " + std::to_string(i) + ": start " + std::to_string(p.start) +
                                     " but slot " + std::to_string(p.slot) + " holds " + std::to_string(s.num_tokens) +
                                     " tokens");
  }
  // Multimodal pieces: the table rows of their ids with the prompt-embedding rows in their range.
  std::vector<std::vector<float>> embeds(pieces.size());
  const int64_t D = model_.config().hidden_size;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const StepPiece& p = pieces[i];
    if (!p.embeds) continue;
    if (p.embeds->width != D || p.embeds->rows.size() != p.embeds->positions.size() * static_cast<size_t>(D))
      return Status::InvalidArgument("piece " + std::to_string(i) + ": prompt embeddings of width " +
                                     std::to_string(p.embeds->width) + " for a model of hidden size " + std::to_string(D));
    const int64_t n = static_cast<int64_t>(p.ids.size());
    const auto [first, last] = p.embeds->RowsIn(p.start, n);
    if (first == last) continue;  // no override in this piece
    std::vector<float>& e = embeds[i];
    e.resize(static_cast<size_t>(n * D));
    ops::Embedding(p.ids, model_.weights().embed, e.data());
    for (size_t k = first; k < last; ++k) {
      const float* row = p.embeds->rows.data() + k * D;
      std::copy(row, row + D, e.begin() + (p.embeds->positions[k] - p.start) * D);
    }
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    const StepPiece& p = pieces[i];
    SequenceState& s = *slots_[p.slot];
    if (p.start == 0) {
      s.Reset();
      last_token_[p.slot] = kPrevToken;
    }
    s.SetPages(p.pages);
    SeqInput in{&s, p.ids, p.all_logits || p.speculative};
    in.speculative = p.speculative;
    in.input_embeds = embeds[i];
    batch.push_back(in);
    if (ops::HasPenalties(p.sample.params)) {
      ops::TokenCounts& c = counts_[p.slot];
      if (p.start == 0 || !p.history.empty() || c.output.empty()) c.Reset(V);
      for (size_t j = 0; j < p.history.size(); ++j) c.Add(p.history[j], static_cast<int64_t>(j), p.num_prompt);
      for (size_t j = 0; j < p.ids.size(); ++j) c.Add(p.ids[j], p.start + static_cast<int64_t>(j), p.num_prompt);
    }
  }
  std::vector<std::vector<float>> hidden(pieces.size());
  if (mtp_kf_ > 0)
    for (size_t i = 0; i < pieces.size(); ++i)
      if (pieces[i].mtp >= 0) batch[i].hidden = &hidden[i];
  std::vector<float> logits;
  GYRE_RETURN_IF_ERROR(model_.Forward(batch, &logits));
  GYRE_SPAN("sample", "sample");
  Done done;
  std::vector<SampledToken>* out = &done.out;
  {
    out->assign(pieces.size(), SampledToken{});
    int64_t r = 0;  // first logits row of piece i
    for (size_t i = 0; i < pieces.size(); ++i) {
      const bool every = pieces[i].all_logits || pieces[i].speculative;
      const int64_t rows = every ? static_cast<int64_t>(pieces[i].ids.size()) : 1;
      r += rows;
      const SampleSpec& sp = pieces[i].sample;
      if (!sp.enabled) continue;
      if (pieces[i].speculative) {  // a token after every row (ValidateStep: no logit processing)
        SampledToken& t = (*out)[i];
        for (int64_t j = r - rows; j < r; ++j) {
          std::span<const float> row(&logits[j * V], V);
          SampledToken one;
          // Row j (of the piece) against its draft, the piece's token j + 1 (none after the last).
          const int64_t jj = j - (r - rows);
          const int32_t draft = jj + 1 < rows ? pieces[i].ids[jj + 1] : -1;
          const int32_t id = SampleSpeculativeKeyed(row, sp.params, sp.offset + static_cast<uint64_t>(jj), draft);
          LogProbs(row, id, 0, &one);
          t.rows.emplace_back(id, one.logprob);
        }
        t.id = t.rows.back().first;
        t.logprob = t.rows.back().second;
        continue;
      }
      std::span<float> row(&logits[(r - 1) * V], V);
      ops::ApplyPenalties(row, sp.params, sp.logit_bias, sp.stop_ids, static_cast<int64_t>(sp.offset),
                          ops::HasPenalties(sp.params) ? &counts_[pieces[i].slot] : nullptr);
      if (!sp.allowed.empty()) ApplyTokenMask(row, sp.allowed);  // the returned logits are masked too
      SampledToken& t = (*out)[i];
      t.id = SampleKeyed(row, sp.params, sp.offset);
      LogProbs(row, t.id, sp.top_logprobs, &t);
      last_token_[pieces[i].slot] = t.id;
    }
  }
  if (mtp_kf_ > 0) {
    GYRE_SPAN("mtp.drafts", "op");
    for (size_t i = 0; i < pieces.size(); ++i)
      if (pieces[i].mtp >= 0) GYRE_RETURN_IF_ERROR(RunMtp(pieces[i], hidden[i], &(*out)[i]));
  }
  if (want_logits) done.logits = std::move(logits);
  done_.push_back(std::move(done));
  return Status::Ok();
}

Status CpuRunner::RunMtp(const StepPiece& p, const std::vector<float>& hidden, SampledToken* t) {
  const int64_t D = model_.config().hidden_size, P = p.start, n = static_cast<int64_t>(p.ids.size()), kf = mtp_kf_;
  // Token position q >= 1 holds MTP position q - 1: the token at q with the hidden state at q - 1.
  const int64_t q0 = std::max<int64_t>(P, 1);
  const int64_t chain = t->id >= 0 ? p.mtp : 0;
  std::vector<float> keys(static_cast<size_t>((P + n + chain) * kf));  // MTP positions 0 .. P + n - 2, then the chain
  for (int64_t q = 1; q < q0; ++q) std::copy_n(MtpKey(p.pages, q), kf, &keys[(q - 1) * kf]);
  std::vector<float> x, lg;
  if (q0 < P + n) {
    const int64_t rows = P + n - q0;
    std::vector<float> h(static_cast<size_t>(rows * D));
    for (int64_t q = q0; q < P + n; ++q) {
      const float* src = q - 1 < P ? &mtp_hidden_[p.slot * D] : &hidden[(q - 1 - P) * D];
      std::copy_n(src, D, &h[(q - q0) * D]);
    }
    GYRE_RETURN_IF_ERROR(model_.MtpStep(p.ids.subspan(q0 - P), h, q0 - 1, keys.data(), 0, &x, &lg));
    for (int64_t q = q0; q < P + n; ++q) std::copy_n(&keys[(q - 1) * kf], kf, MtpKey(p.pages, q));
  }
  // The slot's last hidden state: now, or (a speculative piece) at CommitSpeculative.
  if (p.speculative) {
    spec_hidden_[p.slot] = hidden;
  } else {
    std::copy_n(&hidden[(n - 1) * D], D, &mtp_hidden_[p.slot * D]);
  }
  if (chain == 0) return Status::Ok();
  // The chain starts after the piece's last committed token: its last row, or (speculative) the
  // row of the last accepted draft, whose sampled token is the bonus.
  int64_t a = n - 1;
  int32_t y = t->id;
  if (p.speculative) {
    a = 0;
    while (a + 1 < n && t->rows[a].first == p.ids[a + 1]) ++a;
    y = t->rows[a].first;
  }
  std::vector<float> h(hidden.begin() + a * D, hidden.begin() + (a + 1) * D);
  for (int64_t j = 0; j < chain; ++j) {
    GYRE_RETURN_IF_ERROR(model_.MtpStep(std::span<const int32_t>(&y, 1), h, P + a + j, keys.data(), 1, &x, &lg));
    y = ops::Argmax(lg);
    t->drafts.push_back(y);
    h.swap(x);
  }
  return Status::Ok();
}

}  // namespace gyre
