#include "serve/metrics.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "serve/process_metrics.h"

namespace gyre::serve {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  const size_t b = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();  // le semantics
  std::lock_guard<std::mutex> l(mu_);
  ++counts_[b];
  sum_ += value;
}

Histogram::Snapshot Histogram::Get() const {
  Snapshot s;
  s.bounds = bounds_;
  std::lock_guard<std::mutex> l(mu_);
  uint64_t acc = 0;
  for (uint64_t c : counts_) {
    acc += c;
    s.cumulative.push_back(acc);
  }
  s.sum = sum_;
  s.count = acc;
  return s;
}

std::string PromEscape(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

namespace {

// Shortest decimal that reads back as `v` ("0.005", not "0.0050000000000000001").
std::string Num(double v) {
  char buf[64];
  if (v == static_cast<double>(static_cast<int64_t>(v)) && v > -1e15 && v < 1e15) {
    std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v));
    return buf;
  }
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

void Header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

// `name{labels} v`, or `name v` without labels.
void Sample(std::string& out, const char* name, const std::string& labels, double v) {
  out += name;
  if (!labels.empty()) {
    out += '{';
    out += labels;
    out += '}';
  }
  out += ' ';
  out += Num(v);
  out += '\n';
}

// A metric with one sample.
struct Scalar {
  const char* name;
  const char* type;  // "counter" or "gauge"
  const char* help;
  double value;
};

void One(std::string& out, const Scalar& m, const std::string& labels) {
  Header(out, m.name, m.type, m.help);
  Sample(out, m.name, labels, m.value);
}

// Seconds, from a millisecond up to the longest request vLLM's buckets foresee.
std::vector<double> PhaseBuckets() {
  return {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
          40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

// 1, 2, 5, 10, 20, 50, ... up to 1e6 tokens (vLLM's 1-2-5 series).
std::vector<double> TokenBuckets() {
  std::vector<double> b;
  for (double decade = 1; decade <= 1e6; decade *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * decade <= 1e6) b.push_back(m * decade);
    }
  }
  return b;
}

void ProcessText(std::string& out) {
  auto p = ReadProcessStats();
  if (!p.ok()) return;
  auto n = [](int64_t v) { return static_cast<double>(v); };
  const Scalar scalars[] = {
      {"process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", p->cpu_seconds},
      {"process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", n(p->resident_memory_bytes)},
      {"process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", n(p->virtual_memory_bytes)},
      {"process_open_fds", "gauge", "Number of open file descriptors.", n(p->open_fds)},
      {"process_max_fds", "gauge", "Maximum number of open file descriptors.", n(p->max_fds)},
      {"process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.",
       p->start_time_seconds},
  };
  for (const Scalar& m : scalars) One(out, m, "");
}

}  // namespace

void HistogramText(std::string& out, const char* name, const char* help, const std::string& labels,
                   const Histogram::Snapshot& s) {
  Header(out, name, "histogram", help);
  const std::string n(name);
  for (size_t i = 0; i <= s.bounds.size(); ++i) {
    const std::string le = i < s.bounds.size() ? Num(s.bounds[i]) : "+Inf";
    out += n + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(s.cumulative[i]) + "\n";
  }
  out += n + "_sum{" + labels + "} " + Num(s.sum) + "\n";
  out += n + "_count{" + labels + "} " + std::to_string(s.count) + "\n";
}

void ScalarText(std::string& out, const char* name, const char* type, const char* help, const std::string& labels,
                double v) {
  Header(out, name, type, help);
  Sample(out, name, labels, v);
}

