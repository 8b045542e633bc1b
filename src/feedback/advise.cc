#include "feedback/advise.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace gyre::feedback {

namespace {

bool NameMatches(const nlohmann::json& t, const char* key, const std::string& name) {
  if (!t.contains(key)) return true;
  if (!t[key].is_string()) return false;
  const std::string want = t[key].get<std::string>();
  return want == "*" || want == name;
}

double Num(const nlohmann::json& j, const char* key, double dflt) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : dflt;
}

void Match(Finding& f, const std::vector<Skeleton>& catalogue) {
  for (const auto& s : catalogue)
    for (const auto& t : s.triggers)
      if (TriggerMatches(t, f)) {
        f.skeletons.push_back(s.name);
        break;
      }
}

std::string Fmt(const char* fmt, double a = 0, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, a, b, c, d);
  return buf;
}

}  // namespace

bool TriggerMatches(const nlohmann::json& t, const Finding& f) {
  if (!t.is_object() || !t.contains("signal") || t["signal"] != f.signal) return false;
  const auto& n = f.numbers;
  if (f.signal == "op_share") return NameMatches(t, "op", f.where) && Num(n, "pct", 0) >= Num(t, "min_pct", 0);
  if (f.signal == "roofline") return NameMatches(t, "op", f.where) && Num(n, "roofline_pct", 100) < Num(t, "max_pct", 50);
  if (f.signal == "device_idle") return Num(n, "idle_pct", 0) >= Num(t, "min_pct", 0);
  if (f.signal == "gap_cpu") {
    if (Num(n, "gap_us", 0) < Num(t, "min_us", 0)) return false;
    if (!t.contains("span") || t["span"] == "*") return true;
    for (const auto& s : n.value("cpu", nlohmann::json::array()))
      if (s == t["span"]) return true;
    return false;
  }
  if (f.signal == "overlap")
    return NameMatches(t, "a", n.value("a", "")) && NameMatches(t, "b", n.value("b", "")) &&
           Num(n, "ratio", 1) <= Num(t, "max_ratio", 1);
  if (f.signal == "tiny_kernels")
    return Num(n, "mean_us", 1e9) < Num(t, "max_mean_us", 5) && Num(n, "count", 0) >= Num(t, "min_count", 1000);
  if (f.signal == "eager_decode") return true;
  if (f.signal == "gate_fail") {
    if (!t.contains("predicate")) return true;
    return t["predicate"].is_string() && n.value("expr", "").find(t["predicate"].get<std::string>()) != std::string::npos;
  }
  return false;
}

