#include "runtime/model_runner.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace gyre {

namespace {
uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

Status ValidateCheckpointOp(const RunnerCapacity& cap, int64_t num_checkpoints, SlotId slot, CheckpointId ckpt,
                            int64_t num_tokens) {
  if (slot < 0 || slot >= cap.num_slots)
    return Status::InvalidArgument("slot " + std::to_string(slot) + " is outside [0, " + std::to_string(cap.num_slots) +
                                   ")");
  if (num_tokens < 1) return Status::InvalidArgument("a restored sequence holds at least one token");
  if (ckpt == -1 && cap.bytes_per_slot == 0) return Status::Ok();
  if (ckpt < 0 || ckpt >= num_checkpoints)
    return Status::InvalidArgument("checkpoint " + std::to_string(ckpt) + " is outside [0, " +
                                   std::to_string(num_checkpoints) + ")");
  return Status::Ok();
}

Status ValidatePageCopy(const RunnerCapacity& cap, std::span<const PageId> pages, size_t bytes) {
  for (size_t i = 0; i < pages.size(); ++i)
    if (pages[i] < 0 || pages[i] >= cap.num_pages)
      return Status::InvalidArgument("page " + std::to_string(pages[i]) + " (entry " + std::to_string(i) +
                                     ") is outside [0, " + std::to_string(cap.num_pages) + ")");
  const auto want = static_cast<size_t>(cap.bytes_per_page) * pages.size();
  if (bytes != want)
    return Status::InvalidArgument(std::to_string(bytes) + " bytes for " + std::to_string(pages.size()) +
                                   " pages of " + std::to_string(cap.bytes_per_page) + " bytes");
  return Status::Ok();
}

Status ValidateSlotCopy(const RunnerCapacity& cap, SlotId slot, size_t bytes, int64_t num_tokens) {
  if (slot < 0 || slot >= cap.num_slots)
    return Status::InvalidArgument("slot " + std::to_string(slot) + " is outside [0, " + std::to_string(cap.num_slots) +
                                   ")");
  if (bytes != static_cast<size_t>(cap.bytes_per_slot))
    return Status::InvalidArgument(std::to_string(bytes) + " bytes for a slot of " +
                                   std::to_string(cap.bytes_per_slot) + " bytes");
  if (num_tokens < 1) return Status::InvalidArgument("a written sequence holds at least one token");
  return Status::Ok();
}

Status ValidateStep(std::span<const StepPiece> pieces, const RunnerCapacity& cap, int64_t vocab) {
  if (pieces.empty()) return Status::InvalidArgument("empty step");
  if (static_cast<int64_t>(pieces.size()) > cap.max_step_pieces)
    return Status::InvalidArgument(std::to_string(pieces.size()) + " sequences in one step; at most " +
                                   std::to_string(cap.max_step_pieces));
  int64_t total = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const StepPiece& p = pieces[i];
    const std::string where = "piece " + std::to_string(i);
    if (p.slot < 0 || p.slot >= cap.num_slots)
      return Status::InvalidArgument(where + ": slot " + std::to_string(p.slot) + " is outside [0, " +
                                     std::to_string(cap.num_slots) + ")");
    for (size_t j = 0; j < i; ++j)
      if (pieces[j].slot == p.slot) return Status::InvalidArgument("slot " + std::to_string(p.slot) + " twice in one step");
    if (p.ids.empty()) return Status::InvalidArgument(where + " has no new tokens");
    if (p.start < 0) return Status::InvalidArgument(where + ": negative start");
    const bool prev = p.ids.size() == 1 && p.ids[0] == kPrevToken;
    if (prev && p.start == 0) return Status::InvalidArgument(where + ": kPrevToken in a piece with no history");
    for (int32_t id : p.ids)
      if (!prev && (id < 0 || id >= vocab))
        return Status::InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                       std::to_string(vocab) + ")");
    if (cap.num_pages > 0) {
      const int64_t ctx = p.start + static_cast<int64_t>(p.ids.size());
      if (static_cast<int64_t>(p.pages.size()) * cap.page_tokens < ctx)
        return Status::InvalidArgument(where + ": the block table holds " + std::to_string(p.pages.size()) +
                                       " pages, " + std::to_string((ctx + cap.page_tokens - 1) / cap.page_tokens) +
                                       " are needed");
      for (PageId pg : p.pages)
        if (pg < 0 || pg >= cap.num_pages)
          return Status::InvalidArgument(where + ": page " + std::to_string(pg) + " is outside the page pool");
    }
    if (p.sample.enabled) GYRE_RETURN_IF_ERROR(ops::ValidateSampling(p.sample.params));
    if (p.speculative) {
      if (!cap.speculative) return Status::InvalidArgument(where + ": this runner does not run speculative pieces");
      if (prev) return Status::InvalidArgument(where + ": a speculative piece names its tokens (no kPrevToken)");
      const SampleSpec& sp = p.sample;
      if (sp.enabled && (ops::HasPenalties(sp.params) || sp.params.min_tokens > 0 || !sp.logit_bias.empty() ||
                         !sp.allowed.empty() || sp.top_logprobs > 0))
        return Status::InvalidArgument(where + ": a speculative piece samples without logit processing (no "
                                       "penalties, logit_bias, min_tokens, mask or top_logprobs)");
    }
    if (p.mtp != -1 && (p.mtp < 0 || p.mtp > cap.mtp_drafts))
      return Status::InvalidArgument(where + ": mtp " + std::to_string(p.mtp) +
                                     (cap.mtp_drafts > 0 ? " is outside [-1, " + std::to_string(cap.mtp_drafts) + "]"
                                                         : " on a runner without MTP drafts (only -1)"));
    auto in_vocab = [&](int32_t id, const char* what) {
      return id >= 0 && id < vocab ? Status::Ok()
                                   : Status::InvalidArgument(where + ": " + what + " token id " + std::to_string(id) +
                                                             " is outside the vocabulary [0, " + std::to_string(vocab) +
                                                             ")");
    };
    for (const ops::LogitBias& b : p.sample.logit_bias) GYRE_RETURN_IF_ERROR(in_vocab(b.id, "logit_bias"));
    for (int32_t id : p.sample.stop_ids) GYRE_RETURN_IF_ERROR(in_vocab(id, "stop"));
    if (!p.history.empty() && static_cast<int64_t>(p.history.size()) != p.start)
      return Status::InvalidArgument(where + ": a history of " + std::to_string(p.history.size()) +
                                     " tokens with start " + std::to_string(p.start));
    for (int32_t id : p.history) GYRE_RETURN_IF_ERROR(in_vocab(id, "history"));
    if (!p.sample.allowed.empty()) {
      if (static_cast<int64_t>(p.sample.allowed.size()) != (vocab + 31) / 32)
        return Status::InvalidArgument(where + ": the token mask has " + std::to_string(p.sample.allowed.size()) +
                                       " words, the vocabulary needs " + std::to_string((vocab + 31) / 32));
      bool any = false;
      for (int64_t w = 0; w < static_cast<int64_t>(p.sample.allowed.size()) && !any; ++w) {
        const int64_t bits = std::min<int64_t>(32, vocab - 32 * w);
        const uint32_t live = bits == 32 ? ~0u : ((1u << bits) - 1);
        any = (p.sample.allowed[w] & live) != 0;
      }
      if (!any) return Status::InvalidArgument(where + ": the token mask allows no token");
    }
    total += static_cast<int64_t>(p.ids.size());
  }
  if (total > cap.max_step_tokens)
    return Status::InvalidArgument(std::to_string(total) + " tokens in one step; at most " +
                                   std::to_string(cap.max_step_tokens));
  return Status::Ok();
}

