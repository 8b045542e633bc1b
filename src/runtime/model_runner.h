// ModelRunner: the seam between the engine and a model (docs/architecture.md "The seam between
// the engine and a model"). The engine owns the bookkeeping of both caches — which page and slot
// ids are free, which sequence holds which, block tables — and a runner owns the storage behind
// those ids and one operation: run a ragged step and return sampled tokens and logprobs.
//
// The CPU model (CpuRunner, runtime/cpu_runner.h) and the CUDA model (CudaModel,
// runtime/cuda_model.h) are runners; a sharded, disaggregated, quantized or speculative model is a
// runner or a decorator of one, never a second engine.
//
// What a step means (the one definition both backends implement):
//  - A step is a list of pieces; each piece is one sequence's new tokens: a decode row (1 token on
//    a sequence that has history) or a prefill piece (any number of tokens, from `start`).
//  - Sequence lifecycle: a piece with start == 0 begins a new sequence in its slot (the runner
//    zeroes the slot's KDA state and forgets any history). A piece with start > 0 continues the
//    sequence that the slot holds, whose first `start` tokens are in its pages. The engine frees
//    ids without telling the runner; a freed slot is dead until a start-0 piece reuses it.
//  - `pages` is the block table: pages[j] holds tokens [j·page_tokens, (j+1)·page_tokens). It
//    covers at least start + ids.size() tokens (InvalidArgument otherwise).
//  - Sampling: when `sample.enabled`, the runner draws one token from the piece's last row under
//    `sample.params` with the counter `sample.offset` (the request's number of generated tokens:
//    draws are a function of (logits, params, seed, offset) only, so a seeded request gives the
//    same tokens in any batch composition, after preemption, across runs). The sampled token's
//    log-softmax (temperature 1) is always returned; `top_logprobs` > 0 adds the best alternatives.
//  - Logit processing (ops/penalties.h) comes before the draw: `sample.logit_bias`, min_tokens
//    (`sample.stop_ids` at −inf while sample.offset < params.min_tokens), then the repetition,
//    frequency and presence penalties over the slot's token counts; the structured-output mask
//    after that. The returned logprobs are those of the processed row.
//  - Token counts: a slot whose pieces have ops::HasPenalties(sample.params) (the same params on
//    every piece of a sequence, sampling or not) keeps its sequence's counts: every token the
//    pieces feed — ids, kPrevToken resolved (on the device for CUDA) — is counted at its position,
//    as a prompt token below the piece's `num_prompt`, as an output token from there on. A
//    start-0 piece resets the counts, and so does RestoreState; the first piece after a restore
//    passes `history` = the sequence's tokens [0, start), which are counted first. So the counts
//    at a draw cover exactly the tokens before it, across chunked prefill, preemption (a
//    recompute is a start-0 piece over prompt + output) and overlapped steps.
//  - Errors: InvalidArgument (bad ids, block table too short, a slot twice, too many tokens or
//    pieces for the capacity), Internal (device). After an error the engine must treat every
//    sequence of the step as lost (it ends them); nothing else is affected.
//  - Overlap: Launch enqueues a step and returns; Collect waits for the oldest launched step and
//    returns its tokens. At most two steps are outstanding, so the engine can launch step n+1
//    before it has collected step n. A decode piece of step n+1 whose token is the one its slot
//    samples in step n (unknown on the host) passes ids = {kPrevToken}: the runner takes the
//    slot's most recent sample (on the device for CUDA). Steps execute in launch order, so ids
//    freed by the engine after launching step n may be reused in step n+1.
//  - KDA checkpoints (prefix caching): ReserveCheckpoints sizes a checkpoint store apart from
//    pages and slots; SaveState copies a slot's KDA state (conv tails and recurrent states of every
//    KDA layer) into a checkpoint, RestoreState copies one into a slot and makes the slot hold a
//    sequence of `num_tokens` tokens, whose attention rows are in the pages the next piece names
//    (that piece has start == num_tokens). Both are ordered like steps: they act after every step
//    launched before the call and before every step launched after it (the CPU runner copies at
//    once, a step having completed in Launch; the CUDA model enqueues device-to-device copies on
//    its step stream), so they compose with overlapped steps. Which checkpoint ids are free is
//    the engine's.
//  - Sequence transfer (disaggregated prefill/decode, src/transfer/): ReadPages / ReadSlotState
//    copy a sequence's cache to host bytes, WritePages / WriteSlotState copy it back into another
//    runner's ids. A page's host image is bytes_per_page bytes (every attention layer's rows of
//    the page), a slot's bytes_per_slot bytes (every KDA layer's conv tail and recurrent state);
//    the layout inside is the backend's own: a runner of the same backend() and config reads back
//    what another wrote. Ordered like steps: a read returns when its bytes are those after every
//    step launched before the call (the CUDA model waits for its step stream); a write acts
//    before every step launched after it and has consumed `src` when it returns. Whole-sequence
//    granularity: a read after the last prefill step sees every layer (no per-layer hook yet).
//  - Speculative decoding (ReplaySSM; docs/engine.md "Speculative decoding"): a piece with
//    `speculative` set runs its tokens (the sequence's next known token, then drafts) so that the
//    KDA layers leave the slot's state — conv tails and recurrent states — as it was before the
//    piece, and keep the tokens' per-token KDA inputs (pre-conv inputs, keys, values, gates,
//    betas) in a small per-slot ring; attention rows are written as for any piece. When the piece
//    samples (no penalties, logit_bias, min_tokens, mask or top_logprobs; InvalidArgument
//    otherwise) its SampledToken has `rows`: a token and its logprob after every new token, first
//    to last (id: the last row's) — greedy, or with temperature > 0 drawn against the next token of
//    the piece as its draft (SampleSpeculativeKeyed: row j at offset + j; the draft comes back
//    exactly when accepted, and every row is distributed as plain sampling). CommitSpeculative(slot, n)
//    must follow before the slot's next piece (InvalidArgument otherwise, unless that piece starts
//    a new sequence): it advances the KDA state by folding exactly the first n (0..ids.size())
//    kept inputs with the plain recurrence — no per-draft state copies, bit for bit the state that
//    decoding those n tokens would leave — and makes the slot a sequence of start + n tokens; the
//    attention rows past it are stale and are overwritten by later pieces (the next piece has
//    start == start + n), and state derived from them (the CPU model's pooled indexer keys) is
//    dropped. Ordered like steps, as SaveState. Only runners whose capacity() has `speculative`
//    accept such pieces (ValidateStep rejects them otherwise): the CPU runner, and the CUDA model
//    built with CudaModelOptions::speculative_tokens (others: CommitSpeculative returns
//    Unimplemented, the default).
// Thread safety: a runner is driven by one thread at a time (the engine thread).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "ops/penalties.h"
#include "ops/sampling.h"
#include "runtime/memory_pools.h"

