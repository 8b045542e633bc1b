// Sections: timing helpers; BenchOp; model runs (prefill / decode / mixed); BenchModel;
// RunScenario.
#include "feedback/bench.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <random>
#include <thread>

#include "core/trace.h"
#include "feedback/analyze.h"
#include "feedback/engine_scenario.h"
#include "feedback/trace_export.h"

namespace gyre::feedback {

namespace {

// ---- timing helpers ------------------------------------------------------------------------------

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * (v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - lo) * (v[hi] - v[lo]);
}

std::string IsoNow() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::vector<int32_t> RandomIds(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(g() % vocab);
  return v;
}

}  // namespace

// ---- BenchOp -------------------------------------------------------------------------------------

Result<nlohmann::json> BenchOp(const ops::OpSpec& op, const ops::OpShape& shape, ops::Backend backend,
                               const BenchOpOptions& o, const Ceilings& ceil) {
  const ops::Cost cost = op.cost(shape);
  // Enough input sets that the working set exceeds ~64 MiB (or 16 sets), so caches are cold-ish.
  const int rotate = static_cast<int>(std::clamp(64.0 * (1 << 20) / std::max(cost.bytes, 1.0), 1.0, 16.0));
  GYRE_ASSIGN_OR_RETURN(std::function<void()> run, op.prepare(shape, o.seed, backend, rotate));
  for (int i = 0; i < 3; ++i) run();  // warm-up
  // Iterations per sample so that one sample lasts about min_time / repeats.
  auto t0 = Clock::now();
  run();
  const double one = std::max(Since(t0), 1e-7);
  const int64_t iters = std::max<int64_t>(1, static_cast<int64_t>(o.min_time_s / o.repeats / one));
  std::vector<double> ns;
  for (int r = 0; r < o.repeats; ++r) {
    t0 = Clock::now();
    for (int64_t i = 0; i < iters; ++i) run();
    ns.push_back(Since(t0) * 1e9 / iters);
  }
  const double med = Quantile(ns, 0.5), iqr = Quantile(ns, 0.75) - Quantile(ns, 0.25);
  const double bound_s = std::max(cost.flops / (ceil.gemm_gflops * 1e9), cost.bytes / (ceil.mem_bw_gbs * 1e9));
  const std::string name = op.name + "/" + shape.label;
  nlohmann::json benches = nlohmann::json::array();
  for (int r = 0; r < o.repeats; ++r) {
    benches.push_back({{"name", name}, {"run_name", name}, {"run_type", "iteration"}, {"repetitions", o.repeats},
                       {"repetition_index", r}, {"threads", 1}, {"iterations", iters}, {"real_time", ns[r]},
                       {"cpu_time", ns[r]}, {"time_unit", "ns"}});
  }
  auto agg = [&](const char* aggname, double v) {
    return nlohmann::json{{"name", name + "_" + aggname}, {"run_name", name}, {"run_type", "aggregate"},
                          {"repetitions", o.repeats}, {"threads", 1}, {"aggregate_name", aggname},
                          {"iterations", o.repeats}, {"real_time", v}, {"cpu_time", v}, {"time_unit", "ns"}};
  };
  nlohmann::json m = agg("median", med);
  m["GFLOPS"] = cost.flops / (med * 1e-9) / 1e9;
  m["GBps"] = cost.bytes / (med * 1e-9) / 1e9;
  m["roofline_pct"] = 100.0 * bound_s / (med * 1e-9);
  m["flops"] = cost.flops;
  m["bytes"] = cost.bytes;
  m["rotated_input_sets"] = rotate;
  benches.push_back(m);
  benches.push_back(agg("iqr", iqr));
  nlohmann::json ctx = {{"date", IsoNow()}, {"host_name", MachineInfo()["hostname"]},
                        {"num_cpus", std::thread::hardware_concurrency()}, {"library_build_type", "release"},
                        {"gyre_commit", GitCommit()}, {"machine", MachineInfo()}, {"ceilings", ceil.Json()},
                        {"backend", ops::BackendName(backend)}};
  return nlohmann::json{{"context", ctx}, {"benchmarks", benches}};
}

// ---- model runs ----------------------------------------------------------------------------------

