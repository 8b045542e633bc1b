// `gyre verify trace`: the device timeline checked on a GPU workload whose answer is known.
//
// Three traces, each written to `out_dir` as a Chrome trace, read back from the file and analyzed
// with `gyre analyze`'s code, so the checks cover recording, export, reading and analysis:
//   structure   fill, scale, memset and a 2 ms spin kernel on a compute stream, a 32 MiB pinned
//               host-to-device copy on a copy stream, and a CUDA graph of three kernels; each
//               launch under its own span. Checks: every record is present; kernels of one stream
//               on one track, in launch order, never overlapping; the copy on another track; every
//               record correlated to the API call that launched it and nested under the span open
//               at that call; the graph's kernels carry its graph id and the cudaGraphLaunch;
//               clocks: no record starts before the API call that launched it, none ends after
//               the synchronize that waited for it, and the spin kernel's recorded duration agrees
//               with its own %globaltimer measurement within 5% + 20 µs.
//   serialized  a 5 ms spin, then the copy on the SAME stream: overlap(memcpy, kernel) < 5%.
//   async       a 5 ms spin, and the copy on another stream: overlap(memcpy, kernel) > 90%.
// Plus a measurement (reported, never a pass criterion): the cost per kernel launch of 2000 empty
// launches with the device trace off and on.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gyre::feedback {

// Returns {"pass": bool, "checks": [{name, pass, detail}], "overhead": {...}, "traces": [...]}.
// Errors: Unimplemented (CPU build), NotFound (no CUPTI), Internal (a CUDA call failed).
Result<nlohmann::json> CheckDeviceTrace(const std::string& out_dir, int launches = 2000);

}  // namespace gyre::feedback
