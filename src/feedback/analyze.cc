#include "feedback/analyze.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

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

std::vector<const TraceEvent*> SelectEvents(const std::vector<TraceEvent>& events, const std::string& selector) {
  std::vector<const TraceEvent*> out;
  const bool stream = selector.rfind("stream:", 0) == 0;
  uint32_t stream_id = 0;
  if (stream) {
    try {
      stream_id = static_cast<uint32_t>(std::stoul(selector.substr(7)));
    } catch (const std::exception&) {
      return out;
    }
  }
  const bool by_name = selector.rfind("name:", 0) == 0;
  for (const auto& e : events) {
    if (e.dur_us < 0) continue;
    const bool take = stream ? (e.device() && e.tid == stream_id)
                      : by_name ? e.name == std::string_view(selector).substr(5)
                      : selector == "device" ? e.device()
                      : selector == "cpu"    ? !e.device()
                                             : e.cat == selector;
    if (take) out.push_back(&e);
  }
  return out;
}

namespace {

std::vector<Interval> Intervals(const std::vector<const TraceEvent*>& v) {
  std::vector<Interval> out;
  out.reserve(v.size());
  for (const TraceEvent* e : v) out.push_back({e->ts_us, e->ts_us + e->dur_us});
  return out;
}

// The gaps between consecutive intervals of a union: (start, length).
std::vector<Interval> Gaps(const std::vector<Interval>& u) {
  std::vector<Interval> g;
  for (size_t i = 1; i < u.size(); ++i) g.push_back({u[i - 1].second, u[i].first - u[i - 1].second});
  return g;
}

DeviceTimeline Timeline(int pid, const std::vector<const TraceEvent*>& recs,
                        const std::vector<const TraceEvent*>& cpu, double threshold_us) {
  DeviceTimeline t;
  t.device = pid - TraceEvent::kDevicePidBase;
  t.records = static_cast<int64_t>(recs.size());
  std::set<uint32_t> streams;
  for (const TraceEvent* e : recs) streams.insert(e->tid);
  t.streams = static_cast<int64_t>(streams.size());
  const auto u = Union(Intervals(recs));
  if (u.empty()) return t;
  t.window_us = u.back().second - u.front().first;
  t.busy_us = Length(u);
  t.idle_us = t.window_us - t.busy_us;
  auto gaps = Gaps(u);
  std::erase_if(gaps, [&](const Interval& g) { return g.second < threshold_us; });
  for (const auto& g : gaps) {
    ++t.num_gaps;
    t.gaps_us += g.second;
    t.largest_gap_us = std::max(t.largest_gap_us, g.second);
  }
  std::sort(gaps.begin(), gaps.end(), [](const Interval& a, const Interval& b) { return a.second > b.second; });
  if (gaps.size() > 5) gaps.resize(5);
  for (const auto& [start, len] : gaps) {
    GapContext c{start, len, {}};
    // Longest overlap first; on a tie the shorter (more specific) span first.
    std::vector<std::tuple<double, double, std::string>> over;
    for (const TraceEvent* e : cpu) {
      const double o = std::min(start + len, e->ts_us + e->dur_us) - std::max(start, e->ts_us);
      if (o > 0) over.push_back({-o, e->dur_us, e->name});
    }
    std::sort(over.begin(), over.end());
    for (const auto& [o, dur, name] : over) {
      if (c.cpu.size() == 4) break;
      if (std::find(c.cpu.begin(), c.cpu.end(), name) == c.cpu.end()) c.cpu.push_back(name);
    }
    t.top_gaps.push_back(std::move(c));
  }
  return t;
}

}  // namespace

std::string DisplayKernelName(const std::string& name, size_t width) {
  std::string s = name;
  for (const std::string anon = "(anonymous namespace)::"; ;) {
    const auto p = s.find(anon);
    if (p == std::string::npos) break;
    s.erase(p, anon.size());
  }
  // The last two components of the qualified name (outside template arguments).
  std::vector<size_t> seps;
  int depth = 0;
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (s[i] == '<' || s[i] == '(') ++depth;
    if ((s[i] == '>' || s[i] == ')') && depth > 0) --depth;
    if (depth == 0 && s[i] == ':' && s[i + 1] == ':') seps.push_back(i);
  }
  if (seps.size() >= 2) s = s.substr(seps[seps.size() - 2] + 2);
  if (s.size() > width) s = s.substr(0, width - 3) + "...";
  return s;
}