int32_t SampleKeyed(std::span<const float> logits, const ops::SamplingParams& p, uint64_t offset) {
  if (p.temperature <= 0.0f) return ops::Argmax(logits);
  ops::Sampler s(SplitMix64(p.seed ^ SplitMix64(offset)));
  return s.Sample(logits, p);
}

int32_t SampleSpeculativeKeyed(std::span<const float> logits, const ops::SamplingParams& p, uint64_t offset,
                               int32_t draft) {
  if (p.temperature <= 0.0f) return ops::Argmax(logits);
  if (draft < 0 || static_cast<size_t>(draft) >= logits.size()) return SampleKeyed(logits, p, offset);
  const ops::SampleSupport d = ops::SamplingSupport(logits, p);
  double total = 0, pd = 0;
  for (size_t i = 0; i < d.prob.size(); ++i) {
    total += d.prob[i];
    if (d.ids[i] == draft) pd = d.prob[i];
  }
  std::mt19937_64 rng(SplitMix64(p.seed ^ SplitMix64(offset) ^ 0x5bd1e9955bd1e995ull));
  std::uniform_real_distribution<double> u(0.0, total);
  if (u(rng) < pd) return draft;  // accepted with probability p(draft)
  // Rejected: the residual max(p − δ_draft, 0), renormalised: p without the draft.
  std::uniform_real_distribution<double> r(0.0, total - pd);
  const double x = r(rng);
  double acc = 0;
  int32_t last = -1;
  for (size_t i = 0; i < d.prob.size(); ++i) {
    if (d.ids[i] == draft) continue;
    acc += d.prob[i];
    last = d.ids[i];
    if (x < acc) return d.ids[i];
  }
  return last >= 0 ? last : draft;  // rounding at the end of the mass (or the draft was all of it)
}