Advice AdviseTrace(const std::vector<TraceEvent>& events, const AnalyzeReport& rep,
                   const std::vector<Skeleton>& catalogue) {
  Advice a;
  a.wall_us = rep.wall_us;
  std::vector<Finding>& out = a.findings;
  for (const auto& o : rep.ops) {
    if (o.cat == "cuda_api" || o.cat == "gpu") continue;  // calls and the event-based busy spans are not ops
    if (o.pct_wall >= 5) {
      Finding f{"op_share", o.name, o.excl_us,
                o.name + Fmt(": %.1f %% of the traced wall time (%.3f ms self over %.0f calls)", o.pct_wall,
                             o.excl_us / 1000, static_cast<double>(o.count)),
                {{"pct", o.pct_wall}, {"self_us", o.excl_us}, {"gpu_us", o.gpu_us}}};
      out.push_back(std::move(f));
    }
    if (o.roofline_pct >= 0 && o.roofline_pct < 50 && o.pct_wall >= 2) {
      const double t = o.gpu_us > 0 ? o.gpu_us : o.excl_us;
      out.push_back({"roofline", o.name, t * (1 - o.roofline_pct / 100),
                     o.name + Fmt(": %.1f %% of roofline (%.2f GFLOP/s, %.2f GB/s) over %.3f ms", o.roofline_pct,
                                  o.gflops, o.gbs, t / 1000),
                     {{"roofline_pct", o.roofline_pct}, {"time_us", t}}});
    }
  }
  for (const auto& d : rep.devices) {
    const double idle_pct = d.window_us > 0 ? 100 * d.idle_us / d.window_us : 0;
    if (idle_pct >= 10)
      out.push_back({"device_idle", "GPU " + std::to_string(d.device), d.idle_us,
                     "GPU " + std::to_string(d.device) +
                         Fmt(": idle %.1f %% of its %.3f ms window (busy %.3f ms; %.0f gaps >= threshold)", idle_pct,
                             d.window_us / 1000, d.busy_us / 1000, static_cast<double>(d.num_gaps)),
                     {{"idle_pct", idle_pct}, {"idle_us", d.idle_us}, {"window_us", d.window_us}}});
    for (const auto& g : d.top_gaps) {
      std::string cpu;
      for (const auto& c : g.cpu) cpu += (cpu.empty() ? "" : ", ") + c;
      out.push_back({"gap_cpu", g.cpu.empty() ? "(no CPU span)" : g.cpu.front(), g.dur_us,
                     "GPU " + std::to_string(d.device) + Fmt(" idle %.1f us at %.3f ms", g.dur_us, g.start_us / 1000) +
                         " while the CPU was in " + (cpu.empty() ? "no span" : cpu),
                     {{"gap_us", g.dur_us}, {"cpu", g.cpu}}});
    }
    // Launch-bound: many short records and idle time in the small gaps between them.
    double n_tiny = 0, t_tiny = 0;
    for (const auto& k : rep.kernels)
      if (k.count > 0 && k.total_us / k.count < 5) {
        n_tiny += k.count;
        t_tiny += k.total_us;
      }
    const double small_gaps = d.idle_us - d.gaps_us;
    if (n_tiny >= 1000)
      out.push_back({"tiny_kernels", "GPU " + std::to_string(d.device), small_gaps,
                     Fmt("%.0f device records average %.2f us; %.3f ms of GPU idle sits in gaps shorter than the "
                         "threshold (launch overhead)",
                         n_tiny, t_tiny / n_tiny, small_gaps / 1000),
                     {{"count", n_tiny}, {"mean_us", t_tiny / n_tiny}, {"small_gap_us", small_gaps}}});
  }
  // Overlap of transfers with compute.
  for (const auto& [x, y] : std::vector<std::pair<std::string, std::string>>{
           {"memcpy", "kernel"}, {"collective", "kernel"}, {"transfer", "step"}}) {
    const OverlapResult o = MeasureOverlap(events, x, y);
    if (o.a_us <= 0 || o.b_us <= 0 || o.ratio >= 0.9) continue;
    out.push_back({"overlap", x + " vs " + y, o.exposed_a_us,
                   Fmt("%.1f %% of %.3f ms", 100 * o.ratio, o.a_us / 1000) + " of " + x + " ran under " + y +
                       Fmt(": %.3f ms exposed", o.exposed_a_us / 1000),
                   {{"a", x}, {"b", y}, {"ratio", o.ratio}, {"exposed_us", o.exposed_a_us}}});
  }
  // Eager decode: decode steps (one token per piece) that ran without a graph.
  int64_t eager = 0, decode = 0;
  for (const auto& e : events) {
    if (e.name != "gpu.busy" || e.dur_us < 0) continue;
    const std::string detail = e.args.value("detail", "");
    const auto p = detail.find("pieces=");
    if (p == std::string::npos || !e.args.contains("tokens")) continue;
    const int64_t pieces = std::atoll(detail.c_str() + p + 7);
    if (pieces <= 0 || e.args["tokens"].get<int64_t>() != pieces) continue;  // has prefill tokens
    ++decode;
    if (detail.find("eager") != std::string::npos) ++eager;
  }
  if (eager >= 3) {
    double launch_us = 0;
    int64_t launches = 0;
    for (const auto& e : events)
      if (e.name == "cuda.launch" && e.dur_us >= 0) {
        launch_us += e.dur_us;
        ++launches;
      }
    const double per = launches > 0 ? launch_us / launches : 0;
    out.push_back({"eager_decode", "decode steps", per * eager,
                   Fmt("%.0f of %.0f decode steps ran without a CUDA graph (host launch %.1f us per step)",
                       static_cast<double>(eager), static_cast<double>(decode), per),
                   {{"eager", eager}, {"decode", decode}, {"launch_us_per_step", per}}});
  }
  for (auto& f : out) Match(f, catalogue);
  std::stable_sort(out.begin(), out.end(), [](const Finding& x, const Finding& y) { return x.at_stake_us > y.at_stake_us; });
  return a;
}

Result<Advice> AdviseGate(const nlohmann::json& j, const std::vector<Skeleton>& catalogue) {
  if (!j.is_object() || !j.contains("predicates") || !j["predicates"].is_array())
    return Status::InvalidArgument("not a gate result (no 'predicates' list)");
  Advice a;
  a.source = "gate";
  for (const auto& p : j["predicates"]) {
    if (!p.is_object() || p.value("verdict", "") != "FAIL") continue;
    Finding f{"gate_fail", p.value("id", "?"), 0,
              "gate predicate " + p.value("id", "?") + " failed: " + p.value("expr", "") + " (" + p.value("reason", "") + ")",
              {{"expr", p.value("expr", "")}, {"reason", p.value("reason", "")}}};
    Match(f, catalogue);
    a.findings.push_back(std::move(f));
  }
  return a;
}

std::string Advice::Human(size_t top) const {
  std::string s;
  if (findings.empty()) return "no finding: nothing crossed a threshold (see `gyre analyze` for the full numbers)\n";
  char buf[128];
  std::snprintf(buf, sizeof buf, "%zu finding(s), ranked by the time at stake", findings.size());
  s += buf;
  if (wall_us > 0) {
    std::snprintf(buf, sizeof buf, " (traced wall time %.3f ms)", wall_us / 1000);
    s += buf;
  }
  s += "\n";
  for (size_t i = 0; i < findings.size() && i < top; ++i) {
    const Finding& f = findings[i];
    std::snprintf(buf, sizeof buf, "%2zu. [%s] %9.3f ms  ", i + 1, f.signal.c_str(), f.at_stake_us / 1000);
    s += buf + f.evidence + "\n";
    if (!f.skeletons.empty()) {
      s += "      skeletons:";
      for (const auto& k : f.skeletons) s += " " + k;
      s += "\n";
    }
  }
  return s;
}

nlohmann::json Advice::Json() const {
  nlohmann::json j = {{"source", source}, {"wall_us", wall_us}, {"findings", nlohmann::json::array()}};
  for (const auto& f : findings)
    j["findings"].push_back({{"signal", f.signal},
                             {"where", f.where},
                             {"at_stake_us", f.at_stake_us},
                             {"evidence", f.evidence},
                             {"numbers", f.numbers},
                             {"skeletons", f.skeletons}});
  return j;
}

}  // namespace gyre::feedback
