// Sections: parsing the records; the per-run sampler; the bootstrap and the decision per metric;
// the report. A new latency metric is a row of kLatencyMetrics; a new rate is a row of
// kRateMetrics and a case of Sampler::Rate.
#include "feedback/serve_compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <sstream>

#include "feedback/stats.h"

namespace gyre::feedback {
namespace {

using nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string Fmt(double v, const char* fmt = "%.4g") {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// ---- parsing ----------------------------------------------------------------------------------

Result<double> NonNegative(const json& r, const char* key, size_t i) {
  if (!r.contains(key) || !r[key].is_number() || !std::isfinite(r[key].get<double>()) ||
      r[key].get<double>() < 0) {
    return Status::InvalidArgument("requests[" + std::to_string(i) + "]." + key +
                                   ": expected a finite number >= 0");
  }
  return r[key].get<double>();
}

Result<ServeRequestRecord> ParseRecord(const json& r, size_t i) {
  if (!r.is_object()) return Status::InvalidArgument("requests[" + std::to_string(i) + "]: not an object");
  ServeRequestRecord q;
  q.ok = r.value("ok", false);
  GYRE_ASSIGN_OR_RETURN(q.start_ms, NonNegative(r, "start_ms", i));
  if (!q.ok) return q;  // a failed request has no latencies
  GYRE_ASSIGN_OR_RETURN(q.ttft_ms, NonNegative(r, "ttft_ms", i));
  GYRE_ASSIGN_OR_RETURN(q.e2e_ms, NonNegative(r, "e2e_ms", i));
  GYRE_ASSIGN_OR_RETURN(const double out, NonNegative(r, "output_tokens", i));
  q.output_tokens = static_cast<int64_t>(out);
  if (r.contains("prompt_tokens")) {
    GYRE_ASSIGN_OR_RETURN(const double in, NonNegative(r, "prompt_tokens", i));
    q.prompt_tokens = static_cast<int64_t>(in);
  }
  if (!r.contains("itl_ms") || !r["itl_ms"].is_array()) {
    return Status::InvalidArgument("requests[" + std::to_string(i) + "].itl_ms: expected an array");
  }
  for (const json& g : r["itl_ms"]) {
    if (!g.is_number() || !std::isfinite(g.get<double>()) || g.get<double>() < 0) {
      return Status::InvalidArgument("requests[" + std::to_string(i) +
                                     "].itl_ms: expected finite numbers >= 0");
    }
    q.itl_ms.push_back(g.get<double>());
  }
  return q;
}

// ---- samplers ---------------------------------------------------------------------------------

// A value of one request, sorted once, so a weighted quantile is one walk.
struct Entry {
  double value;
  uint32_t request;  // index into the run's successful requests
};

// numpy-linear quantile of the multiset in which entry e appears w[e.request] times.
// NaN when the multiset is empty.
double WeightedQuantile(const std::vector<Entry>& sorted, const std::vector<uint32_t>& w, double q) {
  uint64_t total = 0;
  for (const Entry& e : sorted) total += w[e.request];
  if (total == 0) return kNaN;
  const double h = static_cast<double>(total - 1) * q;
  const uint64_t k = static_cast<uint64_t>(std::floor(h));
  const double frac = h - static_cast<double>(k);
  double lo = kNaN, hi = kNaN;
  uint64_t cum = 0;
  for (const Entry& e : sorted) {
    cum += w[e.request];
    if (std::isnan(lo) && cum > k) lo = e.value;
    if (cum > k + 1 || (cum > k && k + 1 >= total)) {
      hi = e.value;
      break;
    }
  }
  if (std::isnan(hi)) hi = lo;
  return lo + frac * (hi - lo);
}

double WeightedMean(const std::vector<Entry>& entries, const std::vector<uint32_t>& w) {
  double sum = 0;
  uint64_t n = 0;
  for (const Entry& e : entries) {
    sum += e.value * w[e.request];
    n += w[e.request];
  }
  return n ? sum / static_cast<double>(n) : kNaN;
}

enum class Family { kTtft, kTpot, kItl, kE2e };
struct LatencyMetric {
  const char* name;
  Family family;
  double q;  // < 0: the mean
  bool headline;
};
const LatencyMetric kLatencyMetrics[] = {
    {"ttft_ms_p50", Family::kTtft, 0.5, true},   {"ttft_ms_p99", Family::kTtft, 0.99, true},
    {"tpot_ms_p50", Family::kTpot, 0.5, true},   {"tpot_ms_p99", Family::kTpot, 0.99, true},
    {"itl_ms_p50", Family::kItl, 0.5, true},     {"itl_ms_p99", Family::kItl, 0.99, true},
    {"ttft_ms_p90", Family::kTtft, 0.9, false},  {"ttft_ms_mean", Family::kTtft, -1, false},
    {"tpot_ms_p90", Family::kTpot, 0.9, false},  {"tpot_ms_mean", Family::kTpot, -1, false},
    {"itl_ms_p90", Family::kItl, 0.9, false},    {"itl_ms_mean", Family::kItl, -1, false},
    {"e2e_ms_p50", Family::kE2e, 0.5, false},    {"e2e_ms_p90", Family::kE2e, 0.9, false},
    {"e2e_ms_p99", Family::kE2e, 0.99, false},   {"e2e_ms_mean", Family::kE2e, -1, false},
};

enum class Rate { kOutputTokens, kRequests, kGoodRequests };
struct RateMetric {
  const char* name;
  Rate rate;
  bool headline;
};
const RateMetric kRateMetrics[] = {
    {"output_throughput", Rate::kOutputTokens, true},
    {"goodput", Rate::kGoodRequests, true},
    {"request_throughput", Rate::kRequests, false},
};

class Sampler {
 public:
  Sampler(const ServeRun& run, double slo_ttft_ms, double slo_tpot_ms) : duration_s_(run.duration_s) {
    for (const ServeRequestRecord& r : run.requests) {
      if (!r.ok) continue;
      const uint32_t id = static_cast<uint32_t>(end_ms_.size());
      ttft_.push_back({r.ttft_ms, id});
      e2e_.push_back({r.e2e_ms, id});
      double tpot = 0;
      if (r.output_tokens > 1) {
        tpot = (r.e2e_ms - r.ttft_ms) / static_cast<double>(r.output_tokens - 1);
        tpot_.push_back({tpot, id});
      }
      for (double g : r.itl_ms) itl_.push_back({g, id});
      per_request_[static_cast<int>(Family::kTtft)].push_back(r.ttft_ms);
      per_request_[static_cast<int>(Family::kE2e)].push_back(r.e2e_ms);
      if (r.output_tokens > 1) per_request_[static_cast<int>(Family::kTpot)].push_back(tpot);
      if (!r.itl_ms.empty()) per_request_[static_cast<int>(Family::kItl)].push_back(Mean(r.itl_ms));
      end_ms_.push_back(r.start_ms + r.e2e_ms);
      output_tokens_.push_back(static_cast<double>(r.output_tokens));
      // Goodput's rule is bench serve's (Summarize): within every SLO that is set.
      good_.push_back((slo_ttft_ms <= 0 || r.ttft_ms <= slo_ttft_ms) && (slo_tpot_ms <= 0 || tpot <= slo_tpot_ms));
    }
    for (auto* v : {&ttft_, &tpot_, &itl_, &e2e_}) {
      std::sort(v->begin(), v->end(), [](const Entry& x, const Entry& y) { return x.value < y.value; });
    }
    for (double e : end_ms_) last_end_ms_ = std::max(last_end_ms_, e);
  }

  size_t num_ok() const { return end_ms_.size(); }
  // One value per successful request (for ITL, the request's mean gap): the rank test's input.
  const std::vector<double>& PerRequest(Family f) const { return per_request_[static_cast<int>(f)]; }
  // Values a quantile of the family rests on (requests; gaps for ITL).
  size_t num_values(Family f) const { return Values(f).size(); }

  double Latency(const LatencyMetric& m, const std::vector<uint32_t>& w) const {
    const std::vector<Entry>& v = Values(m.family);
    return m.q < 0 ? WeightedMean(v, w) : WeightedQuantile(v, w, m.q);
  }

  // Events per second over the run. The run's duration moves with its last completion: on a
  // resample, duration × (last end among the drawn requests) / (last end of all).
  double RateOf(Rate rate, const std::vector<uint32_t>& w) const {
    double events = 0, last = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i] == 0) continue;
      last = std::max(last, end_ms_[i]);
      const double per = rate == Rate::kOutputTokens ? output_tokens_[i] : rate == Rate::kGoodRequests ? good_[i] : 1.0;
      events += w[i] * per;
    }
    const double duration_s = last_end_ms_ > 0 ? duration_s_ * last / last_end_ms_ : duration_s_;
    return duration_s > 0 ? events / duration_s : kNaN;
  }

