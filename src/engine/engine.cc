// Engine implementation: one engine thread, FCFS continuous batching with chunked prefill and
// recompute preemption over a ModelRunner. Sections: request record; EngineImpl (submit/cancel/
// stats); the step (schedule → runner step (forward + sample) → emit); factory.
#include "engine/engine.h"

#include <algorithm>
#include <limits>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "core/trace.h"
#include <nlohmann/json.hpp>

#include "engine/ngram_draft.h"
#include "engine/prefix_cache.h"
#include "runtime/cpu_runner.h"
#include "runtime/memory_pools.h"
#include "runtime/model.h"
#include "runtime/model_runner.h"

namespace gyre {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "?";
}

namespace {

const int32_t kPrevTokenId = kPrevToken;  // addressable: a piece's ids span points at it

// ---- request record ------------------------------------------------------------------------------

struct Request {
  RequestId id = 0;
  RequestParams params;
  std::shared_ptr<RequestSink> sink;
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t num_prompt = 0;
  // Tokens in the runner's cache once every launched step has run. With overlapped steps the
  // newest samples are not known yet: `pending` of them are in flight, at positions
  // tokens.size() … tokens.size() + pending − 1.
  int64_t num_scheduled = 0;
  int pending = 0;
  int64_t epoch = 0;            // bumped on preemption: results of steps launched before are dropped
  SlotId slot = -1;             // -1 while waiting (or after preemption)
  std::vector<PageId> pages;    // block table
  bool cancel = false;
  std::vector<uint32_t> mask;   // constrained requests: the allowed tokens of the piece being launched
  std::vector<int32_t> min_stop_ids;  // min_tokens > 0: the ids that would end it (masked until then)
  // Prefix caching: the cached blocks this request holds; the checkpoint policy's end (the tokens
  // known at admission, aligned down to a block); tokens known at admission (prefill work); a
  // decode checkpoint saved for a block not settled yet (its last token is in flight); the latest
  // decode checkpoint attached (replaced by the next one); lost: a runner error, publish nothing.
  PrefixCache::Seq cache;
  int64_t ckpt_end = 0, num_prefill = 0;
  CheckpointId pending_ckpt = -1, decode_ckpt = -1;
  int64_t pending_block = -1, decode_block = -1;
  bool lost = false;
  // Speculative decoding: whether this request verifies drafts (greedy, no logit processing), and
  // the ids of its verify piece in flight: its next known token, then the drafts.
  bool spec = false;
  std::vector<int32_t> spec_ids;
  std::unique_ptr<NgramIndex> ngram;  // its n-gram drafter (made at its first speculative step)
  std::vector<int32_t> mtp_drafts;    // method "mtp": the runner's drafts after its latest token
  // SubmitImported: the prefilled cache to write at admission (then null: a recompute after
  // preemption prefills prompt + generated tokens as usual).
  std::unique_ptr<ImportedSequence> imported;
  // Phase boundaries for Usage (steady clock): Submit, first admission, first and last token.
  // Zero until reached; a preempted request keeps its first admission.
  std::chrono::steady_clock::time_point submitted, first_scheduled, first_token, last_token;
  // The last step that ran a piece of it (Submit until then): EngineStats::max_request_stall_s.
  std::chrono::steady_clock::time_point last_scheduled;
  int64_t num_generated() const { return static_cast<int64_t>(tokens.size()) - num_prompt; }
};

// ---- EngineImpl ----------------------------------------------------------------------------------

class EngineImpl final : public Engine {
 public:
  EngineImpl(ModelRunner& runner, std::unique_ptr<ModelRunner> owned, const EngineOptions& o, int64_t max_model_len,
             int64_t num_checkpoints)
      : owned_runner_(std::move(owned)),
        runner_(runner),
        cap_(runner.capacity()),
        opts_(o),
        pages_(cap_.num_pages, "KV pages"),
        slots_(std::min(o.max_num_seqs, cap_.num_slots), "KDA state slots"),
        max_model_len_(max_model_len) {
    if (o.enable_prefix_caching) {
      cache_ = std::make_unique<PrefixCache>(&pages_, cap_.page_tokens, num_checkpoints, cap_.bytes_per_slot > 0);
    }
  }

  ~EngineImpl() override { Stop(); }

