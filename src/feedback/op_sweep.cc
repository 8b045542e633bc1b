#include "feedback/op_sweep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <numeric>
#include <sstream>

#include "feedback/stats.h"

namespace gyre::feedback {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// The shapes one layer of `c` runs, per phase, as (source, op name, dims).
struct ModelShape {
  std::string source, op;
  std::map<std::string, int64_t> dims;
};

std::vector<ModelShape> ModelLayerShapes(const ModelConfig& c, int64_t tokens, int64_t context) {
  std::vector<ModelShape> out;
  const bool has_kda = c.NumLayers(AttnKind::kKda) > 0;
  const bool has_mla = c.NumLayers(AttnKind::kMla) + c.NumLayers(AttnKind::kDsa) > 0;
  for (const char* phase : {"decode", "prefill"}) {
    const bool decode = std::string(phase) == "decode";
    const int64_t t = decode ? 1 : tokens;              // new tokens of the step
    const int64_t ctx = decode ? context + 1 : tokens;  // attention keys the last token sees
    auto add = [&](const std::string& part, const std::string& op, std::map<std::string, int64_t> d) {
      out.push_back({std::string(phase) + ":" + part, op, std::move(d)});
    };
    const int64_t d = c.hidden_size;
    add("norm", "rmsnorm", {{"N", t}, {"D", d}});
    if (c.hc_mult > 0) {
      add("hc", "hc.pre", {{"T", t}, {"D", d}});
      add("hc", "hc.post", {{"T", t}, {"D", d}});
    }
    if (has_kda) {
      const int64_t h = c.linear_num_heads, k = c.linear_head_dim;
      add("kda.qkv", "linear", {{"N", t}, {"IN", d}, {"OUT", 3 * h * k}});
      add("kda.o", "linear", {{"N", t}, {"IN", h * k}, {"OUT", d}});
      add("kda.conv", "kda.conv", {{"T", t}, {"C", 3 * h * k}});
      add("kda.gate", "kda.gate", {{"T", t}, {"H", h}, {"K", k}, {"SOFTPLUS", 1}});
      add("kda", decode ? "kda.recurrent" : "kda.chunk", {{"T", t}, {"H", h}, {"K", k}});
      add("kda.norm", "kda.gated_norm", {{"T", t}, {"H", h}, {"K", k}});
    }
    if (has_mla) {
      const int64_t h = c.num_attention_heads;
      if (c.q_lora_rank > 0) {
        add("mla.q_a", "linear", {{"N", t}, {"IN", d}, {"OUT", c.q_lora_rank}});
        add("mla.q_b", "linear", {{"N", t}, {"IN", c.q_lora_rank}, {"OUT", h * c.qk_head_dim()}});
      } else {
        add("mla.q", "linear", {{"N", t}, {"IN", d}, {"OUT", h * c.qk_head_dim()}});
      }
      add("mla.kv_a", "linear", {{"N", t}, {"IN", d}, {"OUT", c.kv_lora_rank + c.qk_rope_head_dim}});
      add("mla.o", "linear", {{"N", t}, {"IN", h * c.v_head_dim}, {"OUT", d}});
      const bool sparse = c.index_topk > 0 && ctx > c.index_topk;
      add("mla", "mla.attention",
          {{"S", t}, {"T", ctx}, {"H", h}, {"ROPE", std::max<int64_t>(c.qk_rope_head_dim, 1)},
           {"SPARSE", sparse ? 1 : 0}, {"NOPE", c.qk_nope_head_dim}, {"V", c.v_head_dim}, {"L", c.kv_lora_rank}});
      if (c.index_topk > 0 && c.index_n_heads > 0) {
        const int64_t m = std::max<int64_t>(c.index_kpool, 1);
        add("dsa.select", "dsa.select",
            {{"S", t}, {"T", std::max(ctx / m * m, m)}, {"M", m}, {"TOPK", c.index_topk}, {"TIES", 0},
             {"IH", c.index_n_heads}, {"ID", c.index_head_dim}});
        if (m > 1) add("dsa.pool_key", "dsa.pool_key", {{"M", m}, {"D", c.index_head_dim}});
      }
    }
    if (c.n_routed_experts > 0) {
      const int64_t e = c.n_routed_experts, k = c.num_experts_per_tok;
      add("moe.route", "moe.route",
          {{"N", t}, {"E", e}, {"K", k}, {"G", std::max<int64_t>(c.n_group, 1)}, {"HOT", 0}, {"TIES", 0}});
      // Only the experts a step can touch: E capped at T·K keeps the bytes of a decode step real
      // without allocating all experts of a large model.
      add("moe.experts", "moe.experts",
          {{"T", t}, {"E", std::min(e, t * k)}, {"K", k}, {"D", d}, {"I", c.moe_intermediate_size}});
      add("moe.swiglu", "swiglu", {{"N", t * k}, {"W", c.moe_intermediate_size}});
      if (c.n_shared_experts > 0) {
        add("moe.shared", "linear", {{"N", t}, {"IN", d}, {"OUT", 2 * c.n_shared_experts * c.moe_intermediate_size}});
      }
    }
    if (c.intermediate_size > 0) {
      add("mlp.gate_up", "linear", {{"N", t}, {"IN", d}, {"OUT", 2 * c.intermediate_size}});
      add("mlp.down", "linear", {{"N", t}, {"IN", c.intermediate_size}, {"OUT", d}});
      add("mlp.swiglu", "swiglu", {{"N", t}, {"W", c.intermediate_size}});
    }
    add("lm_head", "linear", {{"N", 1}, {"IN", d}, {"OUT", c.vocab_size}});
  }
  return out;
}

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

std::vector<SweepShape> SweepShapes(const std::vector<ops::OpSpec>& registry, const SweepShapeOptions& o) {
  auto wanted = [&](const std::string& name) {
    return o.only_ops.empty() || std::find(o.only_ops.begin(), o.only_ops.end(), name) != o.only_ops.end();
  };
  auto find = [&](const std::string& name) -> const ops::OpSpec* {
    for (const auto& op : registry)
      if (op.name == name) return &op;
    return nullptr;
  };
  std::vector<SweepShape> out;
  auto push = [&](const ops::OpSpec* op, ops::OpShape shape, std::string source) {
    SweepShape s{op, std::move(shape), std::move(source), ""};
    const double bytes = op->cost(s.shape).bytes;
    if (bytes > o.max_bytes) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "inputs of %.2f GB exceed --max-bytes %.2f GB", bytes / 1e9, o.max_bytes / 1e9);
      s.skip = buf;
    }
    out.push_back(std::move(s));
  };
  if (o.registry_shapes) {
    for (const auto& op : registry) {
      if (!wanted(op.name)) continue;
      for (const auto& sh : op.shapes) push(&op, sh, "registry");
    }
  }
  if (o.model != nullptr) {
    for (ModelShape& m : ModelLayerShapes(*o.model, o.tokens, o.context)) {
      const ops::OpSpec* op = find(m.op);
      if (op == nullptr || !wanted(m.op)) continue;
      bool dup = false;  // the same op and dims from another part (e.g. two identical projections)
      const std::string label = ops::ShapeLabel(m.dims);
      for (const auto& s : out) dup |= s.op == op && s.shape.label == label && s.source == m.source;
      if (!dup) push(op, ops::OpShape{label, m.dims, 0}, m.source);
    }
  }
  return out;
}

