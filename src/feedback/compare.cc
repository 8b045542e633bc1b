#include "feedback/compare.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <sstream>

#include "feedback/op_sweep.h"
#include "feedback/serve_compare.h"
#include "feedback/stats.h"

namespace gyre::feedback {
namespace {

using nlohmann::json;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string> NameTokens(const std::string& name) {
  std::vector<std::string> tokens;
  std::string cur;
  for (char c : name) {
    if (c == '.' || c == '_' || c == '/' || c == '-' || c == ':' || c == ' ') {
      if (!cur.empty()) tokens.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) tokens.push_back(cur);
  return tokens;
}

std::string Format(double v, const char* fmt = "%.6g") {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

json OptionalNumber(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? json(*v) : json(nullptr);
}

Result<json> LoadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot open file");
  json j;
  try {
    in >> j;
  } catch (const json::exception& e) {
    return Status::InvalidArgument(path + ": not valid JSON: " + e.what());
  }
  return j;
}

// ---- Google Benchmark -------------------------------------------------------------------------

Result<double> TimeUnitToNs(const json& entry) {
  const std::string unit = entry.contains("time_unit") && entry["time_unit"].is_string()
                               ? entry["time_unit"].get<std::string>()
                               : "ns";
  if (unit == "ns") return 1.0;
  if (unit == "us") return 1e3;
  if (unit == "ms") return 1e6;
  if (unit == "s") return 1e9;
  return Status::InvalidArgument("unknown time_unit '" + unit + "'");
}

struct GbenchRun {
  std::vector<json> iterations;
  std::map<std::string, json> aggregates;  // by aggregate_name
};

Status AddGbenchEntry(const json& e, double to_ns, const std::string& run, RunResult& out) {
  struct Field {
    const char* key;
    const char* suffix;
    double scale;
    Direction direction;
  };
  const Field fields[] = {
      {"real_time", ".real_time_ns", to_ns, Direction::kLowerIsBetter},
      {"cpu_time", ".cpu_time_ns", to_ns, Direction::kLowerIsBetter},
      {"items_per_second", ".items_per_second", 1.0, Direction::kHigherIsBetter},
      {"bytes_per_second", ".bytes_per_second", 1.0, Direction::kHigherIsBetter},
  };
  for (const Field& f : fields) {
    if (!e.contains(f.key)) continue;
    if (!e[f.key].is_number() || !std::isfinite(e[f.key].get<double>())) {
      return Status::InvalidArgument("benchmark '" + run + "': '" + f.key + "' is not a finite number");
    }
    Metric& m = out.metrics[run + f.suffix];
    m.direction = f.direction;
    m.samples.push_back(e[f.key].get<double>() * f.scale);
  }
  return Status::Ok();
}

Result<RunResult> ParseGoogleBenchmark(const json& j) {
  RunResult out;
  out.format = "google-benchmark";
  out.meta = j.contains("context") ? j["context"] : json(nullptr);
  std::map<std::string, GbenchRun> runs;
  std::vector<std::string> order;
  for (const json& e : j["benchmarks"]) {
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string()) {
      return Status::InvalidArgument("a 'benchmarks' entry has no string 'name'");
    }
    const std::string name = e["name"].get<std::string>();
    const std::string run =
        e.contains("run_name") && e["run_name"].is_string() ? e["run_name"].get<std::string>() : name;
    if (e.value("error_occurred", false)) {
      out.notes.push_back("skipped '" + name + "': " + e.value("error_message", std::string("error")));
      continue;
    }
    if (!runs.count(run)) order.push_back(run);
    GbenchRun& r = runs[run];
    if (e.value("run_type", std::string("iteration")) == "aggregate") {
      r.aggregates[e.value("aggregate_name", std::string())] = e;
    } else {
      r.iterations.push_back(e);
    }
  }
  for (const std::string& run : order) {
    const GbenchRun& r = runs[run];
    std::vector<json> use = r.iterations;
    if (use.empty()) {
      for (const char* agg : {"median", "mean"}) {
        if (r.aggregates.count(agg)) {
          use.push_back(r.aggregates.at(agg));
          break;
        }
      }
    }
    if (use.empty()) {
      out.notes.push_back("skipped '" + run + "': no iteration, median or mean entry");
      continue;
    }
    for (const json& e : use) {
      GYRE_ASSIGN_OR_RETURN(const double to_ns, TimeUnitToNs(e));
      GYRE_RETURN_IF_ERROR(AddGbenchEntry(e, to_ns, run, out));
    }
  }
  return out;
}

// ---- gyre result JSON -------------------------------------------------------------------------

Result<RunResult> ParseGyreResult(const json& j) {
  RunResult out;
  out.format = "gyre";
  out.meta = j.contains("meta") ? j["meta"] : json(nullptr);
  for (const auto& [name, v] : j["metrics"].items()) {
    Metric m;
    if (v.is_number()) {
      m.samples.push_back(v.get<double>());
    } else if (v.is_array() && !v.empty()) {
      for (const json& x : v) {
        if (!x.is_number()) {
          return Status::InvalidArgument("metric '" + name + "': samples must be numbers");
        }
        m.samples.push_back(x.get<double>());
      }
    } else {
      return Status::InvalidArgument("metric '" + name +
                                     "': expected a number or a non-empty array of numbers");
    }
    for (double x : m.samples) {
      if (!std::isfinite(x)) return Status::InvalidArgument("metric '" + name + "': value is not finite");
    }
    out.metrics[name] = std::move(m);
  }
  if (j.contains("directions")) {
    if (!j["directions"].is_object()) return Status::InvalidArgument("'directions' must be an object");
    for (const auto& [name, v] : j["directions"].items()) {
      const std::string d = v.is_string() ? v.get<std::string>() : "";
      if (d != "lower" && d != "higher") {
        return Status::InvalidArgument("directions['" + name + "']: expected \"lower\" or \"higher\"");
      }
      auto it = out.metrics.find(name);
      if (it != out.metrics.end()) {
        it->second.direction = d == "lower" ? Direction::kLowerIsBetter : Direction::kHigherIsBetter;
      }
    }
  }
  return out;
}

// ---- comparison -------------------------------------------------------------------------------

Direction ResolveDirection(const std::string& name, const Metric& a, const Metric& b) {
  if (a.direction != Direction::kUnknown) return a.direction;
  if (b.direction != Direction::kUnknown) return b.direction;
  return DirectionFromName(name);
}

std::optional<double> ChangePct(double a, double b) {
  if (a == 0) return b == 0 ? std::optional<double>(0.0) : std::nullopt;
  return (b - a) / std::fabs(a) * 100;
}

MetricComparison CompareMetric(const std::string& name, const Metric& ma, const Metric& mb,
                               const CompareOptions& opt) {
  MetricComparison c;
  c.name = name;
  c.direction = ResolveDirection(name, ma, mb);
  c.num_a = ma.samples.size();
  c.num_b = mb.samples.size();
  c.a = Median(ma.samples);
  c.b = Median(mb.samples);
  c.change_pct = ChangePct(c.a, c.b);
  const bool large = !c.change_pct || std::fabs(*c.change_pct) >= opt.threshold_pct;
  bool detected = false;
  if (ma.HasDistribution() && mb.HasDistribution()) {
    c.p_value = MannWhitneyU(ma.samples, mb.samples).p_value;
    detected = *c.p_value < opt.alpha && large;
    if (c.a != 0) {
      BootstrapOptions bo;
      bo.num_resamples = opt.bootstrap_resamples;
      bo.seed = opt.seed;
      const ConfidenceInterval ci = BootstrapRatioCi(mb.samples, ma.samples, bo);
      const double sign = c.a < 0 ? -1 : 1;  // keep "percent of |a|" semantics for negative a
      c.change_ci_lo_pct = (ci.lo - 1) * 100 * sign;
      c.change_ci_hi_pct = (ci.hi - 1) * 100 * sign;
      if (*c.change_ci_lo_pct > *c.change_ci_hi_pct) std::swap(c.change_ci_lo_pct, c.change_ci_hi_pct);
    }
    if (MannWhitneyMinP(static_cast<int>(c.num_a), static_cast<int>(c.num_b)) >= opt.alpha) {
      c.note = "(too few samples to reach p < alpha; use >= 4 per side)";
    }
  } else {
    detected = large;
    c.note = "(no samples: threshold only)";
  }
  if (!detected) {
    c.verdict = Verdict::kNoChange;
  } else if (c.direction == Direction::kUnknown) {
    c.verdict = Verdict::kChanged;
    c.note += std::string(c.note.empty() ? "" : " ") + "(direction unknown)";
  } else {
    const bool went_up = c.b > c.a;
    c.verdict = went_up == (c.direction == Direction::kHigherIsBetter) ? Verdict::kBetter
                                                                        : Verdict::kWorse;
  }
  return c;
}

}  // namespace

const char* DirectionName(Direction d) {
  switch (d) {
    case Direction::kLowerIsBetter: return "lower";
    case Direction::kHigherIsBetter: return "higher";
    case Direction::kUnknown: break;
  }
  return "unknown";
}

Direction DirectionFromName(std::string_view name) {
  const std::vector<std::string> t = NameTokens(Lower(name));
  auto is_any = [](const std::string& x, std::initializer_list<const char*> keys) {
    for (const char* k : keys) {
      if (x == k) return true;
    }
    return false;
  };
  for (size_t i = 0; i < t.size(); ++i) {
    if (is_any(t[i], {"throughput", "goodput", "tflops", "gflops", "gbps", "qps", "rps", "tps",
                      "bandwidth"})) {
      return Direction::kHigherIsBetter;
    }
    // "<count> per s", "tok/s", "items_per_second": a rate.
    if (i + 1 < t.size() && is_any(t[i + 1], {"s", "sec", "second"}) &&
        is_any(t[i], {"per", "tok", "token", "tokens", "items", "bytes", "req", "requests"})) {
      return Direction::kHigherIsBetter;
    }
  }
  for (const std::string& x : t) {
    if (is_any(x, {"latency", "time", "duration", "ms", "us", "ns", "s", "sec", "ttft", "tpot",
                   "itl", "e2el"})) {
      return Direction::kLowerIsBetter;
    }
  }
  return Direction::kUnknown;
}

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kBetter: return "better";
    case Verdict::kWorse: return "worse";
    case Verdict::kNoChange: return "no detectable change";
    case Verdict::kChanged: return "changed";
  }
  return "?";
}

