// Load generator. Sections: URL and prompts; the async client (one coroutine per request, a
// dispatcher for arrivals and the concurrency cap); statistics; reports.
#include "serve/loadgen.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace gyre::serve {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using asio::use_awaitable;

// ---- URL and prompts --------------------------------------------------------------------------


Result<std::vector<Json>> MakePrompts(const LoadgenOptions& o, std::mt19937_64& rng) {
  std::vector<Json> out;
  if (!o.prompts_file.empty()) {
    std::ifstream in(o.prompts_file);
    if (!in) return Status::InvalidArgument("cannot read --prompts-file " + o.prompts_file);
    std::vector<Json> file;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      if (line[0] == '{') {
        Json j = Json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.contains("prompt")) {
          return Status::InvalidArgument(o.prompts_file + ": a JSON line needs a \"prompt\"");
        }
        file.push_back(j["prompt"]);
      } else {
        file.push_back(line);
      }
    }
    if (file.empty()) return Status::InvalidArgument(o.prompts_file + " has no prompts");
    for (int64_t i = 0; i < o.num_prompts; ++i) out.push_back(file[static_cast<size_t>(i) % file.size()]);
    return out;
  }
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(o.token_id_range - 1));
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    Json ids = Json::array();
    for (int64_t k = 0; k < o.input_len; ++k) ids.push_back(id(rng));
    out.push_back(std::move(ids));
  }
  return out;
}

double Since(Clock::time_point t0, Clock::time_point t) { return std::chrono::duration<double>(t - t0).count(); }

// ---- the async client -------------------------------------------------------------------------

class Runner {
 public:
  Runner(const LoadgenOptions& o, Endpoint ep, std::vector<Json> prompts, std::mt19937_64 rng)
      : o_(o), ep_(std::move(ep)), prompts_(std::move(prompts)), rng_(rng), slot_(ioc_) {
    results_.resize(prompts_.size());
  }

  LoadReport Run() {
    asio::co_spawn(ioc_, Main(), asio::detached);
    ioc_.run();
    LoadReport r;
    r.requests = std::move(results_);
    r.duration_s = duration_s_;
    return r;
  }

 private:
  asio::awaitable<void> Main() {
    if (o_.model.empty()) co_await DiscoverModel();
    start_ = Clock::now();
    co_await Dispatch();
    while (in_flight_ > 0) co_await WaitSlot();
    duration_s_ = Since(start_, Clock::now());
  }

  asio::awaitable<void> WaitSlot() {
    beast::error_code ec;
    slot_.expires_at(asio::steady_timer::time_point::max());
    co_await slot_.async_wait(asio::redirect_error(use_awaitable, ec));
  }

