// Model-level diff: run the same request through two configurations of the engine (two model
// folders, two activation dtypes, one-shot vs chunked prefill, ...) and report the first layer
// and op whose output differs beyond tolerance — the minimal repro for a numerics change.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model.h"

namespace gyre::feedback {

struct RunConfig {
  const Model* model = nullptr;
  int64_t prefill_chunk = 0;  // > 0: feed the prompt in pieces of this many tokens
  std::string label;
};

struct DiffEntry {
  std::string name;
  double rel_l2 = 0, max_abs = 0;
  int64_t worst_index = -1;
};

struct ModelDiffReport {
  std::vector<DiffEntry> entries;  // forward order
  std::optional<size_t> first;     // first entry over tolerance
  double tolerance = 0;
  std::string a, b;
  std::string Human() const;
  nlohmann::json Json() const;
};

Result<ModelDiffReport> DiffModels(const RunConfig& a, const RunConfig& b, const std::vector<int32_t>& ids,
                                   double tolerance);

}  // namespace gyre::feedback
