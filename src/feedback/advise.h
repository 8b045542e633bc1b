// `gyre advise TRACE|RESULT.json`: from measured signals, a ranked list of where the time goes and
// which optimization skeletons (feedback/skeletons.h) apply, each line citing the numbers that
// triggered it.
//
// Signals from a trace (the same numbers `gyre analyze` prints):
//   op_share      an op's self time >= 5 % of the traced wall time          at stake: its self time
//   roofline      an op with a cost model below 50 % of roofline, >= 2 %    at stake: time x (1 - roofline)
//   device_idle   a GPU idle >= 10 % of its traced window                   at stake: idle time
//   gap_cpu       each of the largest GPU gaps, with the CPU spans in it    at stake: the gap
//   overlap       memcpy / collective under kernels, transfer under step    at stake: the exposed time
//                 (reported when less than 90 % is overlapped)
//   tiny_kernels  >= 1000 device records shorter than 5 us on average       at stake: the GPU idle time in
//                                                                           gaps under the gap threshold
//   eager_decode  decode steps (one token per piece) launched without a graph  at stake: their CPU launch time
// From a gate result: gate_fail per failed predicate (at stake: none; listed first).
// Findings are ranked by the time at stake. A skeleton applies to a finding when one of its
// triggers names the finding's signal and its conditions hold (op / span match, thresholds).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "feedback/analyze.h"
#include "feedback/skeletons.h"

namespace gyre::feedback {

struct Finding {
  std::string signal;   // one of TriggerSignals()
  std::string where;    // op, span, device, "a vs b", predicate
  double at_stake_us = 0;
  std::string evidence; // the sentence with the numbers
  nlohmann::json numbers = nlohmann::json::object();  // what the triggers are evaluated on
  std::vector<std::string> skeletons;  // names of the skeletons that apply
};

struct Advice {
  std::string source;
  double wall_us = 0;
  std::vector<Finding> findings;  // ranked
  std::string Human(size_t top = 15) const;
  nlohmann::json Json() const;
};

// Does `trigger` (one element of a skeleton's triggers) hold for `f`?
bool TriggerMatches(const nlohmann::json& trigger, const Finding& f);

Advice AdviseTrace(const std::vector<TraceEvent>& events, const AnalyzeReport& report,
                   const std::vector<Skeleton>& catalogue);
// A gate result ({"predicates": [...]}) from `gyre gate --out`. InvalidArgument when `j` is not one.
Result<Advice> AdviseGate(const nlohmann::json& j, const std::vector<Skeleton>& catalogue);

}  // namespace gyre::feedback