namespace gyre {

// What the storage behind the ids holds, for the engine's budgets and /metrics.
struct RunnerCapacity {
  int64_t num_pages = 0;        // page ids 0..num_pages-1 (0 when the model has no attention layer)
  int64_t page_tokens = 16;     // tokens per page
  int64_t num_slots = 0;        // slot ids 0..num_slots-1
  int64_t max_step_tokens = 0;  // new tokens per step
  int64_t max_step_pieces = 0;  // pieces per step
  int64_t bytes_per_page = 0;   // all attention layers
  int64_t bytes_per_slot = 0;   // all KDA layers
  bool speculative = false;     // accepts speculative pieces and CommitSpeculative
  int64_t mtp_drafts = 0;       // > 0: runs the model's MTP layer and drafts up to this many tokens (StepPiece::mtp)
  bool prompt_embeds = false;   // accepts StepPiece::embeds (image inputs)
  // What else decides the meaning of a page's bytes, as a tag (0: nothing): the CUDA model's KV cache
  // dtype per layer (fp8 and int8 pages have equal sizes). Sequence transfer compares it.
  uint64_t cache_layout = 0;
};

struct SampleSpec {
  bool enabled = false;
  ops::SamplingParams params;  // params.seed keys the draw
  uint64_t offset = 0;         // draw counter: the request's generated-token count
  int32_t top_logprobs = 0;    // 0..20 alternatives
  // Structured output: empty, or the allowed tokens as a bitmask of ceil(vocab / 32) words (bit
  // id % 32 of allowed[id / 32]); the runner draws from the logits with every other token at −inf
  // (on the device for CUDA), and the returned logprobs are those of the masked row. At least
  // one token of [0, vocab) must be allowed. The span need not outlive Launch.
  std::span<const uint32_t> allowed;
  // Logit processing (ops/penalties.h; ids in [0, vocab)); the spans need not outlive Launch.
  std::span<const ops::LogitBias> logit_bias;
  std::span<const int32_t> stop_ids;  // masked while offset < params.min_tokens
};

// As the only id of a decode piece: the token the piece's slot sampled in the previous step.
inline constexpr int32_t kPrevToken = -1;

// A multimodal prompt (docs/vision.md): embedding rows that replace the embedding-table rows of
// some prompt positions (the image placeholder tokens), one row of `width` floats per position.
struct PromptEmbeds {
  int64_t width = 0;               // the model's hidden size
  std::vector<int64_t> positions;  // ascending prompt positions
  std::vector<float> rows;         // [positions.size(), width]

