#include "feedback/engine_scenario.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "feedback/stats.h"

namespace gyre::feedback {
namespace {

using Clock = std::chrono::steady_clock;

// One request's timeline: token arrival times, how it ended, its queue time.
class TimedSink : public RequestSink {
 public:
  explicit TimedSink(Clock::time_point submitted) : submitted_(submitted) {}
  void OnToken(const TokenEvent&) override {
    std::lock_guard<std::mutex> l(mu_);
    times_.push_back(Clock::now());
    cv_.notify_all();
  }
  void OnFinish(FinishReason r, const Status&, const Usage& u) override {
    std::lock_guard<std::mutex> l(mu_);
    reason_ = r;
    usage_ = u;
    done_ = true;
    cv_.notify_all();
  }
  // Waits (a deadline for a hung engine, not a measurement) for n tokens or the end.
  bool WaitTokens(size_t n, std::chrono::seconds deadline) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, deadline, [&] { return done_ || times_.size() >= n; });
  }
  bool WaitDone(std::chrono::seconds deadline) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, deadline, [&] { return done_; });
  }
  std::vector<Clock::time_point> times() const {
    std::lock_guard<std::mutex> l(mu_);
    return times_;
  }
  FinishReason reason() const {
    std::lock_guard<std::mutex> l(mu_);
    return reason_;
  }
  Usage usage() const {
    std::lock_guard<std::mutex> l(mu_);
    return usage_;
  }
  Clock::time_point submitted() const { return submitted_; }

 private:
  const Clock::time_point submitted_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Clock::time_point> times_;
  FinishReason reason_ = FinishReason::kError;
  Usage usage_;
  bool done_ = false;
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Pct(std::vector<double> v, double q) { return v.empty() ? 0.0 : Quantile(v, q); }

}  // namespace

