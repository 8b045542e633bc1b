// `gyre verify ops`: every registered op (or one) on a backend against its fp64 reference, over
// the op's shapes, with fresh random inputs (seed printed; reproducible with --seed) and outputs
// poisoned with NaN before each run so unwritten elements fail.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ops/registry.h"

namespace gyre::feedback {

struct OpCheckRow {
  std::string op, shape, backend, tolerance_class;
  double tolerance = 0, rel_l2 = 0, max_abs = 0;
  int64_t worst_index = -1, num_outputs = 0, num_unwritten = 0;
  bool pass = false;
  std::string error;  // set when the check could not run (e.g. backend not built)
  std::string note;
  // rel_l2 / tolerance: how much of the tolerance the error used (> 1 fails). For an exact op
  // (tolerance 0): 0 when exact, +inf otherwise.
  double Margin() const;
};

struct VerifyOpsReport {
  uint64_t seed = 0;
  std::vector<OpCheckRow> rows;
  // Ops selected but without the requested backend (OpSpec::backends): not run, not failed.
  std::vector<std::string> not_covered;
  int num_failed() const;
  std::string Human() const;
  nlohmann::json Json() const;
};

// Runs `ops` (all of Registry() when empty) filtered by `only` (empty: all).
VerifyOpsReport VerifyOps(const std::vector<ops::OpSpec>& ops, const std::string& only, ops::Backend backend,
                          uint64_t seed);

}  // namespace gyre::feedback