Result<RunResult> ParseRunResult(const json& j) {
  try {
    if (j.is_object() && j.contains("benchmarks") && j["benchmarks"].is_array()) {
      return ParseGoogleBenchmark(j);
    }
    if (j.is_object() && j.contains("metrics") && j["metrics"].is_object()) {
      return ParseGyreResult(j);
    }
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("malformed JSON value: ") + e.what());
  }
  return Status::InvalidArgument(
      "neither Google Benchmark JSON (no 'benchmarks' array) nor gyre result JSON (no 'metrics' "
      "object)");
}

Result<RunResult> LoadRunResult(const std::string& path) {
  GYRE_ASSIGN_OR_RETURN(const json j, LoadJson(path));
  Result<RunResult> r = ParseRunResult(j);
  if (!r) return r.status().WithContext(path);
  return r;
}

namespace {

bool RunSpecificKey(const std::string& key) {
  static const char* const kSkip[] = {"date", "time", "timestamp", "commit", "git", "load_avg", "executable",
                                      "wall_s", "schedule"};
  const std::string k = Lower(key);
  return std::any_of(std::begin(kSkip), std::end(kSkip), [&](const char* s) { return k == s; });
}

std::string Short(const json& v) {
  if (v.is_null()) return "(absent)";
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

void Differ(const json& a, const json& b, const std::string& prefix, int depth, std::vector<std::string>& out) {
  if (a.is_object() && b.is_object() && depth < 8) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : a.items()) keys.push_back(k);
    for (const auto& [k, v] : b.items()) {
      if (!a.contains(k)) keys.push_back(k);
    }
    for (const std::string& k : keys) {
      if (RunSpecificKey(k)) continue;
      Differ(a.value(k, json()), b.value(k, json()), prefix.empty() ? k : prefix + "." + k, depth + 1, out);
    }
    return;
  }
  if (a != b) out.push_back(prefix + ": " + Short(a) + " vs " + Short(b));
}

}  // namespace