Result<std::map<std::string, double>> RunEngineScenario(const Model& model, const nlohmann::json& spec, int repeat) {
  const int64_t decodes = spec.value("decodes", 0), prompts = spec.value("prompts", 0);
  const int64_t decode_prompt_len = spec.value("decode_prompt_len", 16), decode_tokens = spec.value("decode_tokens", 64);
  const int64_t prompt_len = spec.value("prompt_len", 256), max_tokens = spec.value("max_tokens", 8);
  const int64_t arrival_ms = spec.value("arrival_ms", 0), cancel_every = spec.value("cancel_every", 0);
  const int64_t long_prompts = spec.value("long_prompts", 0), long_prompt_len = spec.value("long_prompt_len", 2048);
  const int64_t long_max_tokens = spec.value("long_max_tokens", 2);
  if (decodes < 0 || prompts < 0 || decodes + prompts < 1)
    return Status::InvalidArgument("engine_load: needs decodes >= 1 or prompts >= 1 (and neither negative)");
  if (decode_prompt_len < 1 || decode_tokens < 2 || prompt_len < 1 || max_tokens < 1 || arrival_ms < 0 ||
      cancel_every < 0)
    return Status::InvalidArgument(
        "engine_load: decode_prompt_len, prompt_len, max_tokens >= 1, decode_tokens >= 2, arrival_ms and "
        "cancel_every >= 0");
  if (long_prompts < 0 || long_prompt_len < 1 || long_max_tokens < 1)
    return Status::InvalidArgument("engine_load: long_prompts >= 0, long_prompt_len and long_max_tokens >= 1");
  if (long_prompts > 0 && prompts < 1)
    return Status::InvalidArgument("engine_load: long_prompts needs prompts >= 1 (the requests arriving during them)");
  EngineOptions eo;
  eo.max_num_seqs = spec.value("max_num_seqs", eo.max_num_seqs);
  eo.max_num_batched_tokens = spec.value("max_num_batched_tokens", eo.max_num_batched_tokens);
  // What `gyre serve` runs: half the step budget unless the spec says (0: off).
  eo.long_prefill_token_threshold = spec.value("long_prefill_token_threshold", eo.max_num_batched_tokens / 2);
  if (eo.long_prefill_token_threshold < 0)
    return Status::InvalidArgument("engine_load: long_prefill_token_threshold must be >= 0 (0: off)");
  eo.kv_memory_bytes = spec.value("kv_memory", eo.kv_memory_bytes);
  if (spec.contains("kv_pages")) {  // a page count: this model's page size from a probe engine
    const int64_t pages = spec["kv_pages"].get<int64_t>();
    if (pages < 1) return Status::InvalidArgument("engine_load: kv_pages must be >= 1");
    EngineOptions po = eo;
    po.kv_memory_bytes = int64_t(16) << 20;
    GYRE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> probe, Engine::Create(model, po));
    GYRE_RETURN_IF_ERROR(probe->Start());  // the page size is published once started
    EngineStats ps = probe->Stats();
    for (int i = 0; i < 200 && ps.kv_bytes_per_page == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ps = probe->Stats();
    }
    probe->Stop();
    if (ps.kv_bytes_per_page <= 0) return Status::Internal("engine_load: the engine published no page size");
    eo.kv_memory_bytes = pages * ps.kv_bytes_per_page;
  }
  eo.kv_page_tokens = spec.value("kv_page_tokens", eo.kv_page_tokens);
  eo.overlap_steps = spec.value("overlap_steps", eo.overlap_steps);
  eo.max_waiting = std::max<int64_t>(eo.max_waiting, decodes + prompts + long_prompts);
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, eo));
  GYRE_RETURN_IF_ERROR(engine->Start());
  const int64_t vocab = model.config().vocab_size;
  std::mt19937_64 rng(1000003ull * static_cast<uint64_t>(repeat + 2));
  auto prompt = [&](int64_t n) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(std::min<int64_t>(vocab, 1000)));
    return p;
  };
  enum class Role { kDecode, kLong, kArrival };
  struct Sent {
    std::shared_ptr<TimedSink> sink;
    RequestId id = 0;
    Role role = Role::kArrival;
    bool cancel = false;
  };
  std::vector<Sent> sent;
  auto submit = [&](int64_t len, int64_t tokens, Role role, bool cancel) -> Status {
    RequestParams p;
    p.prompt = prompt(len);
    p.max_tokens = tokens;
    p.ignore_eos = true;  // every request runs its full length: the load is what the spec says
    p.sampling.temperature = 0;
    auto sink = std::make_shared<TimedSink>(Clock::now());
    GYRE_ASSIGN_OR_RETURN(RequestId id, engine->Submit(std::move(p), sink));
    sent.push_back({sink, id, role, cancel});
    return Status::Ok();
  };
  const int64_t preempt0 = engine->Stats().num_preemptions;
  const auto t0 = Clock::now();
  constexpr std::chrono::seconds kDeadline(300);
  for (int64_t i = 0; i < decodes; ++i) GYRE_RETURN_IF_ERROR(submit(decode_prompt_len, decode_tokens, Role::kDecode, false));
  for (int64_t i = 0; i < decodes; ++i) {  // the decodes are running before the arrivals
    if (!sent[i].sink->WaitTokens(1, kDeadline)) return Status::Internal("engine_load: a decode never started");
  }
  // The long prompts, then the arrivals once the engine has prefilled some of them (its prefill
  // counter moved past what the decodes' prompts took): the arrivals land inside a long prefill.
  const auto long_begin = Clock::now();
  if (long_prompts > 0) {
    const int64_t base = engine->Stats().prefill_tokens_computed;
    for (int64_t i = 0; i < long_prompts; ++i) GYRE_RETURN_IF_ERROR(submit(long_prompt_len, long_max_tokens, Role::kLong, false));
    while (engine->Stats().prefill_tokens_computed <= base) {
      if (Clock::now() - long_begin > kDeadline) return Status::Internal("engine_load: a long prompt never started");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  const auto arrivals_begin = Clock::now();
  for (int64_t i = 0; i < prompts; ++i) {
    if (i > 0 && arrival_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(arrival_ms));
    GYRE_RETURN_IF_ERROR(submit(prompt_len, max_tokens, Role::kArrival, cancel_every > 0 && (i + 1) % cancel_every == 0));
  }
  for (Sent& s : sent) {
    if (!s.cancel) continue;
    if (!s.sink->WaitTokens(1, kDeadline)) return Status::Internal("engine_load: a request never started");
    engine->Cancel(s.id);
  }
  for (Sent& s : sent) {
    if (!s.sink->WaitDone(kDeadline)) return Status::Internal("engine_load: a request never finished");
  }
  const auto arrivals_end = Clock::now();
  const double wall_ms = Ms(arrivals_end - t0);
  // Let the engine publish its final counters, then read the leaks.
  EngineStats st = engine->Stats();
  for (int i = 0; i < 100 && (st.kv_pages_used != 0 || st.kda_slots_used != 0 || st.num_running != 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    st = engine->Stats();
  }
  engine->Stop();

  // The arrivals' prefill window: from the first arrival to the last arriving prompt's first token.
  Clock::time_point window_end = arrivals_begin, long_end = long_begin;
  for (const Sent& s : sent) {
    const auto times = s.sink->times();
    if (s.role == Role::kArrival && !times.empty()) window_end = std::max(window_end, times[0]);
    if (s.role == Role::kLong && !times.empty()) long_end = std::max(long_end, times[0]);
  }
  // Arrivals submitted while a long prompt was still prefilling: their time to first token and to
  // their last token, over the long prefill's span (first long Submit -> last long first token).
  std::vector<double> long_ttft;
  double starved_ttft = 0, starved_e2e = 0;
  int64_t during_long = 0, started_before_long = 0;
  double max_gap_in_window = 0;
  std::vector<double> ttft, arrival_ttft, itl, rates, queue;
  int64_t completed = 0, errors = 0, generated = 0;
  for (const Sent& s : sent) {
    const auto times = s.sink->times();
    const FinishReason r = s.sink->reason();
    const Usage u = s.sink->usage();
    generated += static_cast<int64_t>(times.size());
    if (r == FinishReason::kError) ++errors;
    if (r == FinishReason::kStop || r == FinishReason::kLength || (s.cancel && r == FinishReason::kCancelled)) ++completed;
    queue.push_back(1000 * u.queue_s);
    if (times.empty()) continue;
    ttft.push_back(Ms(times[0] - s.sink->submitted()));
    if (s.role == Role::kArrival) arrival_ttft.push_back(ttft.back());
    if (s.role == Role::kLong) long_ttft.push_back(ttft.back());
    if (long_prompts > 0 && s.role == Role::kArrival && !s.cancel && s.sink->submitted() < long_end) {
      ++during_long;
      starved_ttft = std::max(starved_ttft, ttft.back());
      starved_e2e = std::max(starved_e2e, Ms(times.back() - s.sink->submitted()));
      if (times[0] < long_end) ++started_before_long;
    }
    if (s.role == Role::kDecode) {
      for (size_t k = 1; k < times.size(); ++k) {
        if (times[k] >= arrivals_begin && times[k - 1] <= arrivals_end) itl.push_back(Ms(times[k] - times[k - 1]));
        if (times[k] > arrivals_begin && times[k - 1] < window_end) {
          max_gap_in_window = std::max(max_gap_in_window, Ms(times[k] - times[k - 1]));
        }
      }
      if (times.size() >= 2) rates.push_back((times.size() - 1) / std::max(1e-9, Ms(times.back() - times.front())));
    }
  }
  double sum = 0, sum2 = 0;
  for (double x : rates) {
    sum += x;
    sum2 += x * x;
  }
  std::map<std::string, double> out;
  out["ttft_ms_p50"] = Pct(ttft, 0.5);
  out["ttft_ms_p99"] = Pct(ttft, 0.99);
  if (!arrival_ttft.empty()) out["arrival_ttft_ms_p99"] = Pct(arrival_ttft, 0.99);
  if (!itl.empty()) {
    out["itl_ms_p50"] = Pct(itl, 0.5);
    out["itl_ms_p99"] = Pct(itl, 0.99);
    out["itl_p99_over_p50"] = out["itl_ms_p99"] / std::max(1e-9, out["itl_ms_p50"]);
  }
  if (prompts > 0 && decodes > 0 && window_end > arrivals_begin) {
    out["stall_share"] = max_gap_in_window / std::max(1e-9, Ms(window_end - arrivals_begin));
  }
  if (long_prompts > 0) {
    const auto [lo, hi] = std::minmax_element(long_ttft.begin(), long_ttft.end());
    out["long_ttft_ms"] = long_ttft.empty() ? 0.0 : *hi;
    if (long_ttft.size() > 1 && *hi > 0) out["long_ttft_ratio"] = *lo / *hi;
    out["arrivals_during_long"] = static_cast<double>(during_long);
    out["arrivals_started_before_long"] = static_cast<double>(started_before_long);
    if (during_long > 0 && long_end > long_begin) {
      out["long_prefill_ttft_share"] = starved_ttft / Ms(long_end - long_begin);
      out["long_prefill_e2e_share"] = starved_e2e / Ms(long_end - long_begin);
    }
  }
  out["max_queue_ms"] = queue.empty() ? 0.0 : *std::max_element(queue.begin(), queue.end());
  out["preemptions"] = static_cast<double>(st.num_preemptions - preempt0);
  if (!rates.empty()) out["fairness"] = sum * sum / (static_cast<double>(rates.size()) * std::max(1e-18, sum2));
  out["completed"] = static_cast<double>(completed);
  out["errors"] = static_cast<double>(errors);
  out["leaked_pages"] = static_cast<double>(st.kv_pages_used);
  out["leaked_slots"] = static_cast<double>(st.kda_slots_used);
  out["ms"] = wall_ms;
  out["tok_s"] = 1000.0 * static_cast<double>(generated) / std::max(1e-9, wall_ms);
  return out;
}

}  // namespace gyre::feedback
