// Engine implementation: one engine thread, FCFS continuous batching with chunked prefill and
// recompute preemption. Sections: request record; EngineImpl (submit/cancel/stats); the step
// (schedule → forward → sample → emit); factory.
#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "core/trace.h"
#include "runtime/memory_pools.h"
#include "runtime/model.h"

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

// ---- request record ------------------------------------------------------------------------------

struct Request {
  RequestId id = 0;
  RequestParams params;
  std::shared_ptr<RequestSink> sink;
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t num_prompt = 0;
  int64_t num_computed = 0;     // tokens already in `state`
  std::unique_ptr<SequenceState> state;  // null while waiting (or after preemption)
  std::unique_ptr<ops::Sampler> sampler;
  bool cancel = false;
  int64_t num_generated() const { return static_cast<int64_t>(tokens.size()) - num_prompt; }
};

// log-softmax of `logits` at `id`, and the top `k` alternatives.
void LogProbs(std::span<const float> logits, int32_t id, int32_t k, TokenEvent* ev) {
  float mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  ev->logprob = static_cast<float>(logits[id] - lse);
  if (k <= 0) return;
  std::vector<int32_t> idx(logits.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
  k = std::min<int32_t>(k, static_cast<int32_t>(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (int32_t i = 0; i < k; ++i) ev->top.push_back({idx[i], static_cast<float>(logits[idx[i]] - lse)});
}

// ---- EngineImpl ----------------------------------------------------------------------------------

class EngineImpl final : public Engine {
 public:
  EngineImpl(const Model& model, const EngineOptions& o, int64_t num_pages, int64_t max_model_len)
      : model_(model),
        opts_(o),
        kv_(model.config(), o.kv_page_tokens, num_pages, false),
        kda_(model.config(), o.max_num_seqs, false),
        max_model_len_(max_model_len) {}

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
    const ModelConfig& c = model_.config();
    if (p.prompt.empty()) return Status::InvalidArgument("the prompt is empty");
    for (int32_t id : p.prompt) {
      if (id < 0 || id >= c.vocab_size) {
        return Status::InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                       std::to_string(c.vocab_size) + ")");
      }
    }
    if (p.max_tokens < 1) return Status::InvalidArgument("max_tokens must be >= 1");
    if (p.top_logprobs < 0 || p.top_logprobs > 20) return Status::InvalidArgument("top_logprobs must be in [0, 20]");
    GYRE_RETURN_IF_ERROR(ops::ValidateSampling(p.sampling));
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
    r->sampler = std::make_unique<ops::Sampler>(r->params.sampling.seed);
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
  const Model& model() const override { return model_; }

 private:
  // ---- the engine thread ----
  void Loop() {
    while (true) {
      std::vector<std::unique_ptr<Request>> incoming;
      std::vector<RequestId> cancels;
      bool stopping = false;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return !running_flag_ || !inbox_.empty() || !cancels_.empty() || HasWork(); });
        stopping = !running_flag_;
        for (auto& r : inbox_) incoming.push_back(std::move(r));
        inbox_.clear();
        cancels.swap(cancels_);
      }
      for (auto& r : incoming) {
        trace::Record({"admit.queue", "sched", trace::NowNs(), -1, trace::ThreadId(), trace::Attrs{.request = r->id}});
        waiting_.push_back(std::move(r));
      }
      for (RequestId id : cancels) MarkCancelled(id);
      if (stopping) {
        for (auto& r : running_) r->cancel = true;
        for (auto& r : waiting_) r->cancel = true;
      }
      ReapCancelled();
      if (stopping) {
        PublishStats();
        return;
      }
      if (HasWork()) Step();
      PublishStats();
    }
  }

  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }

  void MarkCancelled(RequestId id) {
    for (auto& r : running_)
      if (r->id == id) r->cancel = true;
    for (auto& r : waiting_)
      if (r->id == id) r->cancel = true;
  }

  void Finish(Request& r, FinishReason reason, const Status& s = Status()) {
    r.state.reset();  // pages and slot back to the pools now
    ++requests_finished_;
    r.sink->OnFinish(reason, s, Usage{r.num_prompt, r.num_generated()});
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
    victim->state.reset();
    victim->num_computed = 0;
    ++num_preemptions_;
    trace::Record({"preempt", "sched", trace::NowNs(), -1, trace::ThreadId(), trace::Attrs{.request = victim->id}});
    waiting_.push_front(std::move(victim));
  }

  void Step() {
    GYRE_SPAN("engine.step", "sched");
    const int64_t V = model_.config().vocab_size;
    int64_t budget = opts_.max_num_batched_tokens;
    std::vector<Request*> sched;
    std::vector<int64_t> counts;
    // 1. Running requests: decodes (1 token) and unfinished prefills, oldest first. A request that
    //    cannot get a page preempts the newest running request (possibly itself).
    for (size_t i = 0; i < running_.size() && budget > 0;) {
      Request* r = running_[i].get();
      const int64_t left = static_cast<int64_t>(r->tokens.size()) - r->num_computed;
      const int64_t n = std::min(left, budget);
      if (r->state->ExtraPagesFor(r->num_computed + n) > kv_.num_free()) {
        PreemptNewest();
        continue;  // retry the same index (the list shrank from the back)
      }
      GYRE_CHECK(r->state->Reserve(r->num_computed + n).ok());
      sched.push_back(r);
      counts.push_back(n);
      budget -= n;
      ++i;
    }
    // 2. Admit waiting requests FCFS while a slot, pages and budget allow.
    while (budget > 0 && !waiting_.empty()) {
      Request* r = waiting_.front().get();
      if (kda_.num_free() == 0) break;
      const int64_t left = static_cast<int64_t>(r->tokens.size());
      const int64_t n = std::min(left, budget);
      if ((n + kv_.page_tokens() - 1) / kv_.page_tokens() > kv_.num_free() && kv_.layout().row_floats > 0) break;
      auto st = SequenceState::Create(model_.config(), &kv_, &kda_);
      if (!st.ok()) break;
      r->state = std::move(*st);
      GYRE_CHECK(r->state->Reserve(n).ok());
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
      sched.push_back(r);
      counts.push_back(n);
      budget -= n;
    }
    if (sched.empty()) return;
    // 3. One forward over the ragged batch.
    std::vector<SeqInput> batch;
    for (size_t i = 0; i < sched.size(); ++i) {
      Request* r = sched[i];
      batch.push_back({r->state.get(), std::span<const int32_t>(r->tokens).subspan(r->num_computed, counts[i]), false});
    }
    std::vector<float> logits;
    Status s = model_.Forward(batch, &logits);
    if (!s.ok()) {
      for (Request* r : sched) r->cancel = true;  // states are unknown now: end these requests
      for (auto it = running_.begin(); it != running_.end();) {
        if ((*it)->cancel) {
          Finish(**it, FinishReason::kError, s);
          it = running_.erase(it);
        } else {
          ++it;
        }
      }
      return;
    }
    // 4. Sample where a request reached the end of its tokens; emit; stop checks.
    std::vector<int32_t> stops_eos = model_.config().eos_token_ids;
    for (size_t i = 0; i < sched.size(); ++i) {
      Request* r = sched[i];
      r->num_computed += counts[i];
      if (r->num_computed < static_cast<int64_t>(r->tokens.size())) continue;  // prefill continues
      std::span<const float> row(&logits[i * V], V);
      const int32_t id = r->sampler->Sample(row, r->params.sampling);
      TokenEvent ev;
      ev.id = id;
      LogProbs(row, id, r->params.top_logprobs, &ev);
      r->tokens.push_back(id);
      if (r->num_generated() == 1) prompt_tokens_total_ += r->num_prompt;
      ++generation_tokens_total_;
      r->sink->OnToken(ev);
      const auto& p = r->params;
      const bool stop = std::find(p.stop_ids.begin(), p.stop_ids.end(), id) != p.stop_ids.end() ||
                        (!p.ignore_eos && std::find(stops_eos.begin(), stops_eos.end(), id) != stops_eos.end());
      if (stop) {
        finish_reason_[r->id] = FinishReason::kStop;
      } else if (r->num_generated() >= p.max_tokens) {
        finish_reason_[r->id] = FinishReason::kLength;
      }
    }
    for (auto it = running_.begin(); it != running_.end();) {
      auto f = finish_reason_.find((*it)->id);
      if (f != finish_reason_.end()) {
        Finish(**it, f->second);
        finish_reason_.erase(f);
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
    stats_.kv_pages_total = kv_.num_pages();
    stats_.kv_pages_used = kv_.num_used();
    stats_.kda_slots_total = kda_.num_slots();
    stats_.kda_slots_used = kda_.num_used();
    stats_.kv_bytes_per_page = kv_.bytes_per_page();
    stats_.kda_bytes_per_slot = kda_.bytes_per_slot();
    stats_.num_preemptions = num_preemptions_;
    stats_.prompt_tokens_total = prompt_tokens_total_;
    stats_.generation_tokens_total = generation_tokens_total_;
    stats_.requests_finished = requests_finished_;
    stats_.max_model_len = max_model_len_;
  }

  // Constant after construction.
  const Model& model_;
  const EngineOptions opts_;

  // Engine thread only.
  KvPagePool kv_;
  KdaSlotPool kda_;
  std::deque<std::unique_ptr<Request>> running_;
  std::deque<std::unique_ptr<Request>> waiting_;
  std::map<RequestId, FinishReason> finish_reason_;
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
  RequestId next_id_ = 1;
  int64_t num_waiting_ = 0;
  EngineStats stats_;
};

}  // namespace

