#include "feedback/trace_export.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace gyre::feedback {

namespace {
nlohmann::json Args(const trace::Attrs& a) {
  nlohmann::json j = nlohmann::json::object();
  if (a.request >= 0) j["request"] = a.request;
  if (a.layer >= 0) j["layer"] = a.layer;
  if (a.tokens >= 0) j["tokens"] = a.tokens;
  if (a.bytes >= 0) j["bytes"] = a.bytes;
  if (a.flops >= 0) j["flops"] = a.flops;
  if (!a.detail.empty()) j["detail"] = a.detail;
  return j;
}
}  // namespace

SpanIndex::SpanIndex(const std::vector<trace::Span>& spans) : spans_(spans) {
  std::map<uint32_t, std::vector<size_t>> m;
  for (size_t i = 0; i < spans.size(); ++i)
    if (spans[i].dur_ns >= 0) m[spans[i].tid].push_back(i);
  for (auto& [tid, v] : m) {
    std::stable_sort(v.begin(), v.end(), [&](size_t a, size_t b) { return spans[a].start_ns < spans[b].start_ns; });
    by_tid_.emplace_back(tid, std::move(v));
  }
}

const trace::Span* SpanIndex::Enclosing(uint32_t tid, int64_t start_ns, int64_t end_ns) const {
  const auto t = std::lower_bound(by_tid_.begin(), by_tid_.end(), tid,
                                  [](const auto& e, uint32_t x) { return e.first < x; });
  if (t == by_tid_.end() || t->first != tid) return nullptr;
  const auto& v = t->second;
  // Spans nest on a track, so the containing span that started last is the innermost. Scan back
  // from the last span that starts at or before `start_ns`; siblings that ended are skipped, and the
  // scan is bounded so a huge flat trace costs O(log n + bound) per lookup.
  auto it = std::upper_bound(v.begin(), v.end(), start_ns, [&](int64_t x, size_t i) { return x < spans_[i].start_ns; });
  constexpr int kMaxScan = 4096;
  for (int n = 0; it != v.begin() && n < kMaxScan; ++n) {
    --it;
    const trace::Span& s = spans_[*it];
    if (s.start_ns + s.dur_ns >= end_ns) return &s;
  }
  return nullptr;
}

namespace {
nlohmann::json Complete(const std::string& name, const std::string& cat, int pid, uint32_t tid, int64_t start_ns,
                        int64_t dur_ns, nlohmann::json args) {
  return {{"name", name}, {"cat", cat}, {"ph", "X"}, {"pid", pid}, {"tid", tid},
          {"ts", static_cast<double>(start_ns) / 1000.0}, {"dur", static_cast<double>(dur_ns) / 1000.0},
          {"args", std::move(args)}};
}
nlohmann::json Meta(const char* what, int pid, const std::optional<uint32_t>& tid, const std::string& name) {
  nlohmann::json e = {{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}};
  if (tid) e["tid"] = *tid;
  return e;
}

// Device records, their launching API calls and the flow arrows between them.
void AddDevice(const DeviceTrace& d, const std::vector<trace::Span>& spans, nlohmann::json& ev,
               std::set<uint32_t>& cpu_tids, nlohmann::json& meta) {
  const SpanIndex index(spans);
  const auto os_ids = trace::ThreadOsIds();
  struct Launch {
    uint32_t tid;
    int64_t ts;
    std::string api;
    const trace::Span* span;
  };
  std::map<uint32_t, Launch> launches;  // by correlation id
  for (const ApiEvent& a : d.api) {
    const uint32_t tid = TraceTidForOsTid(os_ids, a.os_tid);
    cpu_tids.insert(tid);
    const trace::Span* span = index.Enclosing(tid, a.start_ns, a.end_ns);
    nlohmann::json args = {{"correlation", a.correlation}};
    if (span) args["span"] = span->name;
    ev.push_back(Complete(a.name, "cuda_api", 1, tid, a.start_ns, a.end_ns - a.start_ns, std::move(args)));
    launches.emplace(a.correlation, Launch{tid, a.start_ns, a.name, span});
  }
  std::set<std::pair<int, uint32_t>> streams;
  std::set<uint32_t> flowed;
  for (const DeviceEvent& e : d.device) {
    const int pid = TraceEvent::kDevicePidBase + e.device;
    streams.insert({e.device, e.stream});
    nlohmann::json args = {{"correlation", e.correlation}, {"stream", e.stream}};
    if (e.graph) args["graph"] = e.graph;
    if (e.bytes >= 0) args["bytes"] = e.bytes;
    if (!e.detail.empty()) args["detail"] = e.detail;
    const auto l = launches.find(e.correlation);
    if (l != launches.end()) {
      args["api"] = l->second.api;
      if (l->second.span) args["span"] = l->second.span->name;
    }
    ev.push_back(Complete(e.name, e.cat, pid, e.stream, e.start_ns, e.end_ns - e.start_ns, std::move(args)));
    // One arrow per launch: a graph launch's first kernel carries it.
    if (l != launches.end() && flowed.insert(e.correlation).second) {
      ev.push_back({{"name", "launch"}, {"cat", "launch"}, {"ph", "s"}, {"id", e.correlation}, {"pid", 1},
                    {"tid", l->second.tid}, {"ts", static_cast<double>(l->second.ts) / 1000.0}});
      ev.push_back({{"name", "launch"}, {"cat", "launch"}, {"ph", "f"}, {"bp", "e"}, {"id", e.correlation},
                    {"pid", pid}, {"tid", e.stream}, {"ts", static_cast<double>(e.start_ns) / 1000.0}});
    }
  }
  std::set<int> devices;
  for (const auto& [dev, stream] : streams) {
    devices.insert(dev);
    ev.push_back(Meta("thread_name", TraceEvent::kDevicePidBase + dev, stream, "stream " + std::to_string(stream)));
  }
  for (int dev : devices) ev.push_back(Meta("process_name", TraceEvent::kDevicePidBase + dev, {}, "GPU " + std::to_string(dev)));
  meta["device_trace"] = {{"records", d.device.size()}, {"api_calls", d.api.size()}, {"dropped", d.dropped},
                          {"cupti_version", d.cupti_version}, {"library", d.library}};
}
}  // namespace

