#include "cli/disagg_scenario.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "cli/disagg_node.h"
#include "core/trace.h"
#include "engine/engine.h"
#include "feedback/analyze.h"
#include "feedback/stats.h"
#include "feedback/trace_export.h"
#include "transfer/paced_connection.h"
#include "transfer/tcp_connection.h"
#ifdef GYRE_CUDA
#include "runtime/cuda_model.h"
#endif

namespace gyre::cli {
namespace {

using Clock = std::chrono::steady_clock;

// When a request's first token came and when it ended.
class DoneSink final : public RequestSink {
 public:
  void OnToken(const TokenEvent&) override {
    std::lock_guard<std::mutex> l(mu_);
    if (first_ == Clock::time_point{}) first_ = Clock::now();
  }
  void OnFinish(FinishReason r, const Status&, const Usage&) override {
    std::lock_guard<std::mutex> l(mu_);
    reason_ = r;
    end_ = Clock::now();
    done_ = true;
    cv_.notify_all();
  }
  bool WaitDone(std::chrono::seconds deadline) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, deadline, [&] { return done_; });
  }
  Clock::time_point first() const { std::lock_guard<std::mutex> l(mu_); return first_; }
  Clock::time_point end() const { std::lock_guard<std::mutex> l(mu_); return end_; }
  FinishReason reason() const { std::lock_guard<std::mutex> l(mu_); return reason_; }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Clock::time_point first_{}, end_{};
  FinishReason reason_ = FinishReason::kError;
  bool done_ = false;
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Spans as analyze's events (CPU track ids).
std::vector<feedback::TraceEvent> EventsOf(const std::vector<trace::Span>& spans) {
  std::vector<feedback::TraceEvent> out;
  out.reserve(spans.size());
  for (const trace::Span& s : spans)
    out.push_back({s.name, s.cat, s.start_ns / 1e3, s.dur_ns < 0 ? -1.0 : s.dur_ns / 1e3, s.tid, nlohmann::json::object()});
  return out;
}

}  // namespace

Result<std::map<std::string, double>> RunDisaggPrefillScenario(const Model& model, const nlohmann::json& spec,
                                                               int repeat) {
  std::map<std::string, double> out;
  bool transfer = true, bf16_weights = false;
  int64_t prompts = 16, prompt_len = 256, arrival_ms = 0, kv_tokens = int64_t(1) << 16;
  double link_bytes_per_s = 0;
  std::string backend = "cpu";
  EngineOptions eo;
  try {
    transfer = spec.value("transfer", true);
    prompts = spec.value("prompts", prompts);
    prompt_len = spec.value("prompt_len", prompt_len);
    arrival_ms = spec.value("arrival_ms", arrival_ms);
    backend = spec.value("backend", backend);
    link_bytes_per_s = spec.value("link_bytes_per_s", 0.0);
    bf16_weights = spec.value("bf16_weights", false);
    kv_tokens = spec.value("kv_tokens", kv_tokens);
    eo.max_num_seqs = spec.value("max_num_seqs", eo.max_num_seqs);
    eo.max_num_batched_tokens = spec.value("max_num_batched_tokens", eo.max_num_batched_tokens);
    eo.kv_page_tokens = spec.value("kv_page_tokens", eo.kv_page_tokens);
    eo.kv_memory_bytes = spec.value("kv_memory", eo.kv_memory_bytes);
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string("disagg_prefill: ") + e.what());
  }
  if (prompts < 1 || prompt_len < 1 || arrival_ms < 0 || !(link_bytes_per_s >= 0))
    return Status::InvalidArgument("disagg_prefill: prompts and prompt_len must be >= 1, arrival_ms and link_bytes_per_s >= 0");
  if (backend != "cpu" && backend != "cuda")
    return Status::InvalidArgument("disagg_prefill: backend must be \"cpu\" or \"cuda\", not '" + backend + "'");
  eo.max_waiting = std::max<int64_t>(eo.max_waiting, prompts);
  eo.long_prefill_token_threshold = 0;  // one burst, no arrivals to make room for

  std::unique_ptr<ModelRunner> runner;  // cuda: outlives the engine
  Result<std::unique_ptr<Engine>> made = Status::Internal("no engine");
  if (backend == "cuda") {
#ifdef GYRE_CUDA
    CudaModelOptions co;
    co.bf16_weights = bf16_weights;
    co.max_seqs = eo.max_num_seqs;
    co.max_batch_tokens = eo.max_num_batched_tokens;
    co.kv_tokens = kv_tokens;
    co.page_tokens = eo.kv_page_tokens;
    GYRE_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> cm, CudaModel::FromHost(model.config(), model.weights(), co));
    runner = std::move(cm);
    made = Engine::Create(*runner, eo);
