// Token sampling: greedy, temperature, top-k, top-p, min-p, with a seeded RNG. The logit
// processing that comes before (penalties, logit_bias, min_tokens) is in ops/penalties.h.
//
// Order of filters (as in HF generate / vLLM): temperature scaling, top-k, top-p, min-p, then a
// categorical draw. temperature <= 0 means greedy (argmax; ties → lowest id).
// Thread safety: a Sampler is not thread-safe (it owns its RNG); use one per sequence.
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "core/status.h"

namespace gyre::ops {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int64_t top_k = 0;         // <= 0: off
  float top_p = 1.0f;        // in (0, 1]
  float min_p = 0.0f;        // in [0, 1]
  uint64_t seed = 0;
  // Logit processing before the filters (ops/penalties.h: one definition for every backend).
  float presence_penalty = 0.0f;    // in [-2, 2]; 0: off
  float frequency_penalty = 0.0f;   // in [-2, 2]; 0: off
  float repetition_penalty = 1.0f;  // > 0 (finite); 1: off
  int64_t min_tokens = 0;           // >= 0: stop ids are masked until this many tokens are generated
};

// InvalidArgument for out-of-range parameters (negative temperature is allowed and means greedy).
Status ValidateSampling(const SamplingParams& p);

int32_t Argmax(std::span<const float> logits);

// The categorical distribution Sampler::Sample draws from: the kept ids in its sorted order
// (logit descending, ties → lower id), their probabilities normalised over the kept set (double),
// and `margin`, the smallest relative distance of a top-p or min-p cut to its threshold (how far
// a float-precision implementation may be from moving a cut by one token; +inf without cuts).
// temperature <= 0: {Argmax} with probability 1.
struct SampleSupport {
  std::vector<int32_t> ids;
  std::vector<double> prob;
  double margin = std::numeric_limits<double>::infinity();
};
SampleSupport SamplingSupport(std::span<const float> logits, const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(uint64_t seed) : rng_(seed) {}
  // REQUIRES: ValidateSampling(p).ok() and logits non-empty.
  int32_t Sample(std::span<const float> logits, const SamplingParams& p);

 private:
  std::mt19937_64 rng_;
};

}  // namespace gyre::ops