Result<json> RunOpSweep(const std::vector<SweepShape>& shapes, const SweepRunOptions& o, const Ceilings& ceil,
                        const json& meta_extra) {
  if (o.repeats < 2) return Status::InvalidArgument("op sweep: --repeats must be >= 2 (a distribution is compared)");
  if (!(o.sample_s > 0)) return Status::InvalidArgument("op sweep: --sample-time must be > 0");
  json skipped = json::array();
  // Timed shapes, prepared in groups whose inputs fit `group_bytes` together. Within a group the
  // samples are taken in rounds (one sample of every shape per round, the starting shape rotated
  // each round), so each shape's distribution spans the group's whole timing window instead of a
  // fraction of a second: slow drift of a shared machine then widens the distributions instead of
  // shifting one shape against the next run (the A/A noise measured on 2026-12-04).
  struct Timed {
    size_t index;  // into `shapes`
    std::function<void()> run;
    int64_t iters = 1;
    std::vector<double> ns;
  };
  std::vector<json> entry_of(shapes.size());
  std::vector<size_t> order;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const SweepShape& s = shapes[i];
    if (!s.skip.empty()) {
      skipped.push_back({{"op", s.op->name}, {"shape", s.shape.label}, {"source", s.source}, {"reason", s.skip}});
    } else {
      order.push_back(i);
    }
  }
  auto rotate_of = [](const ops::Cost& cost) {
    return static_cast<int>(std::clamp(64.0 * (1 << 20) / std::max(cost.bytes, 1.0), 1.0, 8.0));
  };
  size_t done = 0, groups = 0;
  for (size_t g0 = 0; g0 < order.size();) {
    // The group: shapes from g0 while their inputs (bytes × rotated sets) fit the budget; at least one.
    size_t g1 = g0;
    double held = 0;
    while (g1 < order.size()) {
      const ops::Cost cost = shapes[order[g1]].op->cost(shapes[order[g1]].shape);
      const double b = cost.bytes * rotate_of(cost);
      if (g1 > g0 && (!o.interleave || held + b > o.group_bytes)) break;
      held += b;
      ++g1;
    }
    ++groups;
    std::vector<Timed> group;
    for (size_t k = g0; k < g1; ++k) {
      const SweepShape& s = shapes[order[k]];
      Result<std::function<void()>> prepared =
          s.op->prepare(s.shape, o.seed, ops::Backend::kCpu, rotate_of(s.op->cost(s.shape)));
      if (!prepared) {
        return Status(prepared.status().code(),
                      s.op->name + " " + s.shape.label + " (" + s.source + "): " + prepared.status().message());
      }
      Timed t{order[k], std::move(*prepared)};
      for (int i = 0; i < 2; ++i) t.run();  // warm-up
      const auto t0 = Clock::now();
      t.run();
      const double one = std::max(Seconds(t0), 1e-8);
      t.iters = std::max<int64_t>(1, static_cast<int64_t>(o.sample_s / one));
      group.push_back(std::move(t));
    }
    for (int r = 0; r < o.repeats; ++r) {
      for (size_t j = 0; j < group.size(); ++j) {
        Timed& t = group[(j + static_cast<size_t>(r)) % group.size()];
        const auto t0 = Clock::now();
        for (int64_t i = 0; i < t.iters; ++i) t.run();
        t.ns.push_back(Seconds(t0) * 1e9 / static_cast<double>(t.iters));
      }
    }
    for (Timed& t : group) {
      const SweepShape& s = shapes[t.index];
      const ops::Cost cost = s.op->cost(s.shape);
      const double med = Median(t.ns);
      const double bound_s = std::max(cost.flops / (ceil.gemm_gflops * 1e9), cost.bytes / (ceil.mem_bw_gbs * 1e9));
      entry_of[t.index] = {{"op", s.op->name},
                           {"shape", s.shape.label},
                           {"dims", s.shape.dims},
                           {"source", s.source},
                           {"samples_ns", t.ns},
                           {"iters_per_sample", t.iters},
                           {"median_ns", med},
                           {"iqr_ns", Iqr(t.ns)},
                           {"flops", cost.flops},
                           {"bytes", cost.bytes},
                           {"roofline_pct", 100.0 * bound_s / (med * 1e-9)}};
      if (o.progress) {
        std::fprintf(stderr, "bench ops: [%zu/%zu] %s %s (%s): median %.3f us\n", ++done, order.size(),
                     s.op->name.c_str(), s.shape.label.c_str(), s.source.c_str(), med / 1e3);
      }
    }
    g0 = g1;
  }
  json entries = json::array();
  for (size_t i : order) entries.push_back(std::move(entry_of[i]));
  json meta = {{"date", UtcNow()},           {"gyre_commit", GitCommit()},  {"machine", MachineInfo()},
               {"backend", "cpu"},           {"repeats", o.repeats},        {"sample_s", o.sample_s},
               {"seed", o.seed},             {"ceilings", ceil.Json()},
               {"interleaved", o.interleave}, {"groups", groups}};
  for (const auto& [k, v] : meta_extra.items()) meta[k] = v;
  return json{{"kind", "gyre_op_sweep"}, {"meta", meta}, {"entries", entries}, {"skipped", skipped}};
}

