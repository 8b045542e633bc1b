// Measured hardware ceilings of this machine, for % of roofline: memory bandwidth (large buffer
// copy, read + write bytes counted) and the fp32 GEMM rate (OpenBLAS sgemm, all cores).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gyre::feedback {

struct Ceilings {
  double mem_bw_gbs = 0;       // GB/s (1e9 B/s)
  double gemm_gflops = 0;      // fp32 GFLOP/s
  std::string method;
  nlohmann::json Json() const;
  static Result<Ceilings> FromJson(const nlohmann::json& j);
};

// Takes about a second. `buffer_mb` per copy buffer; `gemm_n` square size.
Ceilings MeasureCeilings(int64_t buffer_mb = 256, int64_t gemm_n = 1024);

// Machine description for result files: cpu model, cores, hostname.
nlohmann::json MachineInfo();
// `git rev-parse --short HEAD` of the source tree, or "unknown".
std::string GitCommit();

}  // namespace gyre::feedback
