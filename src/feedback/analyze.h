// `gyre analyze TRACE`: where the time went.
//   - per op (span name): count, inclusive and exclusive (self) time, % of the traced wall time;
//   - per category (cat): exclusive time;
//   - idle gaps per track (thread): time inside the track's busy window not covered by any span;
//   - overlap between two categories A and B: |A ∩ B| / |A| and A's exposed time |A \ B|;
//   - % of roofline per op from the spans' flops/bytes args and measured ceilings:
//     bound = max(flops / peak_flops, bytes / bandwidth); roofline % = bound / measured time.
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
};

struct TrackGaps {
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
  std::optional<OverlapResult> overlap;
  std::optional<Ceilings> ceilings;
  std::string Human(size_t top = 20) const;
  nlohmann::json Json() const;
};

AnalyzeReport Analyze(const std::vector<TraceEvent>& events, const std::optional<Ceilings>& ceilings,
                      const std::optional<std::pair<std::string, std::string>>& overlap);

}  // namespace gyre::feedback