  // The rows whose positions fall in [start, start + n): indices [first, second) of `positions`
  // (empty when none does). What a runner writes for a piece of n tokens at `start`.
  std::pair<size_t, size_t> RowsIn(int64_t start, int64_t n) const {
    const auto lo = std::lower_bound(positions.begin(), positions.end(), start);
    const auto hi = std::lower_bound(lo, positions.end(), start + n);
    return {static_cast<size_t>(lo - positions.begin()), static_cast<size_t>(hi - positions.begin())};
  }
};

struct StepPiece {
  SlotId slot = -1;
  std::span<const PageId> pages;
  int64_t start = 0;              // tokens of this sequence already in the cache
  std::span<const int32_t> ids;   // new tokens (>= 1)
  SampleSpec sample;
  bool all_logits = false;        // verification: logits of every new token, not only the last
  bool speculative = false;       // ReplaySSM: KDA state untouched until CommitSpeculative (above)
  // Token counts (penalties): the sequence's first num_prompt tokens are its prompt; `history` is
  // empty, or (the first piece after RestoreState) the sequence's tokens [0, start).
  int64_t num_prompt = 0;
  std::span<const int32_t> history;
  // May be null: the request's prompt embeddings; the rows whose positions fall in
  // [start, start + ids.size()) replace the table rows there (runners whose capacity() says
  // prompt_embeds: the CPU runner and the CUDA model, which scatters them after its embedding).
  const PromptEmbeds* embeds = nullptr;
  // MTP drafts (runners whose capacity() has mtp_drafts > 0; docs/engine.md "MTP drafts"): -1, the
  // sequence keeps no MTP cache and nothing runs; 0..mtp_drafts, the MTP layer also runs over the
  // piece's tokens (each paired with the hidden state of the token before it; its attention keys
  // go to the sequence's pages and its last hidden state to its slot), and when the piece samples
  // it chains `mtp` greedy drafts after the sampled token (a speculative piece: after its last
  // accepted row's token, acceptance as the engine counts it), returned in SampledToken::drafts.
  // A sequence whose earlier pieces ran with -1 (or whose cache came from a runner without MTP)
  // gets worse drafts, never a different output: drafts are only ever verified.
  int32_t mtp = -1;
};

struct SampledToken {
  int32_t id = -1;                                   // -1 when the piece did not sample
  float logprob = 0;                                 // log-softmax of `id` (temperature 1)
  std::vector<std::pair<int32_t, float>> top;        // top_logprobs alternatives, best first
  std::vector<std::pair<int32_t, float>> rows;       // speculative piece: (greedy id, logprob) per new token
  std::vector<int32_t> drafts;                       // StepPiece::mtp > 0: the MTP's guesses after `id`
};

using CheckpointId = int32_t;

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelConfig& config() const = 0;
  virtual RunnerCapacity capacity() const = 0;
  virtual std::string backend() const = 0;  // "cpu", "cuda"

  // Enqueues one step (the spans need not outlive the call). `want_logits`: Collect returns, per
  // piece in order, [1 or ids.size() (all_logits), vocab] fp32 rows, for verification; otherwise
  // no logits cross back (the serving path). Errors as above; Internal when two steps are
  // already outstanding. A failed Launch enqueues nothing.
  virtual Status Launch(std::span<const StepPiece> pieces, bool want_logits = false) = 0;
  // Waits for the oldest outstanding step. `out` (may be null) gets one entry per piece, in order
  // (id -1 where sampling was not asked); `logits` (may be null) the rows asked for at Launch.
  // InvalidArgument when no step is outstanding, Internal on a device error (the step is lost).
  virtual Status Collect(std::vector<SampledToken>* out, std::vector<float>* logits = nullptr) = 0;

