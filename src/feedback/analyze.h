// `gyre analyze TRACE`: where the time went.
//   - per op (span name): count, inclusive and exclusive (self) time, % of the traced wall time;
//   - per category (cat): exclusive time;
//   - idle gaps per track (thread): time inside the track's busy window not covered by any span;
//   - overlap between two categories A and B: |A ∩ B| / |A| and A's exposed time |A \ B|;
//   - % of roofline per op from the spans' flops/bytes args and measured ceilings:
//     bound = max(flops / peak_flops, bytes / bandwidth); roofline % = bound / measured time.
//     With a device trace the measured time of an op is the GPU time of the kernels its spans
//     launched (OpTime::gpu_us), not the CPU time of the span.
// On device tracks (a trace with a device timeline, feedback/device_trace.h):
//   - per kernel: count, total / mean / max µs and share of the device's busy time;
//   - per device: busy (union of all records) and idle time inside the recorded window, the gaps of
//     at least `gap_threshold_us`, and for the largest gaps what the CPU was doing meanwhile (the
//     CPU spans overlapping the gap, longest overlap first);
//   - overlap selectors: a category (kernel, memcpy, collective, step, ...), `device` (every device
//     record), `cpu` (every CPU span), `stream:N` (stream N on any device), `name:S` (the spans
//     and records named S, e.g. name:transfer.send: a category holds several kinds of span).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "feedback/ceilings.h"
#include "feedback/trace_export.h"

namespace gyre::feedback {

struct OpTime {
  std::string name, cat;
  int64_t count = 0;
  double incl_us = 0, excl_us = 0, pct_wall = 0;
  double flops = 0, bytes = 0;
  double gflops = 0, gbs = 0, roofline_pct = -1;  // -1: no cost model in the spans
  double gpu_us = 0;   // device time of the records launched under this span name
  int64_t launched = 0;  // device records launched under it
};

struct KernelTime {
  std::string name, cat;
  int64_t count = 0;
  double total_us = 0, max_us = 0, share = 0;  // share of the device busy time
};

struct GapContext {
  double start_us = 0, dur_us = 0;
  std::vector<std::string> cpu;  // CPU spans overlapping the gap, longest overlap first
};

struct DeviceTimeline {
  int device = 0;
  int64_t records = 0, streams = 0;
  double window_us = 0, busy_us = 0, idle_us = 0;
  int64_t num_gaps = 0;                // gaps >= the threshold
  double gaps_us = 0, largest_gap_us = 0;
  std::vector<GapContext> top_gaps;    // the largest, up to 5
};

struct TrackGaps {
  int pid = 1;
  uint32_t tid = 0;
  double busy_window_us = 0, idle_us = 0, largest_gap_us = 0;
  int64_t num_gaps = 0;
};

struct OverlapResult {
  std::string a, b;
  double a_us = 0, b_us = 0, overlap_us = 0, exposed_a_us = 0, ratio = 0;
};

struct AnalyzeReport {
  double wall_us = 0;
  std::vector<OpTime> ops;                        // sorted by exclusive time, descending
  std::vector<std::pair<std::string, double>> categories;  // exclusive µs
  std::vector<TrackGaps> tracks;
  std::vector<KernelTime> kernels;                // device records by name, by total time
  std::vector<DeviceTimeline> devices;
  double gap_threshold_us = 10;
  std::optional<OverlapResult> overlap;
  std::optional<Ceilings> ceilings;
  std::string Human(size_t top = 20) const;
  nlohmann::json Json() const;
};

AnalyzeReport Analyze(const std::vector<TraceEvent>& events, const std::optional<Ceilings>& ceilings,
                      const std::optional<std::pair<std::string, std::string>>& overlap,
                      double gap_threshold_us = 10);

// A kernel's name for a table: "(anonymous namespace)::" dropped, the last two components of the
// qualified name kept, cut to `width` characters.
std::string DisplayKernelName(const std::string& name, size_t width);

// How much of selector `a`'s time overlapped selector `b`'s (what --overlap reports).
OverlapResult MeasureOverlap(const std::vector<TraceEvent>& events, const std::string& a, const std::string& b);

// The events an overlap selector names (see above); unknown names select nothing.
std::vector<const TraceEvent*> SelectEvents(const std::vector<TraceEvent>& events, const std::string& selector);

}  // namespace gyre::feedback