  asio::awaitable<void> Dispatch() {
    asio::steady_timer timer(ioc_);
    std::exponential_distribution<double> exp(std::isfinite(o_.request_rate) ? o_.request_rate : 1.0);
    double t = 0;
    for (size_t i = 0; i < prompts_.size(); ++i) {
      if (i > 0 && std::isfinite(o_.request_rate)) t += o_.poisson ? exp(rng_) : 1.0 / o_.request_rate;
      timer.expires_at(start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t)));
      beast::error_code ec;
      co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
      while (o_.max_concurrency > 0 && in_flight_ >= o_.max_concurrency) co_await WaitSlot();
      ++in_flight_;
      asio::co_spawn(ioc_, OneRequest(i), [this, i](std::exception_ptr) {
        --in_flight_;
        slot_.cancel();
        ReportProgress(results_[i].ok);
      });
    }
  }

  void ReportProgress(bool ok) {
    ++num_done_;
    if (!ok) ++num_failed_;
    const int64_t n = static_cast<int64_t>(prompts_.size());
    const int64_t step = std::max<int64_t>(1, n / 10);
    if (!o_.progress || (num_done_ % step != 0 && num_done_ != n)) return;
    char line[160];
    std::snprintf(line, sizeof line, "bench serve: %lld/%lld requests done (%lld failed), %.1f s",
                  static_cast<long long>(num_done_), static_cast<long long>(n), static_cast<long long>(num_failed_),
                  Since(start_, Clock::now()));
    o_.progress(line);
  }

  Json Body(size_t i) const {
    Json b = {{"prompt", prompts_[i]},
              {"max_tokens", o_.output_len},
              {"temperature", 0},
              {"ignore_eos", true},
              {"stream", true},
              {"stream_options", {{"include_usage", true}}}};
    if (!model_.empty()) b["model"] = model_;
    return b;
  }

  // One HTTP exchange; `on_chunk` receives streamed (chunked) body bytes, the rest goes to
  // *body. Returns the status, or 0 with *error set on a network failure.
  template <typename OnChunk>
  asio::awaitable<int> Exchange(http::verb verb, const std::string& target, std::string payload, std::string* body,
                                std::string* error, OnChunk on_chunk) {
    auto ex = co_await asio::this_coro::executor;
    beast::error_code ec;
    tcp::resolver resolver(ex);
    beast::tcp_stream stream(ex);
    stream.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.request_timeout_s)));
    auto eps = co_await resolver.async_resolve(ep_.host, ep_.port, asio::redirect_error(use_awaitable, ec));
    if (!ec) co_await stream.async_connect(eps, asio::redirect_error(use_awaitable, ec));
    if (ec) {
      *error = "connect " + ep_.host + ":" + ep_.port + ": " + ec.message();
      co_return 0;
    }
    stream.socket().set_option(tcp::no_delay(true), ec);
    http::request<http::string_body> req{verb, ep_.prefix + target, 11};
    req.set(http::field::host, ep_.host + ":" + ep_.port);
    req.set(http::field::user_agent, "gyre-bench");
    if (!o_.api_key.empty()) req.set(http::field::authorization, "Bearer " + o_.api_key);
    if (verb == http::verb::post) {
      req.set(http::field::content_type, "application/json");
      req.body() = std::move(payload);
      req.prepare_payload();
    }
    co_await http::async_write(stream, req, asio::redirect_error(use_awaitable, ec));
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    std::function<size_t(uint64_t, beast::string_view, beast::error_code&)> cb =
        [&](uint64_t, beast::string_view data, beast::error_code&) {
          on_chunk(std::string_view(data.data(), data.size()));
          return data.size();
        };
    parser.on_chunk_body(cb);
    while (!ec && !parser.is_done()) {
      co_await http::async_read_some(stream, buf, parser, asio::redirect_error(use_awaitable, ec));
    }
    if (ec) {
      *error = "reading the response: " + ec.message();
      co_return 0;
    }
    *body = parser.get().body();
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    co_return static_cast<int>(parser.get().result_int());
  }

  asio::awaitable<void> DiscoverModel() {
    std::string body, error;
    const int status = co_await Exchange(http::verb::get, "/v1/models", "", &body, &error, [](std::string_view) {});
    if (status != 200) co_return;  // requests then go without "model"; the server picks its own
    const Json j = Json::parse(body, nullptr, false);
    if (!j.is_discarded() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
        j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
      model_ = j["data"][0]["id"].get<std::string>();
    }
  }

  asio::awaitable<void> OneRequest(size_t i) {
    RequestResult& r = results_[i];
    const auto t0 = Clock::now();
    r.start_s = Since(start_, t0);
    std::string pending, body, error, stream_error;
    bool first = true;
    Clock::time_point last;
    auto on_event = [&](std::string_view data) {
      if (data == "[DONE]") return;
      const Json j = Json::parse(data, nullptr, false);
      if (j.is_discarded()) return;
      if (j.contains("error")) {
        stream_error = j["error"].value("message", std::string("error event"));
        return;
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        r.prompt_tokens = j["usage"].value("prompt_tokens", int64_t{0});
        r.output_tokens = j["usage"].value("completion_tokens", int64_t{0});
      }
      if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
      const Json& c = j["choices"][0];
      const bool has_text = c.contains("text") && c["text"].is_string() && !c["text"].get_ref<const std::string&>().empty();
      if (!has_text) return;
      const auto now = Clock::now();
      if (first) {
        r.ttft_s = Since(t0, now);
        first = false;
      } else {
        r.itl_s.push_back(Since(last, now));
      }
      last = now;
    };
    auto on_chunk = [&](std::string_view bytes) {
      pending.append(bytes);
      size_t pos;
      while ((pos = pending.find("\n\n")) != std::string::npos) {
        std::string_view ev(pending.data(), pos);
        if (ev.rfind("data: ", 0) == 0) on_event(ev.substr(6));
        pending.erase(0, pos + 2);
      }
    };
    const int status = co_await Exchange(http::verb::post, "/v1/completions", DumpJson(Body(i)), &body, &error, on_chunk);
    r.e2e_s = Since(t0, Clock::now());
    if (status == 0) {
      r.error = error;
    } else if (status != 200) {
      const Json j = Json::parse(body, nullptr, false);
      std::string msg = body.substr(0, 200);
      if (!j.is_discarded() && j.contains("error") && j["error"].is_object()) msg = j["error"].value("message", msg);
      r.error = "HTTP " + std::to_string(status) + ": " + msg;
    } else if (!stream_error.empty()) {
      r.error = "stream error: " + stream_error;
    } else if (first) {
      r.error = "the stream had no text";
    } else {
      r.ok = true;
      if (r.output_tokens == 0) r.output_tokens = static_cast<int64_t>(r.itl_s.size()) + 1;  // no usage chunk
    }
  }

  const LoadgenOptions& o_;
  const Endpoint ep_;
  const std::vector<Json> prompts_;
  std::mt19937_64 rng_;
  asio::io_context ioc_;
  asio::steady_timer slot_;
  std::string model_ = o_.model;
  std::vector<RequestResult> results_;
  int64_t in_flight_ = 0;
  int64_t num_done_ = 0, num_failed_ = 0;  // finished requests, for progress lines
  Clock::time_point start_;
  double duration_s_ = 0;
};