  // Storage for `count` KDA checkpoints (ids 0..count-1) of bytes_per_slot each, replacing any
  // earlier store (its contents are lost). REQUIRES: no step outstanding. ResourceExhausted when
  // the memory cannot be had, InvalidArgument for a negative count.
  virtual Status ReserveCheckpoints(int64_t count) = 0;
  // Checkpoint `ckpt` ← the KDA state of `slot` (ordered as above). InvalidArgument for ids out
  // of range; Internal (device).
  virtual Status SaveState(SlotId slot, CheckpointId ckpt) = 0;
  // `slot` ← checkpoint `ckpt` as a sequence of `num_tokens` (>= 1) tokens; ckpt -1 restores the
  // zero state (allowed only for a model without KDA layers, whose sequences need none).
  // InvalidArgument for ids out of range; Internal (device).
  virtual Status RestoreState(CheckpointId ckpt, SlotId slot, int64_t num_tokens) = 0;

  // Host image of pages: dst[i·bytes_per_page, (i+1)·bytes_per_page) ← page pages[i] (ordered as
  // above). InvalidArgument for a page outside the pool or dst.size() != pages.size() ·
  // bytes_per_page; Internal (device).
  virtual Status ReadPages(std::span<const PageId> pages, std::span<std::byte> dst) = 0;
  // Page pages[i] ← src[i·bytes_per_page, ...): the inverse of ReadPages. Errors as ReadPages.
  virtual Status WritePages(std::span<const PageId> pages, std::span<const std::byte> src) = 0;
  // Host image of `slot`'s KDA state (bytes_per_slot bytes; 0 without KDA layers). InvalidArgument
  // for a slot out of range or a wrong size; Internal (device).
  virtual Status ReadSlotState(SlotId slot, std::span<std::byte> dst) = 0;
  // `slot` ← a host image of KDA state, and the slot holds a sequence of `num_tokens` (>= 1)
  // tokens whose attention rows are in the pages the next piece names (that piece has start ==
  // num_tokens), as RestoreState. Errors as ReadSlotState, and InvalidArgument for num_tokens < 1.
  virtual Status WriteSlotState(SlotId slot, std::span<const std::byte> src, int64_t num_tokens) = 0;

  // Disaggregation off the engine thread: whether ReadFinished may be called from another thread
  // while the engine launches and collects steps (false: export on the engine thread with
  // ReadPages / ReadSlotState).
  virtual bool ReadsFinishedConcurrently() const { return false; }
  // The images ReadPages(pages) and ReadSlotState(slot) give, byte for byte, of a sequence whose
  // every step has been collected, from any thread: concurrently with Launch / Collect on the
  // engine thread and with other ReadFinished calls. It does not wait for steps in flight.
  // REQUIRES: no step launched after those collects writes `pages` or `slot` until this returns
  // (the engine holds an exported sequence's pages and slot until ReleaseExported). Errors as
  // ReadPages / ReadSlotState; Unimplemented unless ReadsFinishedConcurrently().
  virtual Status ReadFinished(std::span<const PageId> pages, std::span<std::byte> page_dst, SlotId slot,
                              std::span<std::byte> state_dst) {
    (void)pages, (void)page_dst, (void)slot, (void)state_dst;
    return Status::Unimplemented("this runner (" + backend() + ") reads sequences on the engine thread only");
  }

  // Speculative decoding: `slot`'s pending speculative piece keeps its first `num_accepted`
  // (0..ids.size()) tokens; the KDA state folds their kept inputs (ordered like steps; see above).
  // InvalidArgument for a slot out of range, without a pending speculation or with num_accepted
  // out of range; Unimplemented on a runner without speculation (the default).
  virtual Status CommitSpeculative(SlotId slot, int64_t num_accepted) {
    (void)slot;
    (void)num_accepted;
    return Status::Unimplemented("this runner (" + backend() + ") does not run speculative pieces");
  }

  // Launch + Collect of one step (no step may be outstanding).
  Status Step(std::span<const StepPiece> pieces, std::vector<SampledToken>* out, std::vector<float>* logits = nullptr) {
    GYRE_RETURN_IF_ERROR(Launch(pieces, logits != nullptr));
    return Collect(out, logits);
  }
};