bool IsOpSweepJson(const json& j) {
  return j.is_object() && j.value("kind", "") == "gyre_op_sweep" && j.contains("entries") && j["entries"].is_array();
}

Result<SweepCompareReport> CompareOpSweeps(const json& a, const json& b, const SweepCompareOptions& o) {
  if (!IsOpSweepJson(a)) return Status::InvalidArgument("A is not an op sweep (gyre bench ops)");
  if (!IsOpSweepJson(b)) return Status::InvalidArgument("B is not an op sweep (gyre bench ops)");
  if (!(o.threshold >= 0) || !(o.alpha > 0 && o.alpha < 1)) {
    return Status::InvalidArgument("op sweep compare: threshold must be >= 0 and alpha in (0, 1)");
  }
  auto key = [](const json& e) {
    return e.value("op", "") + "|" + e.value("shape", "") + "|" + e.value("source", "");
  };
  auto samples = [](const json& e) -> Result<std::vector<double>> {
    std::vector<double> v;
    if (!e.contains("samples_ns") || !e["samples_ns"].is_array()) return Status::InvalidArgument("no samples_ns");
    for (const auto& x : e["samples_ns"]) {
      if (!x.is_number() || !std::isfinite(x.get<double>()) || x.get<double>() <= 0) {
        return Status::InvalidArgument("samples_ns holds a value that is not a positive number");
      }
      v.push_back(x.get<double>());
    }
    return v;
  };
  std::map<std::string, const json*> in_b;
  for (const auto& e : b["entries"]) in_b[key(e)] = &e;
  // Extra baseline runs: key → that run's median, per run.
  std::vector<std::map<std::string, double>> extra;
  for (const json* x : o.extra_baselines) {
    if (x == nullptr || !IsOpSweepJson(*x)) return Status::InvalidArgument("an extra baseline is not an op sweep");
    std::map<std::string, double> med;
    for (const auto& e : (*x)["entries"]) {
      Result<std::vector<double>> v = samples(e);
      if (!v) return Status::InvalidArgument("extra baseline: " + key(e) + ": " + v.status().message());
      if (!v->empty()) med[key(e)] = Median(*v);
    }
    extra.push_back(std::move(med));
  }
  const bool between = !extra.empty();
  auto phase = [](const std::string& source) { return source.substr(0, source.find(':')); };
  // Between-run variance of log medians, pooled per (op, phase): sum of squares and df.
  std::map<std::string, std::pair<double, int>> pooled;
  std::map<std::string, std::vector<double>> base_logs;  // key → log medians of the baseline runs
  if (between) {
    for (const auto& ea : a["entries"]) {
      const std::string k = key(ea);
      if (!in_b.count(k)) continue;
      Result<std::vector<double>> sa = samples(ea);
      if (!sa || sa->empty()) continue;
      std::vector<double> logs = {std::log(Median(*sa))};
      for (const auto& m : extra) {
        const auto it = m.find(k);
        if (it != m.end()) logs.push_back(std::log(it->second));
      }
      if (logs.size() >= 2) {
        const double mean = Mean(logs);
        auto& [ss, df] = pooled[ea.value("op", "") + "|" + phase(ea.value("source", ""))];
        for (double l : logs) ss += (l - mean) * (l - mean);
        df += static_cast<int>(logs.size()) - 1;
      }
      base_logs[k] = std::move(logs);
    }
  }
  SweepCompareReport r;
  std::map<std::string, bool> seen_in_a;
  struct Pending {
    size_t index;
    double p;
  };
  std::vector<Pending> tests;
  double log_sum = 0;
  int log_n = 0;
  for (const auto& ea : a["entries"]) {
    const std::string k = key(ea);
    seen_in_a[k] = true;
    const auto it = in_b.find(k);
    if (it == in_b.end()) {
      r.only_in_a.push_back(ea.value("op", "") + " " + ea.value("shape", "") + " (" + ea.value("source", "") + ")");
      continue;
    }
    Result<std::vector<double>> sa = samples(ea), sb = samples(*it->second);
    if (!sa) return Status::InvalidArgument("A: " + k + ": " + sa.status().message());
    if (!sb) return Status::InvalidArgument("B: " + k + ": " + sb.status().message());
    SweepChange c;
    c.op = ea.value("op", "");
    c.shape = ea.value("shape", "");
    c.source = ea.value("source", "");
    c.median_a_ns = Median(*sa);
    c.median_b_ns = Median(*sb);
    if (between && base_logs.count(k)) {
      const std::vector<double>& logs = base_logs[k];
      c.baseline_runs = static_cast<int>(logs.size());
      c.median_a_ns = std::exp(Mean(logs));
    }
    c.ratio = c.median_b_ns / c.median_a_ns;
    log_sum += std::log(c.ratio);
    ++log_n;
    if (between) {
      const auto pit = pooled.find(c.op + "|" + phase(c.source));
      if (pit == pooled.end() || pit->second.second < 1 || !(pit->second.first > 0) || c.baseline_runs < 2) {
        c.verdict = "too few samples";  // no between-run variance for this op and phase
        r.changes.push_back(c);
        continue;
      }
      const double df = pit->second.second;
      c.between_sd = std::sqrt(pit->second.first / df);
      const double se = c.between_sd * std::sqrt(1 + 1.0 / c.baseline_runs);
      const double d = std::log(c.ratio), tq = StudentTQuantile(0.975, df);
      c.ci_lo = std::exp(d - tq * se);
      c.ci_hi = std::exp(d + tq * se);
      c.p_value = StudentTTwoSidedP(d / se, df);
      c.verdict = "no detectable change";
      tests.push_back({r.changes.size(), c.p_value});
      r.changes.push_back(c);
      continue;
    }
    if (sa->size() < 3 || sb->size() < 3) {
      c.verdict = "too few samples";
      r.changes.push_back(c);
      continue;
    }
    BootstrapOptions bo;
    bo.seed = o.seed + r.changes.size();
    const ConfidenceInterval ci = BootstrapRatioCi(*sb, *sa, bo);
    c.ci_lo = ci.lo;
    c.ci_hi = ci.hi;
    c.p_value = MannWhitneyU(*sa, *sb).p_value;
    c.verdict = "no detectable change";
    tests.push_back({r.changes.size(), c.p_value});
    r.changes.push_back(c);
  }
  for (const auto& eb : b["entries"]) {
    if (!seen_in_a.count(key(eb))) {
      r.only_in_b.push_back(eb.value("op", "") + " " + eb.value("shape", "") + " (" + eb.value("source", "") + ")");
    }
  }
  // Holm's step-down: sort by p; the i-th smallest (0-based) is significant while p <= alpha/(m-i).
  std::sort(tests.begin(), tests.end(), [](const Pending& x, const Pending& y) { return x.p < y.p; });
  const size_t m = tests.size();
  for (size_t i = 0; i < m; ++i) {
    if (tests[i].p > o.alpha / static_cast<double>(m - i)) break;
    SweepChange& c = r.changes[tests[i].index];
    if (c.ratio > 1 + o.threshold && c.ci_lo > 1) {
      c.verdict = "slower";
      ++r.num_slower;
    } else if (c.ratio < 1 - o.threshold && c.ci_hi < 1) {
      c.verdict = "faster";
      ++r.num_faster;
    }
  }
  if (between) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "noise: the variation between %zu runs of the baseline (t test per shape, variance pooled per "
                  "op and phase)",
                  extra.size() + 1);
    r.notes.push_back(buf);
  }
  if (m > 0 && !between) {
    const double min_p = MannWhitneyMinP(static_cast<int>(a["entries"][0]["samples_ns"].size()),
                                         static_cast<int>(b["entries"][0]["samples_ns"].size()));
    if (min_p > o.alpha / static_cast<double>(m)) {
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "with these sample counts no single shape can reach alpha/%zu = %.2g (smallest p %.2g): "
                    "take more --repeats",
                    m, o.alpha / static_cast<double>(m), min_p);
      r.notes.push_back(buf);
    }
  }
  r.drift = log_n > 0 ? std::exp(log_sum / log_n) : 1;
  if (std::abs(r.drift - 1) > o.threshold) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "every op moved together (geometric mean ratio %.3f): the machine's speed likely changed "
                  "between the runs; compare the ceilings in both files",
                  r.drift);
    r.notes.push_back(buf);
  }
  const json& ma = a.value("meta", json::object());
  const json& mb = b.value("meta", json::object());
  for (const char* k : {"repeats", "sample_s", "backend", "model", "tokens", "context"}) {
    if (ma.contains(k) != mb.contains(k) || (ma.contains(k) && ma[k] != mb[k])) {
      r.notes.push_back(std::string("settings differ: '") + k + "' is " + (ma.contains(k) ? ma[k].dump() : "unset") +
                        " in A and " + (mb.contains(k) ? mb[k].dump() : "unset") + " in B");
    }
  }
  return r;
}