#else
    return Status::Unimplemented("disagg_prefill: backend cuda needs a CUDA build");
#endif
  } else {
    made = Engine::Create(model, eo);
  }
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, std::move(made));
  GYRE_RETURN_IF_ERROR(engine->Start());

  // The decode side: a receiving DisaggNode (its engine only lends the node a home; nothing is
  // submitted to it), and the prefill node that sends to it.
  std::unique_ptr<Engine> decode_engine;
  std::unique_ptr<DisaggNode> decode_node, prefill_node;
  std::string send_to;
  if (transfer) {
    EngineOptions deo;
    deo.kv_memory_bytes = int64_t(4) << 20;
    deo.max_num_seqs = 1;
    GYRE_ASSIGN_OR_RETURN(decode_engine, Engine::Create(model, deo));
    GYRE_RETURN_IF_ERROR(decode_engine->Start());
    DisaggNodeOptions dno;
    dno.role = DisaggRole::kDecode;
    GYRE_ASSIGN_OR_RETURN(decode_node, DisaggNode::Create(decode_engine.get(), dno));
    send_to = "127.0.0.1:" + std::to_string(decode_node->transfer_port());
    DisaggNodeOptions pno;
    if (link_bytes_per_s > 0) {
      // One link of that rate, shared by every connection the node opens over it.
      auto link = std::make_shared<transfer::LinkPacer>(link_bytes_per_s);
      pno.connect = [link](const std::string& host, uint16_t port) -> Result<std::unique_ptr<transfer::Connection>> {
        GYRE_ASSIGN_OR_RETURN(std::unique_ptr<transfer::Connection> tcp,
                              transfer::TcpConnect(host, port, std::chrono::milliseconds(2000)));
        return std::unique_ptr<transfer::Connection>(std::make_unique<transfer::PacedConnection>(std::move(tcp), link));
      };
    }
    GYRE_ASSIGN_OR_RETURN(prefill_node, DisaggNode::Create(engine.get(), pno));
  }

  const int64_t vocab = model.config().vocab_size;
  std::mt19937_64 rng(1000003ull * static_cast<uint64_t>(repeat + 2));
  auto submit = [&]() -> Result<std::shared_ptr<DoneSink>> {
    RequestParams p;
    p.prompt.resize(static_cast<size_t>(prompt_len));
    for (int32_t& t : p.prompt) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(std::min<int64_t>(vocab, 1000)));
    p.max_tokens = 1;
    p.ignore_eos = true;
    p.sampling.temperature = 0;
    auto sink = std::make_shared<DoneSink>();
    Result<RequestId> id = transfer ? prefill_node->Submit(std::move(p), sink, {(rng() >> 1) | 1, send_to})
                                    : engine->Submit(std::move(p), sink);
    if (!id.ok()) return id.status();
    return sink;
  };
  // One request first, untimed, through the same path: the instance is measured running, not
  // starting (the link's connection, the CUDA model's reading stream and pinned buffer, kernels'
  // first launches are once per process in a server, but once per repeat here).
  {
    GYRE_ASSIGN_OR_RETURN(std::shared_ptr<DoneSink> warm, submit());
    if (!warm->WaitDone(std::chrono::seconds(300))) return Status::Internal("disagg_prefill: the warmup request never finished");
  }
  const serve::Json warm_status = prefill_node ? prefill_node->StatusJson() : serve::Json::object();
  const bool was_tracing = trace::Enabled();
  trace::Clear();
  trace::Enable(true);
  std::vector<std::shared_ptr<DoneSink>> sinks;
  const auto t0 = Clock::now();
  Status submitted = Status::Ok();
  for (int64_t i = 0; i < prompts && submitted.ok(); ++i) {
    Result<std::shared_ptr<DoneSink>> sink = submit();
    if (!sink.ok()) submitted = sink.status();
    else sinks.push_back(std::move(*sink));
    if (arrival_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(arrival_ms));
  }
  bool all_done = true;
  for (auto& s : sinks) all_done = s->WaitDone(std::chrono::seconds(300)) && all_done;
  const auto t_end = Clock::now();
  const std::vector<trace::Span> spans = trace::Collect();
  trace::Enable(was_tracing);
  trace::Clear();

  EngineStats st = engine->Stats();
  for (int i = 0; i < 100 && (st.kv_pages_used != 0 || st.kda_slots_used != 0 || st.num_running != 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    st = engine->Stats();
  }
  serve::Json node_status = prefill_node ? prefill_node->StatusJson() : serve::Json::object();
  // The nodes borrow their engines: they stop first.
  prefill_node.reset();
  decode_node.reset();
  if (decode_engine) decode_engine->Stop();
  engine->Stop();
  GYRE_RETURN_IF_ERROR(submitted.WithContext("disagg_prefill: submitting"));
  if (!all_done) return Status::Internal("disagg_prefill: a request never finished (300 s)");

  Clock::time_point last_first = t0, last_end = t0;
  std::vector<double> ttft, e2e;
  int64_t completed = 0;
  for (auto& s : sinks) {
    const bool ok = s->reason() == FinishReason::kLength || s->reason() == FinishReason::kStop;
    completed += ok;
    if (s->first() != Clock::time_point{}) {
      last_first = std::max(last_first, s->first());
      ttft.push_back(Ms(s->first() - t0));
    }
    last_end = std::max(last_end, s->end());
    e2e.push_back(Ms(s->end() - t0));
  }
  const double tokens = static_cast<double>(prompts * prompt_len);
  out["tok_s"] = tokens / std::max(1e-9, std::chrono::duration<double>(last_first - t0).count());
  out["done_tok_s"] = tokens / std::max(1e-9, std::chrono::duration<double>(last_end - t0).count());
  out["ttft_ms_p50"] = ttft.empty() ? 0.0 : feedback::Quantile(ttft, 0.5);
  out["e2e_ms_p50"] = feedback::Quantile(e2e, 0.5);
  out["completed"] = static_cast<double>(completed);
  out["errors"] = static_cast<double>(static_cast<int64_t>(sinks.size()) - completed);
  out["leaked_pages"] = static_cast<double>(st.kv_pages_used);
  out["leaked_slots"] = static_cast<double>(st.kda_slots_used);
  auto since_warmup = [&](const char* key) { return node_status.value(key, 0.0) - warm_status.value(key, 0.0); };
  out["transfers"] = since_warmup("transfers_completed");
  out["transfer_failures"] = since_warmup("transfers_failed");
  out["transfer_bytes"] = since_warmup("transfer_bytes");
  out["transfer_links"] = node_status.value("transfer_links", 0.0);
  // The engine thread's share of the hand-off: its "engine.export" spans (the sink's OnPrefilled:
  // on the CPU the copy of the image, on the GPU only the queueing).
  // And the transfer threads' (reading the image: "transfer.export" on the GPU; sending it through
  // the protocol to the Ack: "transfer.send"): their sum near the wall time means the link, not the
  // engine, sets the pace (exports held until their Ack keep slots and pages).
  auto span_ms = [&](const char* name) {
    double us = 0;
    for (const trace::Span& sp : spans)
      if (sp.dur_ns > 0 && std::string(sp.name) == name) us += sp.dur_ns / 1e3;
    return us / 1e3;
  };
  out["engine_export_ms"] = span_ms("engine.export");
  out["transfer_read_ms"] = backend == "cpu" ? 0.0 : span_ms("transfer.export");
  out["transfer_send_ms"] = span_ms("transfer.send");
  out["wall_ms"] = Ms(t_end - t0);
  // The sends against the forwards (CPU runner: the "forward" span of category "step" is the
  // compute; the CUDA model's forward is asynchronous and has no such span, so no figure there).
  if (backend == "cpu") {
    const feedback::OverlapResult ov =
        feedback::MeasureOverlap(EventsOf(spans), "name:transfer.send", "step");
    out["send_overlap"] = ov.a_us > 0 ? ov.ratio : 1.0;
    out["exposed_send_share"] = ov.exposed_a_us / std::max(1.0, Ms(t_end - t0) * 1e3);
  }
  return out;
}

}  // namespace gyre::cli
