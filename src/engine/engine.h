// Engine: continuous batching over one model runner (runtime/model_runner.h), the same code for
// every backend. Requests are submitted from any thread; one engine thread owns the scheduler and
// the bookkeeping of both caches (page and slot ids, block tables, preemption) and runs runner
// steps that mix prefill chunks and decodes; the runner owns the storage and samples.
//
// Lifecycle: Create → Start → Submit/Cancel … → Stop (idempotent; cancels what is in flight and
// waits until every request has reached its terminal event).
//
// Every submitted request ends with exactly one terminal call, RequestSink::OnFinish, after zero
// or more OnToken calls. Sinks are called on the engine thread and must not block (the HTTP layer
// hands them to its own executor).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/token_constraint.h"
#include "ops/penalties.h"
#include "ops/sampling.h"

namespace gyre {

class Model;
class ModelRunner;
struct PromptEmbeds;  // runtime/model_runner.h
struct ModelConfig;

using RequestId = int64_t;

struct RequestParams {
  std::vector<int32_t> prompt;          // REQUIRED non-empty, ids < vocab
  int64_t max_tokens = 16;              // >= 1
  ops::SamplingParams sampling;         // temperature 0 → greedy; sampling.seed per request
  std::vector<int32_t> stop_ids;        // in addition to the model's EOS ids
  bool ignore_eos = false;
  int32_t top_logprobs = 0;             // 0..20: alternatives reported per token (logprob always reported)
  // Logit processing (ops/penalties.h): sampling has the penalties and min_tokens (<= max_tokens;
  // it masks EOS — unless ignore_eos — and stop_ids); logit_bias ids < vocab.
  std::vector<ops::LogitBias> logit_bias;
  // Structured output (may be null): every sampled token is drawn from the tokens it allows, and
  // it is advanced with each; the request stops when it is Complete (or at an allowed EOS). Such
  // a request is never launched ahead of its previous token (its mask depends on it), so it does
  // not take part in overlapped steps. A token it refuses, or a state that allows no token, ends
  // the request with kError.
  std::shared_ptr<TokenConstraint> constraint;
  // Multimodal prompt (may be null; docs/vision.md): embedding rows for some prompt positions (the
  // image tokens), fed instead of the table rows. CPU runner only (Submit refuses it otherwise).
  // Such a request bypasses the prefix cache: it neither hits nor publishes blocks.
  std::shared_ptr<const PromptEmbeds> prompt_embeds;
  // Disaggregation, prefill side (docs/disaggregation.md): the request ends after its first
  // sampled token, and instead of freeing its cache the engine hands it to the sink's
  // OnPrefilled and holds its pages and slot until Engine::ReleaseExported names it.
  bool export_prefilled = false;
};

// The cache of a request whose prompt is prefilled (RequestSink::OnPrefilled). Valid during the
// call only; the runner may be read there (ModelRunner::ReadPages / ReadSlotState: ordered like
// steps, so the reads see the finished prefill).
struct PrefilledSequence {
  ModelRunner* runner = nullptr;
  int32_t slot = -1;                 // SlotId
  std::span<const int32_t> pages;    // PageIds: the block table (at least the pages of num_tokens)
  int64_t num_tokens = 0;            // prompt tokens in the cache
  int32_t first_token = -1;          // the token sampled after the prompt (already sent to OnToken)
};


struct TokenEvent {
  int32_t id = 0;
  float logprob = 0;                                 // log-softmax of the sampled token (temperature 1)
  std::vector<std::pair<int32_t, float>> top;        // top_logprobs alternatives, best first
};

// Disaggregation, decode side (Engine::SubmitImported): a prefilled sequence brought from
// another instance. `write` fills the slot and pages the engine allocated for it (called on the
// engine thread, ordered like steps; ids are SlotId / PageIds); a failure ends the request with
// kError before any token is emitted. Then `first` is emitted and decoding continues from it.
struct ImportedSequence {
  int64_t num_tokens = 0;  // prompt tokens in the image (must equal the prompt's size)
  TokenEvent first;        // the token the prefill instance sampled
  std::function<Status(ModelRunner& runner, int32_t slot, std::span<const int32_t> pages)> write;
};

enum class FinishReason { kStop, kLength, kCancelled, kError };
const char* FinishReasonName(FinishReason r);  // "stop", "length", "cancelled", "error"

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  // Where the request's time went, in seconds (vLLM's phases): queue = Submit → first scheduled,
  // prefill = first scheduled → first token, decode = first token → last token. A phase the
  // request never reached is 0 (a request cancelled while waiting has only a queue time).
  double queue_s = 0, prefill_s = 0, decode_s = 0;
};