AnalyzeReport Analyze(const std::vector<TraceEvent>& events, const std::optional<Ceilings>& ceilings,
                      const std::optional<std::pair<std::string, std::string>>& overlap, double gap_threshold_us) {
  AnalyzeReport r;
  r.ceilings = ceilings;
  r.gap_threshold_us = gap_threshold_us;
  std::map<std::pair<int, uint32_t>, std::vector<const TraceEvent*>> by_track;
  std::map<int, std::vector<const TraceEvent*>> by_device;
  std::vector<const TraceEvent*> cpu;
  double t0 = 1e300, t1 = -1e300;
  for (const auto& e : events) {
    if (e.dur_us < 0) continue;
    if (e.device()) {
      by_device[e.pid].push_back(&e);
    } else {
      by_track[{e.pid, e.tid}].push_back(&e);
      if (e.cat != "cuda_api") cpu.push_back(&e);
    }
    t0 = std::min(t0, e.ts_us);
    t1 = std::max(t1, e.ts_us + e.dur_us);
  }
  r.wall_us = t1 > t0 ? t1 - t0 : 0;
  std::map<std::string, OpTime> ops;
  std::map<std::string, double> cats;
  for (auto& [track, list] : by_track) {
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
      if (e->args.contains("flops") && e->args["flops"].is_number()) o.flops += e->args["flops"].get<double>();
      if (e->args.contains("bytes") && e->args["bytes"].is_number()) o.bytes += e->args["bytes"].get<double>();
    }
    // Idle gaps between top-level spans of this track.
    TrackGaps g;
    g.pid = track.first;
    g.tid = track.second;
    const auto u = Union(top);
    if (!u.empty()) {
      g.busy_window_us = u.back().second - u.front().first;
      for (const auto& [start, len] : Gaps(u)) {
        g.idle_us += len;
        g.largest_gap_us = std::max(g.largest_gap_us, len);
        ++g.num_gaps;
      }
    }
    r.tracks.push_back(g);
  }
  // Device records: per kernel name, and GPU time charged to the span that launched them.
  std::map<std::string, KernelTime> kernels;
  double device_busy = 0;
  for (const auto& [pid, recs] : by_device) {
    r.devices.push_back(Timeline(pid, recs, cpu, gap_threshold_us));
    device_busy += r.devices.back().busy_us;
    for (const TraceEvent* e : recs) {
      KernelTime& k = kernels[e->name];
      k.name = e->name;
      k.cat = e->cat;
      ++k.count;
      k.total_us += e->dur_us;
      k.max_us = std::max(k.max_us, e->dur_us);
      if (e->args.contains("span") && e->args["span"].is_string()) {
        auto it = ops.find(e->args["span"].get<std::string>());
        if (it != ops.end()) {
          it->second.gpu_us += e->dur_us;
          ++it->second.launched;
        }
      }
    }
  }
  for (auto& [name, k] : kernels) {
    k.share = device_busy > 0 ? k.total_us / device_busy : 0;
    r.kernels.push_back(k);
  }
  std::sort(r.kernels.begin(), r.kernels.end(), [](const KernelTime& a, const KernelTime& b) { return a.total_us > b.total_us; });
  for (auto& [name, o] : ops) {
    o.pct_wall = r.wall_us > 0 ? 100.0 * o.excl_us / r.wall_us : 0;
    // The op's measured time: what its kernels took on the device when the trace has them.
    const double secs = (o.gpu_us > 0 ? o.gpu_us : o.excl_us) * 1e-6;
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
  if (overlap) r.overlap = MeasureOverlap(events, overlap->first, overlap->second);
  return r;
}

OverlapResult MeasureOverlap(const std::vector<TraceEvent>& events, const std::string& a, const std::string& b) {
  OverlapResult o;
  o.a = a;
  o.b = b;
  const auto ua = Union(Intervals(SelectEvents(events, a))), ub = Union(Intervals(SelectEvents(events, b)));
  o.a_us = Length(ua);
  o.b_us = Length(ub);
  o.overlap_us = IntersectLength(ua, ub);
  o.exposed_a_us = o.a_us - o.overlap_us;
  o.ratio = o.a_us > 0 ? o.overlap_us / o.a_us : 0;
  return o;
}

