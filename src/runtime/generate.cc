#include "runtime/generate.h"

#include <algorithm>

#include "runtime/cpu_runner.h"

namespace gyre {

int64_t PagesForPrompts(const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens, int64_t page_tokens) {
  int64_t n = 0;
  for (const auto& p : prompts) n += (static_cast<int64_t>(p.size()) + max_tokens + page_tokens - 1) / page_tokens;
  return n;
}

Result<std::vector<GenerateResult>> Generate(ModelRunner& runner, const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateOptions& opts, const TokenFn& on_token) {
  const ModelConfig& config = runner.config();
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
  const RunnerCapacity cap = runner.capacity();
  RunnerSession session(runner);
  std::vector<int> seqs;
  for (size_t i = 0; i < B; ++i) {
    GYRE_ASSIGN_OR_RETURN(int s, session.NewSequence());
    seqs.push_back(s);
  }
  std::vector<GenerateResult> results(B);
  std::vector<int32_t> next(B, -1);
  auto spec = [&](size_t i) {
    SampleSpec sp;
    sp.enabled = true;
    sp.params = opts.sampling;
    sp.params.seed = opts.sampling.seed + i;
    sp.offset = results[i].ids.size();
    return sp;
  };
  // Runs `inputs` in steps that respect the runner's per-step limits.
  std::vector<SampledToken> out;
  auto run = [&](std::vector<RunnerSession::Input>& inputs, std::vector<size_t>& who) -> Status {
    size_t a = 0;
    while (a < inputs.size()) {
      size_t b = a;
      int64_t tokens = 0;
      while (b < inputs.size() && static_cast<int64_t>(b - a) < cap.max_step_pieces &&
             tokens + static_cast<int64_t>(inputs[b].ids.size()) <= cap.max_step_tokens) {
        tokens += static_cast<int64_t>(inputs[b].ids.size());
        ++b;
      }
      if (b == a) {
        return Status::InvalidArgument("a piece of " + std::to_string(inputs[a].ids.size()) +
                                       " tokens exceeds the runner's step (" + std::to_string(cap.max_step_tokens) +
                                       " tokens); set a prefill chunk");
      }
      GYRE_RETURN_IF_ERROR(session.Step(std::span<const RunnerSession::Input>(&inputs[a], b - a), &out));
      for (size_t j = a; j < b; ++j)
        if (inputs[j].sample.enabled) next[who[j]] = out[j - a].id;
      a = b;
    }
    return Status::Ok();
  };

  // Prefill: all prompts together, in pieces of prefill_chunk tokens when set.
  std::vector<size_t> done_prefill(B, 0);
  while (true) {
    std::vector<RunnerSession::Input> batch;
    std::vector<size_t> who;
    for (size_t i = 0; i < B; ++i) {
      const size_t left = prompts[i].size() - done_prefill[i];
      if (left == 0) continue;
      const size_t take = opts.prefill_chunk > 0 ? std::min<size_t>(left, opts.prefill_chunk) : left;
      RunnerSession::Input in{seqs[i], std::span<const int32_t>(prompts[i]).subspan(done_prefill[i], take), {}};
      if (i < opts.prompt_embeds.size()) in.embeds = opts.prompt_embeds[i].get();
      done_prefill[i] += take;
      if (done_prefill[i] == prompts[i].size()) in.sample = spec(i);
      batch.push_back(in);
      who.push_back(i);
    }
    if (batch.empty()) break;
    GYRE_RETURN_IF_ERROR(run(batch, who));
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
    std::vector<RunnerSession::Input> batch;
    std::vector<size_t> who;
    for (size_t i = 0; i < B; ++i) {
      if (finished[i]) continue;
      batch.push_back({seqs[i], std::span<const int32_t>(&next[i], 1), spec(i)});
      who.push_back(i);
    }
    if (batch.empty()) break;
    GYRE_RETURN_IF_ERROR(run(batch, who));
    for (size_t i : who) accept(i);
  }
  for (int s : seqs) session.Release(s);
  return results;
}

Result<std::vector<GenerateResult>> Generate(const Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateOptions& opts, const TokenFn& on_token) {
  CpuRunnerOptions ro;
  ro.page_tokens = 64;
  ro.num_slots = std::max<int64_t>(1, static_cast<int64_t>(prompts.size()));
  ro.num_pages = PagesForPrompts(prompts, std::max<int64_t>(opts.max_tokens, 0), ro.page_tokens);
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<CpuRunner> runner, CpuRunner::Create(model, ro));
  return Generate(*runner, prompts, opts, on_token);
}

}  // namespace gyre
