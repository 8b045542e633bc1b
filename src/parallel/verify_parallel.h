// verify parallel: runs every op of a parallel plan sharded (n in-process ranks, each holding only
// its shard) and unsharded (parallel/reference.h, plus Model::Forward itself for the layer
// outputs), and reports per op how far apart they are.
//
// Plans: "tp=N" (KDA heads, MLA heads, LM-head vocabulary), "ep=N" (MoE experts), "cp=N" (one KDA
// layer's sequence, at several lengths). N in [1, 8]. The model is a small random glm5_next
// config (RandomWeights); weights and inputs derive from one seed, recorded in the report, so a
// failing run is reproduced by passing its seed back.
//
// Tolerances (rel-L2 of the recombined sharded result against the reference):
//   0      discrete results and pure data movement (indexer selection, greedy tokens, dispatch);
//   1e-5   fp32 TP / EP ops (only the all-reduce order differs from the reference);
//   1e-4   fp32 CP (the state chain reassociates a recurrence over thousands of tokens).
// The CP merge in bf16 or tf32 is expected to exceed 1e-4: the report then names kda.cp_merge.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "parallel/context_parallel.h"

namespace gyre::parallel {

// A deliberate plan bug, to prove that the checks catch one and name the op (negative control).
enum class InjectedFault {
  kNone,
  // tp: each rank convolves the neighbouring rank's conv channels (kda.conv);
  // ep: each rank runs the neighbouring rank's expert weights (moe.experts);
  // cp: rank 1 reads its pre-conv rows one token early (kda.conv).
  kShardOffset,
};

// The CP check's activations (see MakeCpInputs in verify_parallel.cc).
enum class CpRegime {
  kLongMemory,   // slow decays, β ∈ [0.001, 0.01]: the state remembers for thousands of tokens
  kShortMemory,  // β ∈ [0.02, 0.22]: the delta rule forgets within a few hundred tokens
};

struct VerifyParallelOptions {
  uint64_t seed = 0;  // 0: draw a fresh seed (recorded in the report)
  MergePrecision merge_precision = MergePrecision::kF32;  // cp only
  std::vector<int64_t> cp_lengths = {256, 1024, 4096};    // tokens per cp check
  CpRegime cp_regime = CpRegime::kLongMemory;
  int64_t tokens = 64;                                    // tokens of the tp / ep checks
  InjectedFault fault = InjectedFault::kNone;
};

struct OpCheck {
  std::string op;          // "kda.conv", "kda.cp_merge", "engine.kda_layer", ...
  std::string rule;        // how the sharded results were recombined for the comparison
  int64_t tokens = 0;      // sequence length of this check
  double rel_l2 = 0, max_abs = 0;
  int64_t worst_index = -1;  // flat index of the largest difference in the compared vector
  double tolerance = 0;
  bool bitwise = false;    // max_abs == 0
  bool pass = false;
  std::string note;        // e.g. a size mismatch
};

struct ParallelReport {
  std::string plan;        // as given, e.g. "cp=4"
  std::string kind;        // "tp" | "ep" | "cp"
  int size = 1;
  uint64_t seed = 0;
  std::string merge_precision;  // cp only; "" otherwise
  std::string model;       // one-line description of the config
  std::vector<OpCheck> checks;  // in dataflow order
  bool pass = false;
  double seconds = 0;
  // The first failing check in dataflow order, or null.
  const OpCheck* FirstFailure() const;
  // The failing check with the largest rel_l2 / tolerance (exact checks count as infinite), or
  // null.
  const OpCheck* WorstFailure() const;
};

// Errors: InvalidArgument for a malformed plan, a merge precision other than fp32 on a plan
// that is not cp, or a size the plan cannot split; any error of a rank (with the rank named).
Result<ParallelReport> VerifyParallel(const std::string& plan, const VerifyParallelOptions& opts);

nlohmann::json ReportToJson(const ParallelReport& r);
std::string ReportToText(const ParallelReport& r);

// `gyre verify parallel --plan P [--merge-precision fp32|bf16|tf32] [--seed S] [--json]`: prints
// the text summary (or the JSON) on stdout, errors on stderr. `seed` 0 draws a fresh seed (it is
// printed). Returns 0 when every check passes, 1 when one fails (the summary names the first and
// the worst failing op and by how much), 2 for a usage error (malformed plan or precision).
int RunVerifyParallelCli(const std::string& plan, const std::string& merge_precision, uint64_t seed, bool json);

}  // namespace gyre::parallel
