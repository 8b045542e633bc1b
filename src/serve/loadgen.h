// Load generator for OpenAI-compatible servers (`gyre bench serve`), in the spirit of
// `vllm bench serve`.
//
// Sends `num_prompts` streaming POST /v1/completions requests (with "ignore_eos": true and
// stream_options.include_usage, so every request produces exactly output_len tokens when the
// server honours the extension) on an arrival schedule (Poisson or fixed at `request_rate`
// requests/s, or all at once when the rate is infinite), with at most `max_concurrency` in flight.
// One async HTTP client (Boost.Beast, one thread) measures per request:
//   TTFT  send → first chunk with text;  ITL  gaps between chunks with text;
//   E2E   send → end of stream;          TPOT (E2E − TTFT) / (output tokens − 1).
// Summarize reduces them to a flat metric map (p50/p90/p99/mean in ms, throughputs, goodput under
// optional SLOs) whose keys other tools diff (`gyre compare`).
//
// Thread safety: RunLoad blocks the calling thread; everything else is pure.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "serve/openai_protocol.h"

namespace gyre::serve {

// A server URL, http://HOST[:PORT][/PREFIX] (a trailing /v1 is dropped from the prefix; an IPv6
// host is bracketed). InvalidArgument for another scheme or a missing host.
struct Endpoint {
  std::string host, port, prefix;  // prefix: path before /v1 ("" usually)
};
Result<Endpoint> ParseUrl(std::string url);

struct LoadgenOptions {
  std::string url = "http://127.0.0.1:8000";  // server base URL (a trailing /v1 is accepted)
  std::string model;                          // "" → the first id of GET /v1/models
  std::string api_key;                        // sent as a Bearer token when set
  int64_t num_prompts = 100;
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s
  bool poisson = true;                        // else fixed intervals of 1/request_rate
  int64_t max_concurrency = 0;                // 0: unlimited
  int64_t input_len = 128;                    // random prompts: token ids per prompt
  int64_t output_len = 128;                   // max_tokens per request
  int64_t token_id_range = 1000;              // random prompt ids are drawn from [0, range)
  std::string prompts_file;                   // one prompt per line (text, or JSON {"prompt": ...})
  uint64_t seed = 0;                          // prompts and arrival times
  double slo_ttft_ms = 0, slo_tpot_ms = 0;    // 0: no SLO on that metric
  double request_timeout_s = 600;
  // Called on the benchmark's thread each time another tenth of the requests has finished, with a
  // line such as "bench serve: 40/100 requests done (1 failed), 12.3 s"; empty: nothing.
  // `gyre bench serve` prints it on stderr.
  std::function<void(const std::string&)> progress;
};

struct RequestResult {
  bool ok = false;
  std::string error;          // when !ok: HTTP status and message, or the network error
  double start_s = 0;         // since the benchmark started
  double ttft_s = 0, e2e_s = 0;
  std::vector<double> itl_s;  // gaps between text chunks
  int64_t prompt_tokens = 0, output_tokens = 0;  // from the usage chunk
};

struct LoadReport {
  std::vector<RequestResult> requests;
  double duration_s = 0;
  std::map<std::string, double> metrics;  // Summarize(...)
};

// Runs the benchmark. Errors: InvalidArgument for bad options or an unreadable prompts file;
// Unavailable when the server cannot be reached at all (every request failed to connect).
Result<LoadReport> RunLoad(const LoadgenOptions& options);

// The flat metric map: completed, failed, duration_s, request_throughput, output_throughput,
// total_token_throughput, total_input_tokens, total_output_tokens, {ttft,tpot,itl,e2e}_ms_{mean,
// p50,p90,p99}, and with an SLO: goodput (good requests/s) and goodput_ratio.
std::map<std::string, double> Summarize(const std::vector<RequestResult>& results, double duration_s,
                                        double slo_ttft_ms, double slo_tpot_ms);

// Linear-interpolated percentile (numpy's default), p in [0, 100]; 0 for an empty set.
double Percentile(std::vector<double> values, double p);

// gyre result JSON (the shape `gyre compare` reads): {"meta": {"tool", "date", "machine",
// "commit", "config"}, "metrics": {flat map}, "directions": {"name": "lower"|"higher"},
// "samples": {"ttft_ms"|"tpot_ms"|"e2e_ms": [per request]}, "requests": [one record per request
// sent, in send order: {"ok", "start_ms", and when ok "ttft_ms", "e2e_ms", "itl_ms": [gaps],
// "prompt_tokens", "output_tokens"}], "errors": [first 10 messages]}. `gyre compare` of two such
// files judges serving on the records (feedback/serve_compare.h).
Json ReportJson(const LoadgenOptions& options, const LoadReport& report);
// The human-readable summary table.
std::string ReportText(const LoadReport& report);

}  // namespace gyre::serve