ServeMetrics::ServeMetrics(std::string model_name)
    : model_name_(std::move(model_name)),
      ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
             40.0, 80.0, 160.0, 640.0, 2560.0}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
            7.5, 10.0, 20.0, 40.0, 80.0}),
      e2e_({0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
            120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}),
      queue_(PhaseBuckets()),
      prefill_(PhaseBuckets()),
      decode_(PhaseBuckets()),
      prompt_tokens_(TokenBuckets()),
      generation_tokens_(TokenBuckets()) {
  for (const char* r : {"stop", "length", "abort", "error"}) finished_[r] = 0;
  // The statuses the API answers with, present from the start so rate() sees their first one.
  for (int status : {400, 401, 404, 405, 429, 500, 503}) rejected_[status] = 0;
}

void ServeMetrics::ObserveEngineFinish(const Usage& u) {
  queue_.Observe(u.queue_s);
  prefill_.Observe(u.prefill_s);
  decode_.Observe(u.decode_s);
  prompt_tokens_.Observe(static_cast<double>(u.prompt_tokens));
  generation_tokens_.Observe(static_cast<double>(u.completion_tokens));
}

void ServeMetrics::CountRejected(int http_status) {
  if (http_status < 400) return;
  std::lock_guard<std::mutex> l(mu_);
  ++rejected_[http_status];
}

void ServeMetrics::CountFinished(std::string_view reason) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = finished_.find(reason);
  if (it == finished_.end()) it = finished_.emplace(std::string(reason), 0).first;
  ++it->second;
}

