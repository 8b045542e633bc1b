// Generation loop on one or several sequences over any model runner (runtime/model_runner.h):
// prefill (optionally in pieces), then decode one token per step for every unfinished sequence in
// one ragged step, until EOS / a stop id / max_tokens. Sampling happens inside the runner (on the
// device for CUDA); only token ids come back. The serving engine (engine/engine.h) drives the same
// runner step with admission and preemption.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/sampling.h"
#include "runtime/model.h"
#include "runtime/model_runner.h"

namespace gyre {

struct GenerateOptions {
  int64_t max_tokens = 16;
  ops::SamplingParams sampling;       // temperature 0 → greedy; sequence i draws with seed + i
  std::vector<int32_t> stop_ids;      // in addition to the model's EOS ids
  bool ignore_eos = false;
  int64_t prefill_chunk = 0;          // > 0: prefill in pieces of this many tokens
  // Per prompt (may be shorter than the prompts, entries may be null): multimodal prompt
  // embeddings (StepPiece::embeds; runners whose capacity() says prompt_embeds).
  std::vector<std::shared_ptr<const PromptEmbeds>> prompt_embeds;
};

struct GenerateResult {
  std::vector<int32_t> ids;      // generated tokens (the stop token included when it ended the run)
  std::string finish_reason;     // "stop" (EOS or stop id) or "length"
};

// Called after every generated token of sequence `seq`.
using TokenFn = std::function<void(size_t seq, int32_t id)>;

// Generates for each prompt on `runner`. Errors: InvalidArgument for an empty prompt, an id out of
// range or invalid sampling parameters (nothing is generated then); ResourceExhausted when the
// runner's slots or pages cannot hold the prompts and their tokens.
Result<std::vector<GenerateResult>> Generate(ModelRunner& runner, const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateOptions& opts, const TokenFn& on_token = {});

// The same on the CPU model (a CpuRunner sized for exactly these prompts).
Result<std::vector<GenerateResult>> Generate(const Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateOptions& opts, const TokenFn& on_token = {});

// Pages of `page_tokens` tokens that `prompts` need with `max_tokens` more each.
int64_t PagesForPrompts(const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens, int64_t page_tokens);

}  // namespace gyre