void ApplyTokenMask(std::span<float> logits, std::span<const uint32_t> allowed) {
  for (size_t i = 0; i < logits.size(); ++i)
    if (!((allowed[i >> 5] >> (i & 31)) & 1u)) logits[i] = -INFINITY;
}

void LogProbs(std::span<const float> logits, int32_t id, int32_t k, SampledToken* out) {
  float mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  out->logprob = static_cast<float>(logits[id] - lse);
  out->top.clear();
  if (k <= 0) return;
  std::vector<int32_t> idx(logits.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
  k = std::min<int32_t>(k, static_cast<int32_t>(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (int32_t i = 0; i < k; ++i)
    if (logits[idx[i]] != -INFINITY) out->top.push_back({idx[i], static_cast<float>(logits[idx[i]] - lse)});
}

// ---- RunnerSession -------------------------------------------------------------------------------

RunnerSession::RunnerSession(ModelRunner& runner)
    : runner_(runner),
      cap_(runner.capacity()),
      pages_(cap_.num_pages, "KV pages"),
      slots_(cap_.num_slots, "KDA state slots") {}

Result<int> RunnerSession::NewSequence() {
  GYRE_ASSIGN_OR_RETURN(SlotId slot, slots_.AllocateOne());
  seqs_.push_back({slot, {}, 0});
  return static_cast<int>(seqs_.size() - 1);
}

void RunnerSession::Release(int seq) {
  if (seq < 0 || seq >= static_cast<int>(seqs_.size()) || seqs_[seq].slot < 0) return;
  Seq& s = seqs_[seq];
  pages_.Release(s.pages);
  slots_.Release(s.slot);
  s = Seq{};
}

int64_t RunnerSession::NumTokens(int seq) const {
  if (seq < 0 || seq >= static_cast<int>(seqs_.size()) || seqs_[seq].slot < 0) return -1;
  return seqs_[seq].num_tokens;
}

Status RunnerSession::Step(std::span<const Input> inputs, std::vector<SampledToken>* out,
                           std::vector<float>* logits) {
  const bool paged = cap_.num_pages > 0;
  int64_t need = 0;
  for (const Input& in : inputs) {
    if (NumTokens(in.seq) < 0) return Status::InvalidArgument("unknown sequence " + std::to_string(in.seq));
    const Seq& s = seqs_[in.seq];
    const int64_t total = s.num_tokens + static_cast<int64_t>(in.ids.size());
    if (paged) need += std::max<int64_t>(0, (total + cap_.page_tokens - 1) / cap_.page_tokens - s.pages.size());
  }
  GYRE_ASSIGN_OR_RETURN(std::vector<PageId> got, pages_.Allocate(need));
  size_t g = 0;
  std::vector<StepPiece> pieces;
  for (const Input& in : inputs) {
    Seq& s = seqs_[in.seq];
    const int64_t total = s.num_tokens + static_cast<int64_t>(in.ids.size());
    while (paged && static_cast<int64_t>(s.pages.size()) * cap_.page_tokens < total) s.pages.push_back(got[g++]);
    pieces.push_back({s.slot, s.pages, s.num_tokens, in.ids, in.sample, in.all_logits});
    pieces.back().embeds = in.embeds;
  }
  GYRE_RETURN_IF_ERROR(runner_.Step(pieces, out, logits));
  for (const Input& in : inputs) seqs_[in.seq].num_tokens += static_cast<int64_t>(in.ids.size());
  return Status::Ok();
}

}  // namespace gyre
