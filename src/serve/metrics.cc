#include "serve/metrics.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

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

void Sample(std::string& out, const char* name, const std::string& labels, double v) {
  out += name;
  out += '{';
  out += labels;
  out += "} ";
  out += Num(v);
  out += '\n';
}

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

}  // namespace

ServeMetrics::ServeMetrics(std::string model_name)
    : model_name_(std::move(model_name)),
      ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
             40.0, 80.0, 160.0, 640.0, 2560.0}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
            7.5, 10.0, 20.0, 40.0, 80.0}),
      e2e_({0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
            120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}) {
  for (const char* r : {"stop", "length", "abort", "error"}) finished_[r] = 0;
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
  HistogramText(out, "gyre:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels,
                ttft_.Get());
  HistogramText(out, "gyre:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", labels,
                itl_.Get());
  HistogramText(out, "gyre:e2e_request_latency_seconds", "Histogram of end-to-end request latency in seconds.",
                labels, e2e_.Get());

  Header(out, "gyre:request_success_total", "counter", "Count of finished requests by finish reason.");
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [reason, n] : finished_) {
      Sample(out, "gyre:request_success_total", labels + ",finished_reason=\"" + PromEscape(reason) + "\"",
             static_cast<double>(n));
    }
  }
  Header(out, "gyre:prompt_tokens_total", "counter", "Number of prefill tokens processed.");
  Sample(out, "gyre:prompt_tokens_total", labels, static_cast<double>(st.prompt_tokens_total));
  Header(out, "gyre:generation_tokens_total", "counter", "Number of generation tokens processed.");
  Sample(out, "gyre:generation_tokens_total", labels, static_cast<double>(st.generation_tokens_total));
  Header(out, "gyre:num_preemptions_total", "counter", "Cumulative number of preemptions.");
  Sample(out, "gyre:num_preemptions_total", labels, static_cast<double>(st.num_preemptions));

  Header(out, "gyre:num_requests_running", "gauge", "Number of requests in model execution batches.");
  Sample(out, "gyre:num_requests_running", labels, static_cast<double>(st.num_running));
  Header(out, "gyre:num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
  Sample(out, "gyre:num_requests_waiting", labels, static_cast<double>(st.num_waiting));
  const double kv_usage =
      st.kv_pages_total > 0 ? static_cast<double>(st.kv_pages_used) / static_cast<double>(st.kv_pages_total) : 0.0;
  Header(out, "gyre:kv_cache_usage_perc", "gauge", "Latent KV-cache usage. 1 means 100 percent usage.");
  Sample(out, "gyre:kv_cache_usage_perc", labels, kv_usage);
  Header(out, "gyre:kv_cache_pages_used", "gauge", "Latent KV-cache pages in use.");
  Sample(out, "gyre:kv_cache_pages_used", labels, static_cast<double>(st.kv_pages_used));
  Header(out, "gyre:kv_cache_pages_total", "gauge", "Latent KV-cache pages in the pool.");
  Sample(out, "gyre:kv_cache_pages_total", labels, static_cast<double>(st.kv_pages_total));
  Header(out, "gyre:kda_state_slots_used", "gauge", "KDA recurrent-state slots in use.");
  Sample(out, "gyre:kda_state_slots_used", labels, static_cast<double>(st.kda_slots_used));
  Header(out, "gyre:kda_state_slots_total", "gauge", "KDA recurrent-state slots in the pool.");
  Sample(out, "gyre:kda_state_slots_total", labels, static_cast<double>(st.kda_slots_total));
  return out;
}

}  // namespace gyre::serve
