// Serving metrics and their Prometheus text exposition (format 0.0.4), named after vLLM's
// `vllm:` metrics with a `gyre:` prefix so dashboards carry over:
//   gyre:time_to_first_token_seconds   histogram  request arrival → first token
//   gyre:inter_token_latency_seconds   histogram  gap between consecutive tokens of a request
//   gyre:e2e_request_latency_seconds   histogram  request arrival → last byte queued
//   gyre:request_success_total{finished_reason="stop|length|abort|error"}  counter
//   gyre:prompt_tokens_total, gyre:generation_tokens_total, gyre:num_preemptions_total  counters
//   gyre:num_requests_running, gyre:num_requests_waiting                                gauges
//   gyre:kv_cache_usage_perc (fraction 0..1 of latent-cache pages in use, as vLLM),
//   gyre:kv_cache_pages_used/_total, gyre:kda_state_slots_used/_total                  gauges
// Token counters and pool gauges come from EngineStats at scrape time; latencies are observed by
// the HTTP layer. Every series carries model_name="<served name>".
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"

namespace gyre::serve {

class Histogram {
 public:
  // `bounds`: strictly increasing upper bounds; a +Inf bucket is implied.
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf (size bounds + 1)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Get() const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // guarded by mu_; per bucket, not cumulative
  double sum_ = 0;                // guarded by mu_
};

class ServeMetrics {
 public:
  explicit ServeMetrics(std::string model_name);

  void ObserveTtft(double seconds) { ttft_.Observe(seconds); }
  void ObserveItl(double seconds) { itl_.Observe(seconds); }
  void ObserveE2e(double seconds) { e2e_.Observe(seconds); }
  // `reason`: "stop", "length", "abort" or "error".
  void CountFinished(std::string_view reason);

  // The whole exposition, with the engine's counters and gauges from `stats`.
  std::string Render(const EngineStats& stats) const;

 private:
  const std::string model_name_;
  Histogram ttft_, itl_, e2e_;
  mutable std::mutex mu_;
  std::map<std::string, uint64_t, std::less<>> finished_;  // guarded by mu_
};

// Escapes a Prometheus label value (backslash, double quote, newline).
std::string PromEscape(std::string_view v);

}  // namespace gyre::serve