class RequestSink {
 public:
  virtual ~RequestSink() = default;
  virtual void OnToken(const TokenEvent& ev) = 0;
  // Terminal: called exactly once. `status` is OK unless reason == kError.
  virtual void OnFinish(FinishReason reason, const Status& status, const Usage& usage) = 0;
  // Requests with export_prefilled only, on the engine thread, after the first OnToken: the
  // prefilled cache. OK: the engine holds it until ReleaseExported(id, ...) (which then calls
  // OnFinish); an error ends the request with kError at once. Must not block (copy, then hand
  // the sending to another thread).
  virtual Status OnPrefilled(int64_t /*id*/, const PrefilledSequence& /*seq*/) {
    return Status::Unimplemented("this sink does not take prefilled caches");
  }
};

// Speculative decoding (docs/engine.md "Speculative decoding"), vLLM's --speculative-config.
struct SpeculativeOptions {
  // "": off; "ngram": prompt-lookup drafts; "mtp": the checkpoint's MTP layer, run by the runner
  // (StepPiece::mtp; the CPU runner and the CUDA model), chained greedily for k > 1 as vLLM does.
  std::string method;
  int64_t num_speculative_tokens = 3;   // k: drafts per verify step, 1..16
  int64_t prompt_lookup_max = 4;        // longest n-gram looked up
  int64_t prompt_lookup_min = 2;        // shortest (1 <= min <= max)
};
// Parses vLLM's JSON form, e.g. {"method":"ngram","num_speculative_tokens":3,
// "prompt_lookup_max":4,"prompt_lookup_min":2} or {"method":"mtp","num_speculative_tokens":1}
// ("deepseek_mtp" is read as "mtp"; prompt_lookup_* with "mtp" is refused). InvalidArgument
// naming the field at fault.
Result<SpeculativeOptions> ParseSpeculativeConfig(const std::string& json);

struct EngineOptions {
  int64_t max_num_seqs = 16;             // concurrent running sequences (<= the runner's slots)
  // Create(const Model&) only: the CPU runner's storage (a runner brings its own otherwise).
  int64_t kv_page_tokens = 16;           // tokens per DSA/MLA latent-cache page
  int64_t kv_memory_bytes = 256 << 20;   // budget of the paged latent cache (all layers)
  int64_t max_num_batched_tokens = 256;  // per-step token budget (prefill chunks + decodes)
  // While a request waits for admission (and a slot is free), or while more than one running
  // request still has prompt to prefill, a long prefill's piece is capped at this many tokens, and
  // while a request waits the long prefills together leave this many tokens for admission; short
  // prefills (a rest of at most this many tokens) are scheduled before long ones. So a short
  // request that arrives during one or several long chunked prefills starts at the next step
  // instead of after them (vLLM's --long-prefill-token-threshold, applied only under contention,
  // so a lone long prefill keeps the full budget). 0: off.
  int64_t long_prefill_token_threshold = 0;
  int64_t max_waiting = 256;             // queue bound; beyond it Submit returns ResourceExhausted
  int64_t max_model_len = 0;             // 0: derived from the KV budget (and capped by max_model_len_cap)
  int64_t max_model_len_cap = 0;         // > 0: a derived max_model_len is at most this (the model's trained length)
  // Launch step n+1 before collecting step n (the runner resolves the in-flight token on the
  // device), so scheduling and token emission overlap the model's work. Off: one step at a time.
  bool overlap_steps = true;
  // Prefix caching (docs/engine.md "Prefix caching"): full blocks of page_tokens tokens are
  // shared between requests by reference count, and the KDA state is checkpointed at
  // block-aligned positions so that a hit restores it and prefills only the rest. Needs a paged
  // attention cache (InvalidArgument otherwise).
  bool enable_prefix_caching = false;
  // Budget of the KDA checkpoints (runner memory apart from pages and slots; each holds one
  // slot's state, RunnerCapacity::bytes_per_slot). Must hold at least one when the model has KDA
  // layers. 0: automatic, max(256 MiB, 4 checkpoints).
  int64_t prefix_cache_checkpoint_bytes = 0;
  // Checkpoint policy during prefill: at the end of the known tokens aligned down to a block, and
  // every this many blocks (0: only at the end). During decode: at each block boundary, keeping
  // the latest one per request (so a finished turn leaves its end, aligned down).
  int64_t prefix_cache_checkpoint_interval_blocks = 16;
  // Speculative decoding: greedy requests without logit processing, structured output or
  // top_logprobs verify drafts; others decode as usual. Needs a runner whose capacity() has
  // `speculative` (the CPU runner; InvalidArgument otherwise).
  SpeculativeOptions speculative;
};

