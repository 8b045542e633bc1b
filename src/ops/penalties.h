// Logit processing before a draw: logit_bias, min_tokens and the repetition, frequency and
// presence penalties. One definition for every backend: ApplyPenalties below is the CPU
// implementation and the reference the CUDA kernel (ops/cuda/penalties_cuda.h) is tested against.
//
// Per logits row of one sequence, in this order (fp32, each step rounded as written):
//  1. logit_bias (OpenAI): logits[id] += bias for each entry, in order (repeated ids add up).
//  2. min_tokens (vLLM): while num_generated < min_tokens, logits[id] = −inf for every id of
//     `stop_ids` (the ids that would end the sequence: EOS and stop_token_ids).
//  3. repetition_penalty r (vLLM): for every token that occurs in the prompt or in the output so
//     far, logit > 0 → logit / r, otherwise logit · r.
//  4. frequency_penalty f, presence_penalty p (OpenAI): logit −= f · count, then logit −= p when
//     count > 0, where count is the token's occurrences in the output so far (prompt excluded).
// Structured output masks (SampleSpec::allowed) apply after this, temperature and the filters of
// ops/sampling.h after that.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ops/sampling.h"

namespace gyre::ops {

struct LogitBias {
  int32_t id = 0;
  float bias = 0;  // [-100, 100] at the API
};

// True when `p` has a repetition, frequency or presence penalty: the sequence's token counts
// are needed (logit_bias and min_tokens need none).
inline bool HasPenalties(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
}

// A sequence's token counts over a vocabulary of `vocab` ids: occurrences in the output (the
// generated tokens) and whether each id occurs in the prompt.
struct TokenCounts {
  std::vector<int32_t> output;  // [vocab]
  std::vector<uint8_t> prompt;  // [vocab], 0 or 1
  void Reset(int64_t vocab) {
    output.assign(static_cast<size_t>(vocab), 0);
    prompt.assign(static_cast<size_t>(vocab), 0);
  }
  // Counts token `id` at position `pos` of a sequence whose first `num_prompt` tokens are the prompt.
  void Add(int32_t id, int64_t pos, int64_t num_prompt) {
    if (pos < num_prompt) {
      prompt[static_cast<size_t>(id)] = 1;
    } else {
      ++output[static_cast<size_t>(id)];
    }
  }
};

// Applies steps 1–4 to one row. `counts` may be null when !HasPenalties(p).
// REQUIRES: bias and stop ids in [0, logits.size()); counts sized logits.size().
void ApplyPenalties(std::span<float> logits, const SamplingParams& p, std::span<const LogitBias> bias,
                    std::span<const int32_t> stop_ids, int64_t num_generated, const TokenCounts* counts);

}  // namespace gyre::ops