  Status Start() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (started_) return Status::InvalidArgument("engine already started");
    }
    PublishStats();  // budgets are visible before the first step (the engine thread is not running yet)
    std::lock_guard<std::mutex> l(mu_);
    started_ = true;
    running_flag_ = true;
    thread_ = std::thread([this] { Loop(); });
    return Status();
  }

  void Stop() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!running_flag_) return;
      running_flag_ = false;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  Result<RequestId> Submit(RequestParams p, std::shared_ptr<RequestSink> sink) override {
    return Enqueue(std::move(p), nullptr, std::move(sink));
  }

  Result<RequestId> SubmitImported(RequestParams p, ImportedSequence seq, std::shared_ptr<RequestSink> sink) override {
    if (seq.num_tokens != static_cast<int64_t>(p.prompt.size()))
      return Status::InvalidArgument("the imported cache holds " + std::to_string(seq.num_tokens) +
                                     " tokens but the prompt has " + std::to_string(p.prompt.size()));
    if (p.export_prefilled || p.constraint)
      return Status::InvalidArgument("an imported request cannot be exported again or carry structured output");
    if (!seq.write) return Status::InvalidArgument("the imported sequence has no writer");
    if (seq.first.id < 0 || seq.first.id >= runner_.config().vocab_size)
      return Status::InvalidArgument("the imported first token is outside the vocabulary");
    return Enqueue(std::move(p), std::make_unique<ImportedSequence>(std::move(seq)), std::move(sink));
  }

  void ReleaseExported(RequestId id, const Status& status) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      releases_.emplace_back(id, status);
    }
    cv_.notify_all();
  }

 private:
  Result<RequestId> Enqueue(RequestParams p, std::unique_ptr<ImportedSequence> imported,
                            std::shared_ptr<RequestSink> sink) {
    const ModelConfig& c = runner_.config();
    if (p.prompt.empty()) return Status::InvalidArgument("the prompt is empty");
    for (int32_t id : p.prompt) {
      if (id < 0 || id >= c.vocab_size) {
        return Status::InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                       std::to_string(c.vocab_size) + ")");
      }
    }
    if (p.max_tokens < 1) return Status::InvalidArgument("max_tokens must be >= 1");
    if (p.prompt_embeds) {
      if (!runner_.capacity().prompt_embeds)
        return Status::Unimplemented("image inputs (prompt embeddings) are not built for the " + runner_.backend() +
                                     " runner");
      const PromptEmbeds& e = *p.prompt_embeds;
      if (e.width != c.hidden_size || e.rows.size() != e.positions.size() * static_cast<size_t>(e.width) ||
          !std::is_sorted(e.positions.begin(), e.positions.end()) ||
          (!e.positions.empty() && (e.positions.front() < 0 ||
                                    e.positions.back() >= static_cast<int64_t>(p.prompt.size()))))
        return Status::InvalidArgument("prompt embeddings do not fit the prompt or the model's hidden size");
    }
    if (p.top_logprobs < 0 || p.top_logprobs > 20) return Status::InvalidArgument("top_logprobs must be in [0, 20]");
    GYRE_RETURN_IF_ERROR(ops::ValidateSampling(p.sampling));
    if (p.sampling.min_tokens > p.max_tokens)
      return Status::InvalidArgument("min_tokens (" + std::to_string(p.sampling.min_tokens) +
                                     ") must be <= max_tokens (" + std::to_string(p.max_tokens) + ")");
    for (const ops::LogitBias& b : p.logit_bias) {
      if (b.id < 0 || b.id >= c.vocab_size)
        return Status::InvalidArgument("logit_bias token id " + std::to_string(b.id) +
                                       " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
    }
    const int64_t need = static_cast<int64_t>(p.prompt.size()) + p.max_tokens;
    if (need > max_model_len_) {
      return Status::InvalidArgument("This model's maximum context length is " + std::to_string(max_model_len_) +
                                     " tokens. However, you requested " + std::to_string(need) + " tokens (" +
                                     std::to_string(p.prompt.size()) + " in the prompt, " +
                                     std::to_string(p.max_tokens) + " in the completion).");
    }
    auto r = std::make_unique<Request>();
    r->params = std::move(p);
    r->sink = std::move(sink);
    r->tokens = r->params.prompt;
    r->num_prompt = static_cast<int64_t>(r->tokens.size());
    if (r->params.sampling.min_tokens > 0) {  // (an id outside the vocabulary is never sampled anyway)
      for (int32_t id : r->params.stop_ids)
        if (id >= 0 && id < c.vocab_size) r->min_stop_ids.push_back(id);
      if (!r->params.ignore_eos)
        for (int32_t id : c.eos_token_ids)
          if (id >= 0 && id < c.vocab_size) r->min_stop_ids.push_back(id);
    }
    {
      const RequestParams& q = r->params;
      // Greedy or sampled (rejection sampling in the runner keeps the distribution); logit
      // processing and alternatives are per-row work the verify rows do not do.
      r->spec = !opts_.speculative.method.empty() && !ops::HasPenalties(q.sampling) &&
                q.sampling.min_tokens == 0 && q.logit_bias.empty() && !q.constraint && q.top_logprobs == 0;
    }
    r->imported = std::move(imported);
    r->submitted = r->last_scheduled = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> l(mu_);
    if (!running_flag_) return Status::Unavailable("the engine is not running");
    if (static_cast<int64_t>(inbox_.size() + num_waiting_) >= opts_.max_waiting) {
      return Status::ResourceExhausted("the request queue is full (" + std::to_string(opts_.max_waiting) +
                                       " waiting); retry later");
    }
    r->id = next_id_++;
    const RequestId id = r->id;
    inbox_.push_back(std::move(r));
    cv_.notify_all();
    return id;
  }

 public:
  void Cancel(RequestId id) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      cancels_.push_back(id);
    }
    cv_.notify_all();
  }

  EngineStats Stats() const override {
    std::lock_guard<std::mutex> l(mu_);
    return stats_;
  }
  const ModelConfig& config() const override { return runner_.config(); }

 private:
  // ---- the engine thread ----
  void Loop() {
    // Steps launched ahead of the one being collected: 1 overlaps scheduling and emission with the
    // GPU's work on the previous step; 0 runs one step at a time.
    const size_t depth = opts_.overlap_steps ? 1 : 0;
    while (true) {
      std::vector<std::unique_ptr<Request>> incoming;
      std::vector<RequestId> cancels;
      std::vector<std::pair<RequestId, Status>> releases;
      bool stopping = false;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] {
          return !running_flag_ || !inbox_.empty() || !cancels_.empty() || !releases_.empty() || HasWork() ||
                 !inflight_.empty();
        });
        stopping = !running_flag_;
        for (auto& r : inbox_) incoming.push_back(std::move(r));
        inbox_.clear();
        cancels.swap(cancels_);
        releases.swap(releases_);
      }
      for (auto& r : incoming) {
        trace::Record({"admit.queue", "sched", trace::NowNs(), -1, trace::ThreadId(), trace::Attrs{.request = r->id}});
        waiting_.push_back(std::move(r));
      }
      for (RequestId id : cancels) MarkCancelled(id);
      for (const auto& [id, status] : releases) {
        auto it = exported_.find(id);
        if (it == exported_.end()) continue;  // (released twice, or ended at Stop)
        if (status.ok()) Finish(*it->second, FinishReason::kLength);
        else Finish(*it->second, FinishReason::kError, status);
        exported_.erase(it);
      }
      if (stopping) {
        for (auto& [id, r] : exported_) Finish(*r, FinishReason::kCancelled);
        exported_.clear();
        for (auto& r : running_) r->cancel = true;
        for (auto& r : waiting_) r->cancel = true;
      }
      ReapCancelled();
      if (stopping) {
        while (!inflight_.empty()) CollectOldest();  // nothing is left in flight on the runner
        PublishStats();
        return;
      }
      // Steps with prefill pieces run eagerly, and an eager CUDA launch synchronises inside (the
      // chunked KDA's pageable uploads, workspace growth), which would hold the previous step's
      // tokens back for the length of this one: collect first, then launch (measured: ITL p99
      // 33 → 48-60 ms at c = 64 / 256 when prefills were launched ahead).
      if (!inflight_.empty() && PrefillNext()) CollectOldest();
      bool launched = false;
      if (HasWork() && inflight_.size() <= depth) launched = LaunchStep();
      if (!inflight_.empty() && (!launched || inflight_.size() > depth)) {
        CollectOldest();
      } else if (!launched && inflight_.empty() && HasWork()) {
        std::unique_lock<std::mutex> l(mu_);  // nothing can run now: wait for an event, not spin
        cv_.wait_for(l, std::chrono::milliseconds(1));
      }
      PublishStats();
    }
  }

  // Whether the next step would carry a prefill piece (a new request, a recompute or a chunk).
  bool PrefillNext() const {
    if (!waiting_.empty() && slots_.num_free() > 0) return true;
    for (const auto& r : running_)
      if (static_cast<int64_t>(r->tokens.size()) - r->num_scheduled > 1) return true;
    return false;
  }

  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }
  // An export_prefilled request stops after its first token (the decode instance goes on).
  static int64_t MaxTokens(const Request& r) { return r.params.export_prefilled ? 1 : r.params.max_tokens; }

  void MarkCancelled(RequestId id) {
    for (auto& r : running_)
      if (r->id == id) r->cancel = true;
    for (auto& r : waiting_)
      if (r->id == id) r->cancel = true;
  }

  // Pages and slot back to the pools (the runner's storage behind them is dead until reused).
  void FreeMemory(Request& r) {
    if (cache_) {
      if (!r.lost) SettleCache(r);  // what it computed stays cached
      if (r.pending_ckpt >= 0) cache_->FreeCheckpoint(r.pending_ckpt);
      r.pending_ckpt = r.decode_ckpt = -1;
      for (PageId p : r.pages)
        if (!cache_->IsCached(p)) pages_.Release(p);
      cache_->Release(&r.cache);
    } else {
      pages_.Release(r.pages);
    }
    r.pages.clear();
    if (r.slot >= 0) slots_.Release(r.slot);
    r.slot = -1;
    r.num_scheduled = 0;
    r.pending = 0;
    ++r.epoch;  // any result still in flight for this request is dropped
  }

  // Whether `n` pages are free, evicting unreferenced cached blocks first.
  bool HaveFreePages(int64_t n) { return cache_ ? cache_->MakeFree(n) : pages_.num_free() >= n; }

  // ---- prefix caching: checkpoint policy and settling ----
  bool CheckpointAt(const Request& r, int64_t c) const {
    if (!cache_ || cap_.bytes_per_slot == 0 || c <= 0 || c % cap_.page_tokens != 0) return false;
    if (c >= r.ckpt_end) return true;  // the end, then each block boundary of the decode
    const int64_t every = opts_.prefix_cache_checkpoint_interval_blocks * cap_.page_tokens;
    return every > 0 && c % every == 0;
  }
  // The first prefill checkpoint position after `from` (chunks stop there so the state exists).
  int64_t NextCut(const Request& r, int64_t from) const {
    if (!cache_ || cap_.bytes_per_slot == 0 || from >= r.ckpt_end) return INT64_MAX;
    const int64_t every = opts_.prefix_cache_checkpoint_interval_blocks * cap_.page_tokens;
    const int64_t next = every > 0 ? (from / every + 1) * every : INT64_MAX;
    return std::min(next, r.ckpt_end);
  }
  // Publishes the request's full blocks whose tokens are known and written, and attaches a
  // pending decode checkpoint once its block is settled.
  void SettleCache(Request& r) {
    if (r.params.prompt_embeds) return;  // never published (see admission)
    const int64_t known = std::min<int64_t>(r.num_scheduled, static_cast<int64_t>(r.tokens.size()));
    cache_->Publish(&r.cache, r.tokens, r.pages, known / cap_.page_tokens);
    if (r.pending_ckpt >= 0 && r.pending_block < static_cast<int64_t>(r.cache.refs.size())) {
      AttachDecodeCheckpoint(r, r.pending_block, r.pending_ckpt);
      r.pending_ckpt = -1;
    } else if (r.pending_ckpt >= 0 && r.cache.stopped) {
      cache_->FreeCheckpoint(r.pending_ckpt);
      r.pending_ckpt = -1;
    }
  }
  void AttachDecodeCheckpoint(Request& r, int64_t block, CheckpointId ck) {
    const bool decode = (block + 1) * cap_.page_tokens > r.ckpt_end;
    cache_->Attach(r.cache, block, ck);
    if (!decode || cache_->CheckpointOf(r.cache, block) != ck) return;
    if (r.decode_ckpt >= 0) cache_->Drop(r.cache, r.decode_block, r.decode_ckpt);  // keep the latest
    r.decode_ckpt = ck;
    r.decode_block = block;
  }
  // After a launch that brought `r` to num_scheduled: settle blocks, and save the state if the
  // policy checkpoints this position. A failed save is a runner error.
  Status AfterLaunch(Request& r) {
    if (r.params.prompt_embeds) return Status::Ok();
    SettleCache(r);
    const int64_t c = r.num_scheduled;
    if (!CheckpointAt(r, c) || r.cache.stopped) return Status::Ok();
    const int64_t j = c / cap_.page_tokens - 1;
    const bool settled = j < static_cast<int64_t>(r.cache.refs.size());
    if (settled && cache_->CheckpointOf(r.cache, j) >= 0) return Status::Ok();  // there already
    if (!settled && r.pending_ckpt >= 0) return Status::Ok();  // (one decode block at a time)
    const CheckpointId ck = cache_->NewCheckpoint();
    if (ck < 0) return Status::Ok();  // every checkpoint is held: skip this one
    if (Status s = runner_.SaveState(r.slot, ck); !s.ok()) {
      cache_->FreeCheckpoint(ck);
      return s;
    }
    if (settled) {
      AttachDecodeCheckpoint(r, j, ck);
    } else {
      r.pending_ckpt = ck;
      r.pending_block = j;
    }
    return Status::Ok();
  }

  int64_t PagesFor(int64_t tokens) const {
    return cap_.num_pages > 0 ? (tokens + cap_.page_tokens - 1) / cap_.page_tokens : 0;
  }
  // Takes pages so that `r` holds `tokens` tokens. REQUIRES: enough free (checked by the caller).
  void Grow(Request& r, int64_t tokens) {
    const int64_t extra = PagesFor(tokens) - static_cast<int64_t>(r.pages.size());
    if (extra <= 0) return;
    auto got = pages_.Allocate(extra);
    GYRE_CHECK(got.ok());
    r.pages.insert(r.pages.end(), got->begin(), got->end());
  }

  void Finish(Request& r, FinishReason reason, const Status& s = Status()) {
    FreeMemory(r);
    ++requests_finished_;
    r.sink->OnFinish(reason, s, PhaseUsage(r));
  }

  // Usage with the phase times; a request still waiting has queued until now.
  static Usage PhaseUsage(const Request& r) {
    using TimePoint = std::chrono::steady_clock::time_point;
    auto seconds = [](TimePoint from, TimePoint to) {
      return from == TimePoint{} || to == TimePoint{} ? 0.0 : std::chrono::duration<double>(to - from).count();
    };
    Usage u{r.num_prompt, r.num_generated()};
    const bool admitted = r.first_scheduled != TimePoint{};
    u.queue_s = seconds(r.submitted, admitted ? r.first_scheduled : std::chrono::steady_clock::now());
    u.prefill_s = seconds(r.first_scheduled, r.first_token);
    u.decode_s = seconds(r.first_token, r.last_token);
    return u;
  }

  void ReapCancelled() {
    for (auto* q : {&running_, &waiting_}) {
      for (auto it = q->begin(); it != q->end();) {
        if ((*it)->cancel) {
          Finish(**it, FinishReason::kCancelled);
          it = q->erase(it);
        } else {
          ++it;
        }
      }
    }
  }

  // Frees the newest running request's memory and requeues it at the front of the waiting queue;
  // it recomputes prompt + generated tokens when readmitted.
  void PreemptNewest() {
    auto victim = std::move(running_.back());
    running_.pop_back();
    FreeMemory(*victim);
    ++num_preemptions_;
    trace::Record({"preempt", "sched", trace::NowNs(), -1, trace::ThreadId(), trace::Attrs{.request = victim->id}});
    waiting_.push_front(std::move(victim));
  }

  // Schedules and launches one step. Returns false when nothing could be scheduled.
  bool LaunchStep() {
    GYRE_SPAN("engine.step", "sched");
    int64_t budget = std::min(opts_.max_num_batched_tokens, cap_.max_step_tokens);
    const size_t max_pieces = static_cast<size_t>(std::max<int64_t>(1, cap_.max_step_pieces));
    std::vector<Request*> sched;
    std::vector<StepPiece> pieces;
    // The next piece of a running request: its unscheduled known tokens (prefill, recompute, or
    // the token collected last), or one decode token whose id is the sample still in flight.
    // Returns false when it has nothing to run now (its last allowed sample is in flight).
    bool admitting = false;  // (admission sizes the first piece itself: never a verify piece there)
    // Prefill pieces of running requests give way to waiting ones and to each other
    // (long_prefill_token_threshold): capped while a request waits with a slot free, or while more
    // than one running request still has prompt to prefill (a short request admitted with part of
    // its prompt would otherwise wait behind an older long prefill until it ends).
    // While a request waits, the running prefills together also leave `threshold` tokens of the
    // budget for admission (prefill_room): two long prefills capped at half the budget each would
    // otherwise take all of it.
    int64_t piece_cap = std::numeric_limits<int64_t>::max(), prefill_room = piece_cap;
    bool long_pass = false;  // the cap and the room apply to long prefills (pass 2 below)
    // The pass of a running request in step 1 below: 0 decoding (at most one known token left to
    // run), 1 a short prefill (with a threshold: a rest of at most `threshold` tokens), 2 a long one.
    const int64_t short_rest = opts_.long_prefill_token_threshold;
    auto pass_of = [short_rest](const Request& r) {
      const int64_t rest = static_cast<int64_t>(r.tokens.size()) - r.num_scheduled;
      return rest <= 1 ? 0 : (short_rest > 0 && rest <= short_rest ? 1 : 2);
    };
    if (opts_.long_prefill_token_threshold > 0) {
      int64_t prefilling = 0;
      for (const auto& r : running_) prefilling += pass_of(*r) != 0;
      const bool admissible = !waiting_.empty() && slots_.num_free() > 0;
      if (admissible || prefilling > 1) piece_cap = opts_.long_prefill_token_threshold;
      if (admissible) prefill_room = std::max<int64_t>(0, budget - opts_.long_prefill_token_threshold);
    }
    auto next_piece = [&](Request* r, StepPiece* p) {
      const int64_t known = static_cast<int64_t>(r->tokens.size());
      const bool prev = r->num_scheduled >= known;
      if (prev && r->pending == 0) return false;  // (cannot happen: nothing to run)
      const int64_t n = prev ? 1
                             : std::min({known - r->num_scheduled, budget, NextCut(*r, r->num_scheduled) - r->num_scheduled,
                                         admitting || !long_pass ? std::numeric_limits<int64_t>::max()
                                                                 : std::min(piece_cap, prefill_room)});
      if (n <= 0) return false;  // (a running prefill with no room left in this step)
      const bool samples = r->num_scheduled + n == known + r->pending;
      if (samples && r->num_generated() + r->pending >= MaxTokens(*r)) return false;
      // A constrained request's mask depends on its previous token: never launched ahead of it.
      if (r->params.constraint && r->pending > 0) return false;
      // So is a speculating request: its drafts need its previous token, and a verify piece must
      // be committed (at collection) before the slot's next piece.
      if (r->spec && r->pending > 0) return false;
      p->slot = r->slot;
      p->start = r->num_scheduled;
      p->ids = prev ? std::span<const int32_t>(&kPrevTokenId, 1)
                    : std::span<const int32_t>(r->tokens).subspan(r->num_scheduled, n);
      p->sample.enabled = samples;
      p->sample.params = r->params.sampling;
      p->sample.offset = static_cast<uint64_t>(r->num_generated() + r->pending);
      p->sample.top_logprobs = r->params.top_logprobs;
      p->sample.logit_bias = r->params.logit_bias;
      p->sample.stop_ids = r->min_stop_ids;
      p->num_prompt = r->num_prompt;
      if (r->params.prompt_embeds && !prev && p->start < r->num_prompt) p->embeds = r->params.prompt_embeds.get();
      // MTP drafts: every piece of a speculating request runs the MTP layer (its cache stays
      // whole) and drafts after the token it samples.
      const SpeculativeOptions& so = opts_.speculative;
      const bool mtp = so.method == "mtp";
      if (mtp && r->spec) p->mtp = static_cast<int32_t>(so.num_speculative_tokens);
      // A decode position of a speculating request: verify drafts after its known token (n-gram
      // lookup, or the MTP drafts of its previous step).
      if (r->spec && !admitting && !prev && n == 1 && known == r->num_scheduled + 1 && r->num_generated() >= 1) {
        const int64_t k = std::min({so.num_speculative_tokens, r->params.max_tokens - r->num_generated() - 1, budget - 1});
        std::vector<int32_t> drafts;
        if (mtp) {
          drafts.assign(r->mtp_drafts.begin(), r->mtp_drafts.begin() + std::clamp<int64_t>(k, 0, r->mtp_drafts.size()));
        } else if (k >= 1) {
          if (!r->ngram) r->ngram = std::make_unique<NgramIndex>(so.prompt_lookup_min, so.prompt_lookup_max);
          r->ngram->Draft(r->tokens, k, &drafts);
        }
        if (!drafts.empty()) {
          r->spec_ids.assign(1, r->tokens.back());
          r->spec_ids.insert(r->spec_ids.end(), drafts.begin(), drafts.end());
          p->ids = r->spec_ids;
          p->speculative = true;
        }
      }
      return true;
    };
    // 1. Running requests, oldest first, in three passes: those decoding (at most one known token
    //    left to run), then (with a threshold) short prefills, whose rest fits in `threshold`
    //    tokens, then the long prefills, capped as above. So an older request's long prefill
    //    cannot take the budget from newer requests' decode tokens, nor from a short request
    //    admitted with part of its prompt. A request that cannot get a page preempts the newest
    //    running request (possibly itself) unless that one already has a piece in this step; then
    //    it waits for a later step.
    // in_step[i]: running_[i] has a piece in this step (preemption only pops from the back, so
    // indices stay valid).
    std::vector<char> in_step(running_.size(), 0);
    for (const int pass : {0, 1, 2}) {
      long_pass = pass == 2;
      for (size_t i = 0; i < running_.size() && budget > 0 && sched.size() < max_pieces;) {
        Request* r = running_[i].get();
        StepPiece p;
        if (pass_of(*r) != pass || in_step[i] || !next_piece(r, &p)) {
          ++i;
          continue;
        }
        const int64_t n = static_cast<int64_t>(p.ids.size());
        if (!HaveFreePages(PagesFor(r->num_scheduled + n) - static_cast<int64_t>(r->pages.size()))) {
          if (in_step[running_.size() - 1]) {
            ++i;
            continue;
          }
          PreemptNewest();
          continue;  // retry the same index (the list shrank from the back)
        }
        Grow(*r, r->num_scheduled + n);
        sched.push_back(r);
        pieces.push_back(p);
        in_step[i] = 1;
        budget -= n;
        if (long_pass) prefill_room -= n;
        ++i;
      }
    }
    long_pass = false;
    // 2. Admit waiting requests FCFS while a slot, pages and budget allow.
    while (budget > 0 && !waiting_.empty() && sched.size() < max_pieces) {
      Request* r = waiting_.front().get();
      if (slots_.num_free() == 0) break;
      if (r->imported) {
        admitting = true;  // (its first piece is a plain decode, never a verify piece)
        const bool admitted = AdmitImported(r, sched, pieces, budget, next_piece);
        admitting = false;
        if (!admitted) break;
        continue;
      }
      const int64_t known = static_cast<int64_t>(r->tokens.size());
      // A prefix-cache hit: the deepest restorable prefix, leaving at least the last token to run.
      PrefixCache::Match hit;
      // (a multimodal prompt bypasses the cache: its ids do not say which image they hold)
      const bool cacheable = cache_ && !r->params.prompt_embeds;
      if (cacheable) hit = cache_->Acquire(r->tokens, known - 1, &r->cache);
      r->ckpt_end = known / cap_.page_tokens * cap_.page_tokens;
      r->num_prefill = known;
      r->num_scheduled = hit.tokens;
      const int64_t n = std::min({known - hit.tokens, budget, NextCut(*r, hit.tokens) - hit.tokens});
      if (!HaveFreePages(PagesFor(hit.tokens + n) - static_cast<int64_t>(hit.pages.size()))) {
        if (cache_) cache_->Release(&r->cache);
        r->num_scheduled = 0;
        break;
      }
      r->slot = *slots_.AllocateOne();
      r->pages = hit.pages;
      if (r->first_scheduled == std::chrono::steady_clock::time_point{}) {
        r->first_scheduled = std::chrono::steady_clock::now();
      }
      r->pending = 0;
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
      if (hit.tokens > 0) {
        if (Status s = runner_.RestoreState(hit.checkpoint, r->slot, hit.tokens); !s.ok()) {
          FailRunning({r}, s);
          continue;
        }
        trace::Record({"prefix.hit", "sched", trace::NowNs(), -1, trace::ThreadId(),
                       trace::Attrs{.request = r->id, .tokens = hit.tokens}});
      }
      if (cacheable) cache_->CountLookup(known, hit.tokens);
      StepPiece p;
      admitting = true;
      next_piece(r, &p);  // a fresh request always has a piece (max_tokens >= 1)
      admitting = false;
      // The runner forgot the restored slot's token counts: the piece brings them.
      if (hit.tokens > 0 && ops::HasPenalties(r->params.sampling))
        p.history = std::span<const int32_t>(r->tokens).first(static_cast<size_t>(hit.tokens));
      Grow(*r, hit.tokens + n);
      sched.push_back(r);
      pieces.push_back(p);
      budget -= n;
    }
    if (sched.empty()) return false;
    // Block tables last: Grow may reallocate a request's page vector while pieces are built.
    for (size_t i = 0; i < sched.size(); ++i) pieces[i].pages = sched[i]->pages;
    // Token masks of constrained requests (their automata have seen every sampled token: none is
    // in flight).
    std::vector<Request*> dead_ends;
    for (size_t i = 0; i < sched.size(); ++i) {
      Request* r = sched[i];
      if (!r->params.constraint || !pieces[i].sample.enabled) continue;
      GYRE_SPAN("engine.token_mask", "sched");
      r->mask.resize(static_cast<size_t>((runner_.config().vocab_size + 31) / 32));
      if (!r->params.constraint->FillMask(r->mask)) dead_ends.push_back(r);
      pieces[i].sample.allowed = r->mask;
    }
    if (!dead_ends.empty()) {  // (a trimmed automaton always allows a token; kept as a guard)
      FailRunning(dead_ends, Status::Internal("structured output: no token can continue the output"));
      return true;
    }
    // 3. Launch; the sampled tokens come back in CollectOldest.
    Status s = runner_.Launch(pieces);
    if (!s.ok()) {
      FailRunning(sched, s);
      return true;
    }
    InFlight f;
    Status saved;
    const auto launched = std::chrono::steady_clock::now();
    for (size_t i = 0; i < sched.size(); ++i) {
      Request* r = sched[i];
      r->last_scheduled = launched;
      const int64_t n = static_cast<int64_t>(pieces[i].ids.size());
      prefill_tokens_computed_ += std::max<int64_t>(0, std::min(r->num_scheduled + n, r->num_prefill) - r->num_scheduled);
      r->num_scheduled += n;
      // (a verify piece settles its cache after the commit, when its length is known)
      if (cache_ && saved.ok() && !pieces[i].speculative) saved = AfterLaunch(*r);
      if (pieces[i].sample.enabled) ++r->pending;
      f.ids.push_back(r->id);
      f.epochs.push_back(r->epoch);
      f.samples.push_back(pieces[i].sample.enabled);
      f.drafts.push_back(pieces[i].speculative ? static_cast<int32_t>(n - 1) : 0);
    }
    inflight_.push_back(std::move(f));
    if (!saved.ok()) FailRunning(sched, saved);
    return true;
  }

  // Admits the imported request at the front of the waiting queue: slot and pages for its cache,
  // the cache written through its writer, its first token emitted, and its first decode piece
  // scheduled. False when pages are short (it stays waiting).
  template <typename NextPiece>
  bool AdmitImported(Request* r, std::vector<Request*>& sched, std::vector<StepPiece>& pieces, int64_t& budget,
                     NextPiece& next_piece) {
    const int64_t n_tok = r->imported->num_tokens;
    if (!HaveFreePages(PagesFor(n_tok + 1))) return false;
    r->slot = *slots_.AllocateOne();
    if (cache_) cache_->Acquire(r->tokens, 0, &r->cache);  // a miss: an empty sequence to publish into
    Grow(*r, n_tok);
    if (r->first_scheduled == std::chrono::steady_clock::time_point{}) r->first_scheduled = std::chrono::steady_clock::now();
    r->pending = 0;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    std::unique_ptr<ImportedSequence> imp = std::move(r->imported);
    auto end_now = [&](FinishReason reason, const Status& s) {
      Finish(*r, reason, s);
      running_.pop_back();
      return true;
    };
    {
      GYRE_SPAN("engine.import", "sched");
      if (Status s = imp->write(runner_, r->slot, r->pages); !s.ok()) {
        r->lost = true;
        return end_now(FinishReason::kError, s);
      }
    }
    r->num_scheduled = r->num_prefill = n_tok;
    r->ckpt_end = n_tok / cap_.page_tokens * cap_.page_tokens;
    EmitToken(*r, imp->first.id, imp->first.logprob, imp->first.top);
    if (auto fr = finish_reason_.find(r->id); fr != finish_reason_.end()) {
      const FinishReason reason = fr->second;
      finish_reason_.erase(fr);
      return end_now(reason, Status());
    }
    StepPiece p;
    if (!next_piece(r, &p)) return true;  // (cannot happen: the first token is known, not in flight)
    if (ops::HasPenalties(r->params.sampling)) p.history = std::span<const int32_t>(r->tokens).first(static_cast<size_t>(n_tok));
    Grow(*r, n_tok + 1);
    sched.push_back(r);
    pieces.push_back(p);
    budget -= 1;
    return true;
  }

  // Hands the prefilled cache of an export_prefilled request to its sink.
  Status Export(Request& r) {
    GYRE_SPAN("engine.export", "sched");
    PrefilledSequence seq;
    seq.runner = &runner_;
    seq.slot = r.slot;
    seq.pages = r.pages;
    seq.num_tokens = r.num_prompt;
    seq.first_token = r.tokens.back();
    return r.sink->OnPrefilled(r.id, seq);
  }

  // Ends `reqs` (and every running request marked cancelled) with an error.
  void FailRunning(const std::vector<Request*>& reqs, const Status& s) {
    for (Request* r : reqs) r->cancel = r->lost = true;  // states are unknown now: end these requests
    if (cache_) cache_->Clear();  // so are the blocks and checkpoints the failed steps wrote
    for (auto it = running_.begin(); it != running_.end();) {
      if ((*it)->cancel) {
        Finish(**it, FinishReason::kError, s);
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Emits one collected token of `r`: structured output, the sink, stop conditions.
  void EmitToken(Request& r, int32_t id, float logprob, const std::vector<std::pair<int32_t, float>>& top) {
    const std::vector<int32_t>& stops_eos = runner_.config().eos_token_ids;
    if (r.params.constraint) {
      Status a = r.params.constraint->Accept(id);
      if (!a.ok()) {
        finish_status_[r.id] = Status::Internal("structured output: " + a.message());
        finish_reason_[r.id] = FinishReason::kError;
        return;
      }
    }
    TokenEvent ev;
    ev.id = id;
    ev.logprob = logprob;
    ev.top = top;
    r.tokens.push_back(id);
    r.last_token = std::chrono::steady_clock::now();
    if (r.num_generated() == 1) {
      prompt_tokens_total_ += r.num_prompt;
      r.first_token = r.last_token;
    }
    ++generation_tokens_total_;
    if (cache_) SettleCache(r);
    r.sink->OnToken(ev);
    const auto& p = r.params;
    const bool stop = std::find(p.stop_ids.begin(), p.stop_ids.end(), id) != p.stop_ids.end() ||
                      (!p.ignore_eos && std::find(stops_eos.begin(), stops_eos.end(), id) != stops_eos.end());
    if (stop || (p.constraint && p.constraint->Complete())) {
      finish_reason_[r.id] = FinishReason::kStop;
    } else if (r.num_generated() >= MaxTokens(r)) {
      finish_reason_[r.id] = FinishReason::kLength;
    }
  }

  // Collects the oldest launched step: emits its tokens, applies stop conditions.
  void CollectOldest() {
    InFlight f = std::move(inflight_.front());
    inflight_.pop_front();
    std::vector<SampledToken> sampled;
    Status s = runner_.Collect(&sampled);
    std::map<RequestId, Request*> alive;
    for (auto& r : running_) alive[r->id] = r.get();
    auto find = [&](size_t i) -> Request* {
      auto it = alive.find(f.ids[i]);
      return it != alive.end() && it->second->epoch == f.epochs[i] ? it->second : nullptr;
    };
    if (!s.ok()) {
      std::vector<Request*> lost;
      for (size_t i = 0; i < f.ids.size(); ++i)
        if (Request* r = find(i)) lost.push_back(r);
      FailRunning(lost, s);
      return;
    }
    GYRE_SPAN("engine.emit", "sched");
    for (size_t i = 0; i < f.ids.size(); ++i) {
      if (!f.samples[i]) continue;  // prefill continues
      Request* r = find(i);
      if (!r || finish_reason_.count(r->id)) continue;  // finished, cancelled or preempted since
      const SampledToken& t = sampled[i];
      --r->pending;
      r->mtp_drafts = t.drafts;
      if (f.drafts[i] == 0) {
        EmitToken(*r, t.id, t.logprob, t.top);
        continue;
      }
      // A verify piece: the longest prefix of drafts the rows accepted (greedy: equal to the
      // argmax; sampled: accepted by rejection sampling), then the row's own token after it (the
      // bonus: a residual draw where a draft was rejected); the runner keeps the known token + that
      // prefix.
      const int64_t k = f.drafts[i];
      int64_t a = 0;
      while (a < k && t.rows[a].first == r->spec_ids[1 + a]) ++a;
      ++spec_verify_pieces_;
      spec_draft_tokens_ += k;
      spec_accepted_tokens_ += a;
      if (static_cast<int64_t>(spec_drafts_per_pos_.size()) < k) {
        spec_drafts_per_pos_.resize(k, 0);
        spec_accepted_per_pos_.resize(k, 0);
      }
      for (int64_t j = 0; j < k; ++j) ++spec_drafts_per_pos_[j];
      for (int64_t j = 0; j < a; ++j) ++spec_accepted_per_pos_[j];
      Status c = runner_.CommitSpeculative(r->slot, 1 + a);
      r->num_scheduled -= k - a;
      if (c.ok() && cache_) c = AfterLaunch(*r);
      if (!c.ok()) {
        r->lost = true;
        finish_status_[r->id] = c;
        finish_reason_[r->id] = FinishReason::kError;
        continue;
      }
      for (int64_t j = 0; j <= a && !finish_reason_.count(r->id); ++j) EmitToken(*r, t.rows[j].first, t.rows[j].second, {});
    }
    // Finished requests free their memory now; a step still in flight may have computed one more
    // token for them (dropped on collection), and the runner runs steps in order, so the freed
    // pages and slot can be reused by the next launch.
    for (auto it = running_.begin(); it != running_.end();) {
      auto fr = finish_reason_.find((*it)->id);
      if (fr != finish_reason_.end() && (*it)->params.export_prefilled &&
          (fr->second == FinishReason::kStop || fr->second == FinishReason::kLength)) {
        finish_reason_.erase(fr);
        if (Status s = Export(**it); !s.ok()) {
          Finish(**it, FinishReason::kError, s);
        } else {
          const RequestId id = (*it)->id;
          exported_[id] = std::move(*it);
        }
        it = running_.erase(it);
      } else if (fr != finish_reason_.end()) {
        auto fs = finish_status_.find((*it)->id);
        Finish(**it, fr->second, fs != finish_status_.end() ? fs->second : Status());
        if (fs != finish_status_.end()) finish_status_.erase(fs);
        finish_reason_.erase(fr);
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void PublishStats() {
    std::lock_guard<std::mutex> l(mu_);
    num_waiting_ = static_cast<int64_t>(waiting_.size());
    stats_.num_running = static_cast<int64_t>(running_.size());
    stats_.num_waiting = num_waiting_ + static_cast<int64_t>(inbox_.size());
    stats_.kv_pages_total = pages_.size();
    stats_.kv_pages_used = pages_.num_used();
    stats_.kda_slots_total = slots_.size();
    stats_.kda_slots_used = slots_.num_used();
    stats_.kv_bytes_per_page = cap_.bytes_per_page;
    stats_.kda_bytes_per_slot = cap_.bytes_per_slot;
    stats_.num_preemptions = num_preemptions_;
    stats_.prompt_tokens_total = prompt_tokens_total_;
    stats_.generation_tokens_total = generation_tokens_total_;
    stats_.requests_finished = requests_finished_;
    {
      const auto now = std::chrono::steady_clock::now();
      double stall = 0;
      for (const auto* q : {&running_, &waiting_})
        for (const auto& r : *q) stall = std::max(stall, std::chrono::duration<double>(now - r->last_scheduled).count());
      stats_.max_request_stall_s = stall;
    }
    stats_.max_model_len = max_model_len_;
    stats_.prefill_tokens_computed = prefill_tokens_computed_;
    stats_.spec_verify_pieces = spec_verify_pieces_;
    stats_.spec_draft_tokens = spec_draft_tokens_;
    stats_.spec_accepted_tokens = spec_accepted_tokens_;
    stats_.spec_drafts_per_pos = spec_drafts_per_pos_;
    stats_.spec_accepted_per_pos = spec_accepted_per_pos_;
    stats_.num_exported_held = static_cast<int64_t>(exported_.size());
    if (cache_) {
      const PrefixCacheStats cs = cache_->stats();
      stats_.prefix_caching = true;
      stats_.kv_pages_used = pages_.num_used() - cs.evictable_blocks;
      stats_.prefix_cache_queried_tokens = cs.queried_tokens;
      stats_.prefix_cache_hit_tokens = cs.hit_tokens;
      stats_.prefix_cache_blocks = cs.cached_blocks;
      stats_.prefix_cache_evictable_blocks = cs.evictable_blocks;
      stats_.prefix_cache_block_evictions = cs.block_evictions;
      stats_.kda_checkpoints_used = cs.checkpoints_used;
      stats_.kda_checkpoints_total = cs.checkpoints_total;
      stats_.kda_checkpoint_bytes = cs.checkpoints_used * cap_.bytes_per_slot;
      stats_.kda_checkpoint_evictions = cs.checkpoint_evictions;
    }
  }

  // Constant after construction.
  const std::unique_ptr<ModelRunner> owned_runner_;  // Create(const Model&): the CPU runner
  ModelRunner& runner_;
  const RunnerCapacity cap_;
  const EngineOptions opts_;

  // Engine thread only: the bookkeeping of both caches.
  IdPool pages_;
  IdPool slots_;
  std::unique_ptr<PrefixCache> cache_;  // null when prefix caching is off
  std::deque<std::unique_ptr<Request>> running_;
  std::deque<std::unique_ptr<Request>> waiting_;
  std::map<RequestId, FinishReason> finish_reason_;
  std::map<RequestId, Status> finish_status_;  // with finish_reason_ kError
  // export_prefilled requests whose cache the sink took (OnPrefilled), held until ReleaseExported.
  std::map<RequestId, std::unique_ptr<Request>> exported_;
  // Launched steps not yet collected, oldest first: per piece the request, its epoch at launch and
  // whether the piece samples.
  struct InFlight {
    std::vector<RequestId> ids;
    std::vector<int64_t> epochs;
    std::vector<uint8_t> samples;
    std::vector<int32_t> drafts;  // verify pieces: drafts after the known token; 0 otherwise
  };
  std::deque<InFlight> inflight_;
  int64_t prefill_tokens_computed_ = 0;
  int64_t spec_verify_pieces_ = 0, spec_draft_tokens_ = 0, spec_accepted_tokens_ = 0;
  std::vector<int64_t> spec_drafts_per_pos_, spec_accepted_per_pos_;
  int64_t num_preemptions_ = 0, prompt_tokens_total_ = 0, generation_tokens_total_ = 0, requests_finished_ = 0;
  const int64_t max_model_len_;
  std::thread thread_;

  // Guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  bool running_flag_ = false;
  std::vector<std::unique_ptr<Request>> inbox_;
  std::vector<RequestId> cancels_;
  std::vector<std::pair<RequestId, Status>> releases_;
  RequestId next_id_ = 1;
  int64_t num_waiting_ = 0;
  EngineStats stats_;
};

}  // namespace

// ---- factory -------------------------------------------------------------------------------------

namespace {
Status ValidateOptions(const EngineOptions& o) {
  if (o.max_num_seqs < 1) return Status::InvalidArgument("max_num_seqs must be >= 1");
  if (o.kv_page_tokens < 1) return Status::InvalidArgument("kv_page_tokens must be >= 1");
  if (o.max_num_batched_tokens < 1) return Status::InvalidArgument("max_num_batched_tokens must be >= 1");
  if (o.max_waiting < 1) return Status::InvalidArgument("max_waiting must be >= 1");
  if (o.prefix_cache_checkpoint_bytes < 0)
    return Status::InvalidArgument("prefix_cache_checkpoint_bytes must be >= 0");
  if (o.prefix_cache_checkpoint_interval_blocks < 0)
    return Status::InvalidArgument("prefix_cache_checkpoint_interval_blocks must be >= 0");
  const SpeculativeOptions& sp = o.speculative;
  if (!sp.method.empty()) {
    if (sp.method != "ngram" && sp.method != "mtp")
      return Status::InvalidArgument("speculative method \"" + sp.method + "\" is not supported (\"ngram\" or \"mtp\")");
    if (sp.num_speculative_tokens < 1 || sp.num_speculative_tokens > 16)
      return Status::InvalidArgument("num_speculative_tokens must be in [1, 16]");
    if (sp.prompt_lookup_min < 1 || sp.prompt_lookup_max < sp.prompt_lookup_min)
      return Status::InvalidArgument("need 1 <= prompt_lookup_min <= prompt_lookup_max");
  }
  return Status::Ok();
}

Result<std::unique_ptr<Engine>> CreateOver(ModelRunner& runner, std::unique_ptr<ModelRunner> owned,
                                           const EngineOptions& o) {
  GYRE_RETURN_IF_ERROR(ValidateOptions(o));
  const RunnerCapacity cap = runner.capacity();
  if (cap.num_slots < 1) return Status::InvalidArgument("the model runner has no state slot");
  if (!o.speculative.method.empty() && !cap.speculative)
    return Status::InvalidArgument("speculative decoding is not available on this " + runner.backend() +
                                   " runner (the CUDA model runs it when built with speculative_tokens, not under "
                                   "tensor parallelism or layer split)");
  if (o.speculative.method == "mtp" && cap.mtp_drafts < o.speculative.num_speculative_tokens)
    return Status::InvalidArgument(
        cap.mtp_drafts > 0 ? "this " + runner.backend() + " runner drafts at most " + std::to_string(cap.mtp_drafts) +
                                 " MTP tokens, num_speculative_tokens is " +
                                 std::to_string(o.speculative.num_speculative_tokens)
                           : "MTP drafts are not available on this " + runner.backend() +
                                 " runner (a runner built with MTP drafts runs them for a model with an MTP layer: "
                                 "CpuRunnerOptions / CudaModelOptions mtp_drafts)");
  const bool paged = cap.bytes_per_page > 0;
  int64_t max_len = 1 << 20;
  if (paged) {
    if (cap.num_pages < 1) {
      return Status::ResourceExhausted("the KV budget holds no page of " + std::to_string(cap.bytes_per_page) + " B");
    }
    max_len = cap.num_pages * cap.page_tokens;
  }
  if (o.max_model_len > 0) {
    if (paged && o.max_model_len > max_len) {
      return Status::ResourceExhausted("max_model_len " + std::to_string(o.max_model_len) +
                                       " exceeds what the kv memory budget holds (" + std::to_string(max_len) +
                                       " tokens)");
    }
    max_len = o.max_model_len;
  } else if (o.max_model_len_cap > 0) {
    max_len = std::min(max_len, o.max_model_len_cap);
  }
  int64_t num_checkpoints = 0;
  if (o.enable_prefix_caching) {
    if (!paged) return Status::InvalidArgument("prefix caching needs a paged attention cache; this model has none");
    if (cap.bytes_per_slot > 0) {
      const int64_t budget = o.prefix_cache_checkpoint_bytes > 0
                                 ? o.prefix_cache_checkpoint_bytes
                                 : std::max<int64_t>(int64_t(256) << 20, 4 * cap.bytes_per_slot);
      num_checkpoints = budget / cap.bytes_per_slot;
      if (num_checkpoints < 1)
        return Status::InvalidArgument("the prefix-cache checkpoint budget (" +
                                       std::to_string(budget) +
                                       " B) holds no KDA state checkpoint of " + std::to_string(cap.bytes_per_slot) +
                                       " B");
      GYRE_RETURN_IF_ERROR(runner.ReserveCheckpoints(num_checkpoints));
    }
  }
  return std::unique_ptr<Engine>(new EngineImpl(runner, std::move(owned), o, max_len, num_checkpoints));
}
}  // namespace

Result<SpeculativeOptions> ParseSpeculativeConfig(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::InvalidArgument("--speculative-config: not a JSON object");
  SpeculativeOptions o;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (key == "method") {
      if (!it->is_string()) return Status::InvalidArgument("--speculative-config: method must be a string");
      o.method = it->get<std::string>();
      if (o.method == "deepseek_mtp") o.method = "mtp";  // vLLM's older name for the same drafts
    } else if (key == "num_speculative_tokens" || key == "prompt_lookup_max" || key == "prompt_lookup_min") {
      if (!it->is_number_integer()) return Status::InvalidArgument("--speculative-config: " + key + " must be an integer");
      const int64_t v = it->get<int64_t>();
      (key == "num_speculative_tokens" ? o.num_speculative_tokens
       : key == "prompt_lookup_max"    ? o.prompt_lookup_max
                                       : o.prompt_lookup_min) = v;
    } else {
      return Status::InvalidArgument("--speculative-config: unknown field \"" + key + "\"");
    }
  }
  if (o.method.empty()) return Status::InvalidArgument("--speculative-config: method is required (\"ngram\" or \"mtp\")");
  if (o.method != "ngram" && o.method != "mtp")
    return Status::InvalidArgument("--speculative-config: method \"" + o.method +
                                   "\" is not supported (\"ngram\" or \"mtp\")");
  if (o.method == "mtp")
    for (const char* f : {"prompt_lookup_max", "prompt_lookup_min"})
      if (j.contains(f))
        return Status::InvalidArgument(std::string("--speculative-config: ") + f + " is an n-gram field (method \"mtp\")");
  if (j.contains("prompt_lookup_max") && !j.contains("prompt_lookup_min")) o.prompt_lookup_min = std::min<int64_t>(o.prompt_lookup_min, o.prompt_lookup_max);
  if (j.contains("prompt_lookup_min") && !j.contains("prompt_lookup_max")) o.prompt_lookup_max = std::max(o.prompt_lookup_max, o.prompt_lookup_min);
  return o;
}

Result<std::unique_ptr<Engine>> Engine::Create(ModelRunner& runner, const EngineOptions& o) {
  return CreateOver(runner, nullptr, o);
}

Result<std::unique_ptr<Engine>> Engine::Create(const Model& model, const EngineOptions& o) {
  GYRE_RETURN_IF_ERROR(ValidateOptions(o));
  CpuRunnerOptions ro;
  ro.page_tokens = o.kv_page_tokens;
  ro.num_slots = o.max_num_seqs;
  const bool mtp = o.speculative.method == "mtp";
  if (mtp && !model.has_mtp())
    return Status::InvalidArgument("speculative method \"mtp\" needs a checkpoint with an MTP layer "
                                   "(num_nextn_predict_layers = 1); this one has none");
  ro.mtp_drafts = mtp ? o.speculative.num_speculative_tokens : 0;
  ro.num_pages = CpuRunner::PagesForBytes(model.config(), o.kv_page_tokens, o.kv_memory_bytes, mtp);
  if (AttnRowLayout(model.config()).row_floats > 0 && ro.num_pages < 1) {
    return Status::ResourceExhausted("kv memory budget " + std::to_string(o.kv_memory_bytes) + " B holds no page of " +
                                     std::to_string(o.kv_page_tokens * AttnRowLayout(model.config()).row_floats * 4) +
                                     " B");
  }
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<CpuRunner> r, CpuRunner::Create(model, ro));
  ModelRunner& ref = *r;
  return CreateOver(ref, std::move(r), o);
}

}  // namespace gyre