namespace {

struct RunTimes {
  double total_s = 0;
  std::vector<double> step_s;
  double first_s = 0;
};

// One prefill of `batch` prompts of `len` tokens in a single step.
Result<RunTimes> RunPrefill(const Model& m, int64_t len, int64_t batch, uint64_t seed) {
  std::vector<SequenceState> st;
  std::vector<std::vector<int32_t>> ids;
  for (int64_t b = 0; b < batch; ++b) {
    st.push_back(m.NewSequence());
    ids.push_back(RandomIds(len, m.config().vocab_size, seed + b));
  }
  std::vector<SeqInput> in;
  for (int64_t b = 0; b < batch; ++b) in.push_back({&st[b], ids[b], false});
  std::vector<float> logits;
  const auto t0 = Clock::now();
  GYRE_RETURN_IF_ERROR(m.Forward(in, &logits));
  RunTimes r;
  r.total_s = r.first_s = Since(t0);
  r.step_s.push_back(r.total_s);
  return r;
}

// `batch` sequences with `context` tokens already prefilled (not timed), then `steps` decode steps.
// When `mixed_prompt` > 0, every step also carries a prefill chunk of that many tokens of a new
// sequence (a mixed prefill + decode step).
Result<RunTimes> RunDecode(const Model& m, int64_t batch, int64_t context, int64_t steps, int64_t mixed_prompt,
                           uint64_t seed, bool trace_steps = false) {
  const int64_t V = m.config().vocab_size;
  std::vector<SequenceState> st;
  for (int64_t b = 0; b < batch; ++b) st.push_back(m.NewSequence());
  std::vector<float> logits;
  {
    std::vector<std::vector<int32_t>> ids;
    std::vector<SeqInput> in;
    for (int64_t b = 0; b < batch; ++b) ids.push_back(RandomIds(context, V, seed + b));
    for (int64_t b = 0; b < batch; ++b) in.push_back({&st[b], ids[b], false});
    GYRE_RETURN_IF_ERROR(m.Forward(in, &logits));
  }
  std::vector<int32_t> next(batch);
  for (int64_t b = 0; b < batch; ++b) next[b] = static_cast<int32_t>((seed + b) % V);
  std::vector<SequenceState> extra;
  RunTimes r;
  trace::Enable(trace_steps);  // only the timed steps are traced
  const auto t0 = Clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<SeqInput> in;
    for (int64_t b = 0; b < batch; ++b) in.push_back({&st[b], std::span<const int32_t>(&next[b], 1), false});
    std::vector<int32_t> chunk;
    if (mixed_prompt > 0) {
      extra.push_back(m.NewSequence());
      chunk = RandomIds(mixed_prompt, V, seed + 1000 + s);
      in.push_back({&extra.back(), chunk, false});
    }
    const auto ts = Clock::now();
    GYRE_RETURN_IF_ERROR(m.Forward(in, &logits));
    r.step_s.push_back(Since(ts));
    for (int64_t b = 0; b < batch; ++b) {
      const float* row = &logits[b * V];
      next[b] = static_cast<int32_t>(std::max_element(row, row + V) - row);
    }
  }
  r.total_s = Since(t0);
  trace::Enable(false);
  return r;
}

nlohmann::json Breakdown(const std::vector<trace::Span>& spans, const Ceilings& ceil) {
  std::vector<TraceEvent> ev;
  for (const auto& s : spans) {
    TraceEvent e{s.name, s.cat, s.start_ns / 1000.0, s.dur_ns / 1000.0, s.tid, {}};
    if (s.attrs.flops >= 0) e.args["flops"] = s.attrs.flops;
    if (s.attrs.bytes >= 0) e.args["bytes"] = s.attrs.bytes;
    ev.push_back(std::move(e));
  }
  const AnalyzeReport rep = Analyze(ev, ceil, std::nullopt);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& o : rep.ops) {
    if (o.cat != "op") continue;
    out.push_back({{"op", o.name}, {"self_ms", o.excl_us / 1000}, {"pct_wall", o.pct_wall}, {"count", o.count},
                   {"roofline_pct", o.roofline_pct >= 0 ? nlohmann::json(o.roofline_pct) : nlohmann::json()}});
  }
  return out;
}

}  // namespace

// ---- BenchModel ----------------------------------------------------------------------------------

