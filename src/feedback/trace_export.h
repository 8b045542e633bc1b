// Trace export and reading: Chrome trace-event JSON (opens in the Perfetto UI and
// chrome://tracing) and runtime events as JSONL.
//
// Spans become complete events (`"ph": "X"`, ts/dur in µs), instant spans (dur < 0) become
// instant events (`"ph": "i"`); attributes go to `args` (request, layer, tokens, bytes, flops,
// detail). Thread-name metadata names the tracks.
//
// With a device trace (feedback/device_trace.h) GPU d becomes process 100 + d with one track per
// stream; its records are complete events of category kernel / collective / memcpy / memset with
// args {correlation, span (the launching CPU span), api, stream, graph, bytes, detail}. The API
// calls that launched them are cuda_api spans on the CPU thread's track, and a flow arrow (ph s/f,
// id = correlation) joins each call to its first device record, so Perfetto draws launch -> kernel.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/trace.h"
#include "feedback/device_trace.h"

namespace gyre::feedback {

// An event read back from a trace file (owned strings).
struct TraceEvent {
  std::string name, cat;
  double ts_us = 0, dur_us = -1;  // dur < 0: instant
  uint32_t tid = 0;
  nlohmann::json args;
  int pid = 1;  // 1: the CPU; 100 + d: GPU d (tid = stream). Last, so aggregate inits stay valid.
  bool device() const { return pid >= kDevicePidBase; }
  static constexpr int kDevicePidBase = 100;
};

nlohmann::json ChromeTrace(const std::vector<trace::Span>& spans, const nlohmann::json& meta = {},
                           const DeviceTrace* device = nullptr);
Status WriteChromeTrace(const std::string& path, const std::vector<trace::Span>& spans,
                        const nlohmann::json& meta = {}, const DeviceTrace* device = nullptr);

// The innermost span of `spans` on track `tid` that contains [start_ns, end_ns], or nullptr.
// `by_tid` indexes spans per track sorted by start (built by SpanIndex).
struct SpanIndex {
  explicit SpanIndex(const std::vector<trace::Span>& spans);
  const trace::Span* Enclosing(uint32_t tid, int64_t start_ns, int64_t end_ns) const;

 private:
  const std::vector<trace::Span>& spans_;
  std::vector<std::pair<uint32_t, std::vector<size_t>>> by_tid_;
};

// Clears the span buffers and starts recording; with `device`, also the device timeline. A device
// trace that cannot start (CPU build, no CUPTI) is reported to stderr and the CPU spans are still
// recorded: returns whether the device trace is on.
bool StartTrace(bool device);
// Instant events (scheduler decisions, cache allocation and release, transfers) as JSONL.
Status WriteEventsJsonl(const std::string& path, const std::vector<trace::Span>& spans);

// Stops recording (and the device trace, when one is active) and writes what was recorded since
// trace::Clear: the Chrome trace at `path` and the instant events at `path`.events.jsonl. Returns
// the number of spans written (CPU spans plus device records).
Result<size_t> StopAndWriteTrace(const std::string& path, const nlohmann::json& meta = {});

// Reads a Chrome trace (object with traceEvents, or a bare array). Errors: NotFound,
// InvalidArgument (not JSON, missing fields).
Result<std::vector<TraceEvent>> ReadChromeTrace(const std::string& path);

}  // namespace gyre::feedback
