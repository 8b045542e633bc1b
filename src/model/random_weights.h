// Random weights for any glm5_next / kimi_linear config, without files (benchmarks, tests):
// values are deterministic in (seed, tensor name), scaled so activations neither vanish nor
// explode through many layers, and rounded to bf16 except the tensors the reference keeps fp32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/weights.h"

namespace gyre {

class RandomTensorSource : public TensorSource {
 public:
  // `record`: keep (name, shape, values) of every fetched tensor for WriteCheckpoint.
  RandomTensorSource(uint64_t seed, bool record) : seed_(seed), record_(record) {}
  Status Fetch(const std::string& name, const std::vector<int64_t>& shape, bool keep_f32,
               std::vector<float>* out) override;

  struct Recorded {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> values;
    bool keep_f32;
  };
  const std::vector<Recorded>& recorded() const { return recorded_; }

 private:
  uint64_t seed_;
  bool record_;
  std::vector<Recorded> recorded_;
};

// Builds random weights for `config` in memory.
Result<ModelWeights> RandomWeights(const ModelConfig& config, uint64_t seed);

// Writes a loadable checkpoint folder: `config_json` as config.json and model.safetensors with the
// on-disk names (bf16, fp32 for the fp32-kept tensors). Errors: InvalidArgument for a bad config,
// Unavailable when the folder cannot be written.
Status WriteRandomCheckpoint(const std::string& config_json, const std::string& dir, uint64_t seed);

}  // namespace gyre