std::vector<std::string> SettingsThatDiffer(const json& meta_a, const json& meta_b) {
  std::vector<std::string> out;
  if (!meta_a.is_object() || !meta_b.is_object()) return out;  // nothing to compare
  Differ(meta_a, meta_b, "", 0, out);
  return out;
}

CompareReport CompareRuns(const RunResult& a, const RunResult& b, const CompareOptions& options) {
  CompareReport report;
  report.settings_differ = SettingsThatDiffer(a.meta, b.meta);
  report.label_a = a.format;
  report.label_b = b.format;
  report.options = options;
  for (const auto& [name, ma] : a.metrics) {
    auto it = b.metrics.find(name);
    if (it == b.metrics.end()) {
      report.only_in_a.push_back(name);
      continue;
    }
    report.metrics.push_back(CompareMetric(name, ma, it->second, options));
  }
  for (const auto& [name, mb] : b.metrics) {
    if (!a.metrics.count(name)) report.only_in_b.push_back(name);
  }
  for (const std::string& n : a.notes) report.notes.push_back("A: " + n);
  for (const std::string& n : b.notes) report.notes.push_back("B: " + n);
  return report;
}

int CompareReport::Count(Verdict v) const {
  return static_cast<int>(std::count_if(metrics.begin(), metrics.end(),
                                        [v](const MetricComparison& m) { return m.verdict == v; }));
}

