#include "runtime/generate.h"

#include <algorithm>

namespace gyre {

Result<std::vector<GenerateResult>> GenerateWith(const ModelConfig& config, const RaggedStepFn& step,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const GenerateOptions& opts, const TokenFn& on_token) {
  GYRE_RETURN_IF_ERROR(ops::ValidateSampling(opts.sampling));
  if (opts.max_tokens < 0) return Status::InvalidArgument("max_tokens must be >= 0");
  const int64_t V = config.vocab_size;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return Status::InvalidArgument("prompt " + std::to_string(i) + " is empty");
    for (int32_t id : prompts[i]) {
      if (id < 0 || id >= V) {
        return Status::InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                       std::to_string(V) + ")");
      }
    }
  }
  std::vector<int32_t> stops = opts.stop_ids;
  if (!opts.ignore_eos) stops.insert(stops.end(), config.eos_token_ids.begin(), config.eos_token_ids.end());

  const size_t B = prompts.size();
  std::vector<ops::Sampler> samplers;
  for (size_t i = 0; i < B; ++i) samplers.emplace_back(opts.sampling.seed + i);
  std::vector<GenerateResult> results(B);
  std::vector<float> logits;
  std::vector<int32_t> next(B, -1);
  const int64_t vocab = V;

  // Prefill: all prompts together, in pieces of prefill_chunk tokens when set.
  std::vector<size_t> done_prefill(B, 0);
  while (true) {
    std::vector<RaggedPiece> batch;
    std::vector<size_t> who;
    for (size_t i = 0; i < B; ++i) {
      const size_t left = prompts[i].size() - done_prefill[i];
      if (left == 0) continue;
      const size_t take = opts.prefill_chunk > 0 ? std::min<size_t>(left, opts.prefill_chunk) : left;
      batch.push_back({i, std::span<const int32_t>(prompts[i]).subspan(done_prefill[i], take)});
      who.push_back(i);
      done_prefill[i] += take;
    }
    if (batch.empty()) break;
    GYRE_RETURN_IF_ERROR(step(batch, &logits));
    for (size_t j = 0; j < who.size(); ++j) {
      if (done_prefill[who[j]] == prompts[who[j]].size()) {
        next[who[j]] = samplers[who[j]].Sample(std::span<const float>(&logits[j * vocab], vocab), opts.sampling);
      }
    }
  }
  std::vector<bool> finished(B, false);
  auto accept = [&](size_t i) {
    const int32_t id = next[i];
    results[i].ids.push_back(id);
    if (on_token) on_token(i, id);
    if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
      finished[i] = true;
      results[i].finish_reason = "stop";
    } else if (static_cast<int64_t>(results[i].ids.size()) >= opts.max_tokens) {
      finished[i] = true;
      results[i].finish_reason = "length";
    }
  };
  for (size_t i = 0; i < B; ++i) {
    if (opts.max_tokens == 0) {
      finished[i] = true;
      results[i].finish_reason = "length";
    } else {
      accept(i);
    }
  }
  // Decode: one ragged step over every unfinished sequence.
  while (true) {
    std::vector<RaggedPiece> batch;
    std::vector<size_t> who;
    for (size_t i = 0; i < B; ++i) {
      if (finished[i]) continue;
      batch.push_back({i, std::span<const int32_t>(&next[i], 1)});
      who.push_back(i);
    }
    if (batch.empty()) break;
    GYRE_RETURN_IF_ERROR(step(batch, &logits));
    for (size_t j = 0; j < who.size(); ++j) {
      next[who[j]] = samplers[who[j]].Sample(std::span<const float>(&logits[j * vocab], vocab), opts.sampling);
      accept(who[j]);
    }
  }
  return results;
}

Result<std::vector<GenerateResult>> Generate(const Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateOptions& opts, const TokenFn& on_token) {
  std::vector<SequenceState> states;
  for (size_t i = 0; i < prompts.size(); ++i) states.push_back(model.NewSequence());
  auto step = [&](std::span<const RaggedPiece> pieces, std::vector<float>* logits) -> Status {
    std::vector<SeqInput> batch;
    for (const RaggedPiece& p : pieces) batch.push_back({&states[p.seq], p.ids, false});
    return model.Forward(batch, logits);
  };
  return GenerateWith(model.config(), step, prompts, opts, on_token);
}

}  // namespace gyre
