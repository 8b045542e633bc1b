// Token sampling: greedy, temperature, top-k, top-p, min-p, with a seeded RNG.
//
// Order of filters (as in HF generate / vLLM): temperature scaling, top-k, top-p, min-p, then a
// categorical draw. temperature <= 0 means greedy (argmax; ties → lowest id).
// Thread safety: a Sampler is not thread-safe (it owns its RNG); use one per sequence.
#pragma once

#include <cstdint>
#include <random>
#include <span>

#include "core/status.h"

namespace gyre::ops {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int64_t top_k = 0;         // <= 0: off
  float top_p = 1.0f;        // in (0, 1]
  float min_p = 0.0f;        // in [0, 1]
  uint64_t seed = 0;
};

// InvalidArgument for out-of-range parameters (negative temperature is allowed and means greedy).
Status ValidateSampling(const SamplingParams& p);

int32_t Argmax(std::span<const float> logits);

class Sampler {
 public:
  explicit Sampler(uint64_t seed) : rng_(seed) {}
  // REQUIRES: ValidateSampling(p).ok() and logits non-empty.
  int32_t Sample(std::span<const float> logits, const SamplingParams& p);

 private:
  std::mt19937_64 rng_;
};

}  // namespace gyre::ops