std::string CompareReport::Human() const {
  size_t width = 6;
  for (const MetricComparison& m : metrics) width = std::max(width, m.name.size());
  std::ostringstream os;
  os << "A: " << label_a << "\nB: " << label_b << "\n";
  os << "threshold " << Format(options.threshold_pct) << "%, alpha " << Format(options.alpha)
     << "; a/b are medians over samples\n";
  if (!settings_differ.empty()) {
    os << "warning: the runs used different settings, so this may not compare like with like:\n";
    for (const std::string& d : settings_differ) os << "  " << d << "\n";
  }
  os << "\n";
  char line[512];
  std::snprintf(line, sizeof(line), "%-*s %12s %12s %9s %17s %8s  %s\n", static_cast<int>(width),
                "metric", "a", "b", "change", "change 95% CI", "p", "verdict");
  os << line;
  for (const MetricComparison& m : metrics) {
    const std::string change = m.change_pct ? Format(*m.change_pct, "%+.2f") + "%" : "n/a";
    const std::string ci = m.change_ci_lo_pct && std::isfinite(*m.change_ci_lo_pct) &&
                                   std::isfinite(*m.change_ci_hi_pct)
                               ? "[" + Format(*m.change_ci_lo_pct, "%+.1f") + ", " +
                                     Format(*m.change_ci_hi_pct, "%+.1f") + "]%"
                               : "-";
    const std::string p = m.p_value ? Format(*m.p_value, "%.2g") : "-";
    std::snprintf(line, sizeof(line), "%-*s %12s %12s %9s %17s %8s  %s", static_cast<int>(width),
                  m.name.c_str(), Format(m.a).c_str(), Format(m.b).c_str(), change.c_str(),
                  ci.c_str(), p.c_str(), VerdictName(m.verdict));
    os << line << (m.note.empty() ? "" : " " + m.note) << "\n";
  }
  os << "\nsummary: " << Count(Verdict::kBetter) << " better, " << Count(Verdict::kWorse)
     << " worse, " << Count(Verdict::kNoChange) << " no detectable change";
  if (Count(Verdict::kChanged)) os << ", " << Count(Verdict::kChanged) << " changed (direction unknown)";
  os << "\n";
  auto list = [&os](const char* label, const std::vector<std::string>& names) {
    if (names.empty()) return;
    os << label;
    for (size_t i = 0; i < names.size(); ++i) os << (i ? ", " : " ") << names[i];
    os << "\n";
  };
  list("only in A (not compared):", only_in_a);
  list("only in B (not compared):", only_in_b);
  for (const std::string& n : notes) os << "note: " << n << "\n";
  return os.str();
}

json CompareReport::Json() const {
  json rows = json::array();
  for (const MetricComparison& m : metrics) {
    json ci = m.change_ci_lo_pct && std::isfinite(*m.change_ci_lo_pct) && std::isfinite(*m.change_ci_hi_pct)
                  ? json::array({*m.change_ci_lo_pct, *m.change_ci_hi_pct})
                  : json(nullptr);
    rows.push_back({{"name", m.name},
                    {"a", m.a},
                    {"b", m.b},
                    {"change_pct", OptionalNumber(m.change_pct)},
                    {"change_ci_pct", ci},
                    {"p_value", OptionalNumber(m.p_value)},
                    {"verdict", VerdictName(m.verdict)},
                    {"direction", DirectionName(m.direction)},
                    {"n_a", m.num_a},
                    {"n_b", m.num_b},
                    {"note", m.note}});
  }
  return {{"a", label_a},
          {"b", label_b},
          {"threshold_pct", options.threshold_pct},
          {"alpha", options.alpha},
          {"metrics", rows},
          {"summary",
           {{"better", Count(Verdict::kBetter)},
            {"worse", Count(Verdict::kWorse)},
            {"unchanged", Count(Verdict::kNoChange)},
            {"changed", Count(Verdict::kChanged)}}},
          {"only_in_a", only_in_a},
          {"only_in_b", only_in_b},
          {"notes", notes},
          {"settings_differ", settings_differ}};
}

