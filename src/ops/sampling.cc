#include "ops/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace gyre::ops {

Status ValidateSampling(const SamplingParams& p) {
  if (!std::isfinite(p.temperature)) return Status::InvalidArgument("temperature must be finite");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return Status::InvalidArgument("top_p must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return Status::InvalidArgument("min_p must be in [0, 1]");
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f))
    return Status::InvalidArgument("presence_penalty must be in [-2, 2]");
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f))
    return Status::InvalidArgument("frequency_penalty must be in [-2, 2]");
  if (!(p.repetition_penalty > 0.0f && std::isfinite(p.repetition_penalty)))
    return Status::InvalidArgument("repetition_penalty must be a finite number > 0");
  if (p.min_tokens < 0) return Status::InvalidArgument("min_tokens must be >= 0");
  return Status();
}

int32_t Argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

SampleSupport SamplingSupport(std::span<const float> logits, const SamplingParams& p) {
  SampleSupport d;
  if (p.temperature <= 0.0f) {
    d.ids = {Argmax(logits)};
    d.prob = {1.0};
    return d;
  }
  const int64_t n = static_cast<int64_t>(logits.size());
  std::vector<int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  // Sort by logit descending (ties: lower id first) so every filter is a prefix cut.
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  int64_t keep = n;
  if (p.top_k > 0) keep = std::min<int64_t>(keep, p.top_k);
  const float mx = logits[ids[0]] / p.temperature;
  std::vector<double> prob(keep);
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i) {
    prob[i] = std::exp(static_cast<double>(logits[ids[i]]) / p.temperature - mx);
    sum += prob[i];
  }
  for (auto& v : prob) v /= sum;
  if (p.top_p < 1.0f) {
    double cum = 0;
    int64_t cut = keep;
    for (int64_t i = 0; i < keep; ++i) {
      cum += prob[i];
      if (cum >= p.top_p) {
        cut = i + 1;
        d.margin = std::min(d.margin, std::min(cum - p.top_p, p.top_p - (cum - prob[i])) / p.top_p);
        break;
      }
    }
    keep = cut;
  }
  if (p.min_p > 0.0f) {
    const double thr = p.min_p * prob[0];
    int64_t cut = 1;
    while (cut < keep && prob[cut] >= thr) ++cut;
    if (cut < keep) d.margin = std::min(d.margin, (thr - prob[cut]) / thr);
    if (cut > 1) d.margin = std::min(d.margin, (prob[cut - 1] - thr) / thr);
    keep = cut;
  }
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) total += prob[i];
  d.ids.assign(ids.begin(), ids.begin() + keep);
  d.prob.resize(keep);
  for (int64_t i = 0; i < keep; ++i) d.prob[i] = prob[i] / total;
  return d;
}

int32_t Sampler::Sample(std::span<const float> logits, const SamplingParams& p) {
  if (p.temperature <= 0.0f) return Argmax(logits);
  const SampleSupport d = SamplingSupport(logits, p);
  // The kept probabilities sum to 1 (up to rounding): draw in [0, total) over them in order.
  double total = 0;
  for (double v : d.prob) total += v;
  std::uniform_real_distribution<double> u(0.0, total);
  double r = u(rng_), acc = 0;
  for (size_t i = 0; i < d.prob.size(); ++i) {
    acc += d.prob[i];
    if (r < acc) return d.ids[i];
  }
  return d.ids.back();
}

}  // namespace gyre::ops