std::string AnalyzeReport::Human(size_t top) const {
  std::string s;
  char buf[512];
  std::snprintf(buf, sizeof buf, "traced wall time %.3f ms over %zu track(s)\n", wall_us / 1000, tracks.size());
  s += buf;
  const bool gpu = std::any_of(ops.begin(), ops.end(), [](const OpTime& o) { return o.launched > 0; });
  s += std::string("  op                          count   self ms  incl ms  %wall") + (gpu ? "   gpu ms" : "") +
       "   GFLOP/s   GB/s  %roofline\n";
  for (size_t i = 0; i < ops.size() && i < top; ++i) {
    const OpTime& o = ops[i];
    char roof[32] = "     -";
    if (o.roofline_pct >= 0) std::snprintf(roof, sizeof roof, "%6.1f", o.roofline_pct);
    char gpu_ms[16] = "";
    if (gpu) std::snprintf(gpu_ms, sizeof gpu_ms, " %8.3f", o.gpu_us / 1000);
    std::snprintf(buf, sizeof buf, "  %-26s %6lld %9.3f %8.3f %6.1f%s %9.2f %6.2f %9s\n", o.name.c_str(),
                  static_cast<long long>(o.count), o.excl_us / 1000, o.incl_us / 1000, o.pct_wall, gpu_ms, o.gflops,
                  o.gbs, roof);
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
  if (!kernels.empty()) {
    s += "  device record                                  count  total ms   mean us    max us  %busy\n";
    for (size_t i = 0; i < kernels.size() && i < top; ++i) {
      const KernelTime& k = kernels[i];
      const std::string name = DisplayKernelName(k.name, 44);
      std::snprintf(buf, sizeof buf, "  %-44s %6lld %9.3f %9.2f %9.2f %6.1f\n", name.c_str(),
                    static_cast<long long>(k.count), k.total_us / 1000, k.total_us / std::max<int64_t>(1, k.count),
                    k.max_us, 100 * k.share);
      s += buf;
    }
  }
  for (const auto& d : devices) {
    std::snprintf(buf, sizeof buf,
                  "  GPU %d: %lld records on %lld stream(s); window %.3f ms, busy %.3f ms (%.1f%%), idle %.3f ms; "
                  "%lld gaps >= %.0f us (%.3f ms, largest %.1f us)\n",
                  d.device, static_cast<long long>(d.records), static_cast<long long>(d.streams), d.window_us / 1000,
                  d.busy_us / 1000, d.window_us > 0 ? 100 * d.busy_us / d.window_us : 0.0, d.idle_us / 1000,
                  static_cast<long long>(d.num_gaps), gap_threshold_us, d.gaps_us / 1000, d.largest_gap_us);
    s += buf;
    for (const auto& g : d.top_gaps) {
      std::string what;
      for (const auto& n : g.cpu) what += (what.empty() ? "" : ", ") + n;
      std::snprintf(buf, sizeof buf, "    gap %.1f us at %.3f ms; CPU in: %s\n", g.dur_us, g.start_us / 1000,
                    what.empty() ? "(no span)" : what.c_str());
      s += buf;
    }
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
                        {"gflops", o.gflops}, {"gbs", o.gbs}, {"gpu_us", o.gpu_us}, {"launched", o.launched},
                        {"roofline_pct", o.roofline_pct >= 0 ? nlohmann::json(o.roofline_pct) : nlohmann::json()}});
  }
  j["categories"] = nlohmann::json::object();
  for (const auto& [c, us] : categories) j["categories"][c] = us;
  j["tracks"] = nlohmann::json::array();
  for (const auto& t : tracks)
    j["tracks"].push_back({{"pid", t.pid}, {"tid", t.tid}, {"busy_window_us", t.busy_window_us}, {"idle_us", t.idle_us},
                           {"num_gaps", t.num_gaps}, {"largest_gap_us", t.largest_gap_us}});
  if (overlap)
    j["overlap"] = {{"a", overlap->a}, {"b", overlap->b}, {"a_us", overlap->a_us}, {"b_us", overlap->b_us},
                    {"overlap_us", overlap->overlap_us}, {"exposed_a_us", overlap->exposed_a_us},
                    {"ratio", overlap->ratio}};
  j["kernels"] = nlohmann::json::array();
  for (const auto& k : kernels)
    j["kernels"].push_back({{"name", k.name}, {"cat", k.cat}, {"count", k.count}, {"total_us", k.total_us},
                            {"max_us", k.max_us}, {"share", k.share}});
  j["devices"] = nlohmann::json::array();
  for (const auto& d : devices) {
    nlohmann::json gaps = nlohmann::json::array();
    for (const auto& g : d.top_gaps) gaps.push_back({{"start_us", g.start_us}, {"dur_us", g.dur_us}, {"cpu", g.cpu}});
    j["devices"].push_back({{"device", d.device}, {"records", d.records}, {"streams", d.streams},
                            {"window_us", d.window_us}, {"busy_us", d.busy_us}, {"idle_us", d.idle_us},
                            {"num_gaps", d.num_gaps}, {"gaps_us", d.gaps_us}, {"largest_gap_us", d.largest_gap_us},
                            {"gap_threshold_us", gap_threshold_us}, {"top_gaps", gaps}});
  }
  if (ceilings) j["ceilings"] = ceilings->Json();
  return j;
}

}  // namespace gyre::feedback