 private:
  const std::vector<Entry>& Values(Family f) const {
    return f == Family::kTtft ? ttft_ : f == Family::kTpot ? tpot_ : f == Family::kItl ? itl_ : e2e_;
  }

  double duration_s_ = 0, last_end_ms_ = 0;
  std::vector<Entry> ttft_, tpot_, itl_, e2e_;
  std::vector<double> end_ms_, output_tokens_, good_;  // per successful request
  std::vector<double> per_request_[4];                 // by Family
};

// ---- bootstrap and decision ---------------------------------------------------------------------

// Standard normal quantile by bisection on erfc (no tables; 1e-12 is far below what matters).
double NormalQuantile(double p) {
  double lo = -40, hi = 40;
  for (int i = 0; i < 200 && hi - lo > 1e-12; ++i) {
    const double mid = (lo + hi) / 2;
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

struct Estimate {
  double stat = kNaN;
  std::vector<double> resamples;  // the statistic on each resample (NaN where undefined)
};

// The standard error of the statistic (log scale when `log`), over the finite resamples.
double StandardError(const Estimate& e, bool log) {
  std::vector<double> v;
  for (double x : e.resamples) {
    if (!std::isfinite(x) || (log && x <= 0)) continue;
    v.push_back(log ? std::log(x) : x);
  }
  return v.size() >= 2 ? StdDev(v) : kNaN;
}

// Every metric of a run (kLatencyMetrics, then kRateMetrics), on the original requests and on
// `resamples` cluster resamples of them.
std::vector<Estimate> Estimates(const Sampler& s, int resamples, uint64_t seed) {
  constexpr size_t kNumLatency = std::size(kLatencyMetrics);
  std::vector<Estimate> out(kNumLatency + std::size(kRateMetrics));
  const uint32_t n = static_cast<uint32_t>(s.num_ok());
  std::vector<uint32_t> w(n, 1);
  auto eval = [&](size_t m) {
    return m < kNumLatency ? s.Latency(kLatencyMetrics[m], w) : s.RateOf(kRateMetrics[m - kNumLatency].rate, w);
  };
  for (size_t m = 0; m < out.size(); ++m) out[m].stat = eval(m);
  if (n == 0) return out;
  Rng rng(seed);
  for (int b = 0; b < resamples; ++b) {
    std::fill(w.begin(), w.end(), 0);
    for (uint32_t i = 0; i < n; ++i) ++w[rng.Below(n)];
    for (size_t m = 0; m < out.size(); ++m) out[m].resamples.push_back(eval(m));
  }
  return out;
}

void Decide(ServeMetricComparison& c, const Estimate& ea, const Estimate& eb, double z,
            const ServeCompareOptions& o) {
  c.a = ea.stat;
  c.b = eb.stat;
  if (!std::isfinite(c.a) || !std::isfinite(c.b)) {
    c.note = "(no values on a side)";
    return;
  }
  if (c.a == 0 && c.b == 0) {
    c.change_pct = 0;
    return;
  }
  if (c.a != 0) c.change_pct = (c.b - c.a) / std::fabs(c.a) * 100;
  const bool log = c.a > 0 && c.b > 0;
  const double se = std::hypot(StandardError(ea, log), StandardError(eb, log));
  if (!std::isfinite(se)) {
    c.note = "(not judged: too few resamples with a value)";
    return;
  }
  bool significant = false;
  if (log) {
    const double d = std::log(c.b / c.a);
    if (se > 0) {
      c.ci_lo_pct = (std::exp(d - z * se) - 1) * 100;
      c.ci_hi_pct = (std::exp(d + z * se) - 1) * 100;
      significant = std::fabs(d) > z * se;
    } else {
      significant = d != 0;  // no spread on either side: any difference is real
    }
  } else {
    const double d = c.b - c.a;
    if (se > 0 && c.a != 0) {
      c.ci_lo_pct = (d - z * se) / std::fabs(c.a) * 100;
      c.ci_hi_pct = (d + z * se) / std::fabs(c.a) * 100;
    }
    significant = se > 0 ? std::fabs(d) > z * se : d != 0;
  }
  const bool large = !c.change_pct || std::fabs(*c.change_pct) >= o.threshold_pct;
  if (!significant || !large) return;
  const bool up = c.b > c.a;
  c.verdict = up == (c.direction == Direction::kHigherIsBetter) ? Verdict::kBetter : Verdict::kWorse;
}

// The workload settings that make two runs comparable; the URL is expected to differ.
void SettingWarnings(const ServeRun& a, const ServeRun& b, std::vector<std::string>& out) {
  std::vector<std::string> keys;
  for (const json* c : {&a.config, &b.config}) {
    if (!c->is_object()) continue;
    for (const auto& [k, v] : c->items()) {
      if (k != "url" && std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
  }
  std::sort(keys.begin(), keys.end());
  for (const std::string& k : keys) {
    const json va = a.config.is_object() && a.config.contains(k) ? a.config[k] : json("(absent)");
    const json vb = b.config.is_object() && b.config.contains(k) ? b.config[k] : json("(absent)");
    if (va != vb) {
      out.push_back("settings differ: " + k + " = " + va.dump() + " in A, " + vb.dump() +
                    " in B: the runs measure different workloads");
    }
  }
  if (!a.machine.is_null() && !b.machine.is_null() && a.machine != b.machine) {
    out.push_back("the machines differ: A " + a.machine.dump() + ", B " + b.machine.dump());
  }
  auto failed = [](const ServeRun& r) {
    return std::count_if(r.requests.begin(), r.requests.end(), [](const ServeRequestRecord& q) { return !q.ok; });
  };
  const auto fa = failed(a), fb = failed(b);
  if (fa != fb) {
    out.push_back("failed requests differ: " + std::to_string(fa) + " of " + std::to_string(a.requests.size()) +
                  " in A, " + std::to_string(fb) + " of " + std::to_string(b.requests.size()) +
                  " in B (latencies and rates count successful requests only)");
  }
}

std::string ChangeText(const ServeMetricComparison& m) {
  std::string s = m.name + " " + (m.change_pct ? Fmt(*m.change_pct, "%+.1f") + "%" : "n/a");
  if (m.ci_lo_pct && m.ci_hi_pct) {
    s += " [" + Fmt(*m.ci_lo_pct, "%+.1f") + "%, " + Fmt(*m.ci_hi_pct, "%+.1f") + "%]";
  }
  return s;
}

}  // namespace

bool IsServeBenchJson(const json& j) {
  return j.is_object() && j.contains("meta") && j["meta"].is_object() &&
         j["meta"].value("tool", std::string()) == "gyre bench serve";
}

Result<ServeRun> ParseServeRun(const json& j) {
  if (!IsServeBenchJson(j)) return Status::InvalidArgument("not a `gyre bench serve` result (meta.tool)");
  if (!j.contains("requests") || !j["requests"].is_array()) {
    return Status::InvalidArgument(
        "no per-request records ('requests'): the file predates them; rerun `gyre bench serve --json`");
  }
  ServeRun run;
  const json& meta = j["meta"];
  run.config = meta.contains("config") && meta["config"].is_object() ? meta["config"] : json::object();
  run.machine = meta.contains("machine") ? meta["machine"] : json(nullptr);
  for (const char* key : {"slo_ttft_ms", "slo_tpot_ms"}) {
    if (run.config.contains(key) && !run.config[key].is_number()) {
      return Status::InvalidArgument(std::string("meta.config.") + key + ": expected a number");
    }
  }
  run.slo_ttft_ms = run.config.value("slo_ttft_ms", 0.0);
  run.slo_tpot_ms = run.config.value("slo_tpot_ms", 0.0);
  const json& reqs = j["requests"];
  for (size_t i = 0; i < reqs.size(); ++i) {
    GYRE_ASSIGN_OR_RETURN(ServeRequestRecord r, ParseRecord(reqs[i], i));
    run.requests.push_back(std::move(r));
  }
  double end_ms = 0;
  for (const ServeRequestRecord& r : run.requests) end_ms = std::max(end_ms, r.start_ms + r.e2e_ms);
  run.duration_s = end_ms / 1e3;
  if (j.contains("metrics") && j["metrics"].is_object() && j["metrics"].contains("duration_s")) {
    const json& d = j["metrics"]["duration_s"];
    if (!d.is_number() || !std::isfinite(d.get<double>()) || d.get<double>() < 0) {
      return Status::InvalidArgument("metrics.duration_s: expected a finite number >= 0");
    }
    run.duration_s = std::max(run.duration_s, d.get<double>());
  }
  return run;
}

ServeCompareReport CompareServeRuns(const ServeRun& a, const ServeRun& b, const ServeCompareOptions& o) {
  ServeCompareReport report;
  report.options = o;
  SettingWarnings(a, b, report.warnings);
  const int resamples = std::max(o.resamples, 20);
  const bool same_slo = a.slo_ttft_ms == b.slo_ttft_ms && a.slo_tpot_ms == b.slo_tpot_ms;
  const bool goodput = same_slo && (a.slo_ttft_ms > 0 || a.slo_tpot_ms > 0);
  if (!same_slo) report.warnings.push_back("goodput not compared: the runs used different SLOs");
  const Sampler sa(a, a.slo_ttft_ms, a.slo_tpot_ms), sb(b, b.slo_ttft_ms, b.slo_tpot_ms);
  const bool enough = sa.num_ok() >= static_cast<size_t>(o.min_requests) &&
                      sb.num_ok() >= static_cast<size_t>(o.min_requests);

  int num_headline = 0;
  for (const LatencyMetric& m : kLatencyMetrics) num_headline += m.headline;
  for (const RateMetric& m : kRateMetrics) num_headline += m.headline && (m.rate != Rate::kGoodRequests || goodput);
  report.metric_alpha = o.alpha / num_headline;
  const double z = NormalQuantile(1 - report.metric_alpha / 2);

  std::vector<Estimate> ea, eb;
  if (enough) {
    ea = Estimates(sa, resamples, o.seed);
    eb = Estimates(sb, resamples, o.seed ^ 0x9E3779B97F4A7C15ull);
  }
  std::vector<ServeMetricComparison> rows;
  const std::string too_few =
      "(not judged: fewer than " + std::to_string(o.min_requests) + " successful requests on a side)";
  for (size_t i = 0; i < std::size(kLatencyMetrics); ++i) {
    const LatencyMetric& m = kLatencyMetrics[i];
    ServeMetricComparison c;
    c.name = m.name;
    c.headline = m.headline;
    c.direction = Direction::kLowerIsBetter;
    // A quantile rests on the values above it; with fewer than min_tail of them it is noise.
    const size_t need = m.q > 0 ? static_cast<size_t>(std::ceil(o.min_tail / (1 - m.q) - 1e-6)) : 0;
    const size_t have = std::min(sa.num_values(m.family), sb.num_values(m.family));
    if (!enough) {
      c.note = too_few;
    } else if (have < need) {
      c.a = ea[i].stat;
      c.b = eb[i].stat;
      c.note = "(not judged: " + std::to_string(have) + " values; a p" +
               std::to_string(static_cast<int>(m.q * 100 + 0.5)) + " needs >= " + std::to_string(need) +
               " per side)";
    } else {
      Decide(c, ea[i], eb[i], z, o);
      // The rank test must agree: under A/A the per-request values are exchangeable, so it
      // holds its level exactly, where the bootstrap's normal approximation is only close.
      const std::vector<double>&ra = sa.PerRequest(m.family), &rb = sb.PerRequest(m.family);
      if (c.verdict != Verdict::kNoChange && !ra.empty() && !rb.empty()) {
        const double p = MannWhitneyU(ra, rb).p_value;
        if (p >= report.metric_alpha) {
          c.verdict = Verdict::kNoChange;
          c.note = "(the rank test of the per-request values disagrees: p = " + Fmt(p, "%.2g") + ")";
        }
      }
    }
    rows.push_back(std::move(c));
  }
  for (size_t i = 0; i < std::size(kRateMetrics); ++i) {
    const RateMetric& m = kRateMetrics[i];
    if (m.rate == Rate::kGoodRequests && !goodput) continue;
    ServeMetricComparison c;
    c.name = m.name;
    c.headline = m.headline;
    c.direction = Direction::kHigherIsBetter;
    if (enough) {
      const size_t k = std::size(kLatencyMetrics) + i;
      Decide(c, ea[k], eb[k], z, o);
    } else {
      c.note = too_few;
    }
    rows.push_back(std::move(c));
  }
  std::stable_partition(rows.begin(), rows.end(), [](const ServeMetricComparison& c) { return c.headline; });
  report.metrics = std::move(rows);
  for (const ServeMetricComparison& c : report.metrics) {
    if (!c.headline) continue;
    if (c.verdict == Verdict::kWorse) report.headline_worse.push_back(c.name);
    if (c.verdict == Verdict::kBetter) report.headline_better.push_back(c.name);
  }
  report.headline = !report.headline_worse.empty()    ? Verdict::kWorse
                    : !report.headline_better.empty() ? Verdict::kBetter
                                                      : Verdict::kNoChange;
  return report;
}

std::string ServeCompareReport::HeadlineText() const {
  auto list = [this](const std::vector<std::string>& names) {
    std::string s;
    for (const std::string& n : names) {
      for (const ServeMetricComparison& m : metrics) {
        if (m.name == n) s += (s.empty() ? "" : "; ") + ChangeText(m);
      }
    }
    return s;
  };
  std::string unjudged;
  for (const ServeMetricComparison& m : metrics) {
    if (m.headline && m.note.rfind("(not judged", 0) == 0) unjudged += (unjudged.empty() ? "" : ", ") + m.name;
  }
  const std::string tail = unjudged.empty() ? "" : "; not judged (see the table): " + unjudged;
  if (headline == Verdict::kWorse) {
    std::string s = "WORSE: " + list(headline_worse);
    if (!headline_better.empty()) s += " (also better: " + list(headline_better) + ")";
    return s + tail;
  }
  if (headline == Verdict::kBetter) return "BETTER: " + list(headline_better) + tail;
  const bool has_goodput = std::any_of(metrics.begin(), metrics.end(),
                                       [](const ServeMetricComparison& m) { return m.name == "goodput"; });
  return std::string("no detectable change in TTFT, TPOT, ITL, throughput") +
         (has_goodput ? " or goodput" : " (goodput: no common SLO)") + tail;
}

std::string ServeCompareReport::Human() const {
  std::ostringstream os;
  os << "A: " << label_a << "\nB: " << label_b << "\n";
  os << "headline: " << HeadlineText() << "\n";
  for (const std::string& w : warnings) os << "warning: " << w << "\n";
  os << "\nper-request bootstrap (" << options.resamples << " resamples); threshold " << Fmt(options.threshold_pct) << "%, CI level "
     << Fmt((1 - metric_alpha) * 100, "%.2f") << "% (alpha " << Fmt(options.alpha)
     << " over the headline metrics)\n";
  char line[512];
  std::snprintf(line, sizeof(line), "%-20s %3s %12s %12s %9s %21s  %s\n", "metric", "", "a", "b", "change",
                "change CI", "verdict");
  os << line;
  for (const ServeMetricComparison& m : metrics) {
    const std::string change = m.change_pct ? Fmt(*m.change_pct, "%+.2f") + "%" : "n/a";
    const std::string ci = m.ci_lo_pct && m.ci_hi_pct
                               ? "[" + Fmt(*m.ci_lo_pct, "%+.1f") + ", " + Fmt(*m.ci_hi_pct, "%+.1f") + "]%"
                               : "-";
    std::snprintf(line, sizeof(line), "%-20s %3s %12s %12s %9s %21s  %s", m.name.c_str(), m.headline ? "*" : "",
                  Fmt(m.a, "%.6g").c_str(), Fmt(m.b, "%.6g").c_str(), change.c_str(), ci.c_str(),
                  VerdictName(m.verdict));
    os << line << (m.note.empty() ? "" : " " + m.note) << "\n";
  }
  os << "(* headline metric; latencies in ms, rates per second)\n";
  return os.str();
}

json ServeCompareReport::Json() const {
  json rows = json::array();
  auto num = [](const std::optional<double>& v) { return v && std::isfinite(*v) ? json(*v) : json(nullptr); };
  for (const ServeMetricComparison& m : metrics) {
    rows.push_back({{"name", m.name},
                    {"headline", m.headline},
                    {"direction", DirectionName(m.direction)},
                    {"a", std::isfinite(m.a) ? json(m.a) : json(nullptr)},
                    {"b", std::isfinite(m.b) ? json(m.b) : json(nullptr)},
                    {"change_pct", num(m.change_pct)},
                    {"change_ci_pct", m.ci_lo_pct && m.ci_hi_pct ? json::array({*m.ci_lo_pct, *m.ci_hi_pct})
                                                                 : json(nullptr)},
                    {"verdict", VerdictName(m.verdict)},
                    {"note", m.note}});
  }
  return {{"kind", "serve"},
          {"a", label_a},
          {"b", label_b},
          {"headline",
           {{"verdict", VerdictName(headline)},
            {"worse", headline_worse},
            {"better", headline_better},
            {"text", HeadlineText()}}},
          {"warnings", warnings},
          {"threshold_pct", options.threshold_pct},
          {"alpha", options.alpha},
          {"metric_alpha", metric_alpha},
          {"metrics", rows}};
}

}  // namespace gyre::feedback