int RunCompareCli(const std::string& a, const std::string& b, bool json_out, double threshold_pct,
                  std::ostream& out, std::ostream& err, const std::vector<std::string>& baseline_runs) {
  if (!(threshold_pct >= 0) || !std::isfinite(threshold_pct)) {
    err << "gyre compare: --threshold must be a non-negative number of percent\n";
    return 2;
  }
  // Two `gyre bench serve` files with per-request records: the serving comparison.
  std::string serve_note;
  {
    Result<json> ja = LoadJson(a), jb = LoadJson(b);
    // Two `gyre bench ops` sweeps: per (op, shape), the samples' comparison (op_sweep.h).
    if (ja && jb && (IsOpSweepJson(*ja) || IsOpSweepJson(*jb))) {
      SweepCompareOptions so;
      so.threshold = threshold_pct / 100;
      std::vector<json> runs;
      for (const std::string& f : baseline_runs) {
        Result<json> j = LoadJson(f);
        if (!j || !IsOpSweepJson(*j)) {
          err << "gyre compare: --baseline-run " << f << " is not an op sweep (gyre bench ops --out)\n";
          return 2;
        }
        runs.push_back(std::move(*j));
      }
      for (const json& j : runs) so.extra_baselines.push_back(&j);
      Result<SweepCompareReport> report = CompareOpSweeps(*ja, *jb, so);
      if (!report) {
        err << "gyre compare: " << report.status().message() << "\n";
        return 2;
      }
      out << (json_out ? report->Json().dump(2) + "\n" : report->Human());
      return 0;
    }
    if (!baseline_runs.empty()) {
      err << "gyre compare: --baseline-run applies to op sweeps (gyre bench ops) only\n";
      return 2;
    }
    if (ja && jb && IsServeBenchJson(*ja) && IsServeBenchJson(*jb)) {
      Result<ServeRun> sa = ParseServeRun(*ja), sb = ParseServeRun(*jb);
      if (sa && sb) {
        ServeCompareOptions so;
        so.threshold_pct = threshold_pct;
        ServeCompareReport report = CompareServeRuns(*sa, *sb, so);
        report.label_a = a;
        report.label_b = b;
        out << (json_out ? report.Json().dump(2) + "\n" : report.Human());
        return 0;
      }
      serve_note = "per-request comparison not possible (" +
                   (sa ? "B: " + sb.status().message() : "A: " + sa.status().message()) +
                   "); generic comparison of the summary numbers, which has no noise model";
    }
  }
  Result<RunResult> ra = LoadRunResult(a);
  if (!ra) {
    err << "gyre compare: cannot read A: " << ra.status().message() << "\n";
    return 2;
  }
  Result<RunResult> rb = LoadRunResult(b);
  if (!rb) {
    err << "gyre compare: cannot read B: " << rb.status().message() << "\n";
    return 2;
  }
  CompareOptions options;
  options.threshold_pct = threshold_pct;
  CompareReport report = CompareRuns(*ra, *rb, options);
  report.label_a = a + " (" + ra->format + ")";
  report.label_b = b + " (" + rb->format + ")";
  if (!report.settings_differ.empty()) {
    err << "gyre compare: warning: A and B used different settings (" << report.settings_differ.size()
        << "; listed in the report)\n";
  }
  if (!serve_note.empty()) report.notes.insert(report.notes.begin(), serve_note);
  if (json_out) {
    out << report.Json().dump(2) << "\n";
  } else {
    out << report.Human();
  }
  return 0;
}

int RunCompareCli(const std::string& a, const std::string& b, bool json_out, double threshold_pct,
                  const std::vector<std::string>& baseline_runs) {
  return RunCompareCli(a, b, json_out, threshold_pct, std::cout, std::cerr, baseline_runs);
}

}  // namespace gyre::feedback
