// GPU model parity (CUDA builds only): the CudaModel (fp32 weights) against the transformers
// goldens of a fixture folder and against the CPU engine on the same inputs.
//
// Checks, each with its rel-L2 / ids in the JSON report:
//   golden_logits    one full forward of the golden input_ids (every row) vs the golden logits
//   cpu_logits       the same forward vs the CPU Model::Forward
//   greedy_golden    greedy continuation of the golden prompt (first 40 ids) vs greedy_ids
//   greedy_cpu       the same continuation vs the CPU engine's greedy tokens
//   ragged_batch     a fixed schedule of mixed steps (prefill pieces, single-token prefill, decode
//                    of several sequences in one step) vs the CPU engine on the same steps
// `pass` is true iff every rel-L2 is within `tolerance` and every id sequence is identical.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gyre {

Result<nlohmann::json> CheckCudaParity(const std::string& model_dir, double tolerance);

}  // namespace gyre