// ---- reports ----------------------------------------------------------------------------------

std::string Shell(const char* cmd) {
  std::string out;
  if (FILE* f = ::popen(cmd, "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof(buf), f)) out += buf;
    ::pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

Json MachineJson() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  std::string cpu;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  Json m = {{"hostname", host}, {"cpu", cpu}, {"num_cpus", std::thread::hardware_concurrency()}};
  const std::string gpu = Shell("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1");
  if (!gpu.empty()) m["gpu"] = gpu;
  return m;
}

}  // namespace

Result<Endpoint> ParseUrl(std::string url) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) return Status::InvalidArgument("--url must start with http:// (got '" + url + "')");
  url = url.substr(kScheme.size());
  Endpoint e;
  const size_t slash = url.find('/');
  const std::string authority = url.substr(0, slash);
  e.prefix = slash == std::string::npos ? "" : url.substr(slash);
  while (!e.prefix.empty() && e.prefix.back() == '/') e.prefix.pop_back();
  if (e.prefix.size() >= 3 && e.prefix.compare(e.prefix.size() - 3, 3, "/v1") == 0) e.prefix.resize(e.prefix.size() - 3);
  // An IPv6 literal is bracketed: [::1]:8000.
  const size_t close = authority[0] == '[' ? authority.find(']') : std::string::npos;
  const size_t colon = authority.find(':', close == std::string::npos ? 0 : close);
  e.host = authority.substr(0, colon);
  e.port = colon == std::string::npos ? "80" : authority.substr(colon + 1);
  if (close != std::string::npos) e.host = e.host.substr(1, close - 1);
  if (e.host.empty() || e.port.empty()) return Status::InvalidArgument("--url has no host or port: " + url);
  return e;
}

// ---- statistics -------------------------------------------------------------------------------

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos)), hi = static_cast<size_t>(std::ceil(pos));
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

