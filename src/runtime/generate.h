// Generation loop on one or several sequences: prefill (optionally in pieces), then decode one
// token per step for every unfinished sequence in one ragged forward, until EOS / a stop id /
// max_tokens. The scheduler with admission and preemption builds on the same Model::Forward.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ops/sampling.h"
#include "runtime/model.h"

namespace gyre {

struct GenerateOptions {
  int64_t max_tokens = 16;
  ops::SamplingParams sampling;       // temperature 0 → greedy
  std::vector<int32_t> stop_ids;      // in addition to the model's EOS ids
  bool ignore_eos = false;
  int64_t prefill_chunk = 0;          // > 0: prefill in pieces of this many tokens
};

struct GenerateResult {
  std::vector<int32_t> ids;      // generated tokens (the stop token included when it ended the run)
  std::string finish_reason;     // "stop" (EOS or stop id) or "length"
};

// Called after every generated token of sequence `seq`.
using TokenFn = std::function<void(size_t seq, int32_t id)>;

// One ragged step of a backend: for each piece (sequence index into the prompts, new tokens) in
// order, the logits of the piece's last token ([pieces, vocab]).
struct RaggedPiece {
  size_t seq = 0;
  std::span<const int32_t> ids;
};
using RaggedStepFn = std::function<Status(std::span<const RaggedPiece>, std::vector<float>* logits)>;

// The generation loop over any backend's step (the CPU Model below; the GPU CudaModel in
// `gyre generate --backend cuda`).
Result<std::vector<GenerateResult>> GenerateWith(const ModelConfig& config, const RaggedStepFn& step,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const GenerateOptions& opts, const TokenFn& on_token = {});

// Generates for each prompt. Errors: InvalidArgument for an empty prompt, an id out of range or
// invalid sampling parameters; nothing is generated then.
Result<std::vector<GenerateResult>> Generate(const Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateOptions& opts, const TokenFn& on_token = {});

}  // namespace gyre
