#include "feedback/analyze.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace gyre::feedback {

namespace {

using Interval = std::pair<double, double>;

std::vector<Interval> Union(std::vector<Interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const auto& iv : v) {
    if (!out.empty() && iv.first <= out.back().second) {
      out.back().second = std::max(out.back().second, iv.second);
    } else {
      out.push_back(iv);
    }
  }
  return out;
}

double Length(const std::vector<Interval>& v) {
  double s = 0;
  for (const auto& iv : v) s += iv.second - iv.first;
  return s;
}

double IntersectLength(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double s = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) s += hi - lo;
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return s;
}

}  // namespace

AnalyzeReport Analyze(const std::vector<TraceEvent>& events, const std::optional<Ceilings>& ceilings,
                      const std::optional<std::pair<std::string, std::string>>& overlap) {
  AnalyzeReport r;
  r.ceilings = ceilings;
  std::map<uint32_t, std::vector<const TraceEvent*>> by_tid;
  double t0 = 1e300, t1 = -1e300;
  for (const auto& e : events) {
    if (e.dur_us < 0) continue;
    by_tid[e.tid].push_back(&e);
    t0 = std::min(t0, e.ts_us);
    t1 = std::max(t1, e.ts_us + e.dur_us);
  }
  r.wall_us = t1 > t0 ? t1 - t0 : 0;
  std::map<std::string, OpTime> ops;
  std::map<std::string, double> cats;
  std::map<std::string, std::vector<Interval>> cat_intervals;
  for (auto& [tid, list] : by_tid) {
    // Parents first: by start, then longer first.
    std::sort(list.begin(), list.end(), [](const TraceEvent* a, const TraceEvent* b) {
      return a->ts_us < b->ts_us || (a->ts_us == b->ts_us && a->dur_us > b->dur_us);
    });
    std::vector<double> child_us(list.size(), 0.0);
    std::vector<size_t> stack;
    std::vector<Interval> top;
    for (size_t i = 0; i < list.size(); ++i) {
      const TraceEvent* e = list[i];
      while (!stack.empty() && list[stack.back()]->ts_us + list[stack.back()]->dur_us <= e->ts_us) stack.pop_back();
      if (!stack.empty()) {
        child_us[stack.back()] += e->dur_us;
      } else {
        top.push_back({e->ts_us, e->ts_us + e->dur_us});
      }
      stack.push_back(i);
    }
    for (size_t i = 0; i < list.size(); ++i) {
      const TraceEvent* e = list[i];
      OpTime& o = ops[e->name];
      o.name = e->name;
      o.cat = e->cat;
      ++o.count;
      o.incl_us += e->dur_us;
      const double excl = std::max(0.0, e->dur_us - child_us[i]);
      o.excl_us += excl;
      cats[e->cat] += excl;
      cat_intervals[e->cat].push_back({e->ts_us, e->ts_us + e->dur_us});
      if (e->args.contains("flops") && e->args["flops"].is_number()) o.flops += e->args["flops"].get<double>();
      if (e->args.contains("bytes") && e->args["bytes"].is_number()) o.bytes += e->args["bytes"].get<double>();
    }
    // Idle gaps between top-level spans of this track.
    TrackGaps g;
    g.tid = tid;
    const auto u = Union(top);
    if (!u.empty()) {
      g.busy_window_us = u.back().second - u.front().first;
      for (size_t i = 1; i < u.size(); ++i) {
        const double gap = u[i].first - u[i - 1].second;
        g.idle_us += gap;
        g.largest_gap_us = std::max(g.largest_gap_us, gap);
        ++g.num_gaps;
      }
    }
    r.tracks.push_back(g);
  }
  for (auto& [name, o] : ops) {
    o.pct_wall = r.wall_us > 0 ? 100.0 * o.excl_us / r.wall_us : 0;
    const double secs = o.excl_us * 1e-6;
    if (secs > 0) {
      o.gflops = o.flops / secs / 1e9;
      o.gbs = o.bytes / secs / 1e9;
    }
    if (ceilings && secs > 0 && (o.flops > 0 || o.bytes > 0)) {
      const double bound = std::max(o.flops / (ceilings->gemm_gflops * 1e9), o.bytes / (ceilings->mem_bw_gbs * 1e9));
      o.roofline_pct = 100.0 * bound / secs;
    }
    r.ops.push_back(o);
  }
  std::sort(r.ops.begin(), r.ops.end(), [](const OpTime& a, const OpTime& b) { return a.excl_us > b.excl_us; });
  for (const auto& [c, us] : cats) r.categories.push_back({c, us});
  std::sort(r.categories.begin(), r.categories.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (overlap) {
    OverlapResult o;
    o.a = overlap->first;
    o.b = overlap->second;
    const auto ua = Union(cat_intervals[o.a]), ub = Union(cat_intervals[o.b]);
    o.a_us = Length(ua);
    o.b_us = Length(ub);
    o.overlap_us = IntersectLength(ua, ub);
    o.exposed_a_us = o.a_us - o.overlap_us;
    o.ratio = o.a_us > 0 ? o.overlap_us / o.a_us : 0;
    r.overlap = o;
  }
  return r;
}

std::string AnalyzeReport::Human(size_t top) const {
  std::string s;
  char buf[512];
  std::snprintf(buf, sizeof buf, "traced wall time %.3f ms over %zu track(s)\n", wall_us / 1000, tracks.size());
  s += buf;
  s += "  op                          count   self ms  incl ms  %wall   GFLOP/s   GB/s  %roofline\n";
  for (size_t i = 0; i < ops.size() && i < top; ++i) {
    const OpTime& o = ops[i];
    char roof[32] = "     -";
    if (o.roofline_pct >= 0) std::snprintf(roof, sizeof roof, "%6.1f", o.roofline_pct);
    std::snprintf(buf, sizeof buf, "  %-26s %6lld %9.3f %8.3f %6.1f %9.2f %6.2f %9s\n", o.name.c_str(),
                  static_cast<long long>(o.count), o.excl_us / 1000, o.incl_us / 1000, o.pct_wall, o.gflops, o.gbs,
                  roof);
    s += buf;
  }
  s += "  by category (self):";
  for (const auto& [c, us] : categories) {
    std::snprintf(buf, sizeof buf, " %s %.3f ms;", c.c_str(), us / 1000);
    s += buf;
  }
  s += "\n";
  for (const auto& t : tracks) {
    std::snprintf(buf, sizeof buf, "  track %u: busy window %.3f ms, idle %.3f ms in %lld gaps (largest %.3f ms)\n",
                  t.tid, t.busy_window_us / 1000, t.idle_us / 1000, static_cast<long long>(t.num_gaps),
                  t.largest_gap_us / 1000);
    s += buf;
  }
  if (overlap) {
    std::snprintf(buf, sizeof buf, "  overlap %s with %s: %.1f%% of %s overlapped, exposed %.3f ms\n", overlap->a.c_str(),
                  overlap->b.c_str(), 100 * overlap->ratio, overlap->a.c_str(), overlap->exposed_a_us / 1000);
    s += buf;
  }
  if (ceilings) {
    std::snprintf(buf, sizeof buf, "  ceilings: %.1f GB/s memory, %.1f GFLOP/s fp32 GEMM\n", ceilings->mem_bw_gbs,
                  ceilings->gemm_gflops);
    s += buf;
  }
  if (!ops.empty()) {
    std::snprintf(buf, sizeof buf, "  dominant op: %s (%.1f%% of wall)\n", ops[0].name.c_str(), ops[0].pct_wall);
    s += buf;
  }
  return s;
}

nlohmann::json AnalyzeReport::Json() const {
  nlohmann::json j;
  j["wall_us"] = wall_us;
  j["ops"] = nlohmann::json::array();
  for (const auto& o : ops) {
    j["ops"].push_back({{"name", o.name}, {"cat", o.cat}, {"count", o.count}, {"self_us", o.excl_us},
                        {"incl_us", o.incl_us}, {"pct_wall", o.pct_wall}, {"flops", o.flops}, {"bytes", o.bytes},
                        {"gflops", o.gflops}, {"gbs", o.gbs},
                        {"roofline_pct", o.roofline_pct >= 0 ? nlohmann::json(o.roofline_pct) : nlohmann::json()}});
  }
  j["categories"] = nlohmann::json::object();
  for (const auto& [c, us] : categories) j["categories"][c] = us;
  j["tracks"] = nlohmann::json::array();
  for (const auto& t : tracks)
    j["tracks"].push_back({{"tid", t.tid}, {"busy_window_us", t.busy_window_us}, {"idle_us", t.idle_us},
                           {"num_gaps", t.num_gaps}, {"largest_gap_us", t.largest_gap_us}});
  if (overlap)
    j["overlap"] = {{"a", overlap->a}, {"b", overlap->b}, {"a_us", overlap->a_us}, {"b_us", overlap->b_us},
                    {"overlap_us", overlap->overlap_us}, {"exposed_a_us", overlap->exposed_a_us},
                    {"ratio", overlap->ratio}};
  if (ceilings) j["ceilings"] = ceilings->Json();
  return j;
}

}  // namespace gyre::feedback