std::map<std::string, double> Summarize(const std::vector<RequestResult>& rs, double duration_s, double slo_ttft_ms,
                                        double slo_tpot_ms) {
  std::map<std::string, double> m;
  std::vector<double> ttft, tpot, itl, e2e;
  double in_tok = 0, out_tok = 0, ok = 0, good = 0;
  for (const auto& r : rs) {
    if (!r.ok) continue;
    ++ok;
    in_tok += static_cast<double>(r.prompt_tokens);
    out_tok += static_cast<double>(r.output_tokens);
    ttft.push_back(r.ttft_s * 1e3);
    e2e.push_back(r.e2e_s * 1e3);
    double tp = 0;
    if (r.output_tokens > 1) {
      tp = (r.e2e_s - r.ttft_s) * 1e3 / static_cast<double>(r.output_tokens - 1);
      tpot.push_back(tp);
    }
    for (double g : r.itl_s) itl.push_back(g * 1e3);
    if ((slo_ttft_ms <= 0 || r.ttft_s * 1e3 <= slo_ttft_ms) && (slo_tpot_ms <= 0 || tp <= slo_tpot_ms)) ++good;
  }
  const double d = duration_s > 0 ? duration_s : 1e-9;
  m["completed"] = ok;
  m["failed"] = static_cast<double>(rs.size()) - ok;
  m["duration_s"] = duration_s;
  m["total_input_tokens"] = in_tok;
  m["total_output_tokens"] = out_tok;
  m["request_throughput"] = ok / d;
  m["output_throughput"] = out_tok / d;
  m["total_token_throughput"] = (in_tok + out_tok) / d;
  auto stats = [&](const char* name, const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    const std::string n(name);
    m[n + "_ms_mean"] = v.empty() ? 0 : sum / static_cast<double>(v.size());
    m[n + "_ms_p50"] = Percentile(v, 50);
    m[n + "_ms_p90"] = Percentile(v, 90);
    m[n + "_ms_p99"] = Percentile(v, 99);
  };
  stats("ttft", ttft);
  stats("tpot", tpot);
  stats("itl", itl);
  stats("e2e", e2e);
  if (slo_ttft_ms > 0 || slo_tpot_ms > 0) {
    m["goodput"] = good / d;
    m["goodput_ratio"] = rs.empty() ? 0 : good / static_cast<double>(rs.size());
  }
  return m;
}

Result<LoadReport> RunLoad(const LoadgenOptions& o) {
  if (o.num_prompts < 1) return Status::InvalidArgument("--num-prompts must be >= 1");
  if (!(o.request_rate > 0)) return Status::InvalidArgument("--request-rate must be > 0 (or inf)");
  if (o.input_len < 1 || o.output_len < 1) return Status::InvalidArgument("--input-len and --output-len must be >= 1");
  if (o.token_id_range < 1) return Status::InvalidArgument("the token id range must be >= 1");
  if (o.max_concurrency < 0) return Status::InvalidArgument("--max-concurrency must be >= 0");
  GYRE_ASSIGN_OR_RETURN(Endpoint ep, ParseUrl(o.url));
  std::mt19937_64 rng(o.seed);
  GYRE_ASSIGN_OR_RETURN(std::vector<Json> prompts, MakePrompts(o, rng));
  Runner runner(o, std::move(ep), std::move(prompts), rng);
  LoadReport r = runner.Run();
  const bool none_connected = std::all_of(r.requests.begin(), r.requests.end(), [](const RequestResult& x) {
    return !x.ok && x.error.rfind("connect ", 0) == 0;
  });
  if (none_connected) return Status::Unavailable("no request reached " + o.url + ": " + r.requests[0].error);
  r.metrics = Summarize(r.requests, r.duration_s, o.slo_ttft_ms, o.slo_tpot_ms);
  return r;
}