// Point-in-time counters for /metrics and `gyre inspect`.
struct EngineStats {
  int64_t num_running = 0, num_waiting = 0;
  int64_t kv_pages_total = 0, kv_pages_used = 0;
  int64_t kda_slots_total = 0, kda_slots_used = 0;
  int64_t kv_bytes_per_page = 0, kda_bytes_per_slot = 0;
  int64_t num_preemptions = 0;
  int64_t prompt_tokens_total = 0, generation_tokens_total = 0;
  int64_t requests_finished = 0;
  int64_t max_model_len = 0;
  // Starvation, live: the longest time any running or waiting request has gone without a piece in
  // a step (since Submit if it never had one), when the stats were last published (each step).
  // Decoding requests read about one step; a request admitted but given no budget, or queued,
  // grows. /metrics: gyre_request_max_stall_seconds.
  double max_request_stall_s = 0;
  // Prefix caching (zero when off). kv_pages_used above excludes the unreferenced cached blocks,
  // which the engine evicts when it needs pages: they are prefix_cache_evictable_blocks.
  bool prefix_caching = false;
  int64_t prefix_cache_queried_tokens = 0, prefix_cache_hit_tokens = 0;
  int64_t prefix_cache_blocks = 0, prefix_cache_evictable_blocks = 0, prefix_cache_block_evictions = 0;
  int64_t kda_checkpoints_used = 0, kda_checkpoints_total = 0, kda_checkpoint_bytes = 0;
  int64_t kda_checkpoint_evictions = 0;
  // Prompt (and recomputed) tokens run through the model: prefill work done, hits excluded.
  int64_t prefill_tokens_computed = 0;
  // Speculative decoding: verify pieces run, draft tokens proposed and accepted (the bonus token
  // of each verify piece is not a draft).
  int64_t spec_verify_pieces = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  // Per draft position j (0-based): drafts proposed at j and accepted at j (a draft at j is
  // accepted only when drafts 0..j-1 were): where a longer k stops paying (vLLM's
  // spec_decode_num_accepted_tokens_per_pos). Sized to the longest verify piece seen.
  std::vector<int64_t> spec_drafts_per_pos, spec_accepted_per_pos;
  // Disaggregation: prefilled requests holding their cache until the transfer is acknowledged.
  int64_t num_exported_held = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Errors: InvalidArgument for inconsistent options; ResourceExhausted if the budget cannot
  // hold even one maximal sequence page set.
  // Over `runner` (must outlive the engine): max_num_seqs and max_num_batched_tokens are capped by
  // its capacity, the page budget is the runner's page pool.
  static Result<std::unique_ptr<Engine>> Create(ModelRunner& runner, const EngineOptions& opts);
  // Over the CPU model: the engine owns a CpuRunner sized by kv_memory_bytes / kv_page_tokens /
  // max_num_seqs.
  static Result<std::unique_ptr<Engine>> Create(const Model& model, const EngineOptions& opts);

  virtual Status Start() = 0;
  virtual void Stop() = 0;

  // Queues a request. Errors (nothing queued, sink not called): InvalidArgument (empty prompt,
  // id out of range, bad sampling, prompt + max_tokens > max_model_len — the message gives the
  // numbers), ResourceExhausted (queue full: retry later), Unavailable (engine stopped).
  virtual Result<RequestId> Submit(RequestParams params, std::shared_ptr<RequestSink> sink) = 0;
  // Best effort: the request finishes with kCancelled at the next step if it has not finished.
  virtual void Cancel(RequestId id) = 0;

  // Disaggregation (docs/disaggregation.md). SubmitImported queues a request whose prompt was
  // prefilled elsewhere: `params.prompt` is the prompt (used for penalties and for a recompute
  // after preemption), `seq` its cache; errors as Submit, and InvalidArgument when seq.num_tokens
  // is not the prompt's size or params has export_prefilled or a constraint.
  virtual Result<RequestId> SubmitImported(RequestParams /*params*/, ImportedSequence /*seq*/,
                                           std::shared_ptr<RequestSink> /*sink*/) {
    return Status::Unimplemented("this engine does not import sequences");
  }
  // Ends an export_prefilled request held since OnPrefilled: its pages and slot are freed and its
  // sink gets OnFinish (kLength, or kError with `status` when not OK: the transfer failed). Any
  // thread; unknown ids are ignored.
  virtual void ReleaseExported(RequestId /*id*/, const Status& /*status*/) {}

  virtual EngineStats Stats() const = 0;
  virtual const ModelConfig& config() const = 0;
};

// The engine of an instance that does not generate (`gyre serve --role encode`: the vision tower
// only, no language model loaded): the model's config (vocabulary, EOS ids) and the context length
// requests are checked against, no runner and no pools. Submit refuses with InvalidArgument
// saying `why`; Stats reports max_model_len and zeros. Thread safety: every method, any thread.
std::unique_ptr<Engine> MakeNoGenerationEngine(ModelConfig config, int64_t max_model_len, std::string why);

}  // namespace gyre