std::string ServeMetrics::Render(const EngineStats& st) const {
  const std::string labels = "model_name=\"" + PromEscape(model_name_) + "\"";
  std::string out;
  out.reserve(8192);
  HistogramText(out, "gyre_time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels,
                ttft_.Get());
  HistogramText(out, "gyre_inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", labels,
                itl_.Get());
  HistogramText(out, "gyre_e2e_request_latency_seconds", "Histogram of end-to-end request latency in seconds.",
                labels, e2e_.Get());
  HistogramText(out, "gyre_request_queue_time_seconds",
                "Histogram of time spent waiting in the engine's queue, in seconds.", labels, queue_.Get());
  HistogramText(out, "gyre_request_prefill_time_seconds",
                "Histogram of time from first scheduling to the first token, in seconds.", labels, prefill_.Get());
  HistogramText(out, "gyre_request_decode_time_seconds",
                "Histogram of time from the first token to the last, in seconds.", labels, decode_.Get());
  HistogramText(out, "gyre_request_prompt_tokens", "Histogram of prompt tokens per finished request.", labels,
                prompt_tokens_.Get());
  HistogramText(out, "gyre_request_generation_tokens", "Histogram of generated tokens per finished request.",
                labels, generation_tokens_.Get());

  Header(out, "gyre_request_success_total", "counter", "Count of finished requests by finish reason.");
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [reason, n] : finished_) {
      Sample(out, "gyre_request_success_total", labels + ",finished_reason=\"" + PromEscape(reason) + "\"",
             static_cast<double>(n));
    }
    Header(out, "gyre_request_rejected_total", "counter", "Count of requests answered with an HTTP error status.");
    for (const auto& [status, n] : rejected_) {
      Sample(out, "gyre_request_rejected_total", labels + ",status=\"" + std::to_string(status) + "\"",
             static_cast<double>(n));
    }
  }
  const double kv_usage =
      st.kv_pages_total > 0 ? static_cast<double>(st.kv_pages_used) / static_cast<double>(st.kv_pages_total) : 0.0;
  auto n = [](int64_t v) { return static_cast<double>(v); };
  const Scalar scalars[] = {
      {"gyre_prompt_tokens_total", "counter", "Number of prefill tokens processed.", n(st.prompt_tokens_total)},
      {"gyre_generation_tokens_total", "counter", "Number of generation tokens processed.",
       n(st.generation_tokens_total)},
      {"gyre_num_preemptions_total", "counter", "Cumulative number of preemptions.", n(st.num_preemptions)},
      {"gyre_num_requests_running", "gauge", "Number of requests in model execution batches.", n(st.num_running)},
      {"gyre_num_requests_waiting", "gauge", "Number of requests waiting to be processed.", n(st.num_waiting)},
      {"gyre_request_max_stall_seconds", "gauge",
       "Longest time any running or waiting request has gone without a scheduled piece (starvation).",
       st.max_request_stall_s},
      {"gyre_kv_cache_usage_perc", "gauge", "Latent KV-cache usage. 1 means 100 percent usage.", kv_usage},
      {"gyre_kv_cache_pages_used", "gauge", "Latent KV-cache pages in use.", n(st.kv_pages_used)},
      {"gyre_kv_cache_pages_capacity", "gauge", "Latent KV-cache pages in the pool.", n(st.kv_pages_total)},
      {"gyre_kda_state_slots_used", "gauge", "KDA recurrent-state slots in use.", n(st.kda_slots_used)},
      {"gyre_kda_state_slots_capacity", "gauge", "KDA recurrent-state slots in the pool.", n(st.kda_slots_total)},
      {"gyre_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
       n(st.prefix_cache_queried_tokens)},
      {"gyre_prefix_cache_hits_total", "counter", "Prompt tokens restored from the prefix cache (state restored too).",
       n(st.prefix_cache_hit_tokens)},
      {"gyre_prefix_cache_blocks", "gauge", "Token blocks (KV pages) held by the prefix cache.",
       n(st.prefix_cache_blocks)},
      {"gyre_prefix_cache_evictable_blocks", "gauge", "Cached blocks no request holds (evicted when pages are needed).",
       n(st.prefix_cache_evictable_blocks)},
      {"gyre_prefix_cache_block_evictions_total", "counter", "Cached blocks evicted to free KV pages.",
       n(st.prefix_cache_block_evictions)},
      {"gyre_kda_checkpoint_bytes", "gauge", "Bytes of KDA state checkpoints held by the prefix cache.",
       n(st.kda_checkpoint_bytes)},
      {"gyre_kda_checkpoints_used", "gauge", "KDA state checkpoints in use.", n(st.kda_checkpoints_used)},
      {"gyre_kda_checkpoints_capacity", "gauge", "KDA state checkpoints the budget holds.",
       n(st.kda_checkpoints_total)},
      {"gyre_kda_checkpoint_evictions_total", "counter", "KDA state checkpoints evicted to make room for new ones.",
       n(st.kda_checkpoint_evictions)},
      {"gyre_prefill_tokens_computed_total", "counter", "Prompt and recomputed tokens run through the model (hits excluded).",
       n(st.prefill_tokens_computed)},
      {"gyre_spec_decode_num_drafts_total", "counter", "Speculative verify pieces run.", n(st.spec_verify_pieces)},
      {"gyre_spec_decode_num_draft_tokens_total", "counter", "Draft tokens proposed for verification.",
       n(st.spec_draft_tokens)},
      {"gyre_spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted by verification.",
       n(st.spec_accepted_tokens)},
  };
  for (const Scalar& m : scalars) One(out, m, labels);
  // Per draft position (vLLM's spec_decode_num_accepted_tokens_per_pos), one sample per position.
  if (!st.spec_drafts_per_pos.empty()) {
    const std::pair<const char*, const std::vector<int64_t>*> per_pos[] = {
        {"gyre_spec_decode_num_draft_tokens_per_pos_total", &st.spec_drafts_per_pos},
        {"gyre_spec_decode_num_accepted_tokens_per_pos_total", &st.spec_accepted_per_pos}};
    for (const auto& [name, v] : per_pos) {
      Header(out, name, "counter",
             name == per_pos[0].first ? "Draft tokens proposed at each draft position (0-based)."
                                      : "Draft tokens accepted at each draft position (0-based).");
      for (size_t j = 0; j < v->size(); ++j)
        Sample(out, name, labels + ",position=\"" + std::to_string(j) + "\"", n((*v)[j]));
    }
  }
  ProcessText(out);
  return out;
}

}  // namespace gyre::serve
