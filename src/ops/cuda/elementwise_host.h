// Host-memory entry points of the token-wise CUDA kernels (elementwise_cuda.h), for the op registry
// (`gyre verify ops --backend cuda`) and GPU self-checks. Plain C++: includes no CUDA header, so
// src/ops/registry.cc compiles with the host compiler.
//
// Same contract as ops_cuda.h: each call copies its inputs to fresh device buffers, fills every
// device output with NaN bytes (0xFF) so that unwritten elements show up, runs the kernel on a
// private stream, synchronizes and copies the results back. Returns the first CUDA error as
// Internal (file:line), the launcher's InvalidArgument, or Internal when a built-in side check
// fails (named per function). Slow by design: for checks, not for serving.
//
// Shapes are those of the CPU ops (src/ops/basic.h, kda.h, hyper_connection.h); all host arrays
// are dense row-major unless said otherwise.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace gyre::cuda {

// ops::RmsNorm in fp32. x [n, d], w [d] or null, y [n, d]. On the device x and y get padded rows
// (row strides d + 4 and d + 8) so the strided form is what runs; Internal if the kernel wrote
// into a row's padding.
Status RmsNormOnDevice(const float* x, int64_t n, int64_t d, const float* w, float eps, float* y);

// ops::LayerNorm in fp32. x, y [n, d]; w, b [d].
Status LayerNormOnDevice(const float* x, int64_t n, int64_t d, const float* w, const float* b, float eps, float* y);

// ops::SwiGlu with g and u the two halves of one fused [n, 2·width] device buffer (ld = 2·width), as
// a gate/up GEMM writes them. g, u, a [n, width].
Status SwiGluOnDevice(const float* g, const float* u, int64_t n, int64_t width, float limit, float* a);

// Sigmoid and AddInPlace over n values (x in/out for the add).
Status SigmoidOnDevice(const float* x, int64_t n, float* y);
Status AddInPlaceOnDevice(float* x, const float* a, int64_t n);

// ops::KdaGate. f, g [t, h·k]; dt_bias [h·k]; a_log [h].
Status KdaGateOnDevice(const float* f, int64_t t, int64_t h, int64_t k, const float* dt_bias, const float* a_log,
                       bool has_lower_bound, float lower_bound, float* g);

// ops::GatedRmsNorm. o, z, y [t, h, v]; w [v].
Status GatedRmsNormOnDevice(const float* o, const float* z, int64_t t, int64_t h, int64_t v, const float* w, float eps,
                            float* y);

// ops::CausalConv1dSilu for one sequence: x, y [t, ch]; w [ch, width]; state [width-1, ch] in/out.
// Runs the ragged kernel the way the runtime does, in two calls on a 3-slot pool with the sequence
// at slot 1: call 1 = {padding sequence of 2 tokens (slot -1), the first t/2 tokens, an empty
// sequence at slot 2}, call 2 = {the remaining tokens}. Internal unless the padding rows are
// exactly 0, slots 0 and 2 are unchanged bit for bit, and slot 1 ends as the last width-1 inputs of
// [state; x] exactly (a copy).
Status CausalConv1dSiluOnDevice(const float* x, int64_t t, int64_t ch, const float* w, int64_t width, float* state,
                                float* y);

// ops::HcPre. x [t, n, d]; fn [(2+n)·n, n·d]; base [(2+n)·n]; scale [3]; writes post [t, n],
// comb [t, n, n], y [t, d].
Status HcPreOnDevice(const float* x, int64_t t, int64_t n, int64_t d, const float* fn, const float* base,
                     const float* scale, float norm_eps, float hc_eps, int64_t sinkhorn_iters, float* post,
                     float* comb, float* y);

// ops::HcPost, in place on x [t, n, d]; a [t, d]; post [t, n]; comb [t, n, n].
Status HcPostOnDevice(float* x, int64_t t, int64_t n, int64_t d, const float* a, const float* post, const float* comb);

// ops::Embedding. ids [n] (host); table [vocab, d] given as fp32 (`table_f32`) or as bf16 bits
// (`table_bf16`, exactly one non-null); y [n, d] (ids outside [0, vocab) give zero rows).
Status EmbeddingOnDevice(const int32_t* ids, int64_t n, const float* table_f32, const uint16_t* table_bf16,
                         int64_t vocab, int64_t d, float* y);

// Stream mean y[r, d] over x [t, n, d] rows `rows` [r] (null: 0..r-1), and the row gather
// y[r, d] = x[rows[r], :] over x [t, d].
Status StreamMeanOnDevice(const float* x, int64_t t, int64_t n, int64_t d, const int32_t* rows, int64_t r, float* y);
Status GatherRowsOnDevice(const float* x, int64_t t, int64_t d, const int32_t* rows, int64_t r, float* y);

// x [n] → bf16 bits y [n] (round to nearest even).
Status CastF32ToBf16OnDevice(const float* x, int64_t n, uint16_t* y);

// Greedy ids [r] of logits [r, v].
Status ArgmaxOnDevice(const float* logits, int64_t r, int64_t v, int32_t* ids);

}  // namespace gyre::cuda