Json ReportJson(const LoadgenOptions& o, const LoadReport& r) {
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::string commit = Shell("git rev-parse --short HEAD 2>/dev/null");
  if (commit.empty()) commit = "unknown";
  Json config = {{"url", o.url},
                 {"model", o.model},
                 {"num_prompts", o.num_prompts},
                 {"request_rate", std::isfinite(o.request_rate) ? Json(o.request_rate) : Json("inf")},
                 {"arrival", o.poisson ? "poisson" : "fixed"},
                 {"max_concurrency", o.max_concurrency},
                 {"input_len", o.input_len},
                 {"output_len", o.output_len},
                 {"token_id_range", o.token_id_range},
                 {"prompts_file", o.prompts_file},
                 {"seed", o.seed},
                 {"slo_ttft_ms", o.slo_ttft_ms},
                 {"slo_tpot_ms", o.slo_tpot_ms}};
  Json metrics = Json::object();
  for (const auto& [k, v] : r.metrics) metrics[k] = v;
  // Directions for `gyre compare` (names like "completed" carry none by convention).
  Json directions = Json::object();
  for (const auto& [k, v] : r.metrics) {
    const bool higher = k.find("throughput") != std::string::npos || k.rfind("goodput", 0) == 0 || k == "completed";
    const bool lower = k.find("_ms_") != std::string::npos || k == "failed" || k == "duration_s";
    if (higher || lower) directions[k] = higher ? "higher" : "lower";
  }
  // Per-request samples (successful requests, in send order), for distribution comparisons.
  Json samples = {{"ttft_ms", Json::array()}, {"tpot_ms", Json::array()}, {"e2e_ms", Json::array()}};
  Json errors = Json::array();
  Json requests = Json::array();
  for (const auto& q : r.requests) {
    Json rec = {{"ok", q.ok}, {"start_ms", q.start_s * 1e3}};
    if (q.ok) {
      Json itl = Json::array();
      for (double g : q.itl_s) itl.push_back(g * 1e3);
      rec.update({{"ttft_ms", q.ttft_s * 1e3},
                  {"e2e_ms", q.e2e_s * 1e3},
                  {"itl_ms", std::move(itl)},
                  {"prompt_tokens", q.prompt_tokens},
                  {"output_tokens", q.output_tokens}});
    }
    requests.push_back(std::move(rec));
    if (!q.ok) {
      if (errors.size() < 10) errors.push_back(q.error);
      continue;
    }
    samples["ttft_ms"].push_back(q.ttft_s * 1e3);
    samples["e2e_ms"].push_back(q.e2e_s * 1e3);
    if (q.output_tokens > 1) {
      samples["tpot_ms"].push_back((q.e2e_s - q.ttft_s) * 1e3 / static_cast<double>(q.output_tokens - 1));
    }
  }
  return Json{{"meta",
               {{"tool", "gyre bench serve"}, {"date", date}, {"machine", MachineJson()}, {"commit", commit},
                {"config", config}}},
              {"metrics", metrics},
              {"directions", directions},
              {"samples", samples},
              {"requests", requests},
              {"errors", errors}};
}

std::string ReportText(const LoadReport& r) {
  const auto& m = r.metrics;
  auto get = [&](const std::string& k) {
    auto it = m.find(k);
    return it == m.end() ? 0.0 : it->second;
  };
  std::string out;
  char line[160];
  auto row = [&](const char* label, double v, const char* fmt = "%-40s %12.2f\n") {
    std::snprintf(line, sizeof(line), fmt, label, v);
    out += line;
  };
  out += "============ Serving Benchmark Result ============\n";
  row("Successful requests:", get("completed"), "%-40s %12.0f\n");
  row("Failed requests:", get("failed"), "%-40s %12.0f\n");
  row("Benchmark duration (s):", get("duration_s"));
  row("Total input tokens:", get("total_input_tokens"), "%-40s %12.0f\n");
  row("Total generated tokens:", get("total_output_tokens"), "%-40s %12.0f\n");
  row("Request throughput (req/s):", get("request_throughput"));
  row("Output token throughput (tok/s):", get("output_throughput"));
  row("Total token throughput (tok/s):", get("total_token_throughput"));
  if (m.count("goodput")) row("Request goodput (req/s):", get("goodput"));
  for (const char* n : {"ttft", "tpot", "itl", "e2e"}) {
    const std::string s(n);
    std::string title = s == "ttft" ? "Time to First Token" : s == "tpot" ? "Time per Output Token (excl. 1st token)"
                                                      : s == "itl" ? "Inter-token Latency" : "End-to-end Latency";
    out += "---------------" + title + "---------------\n";
    std::string upper = s;
    for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    row(("Mean " + upper + " (ms):").c_str(), get(s + "_ms_mean"));
    row(("P50 " + upper + " (ms):").c_str(), get(s + "_ms_p50"));
    row(("P90 " + upper + " (ms):").c_str(), get(s + "_ms_p90"));
    row(("P99 " + upper + " (ms):").c_str(), get(s + "_ms_p99"));
  }
  out += "==================================================\n";
  return out;
}

}  // namespace gyre::serve