json SweepCompareReport::Json() const {
  json ch = json::array();
  for (const auto& c : changes) {
    ch.push_back({{"op", c.op},
                  {"shape", c.shape},
                  {"source", c.source},
                  {"median_a_ns", c.median_a_ns},
                  {"median_b_ns", c.median_b_ns},
                  {"ratio", c.ratio},
                  {"ci95", {c.ci_lo, c.ci_hi}},
                  {"p_value", c.p_value},
                  {"baseline_runs", c.baseline_runs},
                  {"between_run_sd_log", c.between_sd},
                  {"verdict", c.verdict}});
  }
  std::string headline = num_slower > 0 ? "slower" : num_faster > 0 ? "faster" : "no detectable change";
  return {{"kind", "gyre_op_sweep_compare"}, {"headline", headline},    {"slower", num_slower},
          {"faster", num_faster},            {"drift", drift},          {"changes", ch},
          {"only_in_a", only_in_a},          {"only_in_b", only_in_b},  {"notes", notes}};
}

std::string SweepCompareReport::Human() const {
  std::ostringstream ss;
  char buf[512];
  std::snprintf(buf, sizeof buf, "op sweep: %d slower, %d faster, %zu unchanged of %zu shapes; drift %.3f\n",
                num_slower, num_faster, changes.size() - num_slower - num_faster, changes.size(), drift);
  ss << buf;
  for (const char* want : {"slower", "faster"}) {
    for (const auto& c : changes) {
      if (c.verdict != want) continue;
      std::snprintf(buf, sizeof buf, "  %-7s %-15s %-40s %-22s %10.3f -> %10.3f us  x%.3f [%.3f, %.3f] p=%.2g\n", want,
                    c.op.c_str(), c.shape.c_str(), c.source.c_str(), c.median_a_ns / 1e3, c.median_b_ns / 1e3,
                    c.ratio, c.ci_lo, c.ci_hi, c.p_value);
      ss << buf;
    }
  }
  for (const auto& s : only_in_a) ss << "  only in A: " << s << "\n";
  for (const auto& s : only_in_b) ss << "  only in B: " << s << "\n";
  for (const auto& n : notes) ss << "  note: " << n << "\n";
  return ss.str();
}

}  // namespace gyre::feedback
