// The op registry: every op the engine runs, with a reference implementation (ops/reference.h,
// fp64), its backends, a FLOP/byte model, a tolerance class, and a generator of valid random
// inputs over several shapes including edge shapes (length 1, lengths that are not a multiple of
// the KDA chunk, more tokens than index_topk, one expert hit by every token).
//
// `gyre verify ops` runs Check for every (op, shape, backend); `gyre bench op` runs Prepare.
// To add an op: write its reference in ops/reference.cc, then an OpSpec in ops/registry.cc
// (section "specs"); `verify ops` and `bench op` pick it up.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "ops/basic.h"

namespace gyre::ops {

enum class Backend { kCpu, kCuda };
const char* BackendName(Backend b);

struct OpShape {
  std::string label;                     // "T=65 H=2 K=16"
  std::map<std::string, int64_t> dims;   // named sizes
  // Calibrated rel-L2 bound for this shape: 4x the worst error of the fp32 CPU backend over 400
  // seeds (bench/results/verify_ops_calibration_cpu_2026-12-03.json). 0: the op's class bound.
  double tolerance = 0;
};

struct Cost {
  double flops = 0;  // useful floating-point operations
  double bytes = 0;  // minimum bytes moved (inputs read + outputs written once, fp32)
};

struct CheckResult {
  Diff diff;                      // backend vs reference (fp64 rounded to fp32 for comparison)
  int64_t num_outputs = 0;
  int64_t num_unwritten = 0;      // outputs still NaN after the run (poisoned before it)
  std::string note;               // e.g. "selection mismatches: 0/80 rows"
};

struct OpSpec {
  std::string name;
  std::string tolerance_class;    // "fp32-reassociation", "fp32-iterative", "exact"
  double tolerance = 1e-5;        // rel-L2 bound for fp32
  // > 0: the bound on the cuda backend instead, with its class (e.g. the FP8 GEMMs: Hopper's FP8
  // tensor cores accumulate with fewer fp32 mantissa bits than the CPU's fp32 sums).
  double cuda_tolerance = 0;
  std::string cuda_tolerance_class;
  std::vector<OpShape> shapes;
  // The backends the op has. `verify ops` on another backend lists the op as not covered there
  // instead of running it (the quantization ops are CPU-only: docs/quantization.md).
  std::vector<Backend> backends = {Backend::kCpu, Backend::kCuda};
  std::function<Cost(const OpShape&)> cost;
  // Fresh random inputs from `seed`; outputs poisoned with NaN; backend vs reference.
  std::function<Result<CheckResult>(const OpShape&, uint64_t seed, Backend)> check;
  // Builds `rotate` independent input sets and returns a function running the backend once on
  // the next set (round robin), so caches do not flatter a benchmark.
  std::function<Result<std::function<void()>>(const OpShape&, uint64_t seed, Backend, int rotate)> prepare;
};

// All registered ops (built once; thread-safe to read).
const std::vector<OpSpec>& Registry();
const OpSpec* FindOp(const std::string& name);
// "H=2 K=16 T=65": the label of a shape (dims in name order), as OpShape::label holds it.
std::string ShapeLabel(const std::map<std::string, int64_t>& dims);
// Parses "T=65,H=2,K=16" against an op's dims (unknown names → InvalidArgument).
Result<OpShape> ParseShape(const OpSpec& op, const std::string& text);

}  // namespace gyre::ops
