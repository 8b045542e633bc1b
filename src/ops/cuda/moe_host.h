// Host-memory entry points of the MoE kernels, for the op registry (`gyre verify ops --backend cuda
// --op moe.route|moe.experts`). Plain C++: includes no CUDA header, so src/ops/registry.cc compiles
// with the host compiler. Same contract as ops_cuda.h: each call copies its inputs to fresh device
// buffers, fills every device output and the workspace with NaN bytes (0xFF), runs the launcher on a
// private stream, synchronizes and copies the results back. Returns the first CUDA error as
// Internal (with file:line), or the launcher's InvalidArgument. For checks, not for serving.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "ops/moe.h"

namespace gyre::cuda {

// cuda::MoeRoute on host arrays: logits [n, E]; bias [E] or null; writes idx, w [n, top_k].
Status MoeRouteOnDevice(const float* logits, int64_t n, const float* bias, const ops::RouterParams& p, int32_t* idx,
                        float* w);

// cuda::MoeExperts on host arrays: x [n, D]; idx, w [n, top_k]; gate_up [E, 2I, D] and down
// [E, D, I] fp32 (uploaded as bf16, round to nearest even, when `bf16_weights`); writes out [n, D].
Status MoeExpertsOnDevice(const float* x, int64_t n, const int32_t* idx, const float* w, int64_t top_k,
                          const float* gate_up, const float* down, const ops::ExpertDims& d, bool bf16_weights,
                          float swiglu_limit, float* out);

}  // namespace gyre::cuda
