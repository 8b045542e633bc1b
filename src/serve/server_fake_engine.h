// FakeEngine: a test double for Engine that needs no model (tests only; header-only so it is not
// part of the gyre_serve library).
//
// Each request emits the scripted tokens (cycled) one per tick on the fake's own thread, with
// `tick_ms` between ticks, so HTTP tests see real cross-thread delivery and timing. A request
// finishes with kStop on an EOS id (unless ignore_eos) or a stop id, kLength at max_tokens, and
// kCancelled after Cancel or Stop. Cancel and Submit calls are recorded for assertions.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/engine.h"

namespace gyre::serve::testing {

struct FakeEngineOptions {
  std::vector<int32_t> script = {39, 547, 335};  // tokens emitted in order (cycled)
  std::vector<int32_t> eos_ids = {1014};
  int64_t tick_ms = 2;
  int64_t max_in_flight = 64;     // Submit beyond this: ResourceExhausted
  int64_t max_model_len = 4096;
  int64_t vocab_size = 1024;
  // When set, Submit fails with this status (e.g. Unavailable).
  Status submit_error;
  // The phase times every finish reports in its Usage (seconds).
  double queue_s = 0, prefill_s = 0, decode_s = 0;
};

class FakeEngine final : public Engine {
 public:
  explicit FakeEngine(FakeEngineOptions o = {}) : o_(std::move(o)) {
    config_.eos_token_ids = o_.eos_ids;
    config_.vocab_size = o_.vocab_size;
  }
  ~FakeEngine() override { Stop(); }

  Status Start() override {
    std::lock_guard<std::mutex> l(mu_);
    running_ = true;
    thread_ = std::thread([this] { Loop(); });
    return Status::Ok();
  }

  void Stop() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!running_) return;
      running_ = false;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  Result<RequestId> Submit(RequestParams params, std::shared_ptr<RequestSink> sink) override {
    if (!o_.submit_error.ok()) return o_.submit_error;
    if (params.prompt.empty()) return Status::InvalidArgument("the prompt is empty");
    for (int32_t id : params.prompt) {
      if (id < 0 || id >= o_.vocab_size) return Status::InvalidArgument("token id out of range");
    }
    const int64_t need = static_cast<int64_t>(params.prompt.size()) + params.max_tokens;
    if (need > o_.max_model_len) {
      return Status::InvalidArgument("This model's maximum context length is " + std::to_string(o_.max_model_len) +
                                     " tokens. However, you requested " + std::to_string(need) + " tokens.");
    }
    std::lock_guard<std::mutex> l(mu_);
    if (!running_) return Status::Unavailable("the engine is not running");
    if (static_cast<int64_t>(active_.size()) >= o_.max_in_flight) {
      return Status::ResourceExhausted("the request queue is full; retry later");
    }
    const RequestId id = next_id_++;
    submitted_.push_back(params);
    active_[id] = Req{std::move(params), std::move(sink), 0, false};
    cv_.notify_all();
    return id;
  }

  void Cancel(RequestId id) override {
    std::lock_guard<std::mutex> l(mu_);
    cancelled_.push_back(id);
    auto it = active_.find(id);
    if (it != active_.end()) it->second.cancel = true;
    cv_.notify_all();
  }

  EngineStats Stats() const override {
    std::lock_guard<std::mutex> l(mu_);
    EngineStats s;
    s.num_running = static_cast<int64_t>(active_.size());
    s.kv_pages_total = 100;
    s.kv_pages_used = static_cast<int64_t>(active_.size());
    s.kda_slots_total = 16;
    s.kda_slots_used = static_cast<int64_t>(active_.size());
    s.kv_bytes_per_page = 4096;
    s.kda_bytes_per_slot = 8192;
    s.generation_tokens_total = generated_;
    s.prompt_tokens_total = prompt_total_;
    s.max_model_len = o_.max_model_len;
    return s;
  }

  // Only eos_token_ids and vocab_size are meaningful.
  const ModelConfig& config() const override { return config_; }

  // --- for assertions ---
  std::vector<RequestId> cancelled() const {
    std::lock_guard<std::mutex> l(mu_);
    return cancelled_;
  }
  std::vector<RequestParams> submitted() const {
    std::lock_guard<std::mutex> l(mu_);
    return submitted_;
  }
  int64_t num_active() const {
    std::lock_guard<std::mutex> l(mu_);
    return static_cast<int64_t>(active_.size());
  }
  // Pauses / resumes token emission (requests stay active).
  void SetPaused(bool paused) {
    paused_ = paused;
    cv_.notify_all();
  }

 private:
  struct Req {
    RequestParams params;
    std::shared_ptr<RequestSink> sink;
    int64_t emitted = 0;
    bool cancel = false;
  };

  Usage UsageOf(const Req& r) const {
    return Usage{static_cast<int64_t>(r.params.prompt.size()), r.emitted, o_.queue_s, o_.prefill_s, o_.decode_s};
  }

  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (true) {
      cv_.wait_for(l, std::chrono::milliseconds(o_.tick_ms), [&] { return !running_; });
      if (!running_) {
        for (auto& [id, r] : active_) r.cancel = true;
      }
      // Events are delivered without the lock (as the real engine's sinks run on its thread).
      std::vector<std::pair<std::shared_ptr<RequestSink>, TokenEvent>> tokens;
      std::vector<std::tuple<std::shared_ptr<RequestSink>, FinishReason, Usage>> finishes;
      for (auto it = active_.begin(); it != active_.end();) {
        Req& r = it->second;
        const Usage usage = UsageOf(r);
        if (r.cancel) {
          finishes.emplace_back(r.sink, FinishReason::kCancelled, usage);
          it = active_.erase(it);
          continue;
        }
        if (paused_) {
          ++it;
          continue;
        }
        TokenEvent ev;
        ev.id = o_.script[r.emitted % o_.script.size()];
        ev.logprob = -0.25f * static_cast<float>(r.emitted % 4 + 1);
        for (int32_t k = 0; k < r.params.top_logprobs; ++k) ev.top.push_back({(ev.id + k) % 1000, -0.1f * (k + 1)});
        if (r.emitted == 0) prompt_total_ += static_cast<int64_t>(r.params.prompt.size());
        ++r.emitted;
        ++generated_;
        tokens.emplace_back(r.sink, ev);
        const auto& p = r.params;
        const bool eos = !p.ignore_eos && std::count(o_.eos_ids.begin(), o_.eos_ids.end(), ev.id);
        const bool stop = eos || std::count(p.stop_ids.begin(), p.stop_ids.end(), ev.id);
        if (stop || r.emitted >= p.max_tokens) {
          finishes.emplace_back(r.sink, stop ? FinishReason::kStop : FinishReason::kLength, UsageOf(r));
          it = active_.erase(it);
          continue;
        }
        ++it;
      }
      const bool done = !running_;
      l.unlock();
      for (auto& [sink, ev] : tokens) sink->OnToken(ev);
      for (auto& [sink, reason, usage] : finishes) sink->OnFinish(reason, Status::Ok(), usage);
      l.lock();
      if (done && active_.empty()) return;
    }
  }

  const FakeEngineOptions o_;
  ModelConfig config_;  // constant after construction
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  bool running_ = false;
  std::atomic<bool> paused_{false};
  RequestId next_id_ = 1;
  std::map<RequestId, Req> active_;
  std::vector<RequestId> cancelled_;
  std::vector<RequestParams> submitted_;
  int64_t generated_ = 0, prompt_total_ = 0;
};

}  // namespace gyre::serve::testing
