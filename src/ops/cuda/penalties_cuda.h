// Logit processing on the GPU: the function of ops::ApplyPenalties (src/ops/penalties.h) for a
// batch of logits rows, and the per-slot token counts it reads, kept on the device.
//
// Counts: out_counts [slots, vocab] int32 (occurrences in a sequence's output) and in_prompt
// [slots, vocab] uint8 (occurs in its prompt). CountTokens adds a step's fed tokens to them; a
// token given as -1 (kPrevToken) is resolved from last_token[slot], the slot's most recent
// sample, on the device. Resetting a slot is a cudaMemsetAsync of its two rows (the caller's).
//
// ApplyPenaltyRows: per row with `active`, in the order of ops/penalties.h: the row's logit_bias
// entries added in order (one thread: repeated ids add up in order, as on the CPU), its stop ids
// set to −inf, then per token the repetition penalty and frequency/presence from its slot's
// counts (slot −1: none). fp32, the same operations as the CPU, each rounded (no fused
// multiply-add; the host build targets plain x86-64, which has none), so rows agree with the
// CPU's bit for bit.
//
// Streams: both enqueue one kernel on `stream` and return; they allocate and synchronize nothing.
// Pointers are device pointers. Thread safety: safe to call from several threads.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace gyre::cuda {

// One logits row's processing parameters (ops::SamplingParams and the step's lists).
struct PenaltyRowDev {
  int32_t active = 0;             // 0: the row is left alone
  int32_t slot = -1;              // counts row; -1: no repetition/frequency/presence
  float presence = 0.0f, frequency = 0.0f, repetition = 1.0f;
  int32_t bias_begin = 0, bias_end = 0;  // [begin, end) of the step's bias lists
  int32_t stop_begin = 0, stop_end = 0;  // [begin, end) of the step's stop ids (empty once min_tokens is reached)
};

// One fed token to count: its slot, its id (-1: last_token[slot]), and 1 for a prompt token.
struct CountEntryDev {
  int32_t slot = 0, id = 0, prompt = 0;
};

// Enqueues the counting of `n` entries. InvalidArgument for null pointers or bad sizes.
Status CountTokens(const CountEntryDev* entries, int64_t n, const int32_t* last_token, int64_t vocab,
                   int32_t* out_counts, uint8_t* in_prompt, cudaStream_t stream);

// Enqueues the processing of `rows` rows of logits [rows, vocab]. InvalidArgument for bad shapes
// (rows > 65535) or null pointers.
Status ApplyPenaltyRows(float* logits, int64_t rows, int64_t vocab, const PenaltyRowDev* params,
                        const int32_t* bias_ids, const float* bias_values, const int32_t* stop_ids,
                        const int32_t* out_counts, const uint8_t* in_prompt, cudaStream_t stream);

}  // namespace gyre::cuda
