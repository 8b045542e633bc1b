#include "feedback/trace_export.h"

#include <fstream>
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

nlohmann::json ChromeTrace(const std::vector<trace::Span>& spans, const nlohmann::json& meta) {
  nlohmann::json ev = nlohmann::json::array();
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
  for (uint32_t t : tids) {
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", t},
                  {"args", {{"name", t == 0 ? std::string("main") : "thread-" + std::to_string(t)}}}});
  }
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "gyre"}}}});
  nlohmann::json j = {{"traceEvents", ev}, {"displayTimeUnit", "ms"}};
  if (!meta.is_null()) j["metadata"] = meta;
  return j;
}

Status WriteChromeTrace(const std::string& path, const std::vector<trace::Span>& spans, const nlohmann::json& meta) {
  std::ofstream f(path);
  if (!f) return Status::Unavailable("cannot write " + path);
  f << ChromeTrace(spans, meta).dump();
  return f.good() ? Status() : Status::Unavailable("write failed: " + path);
}

Result<size_t> StopAndWriteTrace(const std::string& path, const nlohmann::json& meta) {
  trace::Enable(false);
  const std::vector<trace::Span> spans = trace::Collect();
  GYRE_RETURN_IF_ERROR(WriteChromeTrace(path, spans, meta));
  GYRE_RETURN_IF_ERROR(WriteEventsJsonl(path + ".events.jsonl", spans));
  return spans.size();
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
      t.args = e.value("args", nlohmann::json::object());
    } catch (const nlohmann::json::exception& ex) {
      return Status::InvalidArgument(path + ": malformed event: " + ex.what());
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace gyre::feedback