Result<nlohmann::json> BenchModel(const Model& m, const BenchModelOptions& o, const Ceilings& ceil,
                                  const nlohmann::json& config_meta) {
  nlohmann::json metrics = nlohmann::json::object(), dirs = nlohmann::json::object(), breakdown;
  // Prefill.
  std::vector<double> pre;
  for (int r = 0; r < o.repeats; ++r) {
    const bool last = r == o.repeats - 1;
    trace::Clear();
    trace::Enable(last);
    auto t = RunPrefill(m, o.prompt_len, 1, o.seed + r);
    trace::Enable(false);
    if (!t.ok()) return t.status();
    pre.push_back(o.prompt_len / t->total_s);
    if (last) {
      auto spans = trace::Collect();
      breakdown["prefill"] = Breakdown(spans, ceil);
      if (!o.trace_path.empty()) GYRE_RETURN_IF_ERROR(WriteChromeTrace(o.trace_path + ".prefill.json", spans));
    }
  }
  metrics["prefill_tok_s"] = pre;
  dirs["prefill_tok_s"] = "higher";
  // Decode per batch size.
  for (int64_t b : o.decode_batches) {
    std::vector<double> tps, step_ms;
    for (int r = 0; r < o.repeats; ++r) {
      const bool last = r == o.repeats - 1;
      trace::Clear();
      auto t = RunDecode(m, b, o.decode_context, o.decode_steps, 0, o.seed + 100 * r, /*trace_steps=*/last);
      if (!t.ok()) return t.status();
      tps.push_back(static_cast<double>(b * o.decode_steps) / t->total_s);
      step_ms.push_back(1000 * Quantile(t->step_s, 0.5));
      if (last) {
        auto spans = trace::Collect();
        breakdown["decode_b" + std::to_string(b)] = Breakdown(spans, ceil);
        if (!o.trace_path.empty() && b == o.decode_batches.front()) {
          GYRE_RETURN_IF_ERROR(WriteChromeTrace(o.trace_path + ".decode.json", spans));
        }
      }
    }
    metrics["decode_tok_s_b" + std::to_string(b)] = tps;
    metrics["decode_step_ms_b" + std::to_string(b)] = step_ms;
    dirs["decode_tok_s_b" + std::to_string(b)] = "higher";
    dirs["decode_step_ms_b" + std::to_string(b)] = "lower";
  }
  trace::Clear();
  const ModelSummary sum = Summarize(m.config());
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  nlohmann::json meta = {{"date", IsoNow()},
                         {"loadavg_1m_at_end", load[0]},
                         {"omp_wait_policy", wait ? wait : "(unset)"},
                         {"commit", GitCommit()},
                         {"machine", MachineInfo()},
                         {"ceilings", ceil.Json()},
                         {"model", config_meta},
                         {"params_total", sum.params_total},
                         {"params_active", sum.params_active},
                         {"options",
                          {{"prompt_len", o.prompt_len},
                           {"decode_batches", o.decode_batches},
                           {"decode_context", o.decode_context},
                           {"decode_steps", o.decode_steps},
                           {"repeats", o.repeats}}}};
  return nlohmann::json{{"meta", meta}, {"metrics", metrics}, {"directions", dirs}, {"op_breakdown", breakdown}};
}

// ---- span overhead -------------------------------------------------------------------------------

SpanOverhead MeasureSpanOverhead(int64_t n) {
  SpanOverhead o;
  volatile int64_t sink = 0;
  auto loop = [&](bool span) {
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < n; ++i) {
      if (span) {
        GYRE_SPAN("overhead", "bench");
        sink = sink + i;
      } else {
        sink = sink + i;
      }
    }
    return Since(t0) * 1e9 / n;
  };
  const bool was = trace::Enabled();
  trace::Enable(false);
  o.baseline_ns = loop(false);
  o.off_ns = loop(true) - o.baseline_ns;
  trace::Clear();
  trace::Enable(true);
  o.on_ns = loop(true) - o.baseline_ns;
  trace::Enable(was);
  trace::Clear();
  return o;
}

// ---- RunScenario ---------------------------------------------------------------------------------

Result<std::map<std::string, double>> RunScenario(const Model& m, const nlohmann::json& spec, int repeat) {
  std::map<std::string, double> out;
  try {
    const std::string kind = spec.at("kind");
    const uint64_t seed = 7919ull * (repeat + 1);
    if (kind == "prefill" || kind == "long_context") {
      const int64_t len = spec.at("prompt_len"), batch = spec.value("batch", 1);
      GYRE_ASSIGN_OR_RETURN(RunTimes t, RunPrefill(m, len, batch, seed));
      out["ms"] = 1000 * t.total_s;
      out["ttft_ms"] = 1000 * t.first_s;
      out["tok_s"] = len * batch / t.total_s;
      out["step_ms"] = 1000 * t.total_s;
      if (kind == "long_context" && spec.contains("steps")) {
        GYRE_ASSIGN_OR_RETURN(RunTimes d, RunDecode(m, 1, len, spec["steps"].get<int64_t>(), 0, seed));
        out["decode_step_ms"] = 1000 * Quantile(d.step_s, 0.5);
        out["decode_tok_s"] = spec["steps"].get<int64_t>() / d.total_s;
      }
    } else if (kind == "decode" || kind == "mixed") {
      const int64_t batch = spec.at("batch"), steps = spec.at("steps");
      const int64_t ctx = spec.value("context_len", 64);
      const int64_t chunk = kind == "mixed" ? spec.value("prompt_len", 64) : 0;
      GYRE_ASSIGN_OR_RETURN(RunTimes t, RunDecode(m, batch, ctx, steps, chunk, seed));
      out["ms"] = 1000 * t.total_s;
      out["step_ms"] = 1000 * Quantile(t.step_s, 0.5);
      out["tok_s"] = static_cast<double>((batch + chunk) * steps) / t.total_s;
    } else if (kind == "engine_load") {
      return RunEngineScenario(m, spec, repeat);
    } else {
      return Status::InvalidArgument("unknown scenario kind '" + kind +
                                     "' (prefill, decode, mixed, long_context, engine_load)");
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string("scenario spec: ") + e.what());
  }
  return out;
}

}  // namespace gyre::feedback
