// Token sampling on the GPU: the function of ops::Sampler::Sample (src/ops/sampling.h) for a batch
// of logits rows, one draw per row, without sorting the vocabulary.
//
// Per row, over the logits sorted by (value descending, id ascending): temperature <= 0 is greedy
// (ops::Argmax: ties → lowest id, logits[0] NaN → 0). Otherwise p_i = exp((l_i − max) / T); top-k
// keeps the first k; top-p keeps the shortest prefix of that set whose mass is ≥ top_p of the
// set's mass; min-p keeps p_i ≥ min_p (p = 1 at the max); the kept set is the shortest of the three
// prefixes, and one id is drawn from it with probability ∝ p_i. Cuts may split a run of tied
// logits: the lower ids are kept, as in the CPU op.
//
// Differences from the CPU op, all at probability-mass boundaries: p_i is fp32 (exp2f) and masses
// are exact integer sums of round(p_i · 2^44), where the CPU sums doubles; so a top-p or min-p
// cut can differ by a token when the CPU's running mass (or p_i / p_max) lies within ~1e-6
// relative of top_p (min_p), and tokens with p_i < 2^-45 are never drawn. Counts (top-k, ties)
// are exact. NaN logits rank as −inf (never drawn unless the whole row is −inf/NaN; a row of only
// −inf is drawn uniformly). The random stream differs from the CPU's mt19937_64 (not reproducible
// across backends), so only the distribution is the same.
//
// The draw is a function of (logits row, params) alone: the same row with the same (seed, offset)
// gives the same id in any batch, at any position, with any cluster size (exact integer masses,
// prefix order = id order, one Philox-4x32-10 draw keyed by seed with counter offset).
//
// Streams: SampleRows enqueues one kernel on `stream` and returns without synchronizing. It
// allocates nothing, uploads nothing and never synchronizes, so it can be captured in a CUDA
// graph; the per-row parameters live on the device so a captured graph can be replayed with new
// ones. Pointers are device pointers. Thread safety: safe to call from several threads.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace gyre::cuda {

// Per-row sampling parameters, on the device (ops::SamplingParams plus the draw's counter).
// Callers validate with ops::ValidateSampling; out-of-range values are clamped on the device so
// they cannot fault or hang: NaN temperature → greedy, NaN or ≥ 1 top_p → off, top_p ≤ 0 → one
// token, NaN or ≤ 0 min_p → off, min_p > 1 → 1.
struct SampleParamsDev {
  float temperature = 0.0f;  // <= 0: greedy (argmax)
  int32_t top_k = 0;         // <= 0 or >= vocab: off
  float top_p = 1.0f;        // in (0, 1]; 1: off
  float min_p = 0.0f;        // in [0, 1]; 0: off
  uint64_t seed = 0;         // Philox key (per request)
  uint64_t offset = 0;       // Philox counter (e.g. the request's decode step)
  // Speculative sampling (ops: SampleSpeculativeKeyed's function) against this deterministic
  // draft token: the draft is returned with its probability p(draft) in the kept set (a second
  // Philox stream, seed ^ a constant), else a draw from the kept set without it, so the result is
  // distributed as without a draft. < 0 or >= vocab: none. Greedy rows ignore it.
  int32_t draft = -1;
  int32_t reserved = 0;
};
static_assert(sizeof(SampleParamsDev) == 40, "SampleParamsDev is shared with device code");

// Launch shape: a cluster of `cluster_size` CTAs (512 threads each) per row, each CTA holding its
// slice of the row in shared memory. 0 = pick by heuristic; else 1, 2, 4 or 8 (benches, tests).
// The result does not depend on it.
struct SampleConfig {
  int cluster_size = 0;
};

// Enqueues the sampling of `rows` rows: ids[r] ← one draw from row r of logits [rows, vocab] fp32
// (row-major, contiguous) under params[r]. REQUIRES: 1 <= vocab <= SampleMaxVocab(). Returns
// InvalidArgument for bad shapes, null pointers or an unsupported cluster size, Internal for a
// launch error. rows == 0 is a no-op.
Status SampleRows(const float* logits, int64_t rows, int64_t vocab, const SampleParamsDev* params, int32_t* ids,
                  cudaStream_t stream, SampleConfig cfg = {});

// Enqueues out[r] ← log_softmax(logits[r])[ids[r]] at temperature 1 (fp32 max, fp32 exp sums in a
// fixed order per row: deterministic; agrees with the CPU's double log-softmax to ~1e-6 relative
// of the row's log-sum-exp). Rows with ids[r] outside [0, vocab) get NaN. One CTA per row; no
// allocation, no synchronisation (graph-capturable). InvalidArgument for bad shapes or nulls.
Status RowLogProbs(const float* logits, int64_t rows, int64_t vocab, const int32_t* ids, float* out,
                   cudaStream_t stream);

// Structured output: enqueues logits[r][i] ← −inf for every token i that row r's mask does not
// allow: row_mask[r] (device, [rows]) is -1 (no mask) or m, whose mask is masks[m * W .. m * W + W)
// (device, W = ceil(vocab / 32) words, bit i % 32 of word i / 32 = token i allowed). Launch it
// before SampleRows / Argmax / RowLogProbs. No allocation, no synchronisation (graph-capturable).
// InvalidArgument for bad shapes (rows > 65535) or nulls.
Status ApplyTokenMask(float* logits, int64_t rows, int64_t vocab, const int32_t* row_mask, const uint32_t* masks,
                      cudaStream_t stream);

// The largest vocabulary SampleRows supports on the current device (a row must fit in the shared
// memory of 8 CTAs; 2^19 at most): 400k+ on an H100/H200.
int64_t SampleMaxVocab();

// The cluster size SampleRows would pick for this shape on the current device (0: unsupported).
int SampleClusterSize(int64_t rows, int64_t vocab);

}  // namespace gyre::cuda
