#include "ops/penalties.h"

#include <limits>

namespace gyre::ops {

void ApplyPenalties(std::span<float> logits, const SamplingParams& p, std::span<const LogitBias> bias,
                    std::span<const int32_t> stop_ids, int64_t num_generated, const TokenCounts* counts) {
  for (const LogitBias& b : bias) logits[b.id] += b.bias;
  if (num_generated < p.min_tokens) {
    for (int32_t id : stop_ids) logits[id] = -std::numeric_limits<float>::infinity();
  }
  if (!HasPenalties(p) || !counts) return;
  const float r = p.repetition_penalty, f = p.frequency_penalty, pr = p.presence_penalty;
  for (size_t i = 0; i < logits.size(); ++i) {
    const int32_t c = counts->output[i];
    if (c == 0 && !counts->prompt[i]) continue;
    float l = logits[i];
    if (r != 1.0f) l = l > 0 ? l / r : l * r;
    if (c > 0) {
      l -= f * static_cast<float>(c);
      l -= pr;
    }
    logits[i] = l;
  }
}

}  // namespace gyre::ops
