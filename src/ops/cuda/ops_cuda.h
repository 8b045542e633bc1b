// Host-memory entry points of the CUDA kernels, for the op registry (`gyre verify ops --backend
// cuda`). Plain C++: includes no CUDA header, so src/ops/registry.cc compiles with the host compiler.
//
// Each call copies its inputs to fresh device buffers, fills every device output with NaN (bytes
// 0xFF) so that unwritten elements show up, runs the kernel on a private stream, synchronizes and
// copies the results back. Returns the first CUDA error as Internal (with file:line), or the
// kernel launcher's InvalidArgument. Slow by design (allocations and copies per call): for checks,
// not for serving.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"

namespace gyre::cuda {

// y[n, out] = x[n, in] · w[out, in]ᵀ in fp32 through cuBLASLt (TF32 off).
Status LinearF32OnDevice(const float* x, int64_t n, int64_t in, const float* w, int64_t out, float* y);

// One sequence of t tokens, h heads, head size dk (K = V): q, k, v, g [t, h, dk]; beta [t, h];
// state [h, dk, dk] in/out; o [t, h, dk] out. `chunked` picks the chunked (prefill) kernels,
// otherwise the recurrent kernel runs all t tokens in one launch.
Status KdaOnDevice(bool chunked, const float* q, const float* k, const float* v, const float* g, const float* beta,
                   int64_t t, int64_t h, int64_t dk, float* state, float* o);

// ReplaySSM on the recurrent kernel, one sequence of t >= 0 tokens (shapes as KdaOnDevice):
// a speculative launch (ragged rows, the state kept) must leave `state` bit for bit as it was,
// then the fold (the state advanced over the t tokens, no outputs) must equal, bit for bit, the
// state of a plain launch over the same tokens, and the speculative launch's outputs the plain
// launch's. Any difference is Internal naming it. state [h, dk, dk] in/out: the folded state.
Status KdaReplayFoldOnDevice(const float* q, const float* k, const float* v, const float* g, const float* beta,
                             int64_t t, int64_t h, int64_t dk, float* state);

// Logit processing (penalties_cuda.h ApplyPenaltyRows) of `rows` rows of logits [rows, vocab], in
// place: row r with rows[r]'s parameters and the counts output_counts / in_prompt [rows, vocab].
struct PenaltyRowsHost {
  struct Row {
    std::vector<std::pair<int32_t, float>> bias;
    std::vector<int32_t> stop_ids;
    bool mask_stops = false;
    float presence = 0, frequency = 0, repetition = 1;
  };
  std::vector<Row> rows;
  const int32_t* output_counts = nullptr;
  const uint8_t* in_prompt = nullptr;
};
Status PenaltiesOnDevice(float* logits, int64_t rows, int64_t vocab, const PenaltyRowsHost& in);

// Vision tower (vision_cuda.h): the axial RoPE on x [n, heads, head_dim] with tables cos / sin
// [n, head_dim] (out: the rotated x), and the segment attention over q, k, v [n, heads·head_dim]
// (`segments` sum to n).
Status VisionRopeOnDevice(const float* x, int64_t n, int64_t heads, int64_t head_dim, const float* cos,
                          const float* sin, float* out);
Status VisionAttentionOnDevice(const float* q, const float* k, const float* v, int64_t n,
                               std::span<const int64_t> segments, int64_t heads, int64_t head_dim, float* out);

}  // namespace gyre::cuda
