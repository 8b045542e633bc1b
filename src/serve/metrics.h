// Serving metrics and their Prometheus text exposition (format 0.0.4), named after vLLM's
// `vllm:` metrics with a `gyre_` prefix (a colon is reserved for recording rules, and
// `promtool check metrics` refuses it), so a vLLM dashboard carries over by renaming the prefix:
//   gyre_time_to_first_token_seconds   histogram  request arrival → first token
//   gyre_inter_token_latency_seconds   histogram  gap between consecutive tokens of a request
//   gyre_e2e_request_latency_seconds   histogram  request arrival → last byte queued
//   gyre_request_queue_time_seconds, gyre_request_prefill_time_seconds,
//   gyre_request_decode_time_seconds   histograms  the engine's phases of each finished request
//   gyre_request_prompt_tokens, gyre_request_generation_tokens   histograms  tokens per request
//   gyre_request_success_total{finished_reason="stop|length|abort|error"}  counter
//   gyre_request_rejected_total{status="400|401|404|…"}   counter  answers with an HTTP error status
//   gyre_prompt_tokens_total, gyre_generation_tokens_total, gyre_num_preemptions_total  counters
//   gyre_num_requests_running, gyre_num_requests_waiting                                gauges
//   gyre_kv_cache_usage_perc (fraction 0..1 of latent-cache pages in use, as vLLM),
//   gyre_kv_cache_pages_used/_capacity, gyre_kda_state_slots_used/_capacity            gauges
//   gyre_prefix_cache_queries_total, gyre_prefix_cache_hits_total (prompt tokens looked up /
//   restored), gyre_prefix_cache_block_evictions_total, gyre_kda_checkpoint_evictions_total,
//   gyre_prefill_tokens_computed_total                                                  counters
//   gyre_prefix_cache_blocks, gyre_prefix_cache_evictable_blocks, gyre_kda_checkpoint_bytes,
//   gyre_kda_checkpoints_used/_capacity                                                 gauges
//   gyre_image_cache_{hits,misses,evictions}_total, gyre_image_cache_{bytes,entries,capacity_bytes}
//   the image embedding cache, where the server takes images (image_cache.h)
//   process_cpu_seconds_total (counter), process_resident_memory_bytes,
//   process_virtual_memory_bytes, process_open_fds, process_max_fds,
//   process_start_time_seconds (gauges)   the standard process metrics, from /proc (no labels)
// Counters end in _total and nothing else does. Token counters and pool gauges come from
// EngineStats at scrape time; latencies are observed by the HTTP layer. Every gyre_ series
// carries model_name="<served name>".
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
  // One request the engine finished (any reason): its phase times and token counts.
  void ObserveEngineFinish(const Usage& usage);
  // One answer with an HTTP error status (>= 400; others are ignored).
  void CountRejected(int http_status);

  // The whole exposition, with the engine's counters and gauges from `stats` and the process
  // metrics (left out where /proc cannot be read).
  std::string Render(const EngineStats& stats) const;

 private:
  const std::string model_name_;
  Histogram ttft_, itl_, e2e_;
  Histogram queue_, prefill_, decode_;
  Histogram prompt_tokens_, generation_tokens_;
  mutable std::mutex mu_;
  std::map<std::string, uint64_t, std::less<>> finished_;  // guarded by mu_
  std::map<int, uint64_t> rejected_;                       // guarded by mu_; by HTTP status
};

// Escapes a Prometheus label value (backslash, double quote, newline).
std::string PromEscape(std::string_view v);

// Appends one histogram (HELP, TYPE, buckets, sum, count) to an exposition; `labels` is
// `k="v",...` without braces (non-empty).
void HistogramText(std::string& out, const char* name, const char* help, const std::string& labels,
                   const Histogram::Snapshot& s);
// Appends one counter or gauge (`type`) with its HELP and TYPE lines.
void ScalarText(std::string& out, const char* name, const char* type, const char* help, const std::string& labels,
                double v);

}  // namespace gyre::serve
