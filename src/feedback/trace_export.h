// Trace export and reading: Chrome trace-event JSON (opens in the Perfetto UI and
// chrome://tracing) and runtime events as JSONL.
//
// Spans become complete events (`"ph": "X"`, ts/dur in µs), instant spans (dur < 0) become
// instant events (`"ph": "i"`); attributes go to `args` (request, layer, tokens, bytes, flops,
// detail). Thread-name metadata names the tracks.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/trace.h"

namespace gyre::feedback {

// An event read back from a trace file (owned strings).
struct TraceEvent {
  std::string name, cat;
  double ts_us = 0, dur_us = -1;  // dur < 0: instant
  uint32_t tid = 0;
  nlohmann::json args;
};

nlohmann::json ChromeTrace(const std::vector<trace::Span>& spans, const nlohmann::json& meta = {});
Status WriteChromeTrace(const std::string& path, const std::vector<trace::Span>& spans,
                        const nlohmann::json& meta = {});
// Instant events (scheduler decisions, cache allocation and release, transfers) as JSONL.
Status WriteEventsJsonl(const std::string& path, const std::vector<trace::Span>& spans);

// Stops recording and writes what was recorded since trace::Clear: the Chrome trace at `path` and
// the instant events at `path`.events.jsonl. Returns the number of spans written.
Result<size_t> StopAndWriteTrace(const std::string& path, const nlohmann::json& meta = {});

// Reads a Chrome trace (object with traceEvents, or a bare array). Errors: NotFound,
// InvalidArgument (not JSON, missing fields).
Result<std::vector<TraceEvent>> ReadChromeTrace(const std::string& path);

}  // namespace gyre::feedback