nlohmann::json ChromeTrace(const std::vector<trace::Span>& spans, const nlohmann::json& meta_in,
                           const DeviceTrace* device) {
  nlohmann::json ev = nlohmann::json::array();
  nlohmann::json meta = meta_in;
  std::set<uint32_t> tids;
  for (const auto& s : spans) {
    tids.insert(s.tid);
    nlohmann::json e = {{"name", s.name}, {"cat", s.cat}, {"pid", 1}, {"tid", s.tid},
                        {"ts", static_cast<double>(s.start_ns) / 1000.0}, {"args", Args(s.attrs)}};
    if (s.dur_ns >= 0) {
      e["ph"] = "X";
      e["dur"] = static_cast<double>(s.dur_ns) / 1000.0;
    } else {
      e["ph"] = "i";
      e["s"] = "t";
    }
    ev.push_back(std::move(e));
  }
  if (device) AddDevice(*device, spans, ev, tids, meta);
  for (uint32_t t : tids)
    ev.push_back(Meta("thread_name", 1, t, t == 0 ? std::string("main") : "thread-" + std::to_string(t)));
  ev.push_back(Meta("process_name", 1, {}, "gyre"));
  nlohmann::json j = {{"traceEvents", ev}, {"displayTimeUnit", "ms"}};
  if (!meta.is_null()) j["metadata"] = meta;
  return j;
}

Status WriteChromeTrace(const std::string& path, const std::vector<trace::Span>& spans, const nlohmann::json& meta,
                        const DeviceTrace* device) {
  std::ofstream f(path);
  if (!f) return Status::Unavailable("cannot write " + path);
  f << ChromeTrace(spans, meta, device).dump();
  return f.good() ? Status() : Status::Unavailable("write failed: " + path);
}

bool StartTrace(bool device) {
  trace::Clear();
  trace::Enable(true);
  if (!device) return false;
  const Status st = StartDeviceTrace();
  if (!st.ok()) std::fprintf(stderr, "gyre: device trace off: %s\n", st.ToString().c_str());
  return st.ok();
}

Result<size_t> StopAndWriteTrace(const std::string& path, const nlohmann::json& meta) {
  std::optional<DeviceTrace> dev;
  if (DeviceTraceActive()) {
    auto d = StopDeviceTrace();
    if (!d.ok()) return d.status();
    dev = std::move(*d);
  }
  trace::Enable(false);
  const std::vector<trace::Span> spans = trace::Collect();
  GYRE_RETURN_IF_ERROR(WriteChromeTrace(path, spans, meta, dev ? &*dev : nullptr));
  GYRE_RETURN_IF_ERROR(WriteEventsJsonl(path + ".events.jsonl", spans));
  return spans.size() + (dev ? dev->device.size() + dev->api.size() : 0);
}

Status WriteEventsJsonl(const std::string& path, const std::vector<trace::Span>& spans) {
  std::ofstream f(path);
  if (!f) return Status::Unavailable("cannot write " + path);
  for (const auto& s : spans) {
    if (s.dur_ns >= 0) continue;
    nlohmann::json e = Args(s.attrs);
    e["ts_us"] = static_cast<double>(s.start_ns) / 1000.0;
    e["event"] = s.name;
    e["cat"] = s.cat;
    f << e.dump() << "\n";
  }
  return f.good() ? Status() : Status::Unavailable("write failed: " + path);
}

Result<std::vector<TraceEvent>> ReadChromeTrace(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Status::NotFound("cannot open " + path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(path + " is not valid JSON: " + e.what());
  }
  const nlohmann::json* arr = &j;
  if (j.is_object()) {
    if (!j.contains("traceEvents")) return Status::InvalidArgument(path + " has no traceEvents");
    arr = &j["traceEvents"];
  }
  if (!arr->is_array()) return Status::InvalidArgument(path + ": traceEvents must be an array");
  std::vector<TraceEvent> out;
  for (const auto& e : *arr) {
    if (!e.is_object() || !e.contains("ph") || !e["ph"].is_string()) continue;
    const std::string ph = e["ph"];
    if (ph != "X" && ph != "i" && ph != "I") continue;
    TraceEvent t;
    try {
      t.name = e.value("name", "");
      t.cat = e.value("cat", "");
      t.ts_us = e.at("ts").get<double>();
      t.dur_us = ph == "X" ? e.at("dur").get<double>() : -1;
      t.tid = e.value("tid", 0u);
      t.pid = e.value("pid", 1);
      t.args = e.value("args", nlohmann::json::object());
    } catch (const nlohmann::json::exception& ex) {
      return Status::InvalidArgument(path + ": malformed event: " + ex.what());
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace gyre::feedback