// ---- factory -------------------------------------------------------------------------------------

Result<std::unique_ptr<Engine>> Engine::Create(const Model& model, const EngineOptions& o) {
  if (o.max_num_seqs < 1) return Status::InvalidArgument("max_num_seqs must be >= 1");
  if (o.kv_page_tokens < 1) return Status::InvalidArgument("kv_page_tokens must be >= 1");
  if (o.max_num_batched_tokens < 1) return Status::InvalidArgument("max_num_batched_tokens must be >= 1");
  if (o.max_waiting < 1) return Status::InvalidArgument("max_waiting must be >= 1");
  const AttnRowLayout layout(model.config());
  const int64_t page_bytes = o.kv_page_tokens * layout.row_floats * static_cast<int64_t>(sizeof(float));
  int64_t num_pages = 0, max_len = 1 << 20;
  if (page_bytes > 0) {
    num_pages = o.kv_memory_bytes / page_bytes;
    if (num_pages < 1) {
      return Status::ResourceExhausted("kv memory budget " + std::to_string(o.kv_memory_bytes) +
                                       " B holds no page of " + std::to_string(page_bytes) + " B");
    }
    max_len = num_pages * o.kv_page_tokens;
  }
  if (o.max_model_len > 0) {
    if (page_bytes > 0 && o.max_model_len > max_len) {
      return Status::ResourceExhausted("max_model_len " + std::to_string(o.max_model_len) +
                                       " exceeds what the kv memory budget holds (" + std::to_string(max_len) +
                                       " tokens)");
    }
    max_len = o.max_model_len;
  }
  return std::unique_ptr<Engine>(new EngineImpl(model, o, num_pages, max_len));
}

}  // namespace gyre