// The checks every runner makes before a step touches anything — one definition of a valid step:
// 1..max_step_pieces pieces of >= 1 id, at most max_step_tokens ids in all; slots in
// [0, num_slots), none twice; ids in [0, vocab) or a lone kPrevToken with start > 0; with a page
// pool, pages in [0, num_pages) covering start + ids; valid sampling parameters; logit_bias,
// stop_ids and history ids in [0, vocab), history empty or of `start` tokens.
// InvalidArgument naming the piece otherwise.
Status ValidateStep(std::span<const StepPiece> pieces, const RunnerCapacity& cap, int64_t vocab);

// The checks of SaveState / RestoreState: ids in range (`num_checkpoints` reserved), num_tokens
// >= 1, ckpt -1 only without KDA state. InvalidArgument naming the id otherwise.
Status ValidateCheckpointOp(const RunnerCapacity& cap, int64_t num_checkpoints, SlotId slot, CheckpointId ckpt,
                            int64_t num_tokens);

// The checks of ReadPages / WritePages (pages in [0, num_pages), bytes == pages · bytes_per_page)
// and of ReadSlotState / WriteSlotState (slot in range, bytes == bytes_per_slot, num_tokens >= 1;
// pass num_tokens 1 for a read). InvalidArgument naming what is wrong otherwise.
Status ValidatePageCopy(const RunnerCapacity& cap, std::span<const PageId> pages, size_t bytes);
Status ValidateSlotCopy(const RunnerCapacity& cap, SlotId slot, size_t bytes, int64_t num_tokens);

// One draw from `logits` under `p` keyed by (seed, offset) (the CPU definition: ops::Sampler over
// the support of ops::SamplingSupport); greedy when temperature <= 0.
int32_t SampleKeyed(std::span<const float> logits, const ops::SamplingParams& p, uint64_t offset);

// Speculative sampling against one deterministic draft token (an n-gram draft is a point mass):
// with p the distribution SampleKeyed draws from, returns `draft` with probability p(draft), else
// a draw from p restricted to the other tokens (renormalised), so the result is distributed as p
// whatever the draft (rejection sampling; Leviathan et al. 2023 with q = δ_draft). Keyed by (seed,
// offset) like SampleKeyed (its own streams). Greedy (temperature <= 0): Argmax. draft < 0 or
// outside the vocabulary: SampleKeyed. The speculative rows of a verify piece sample with it, row j
// against the piece's token j + 1, at offset + j (model_runner.h).
int32_t SampleSpeculativeKeyed(std::span<const float> logits, const ops::SamplingParams& p, uint64_t offset,
                               int32_t draft);

// Sets logits[i] = −inf for every token i not allowed by `allowed` (SampleSpec::allowed).
// REQUIRES: allowed.size() == ceil(logits.size() / 32).
void ApplyTokenMask(std::span<float> logits, std::span<const uint32_t> allowed);

// log-softmax of `logits` at `id` and the `k` best alternatives (ties → lower id; tokens at −inf
// are never listed).
void LogProbs(std::span<const float> logits, int32_t id, int32_t k, SampledToken* out);

// RunnerSession: sequences on a runner for callers without an engine (gyre generate, verify model,
// bench model, tests): it keeps the id bookkeeping (an IdPool each for pages and slots) and each
// sequence's block table. Not thread-safe.
class RunnerSession {
 public:
  explicit RunnerSession(ModelRunner& runner);
  ModelRunner& runner() { return runner_; }

  // A new empty sequence (a slot). ResourceExhausted when every slot is in use.
  Result<int> NewSequence();
  // Returns the sequence's pages and slot. Unknown ids are ignored.
  void Release(int seq);
  int64_t NumTokens(int seq) const;
  int64_t free_pages() const { return pages_.num_free(); }

  struct Input {
    int seq = -1;
    std::span<const int32_t> ids;
    SampleSpec sample;
    bool all_logits = false;
    const PromptEmbeds* embeds = nullptr;  // StepPiece::embeds
  };
  // One step over the sequences' new tokens: pages are taken (all or nothing: ResourceExhausted),
  // the runner steps, and the sequences advance. `out` / `logits` as in ModelRunner::Step.
  Status Step(std::span<const Input> inputs, std::vector<SampledToken>* out, std::vector<float>* logits = nullptr);

 private:
  struct Seq {
    SlotId slot = -1;
    std::vector<PageId> pages;
    int64_t num_tokens = 0;
  };
  ModelRunner& runner_;
  RunnerCapacity cap_;
  IdPool pages_, slots_;
  std::vector<Seq> seqs_;  // index = sequence id; slot -1 = released
};

}  // namespace gyre
