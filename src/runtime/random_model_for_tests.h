// Test helpers over the CPU Model (tests only; header-only so it is not part of the gyre_runtime
// library): a model with random weights for a config.json text, and one fresh prefill's logits.
// Failures are test failures (ADD_FAILURE / EXPECT), not aborts.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/random_weights.h"
#include "runtime/model.h"

namespace gyre {

// A Model with RandomWeights(config, seed); null (and a test failure) for a bad config.
inline std::unique_ptr<Model> RandomModel(const char* config_json, uint64_t seed) {
  auto cfg = ParseModelConfig(config_json);
  if (!cfg.ok()) {
    ADD_FAILURE() << cfg.status().ToString();
    return nullptr;
  }
  auto w = RandomWeights(*cfg, seed);
  if (!w.ok()) {
    ADD_FAILURE() << w.status().ToString();
    return nullptr;
  }
  return Model::FromWeights(*cfg, std::move(*w));
}

// [ids.size(), V] logits of one fresh prefill over `ids` (what `gyre forward` writes); `hidden`
// (may be null) receives the pre-norm hidden states (SeqInput::hidden).
inline std::vector<float> FullLogits(const Model& m, std::span<const int32_t> ids,
                                     std::vector<float>* hidden = nullptr) {
  SequenceState st = m.NewSequence();
  SeqInput in{&st, ids, true, hidden};
  std::vector<float> logits;
  EXPECT_TRUE(m.Forward(std::span<const SeqInput>(&in, 1), &logits).ok());
  return logits;
}

}  // namespace gyre
