#include "feedback/gate.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <sstream>

#include "feedback/stats.h"

namespace gyre::feedback {
namespace {

using nlohmann::json;

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

std::string Format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string Interval(const PredicateResult& r) {
  return Num(r.confidence * 100) + "% CI [" + Num(*r.ci_lo) + ", " + Num(*r.ci_hi) + "]";
}

json OptionalNumber(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? json(*v) : json(nullptr);
}

// Bound and ratio: the CI decides. PASS if both ends satisfy `op value`, FAIL if neither does.
void DecideByInterval(const PredicateSpec& p, PredicateResult& r) {
  const std::string target = std::string(CompareOpName(p.op)) + " " + Num(p.value);
  if (std::isnan(*r.ci_lo) || std::isnan(*r.ci_hi)) {
    r.verdict = GateVerdict::kInconclusive;
    r.reason = "statistic undefined (zero denominator in every resample)";
    return;
  }
  const bool lo_ok = Holds(*r.ci_lo, p.op, p.value), hi_ok = Holds(*r.ci_hi, p.op, p.value);
  if (lo_ok && hi_ok) {
    r.verdict = GateVerdict::kPass;
    r.reason = "whole " + Interval(r) + " is " + target;
  } else if (!lo_ok && !hi_ok) {
    r.verdict = GateVerdict::kFail;
    r.reason = "whole " + Interval(r) + " violates " + target;
  } else {
    r.verdict = GateVerdict::kInconclusive;
    r.reason = Interval(r) + " straddles " + Num(p.value) + ": more repeats or less noise needed";
  }
}

void EvaluateCompare(const PredicateSpec& p, const std::vector<double>& a,
                     const std::vector<double>& b, PredicateResult& r) {
  r.p_value = MannWhitneyU(a, b).p_value;
  const double shift = HodgesLehmannShift(b, a);  // median of a_i - b_j
  r.estimate = *r.median_b != 0 ? shift / std::fabs(*r.median_b) * 100
               : shift == 0     ? 0.0
                                : std::copysign(std::numeric_limits<double>::infinity(), shift);
  std::string evidence = "effect " + Num(r.estimate) + "%, p=" + Num(*r.p_value);
  if (p.min_effect_pct > 0) evidence += ", margin " + Num(p.min_effect_pct) + "%";
  if (MannWhitneyMinP(static_cast<int>(a.size()), static_cast<int>(b.size())) >= p.alpha) {
    r.verdict = GateVerdict::kInconclusive;
    r.reason = "too few samples for p < " + Num(p.alpha) + " (n=" + std::to_string(a.size()) + "/" +
               std::to_string(b.size()) + "; need >= 4 per side at alpha 0.05)";
    return;
  }
  const bool detected = *r.p_value < p.alpha && std::fabs(r.estimate) > p.min_effect_pct;
  const bool wants_greater = p.op == CompareOp::kGreater || p.op == CompareOp::kGreaterEqual;
  const bool strict = p.op == CompareOp::kGreater || p.op == CompareOp::kLess;
  const bool right_way = wants_greater ? r.estimate > 0 : r.estimate < 0;
  if (detected && right_way) {
    r.verdict = GateVerdict::kPass;
    r.reason = "detected difference in the required direction (" + evidence + ")";
  } else if (detected) {
    r.verdict = GateVerdict::kFail;
    r.reason = "detected difference in the wrong direction (" + evidence + ")";
  } else if (strict) {
    r.verdict = GateVerdict::kInconclusive;
    r.reason = "no detectable difference (" + evidence + "): cannot show " + CompareOpName(p.op);
  } else {
    r.verdict = GateVerdict::kPass;
    r.reason = "not detectably worse (" + evidence + ")";
  }
}

PredicateResult Evaluate(const PredicateSpec& p, const GateSpec& g,
                         const std::map<std::string, std::vector<double>>& samples,
                         uint64_t bootstrap_seed) {
  PredicateResult r;
  r.id = p.id;
  r.kind = p.kind;
  r.expression = p.Expression();
  r.stat = p.stat;
  r.confidence = g.confidence;
  const std::vector<double>& a = samples.at(p.a.Full());
  r.num_a = a.size();
  r.median_a = Median(a);
  BootstrapOptions bo;
  bo.num_resamples = g.bootstrap_resamples;
  bo.confidence = g.confidence;
  bo.seed = bootstrap_seed;
  const SampleStatistic stat = [&p](std::span<const double> x) { return ApplyStat(p.stat, x); };
  if (p.kind == PredicateKind::kBound) {
    const ConfidenceInterval ci = BootstrapCi(a, stat, bo);
    r.estimate = ci.estimate;
    r.ci_lo = ci.lo;
    r.ci_hi = ci.hi;
    DecideByInterval(p, r);
    return r;
  }
  const std::vector<double>& b = samples.at(p.b.Full());
  r.num_b = b.size();
  r.median_b = Median(b);
  if (p.kind == PredicateKind::kRatio) {
    const ConfidenceInterval ci = BootstrapRatioCi(a, b, bo, stat);
    r.estimate = ci.estimate;
    r.ci_lo = ci.lo;
    r.ci_hi = ci.hi;
    DecideByInterval(p, r);
  } else {
    EvaluateCompare(p, a, b, r);
  }
  return r;
}

std::string ProducedMetrics(const std::map<std::string, std::vector<double>>& samples,
                            const std::string& scenario) {
  std::string out;
  for (const auto& [name, v] : samples) {
    if (name.compare(0, scenario.size() + 1, scenario + ".") == 0) {
      out += (out.empty() ? "" : ", ") + name.substr(scenario.size() + 1);
    }
  }
  return out.empty() ? "none" : out;
}

Status CheckReferences(const GateSpec& g, const std::map<std::string, std::vector<double>>& samples) {
  for (const PredicateSpec& p : g.predicates) {
    for (const MetricRef* ref : {&p.a, &p.b}) {
      if (ref->scenario.empty() || samples.count(ref->Full())) continue;
      return Status::InvalidArgument("predicate '" + p.id + "': scenario '" + ref->scenario +
                                     "' produced no metric '" + ref->metric + "' (it produced: " +
                                     ProducedMetrics(samples, ref->scenario) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace

const char* GateVerdictName(GateVerdict v) {
  switch (v) {
    case GateVerdict::kPass: return "PASS";
    case GateVerdict::kFail: return "FAIL";
    case GateVerdict::kInconclusive: return "INCONCLUSIVE";
  }
  return "?";
}

std::vector<std::vector<std::string>> InterleavedSchedule(const std::vector<std::string>& scenarios,
                                                          int rounds, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<std::string>> out;
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::string> order = scenarios;
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.Below(i)]);
    out.push_back(std::move(order));
  }
  return out;
}

Result<GateReport> RunGate(const json& gate, const ScenarioRunner& runner, const GateOptions& options) {
  GYRE_ASSIGN_OR_RETURN(const GateSpec g, ParseGate(gate));
  GateReport report;
  report.name = g.name;
  report.repeats = options.repeats > 0 ? options.repeats : g.repeats;
  report.warmup = options.warmup >= 0 ? options.warmup : g.warmup;
  report.seed = options.seed;

  std::vector<std::string> names;
  std::map<std::string, const json*> specs;
  for (const auto& [name, spec] : g.scenarios) {
    names.push_back(name);
    specs[name] = &spec;
  }
  const auto start = std::chrono::steady_clock::now();
  const auto rounds = InterleavedSchedule(names, report.warmup + report.repeats, options.seed);
  for (int round = 0; round < static_cast<int>(rounds.size()); ++round) {
    const bool warmup = round < report.warmup;
    const int repeat_index = warmup ? -(round + 1) : round - report.warmup;
    for (const std::string& name : rounds[round]) {
      const std::string where = "gate '" + g.name + "': scenario '" + name + "' (repeat " +
                                std::to_string(repeat_index) + ")";
      Result<std::map<std::string, double>> metrics = runner(name, *specs[name], repeat_index);
      if (!metrics) return metrics.status().WithContext(where);
      for (const auto& [metric, value] : *metrics) {
        if (metric.empty() || metric.find('.') != std::string::npos) {
          return Status::InvalidArgument(where + ": metric name '" + metric + "' is empty or contains '.'");
        }
        if (!std::isfinite(value)) {
          return Status::InvalidArgument(where + ": metric '" + metric + "' is not finite");
        }
        if (!warmup) report.samples[name + "." + metric].push_back(value);
      }
    }
    if (!warmup) report.schedule.push_back(rounds[round]);
    if (options.progress) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      char line[256];
      std::snprintf(line, sizeof line, "gate %s: round %d/%d%s, %.1f s", g.name.c_str(), round + 1,
                    static_cast<int>(rounds.size()),
                    warmup ? (" (warmup " + std::to_string(round + 1) + "/" + std::to_string(report.warmup) + ")").c_str()
                           : "",
                    s);
      options.progress(line);
    }
  }
  report.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  GYRE_RETURN_IF_ERROR(CheckReferences(g, report.samples).WithContext("gate '" + g.name + "'"));

  for (size_t i = 0; i < g.predicates.size(); ++i) {
    Rng mix(options.seed ^ (0x9E3779B97F4A7C15ull * (i + 1)));
    report.predicates.push_back(Evaluate(g.predicates[i], g, report.samples, mix.Next()));
  }
  return report;
}

int GateReport::Count(GateVerdict v) const {
  int n = 0;
  for (const PredicateResult& p : predicates) n += p.verdict == v;
  return n;
}

std::string GateReport::Human() const {
  size_t id_width = 2;
  for (const PredicateResult& p : predicates) id_width = std::max(id_width, p.id.size());
  std::ostringstream os;
  os << "gate " << name << ": " << repeats << " repeats";
  if (warmup > 0) os << " + " << warmup << " warmup";
  os << ", seed " << seed << ", " << (schedule.empty() ? 0 : schedule[0].size()) << " scenarios, "
     << Format("%.1f", wall_s) << " s\n";
  char line[1024];
  for (const PredicateResult& p : predicates) {
    std::snprintf(line, sizeof(line), "%-12s  %-*s  %s\n", GateVerdictName(p.verdict),
                  static_cast<int>(id_width), p.id.c_str(), p.expression.c_str());
    os << line;
    std::string evidence = "n=" + std::to_string(p.num_a);
    if (p.kind == PredicateKind::kBound) {
      evidence += "  " + p.stat + " " + Num(p.estimate);
      if (p.stat != "median") evidence += "  (median " + Num(p.median_a) + ")";
    } else if (p.kind == PredicateKind::kRatio) {
      evidence += "/" + std::to_string(p.num_b) + "  ratio " + Num(p.estimate) + "  medians " +
                  Num(p.median_a) + " / " + Num(*p.median_b);
    } else {
      char effect[32];
      std::snprintf(effect, sizeof(effect), "%+.3g%%", p.estimate);
      evidence += "/" + std::to_string(p.num_b) + "  medians " + Num(p.median_a) + " vs " +
                  Num(*p.median_b) + "  effect " + effect + "  p=" + Num(*p.p_value);
    }
    os << std::string(14, ' ') << evidence << "\n" << std::string(14, ' ') << p.reason << "\n";
  }
  os << "result: " << (Passed() ? "PASS" : "FAIL") << " (" << Count(GateVerdict::kPass) << " pass, "
     << Count(GateVerdict::kFail) << " fail, " << Count(GateVerdict::kInconclusive) << " inconclusive";
  if (Count(GateVerdict::kInconclusive)) os << "; inconclusive counts as failure";
  os << ")\n";
  return os.str();
}

json GateReport::Json() const {
  json preds = json::array();
  for (const PredicateResult& p : predicates) {
    json ev = {{"n_a", p.num_a}, {"median_a", p.median_a}, {"estimate", OptionalNumber(p.estimate)}};
    if (p.kind != PredicateKind::kBound) {
      ev["n_b"] = p.num_b;
      ev["median_b"] = OptionalNumber(p.median_b);
    }
    if (p.ci_lo) {
      ev["ci"] = {OptionalNumber(p.ci_lo), OptionalNumber(p.ci_hi)};
      ev["confidence"] = p.confidence;
    }
    if (p.p_value) ev["p_value"] = *p.p_value;
    preds.push_back({{"id", p.id},
                     {"kind", PredicateKindName(p.kind)},
                     {"expr", p.expression},
                     {"verdict", GateVerdictName(p.verdict)},
                     {"reason", p.reason},
                     {"evidence", ev}});
  }
  json metrics = json::object();
  for (const auto& [metric, v] : samples) metrics[metric] = v;
  return {{"meta",
           {{"gate", name}, {"repeats", repeats}, {"warmup", warmup}, {"seed", seed},
            {"wall_s", wall_s}, {"schedule", schedule}}},
          {"metrics", metrics},
          {"predicates", preds},
          {"summary",
           {{"pass", Count(GateVerdict::kPass)},
            {"fail", Count(GateVerdict::kFail)},
            {"inconclusive", Count(GateVerdict::kInconclusive)},
            {"passed", Passed()}}},
          {"exit_code", ExitCode()}};
}

int RunGateCli(const std::string& gate_path, const ScenarioRunner& runner, const GateOptions& options,
               bool json_out, std::ostream& out, std::ostream& err) {
  Result<json> gate = ReadGateFile(gate_path);
  if (!gate) {
    err << "gyre gate: " << gate.status().message() << "\n";
    return 2;
  }
  GateOptions with_progress = options;
  if (!with_progress.progress) {
    with_progress.progress = [&err](const std::string& line) { err << line << "\n" << std::flush; };
  }
  Result<GateReport> report = RunGate(*gate, runner, with_progress);
  if (!report) {
    err << "gyre gate: " << gate_path << ": " << report.status().ToString() << "\n";
    return 2;
  }
  out << (json_out ? report->Json().dump(2) + "\n" : report->Human());
  return report->ExitCode();
}

int RunGateCli(const std::string& gate_path, const ScenarioRunner& runner, const GateOptions& options,
               bool json_out) {
  return RunGateCli(gate_path, runner, options, json_out, std::cout, std::cerr);
}

}  // namespace gyre::feedback
