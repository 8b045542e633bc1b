#include "model/random_weights.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sys/stat.h>

namespace gyre {

namespace {
uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}
bool EndsWith(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
bool Contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }
}  // namespace

Status RandomTensorSource::Fetch(const std::string& name, const std::vector<int64_t>& shape, bool keep_f32,
                                 std::vector<float>* out) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  out->resize(n);
  std::mt19937_64 rng(seed_ ^ Fnv1a(name));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  const int64_t fan_in = shape.size() >= 2 ? shape.back() : 1;
  for (auto& v : *out) {
    if (EndsWith(name, "A_log")) {
      v = std::log(1.0f + 15.0f * uni(rng));
    } else if (EndsWith(name, "dt_bias")) {
      v = -2.0f + 3.0f * uni(rng);
    } else if (EndsWith(name, "e_score_correction_bias")) {
      v = 0.05f * normal(rng);
    } else if (EndsWith(name, "k_norm.bias")) {
      v = 0.1f * normal(rng);
    } else if (Contains(name, "norm")) {
      v = 1.0f + 0.1f * normal(rng);
    } else if (EndsWith(name, "_fn")) {
      v = 0.02f * normal(rng);
    } else if (EndsWith(name, "_base") || EndsWith(name, "_scale")) {
      v = 0.5f * normal(rng);
    } else if (Contains(name, "conv1d")) {
      v = 0.5f * normal(rng);
    } else if (EndsWith(name, "compress_ape")) {
      v = 0.5f * normal(rng);
    } else if (EndsWith(name, "embed_tokens.weight")) {
      v = normal(rng);
    } else {
      v = normal(rng) / std::sqrt(static_cast<float>(fan_in));
    }
  }
  if (!keep_f32) RoundBf16InPlace(*out);
  if (record_) recorded_.push_back({name, shape, *out, keep_f32});
  return Status();
}

Result<ModelWeights> RandomWeights(const ModelConfig& config, uint64_t seed) {
  RandomTensorSource src(seed, false);
  return BindWeightsFrom(config, src, WeightPrefix(config));
}

Status WriteRandomCheckpoint(const std::string& config_json, const std::string& dir, uint64_t seed) {
  GYRE_ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(config_json));
  RandomTensorSource src(seed, true);
  auto w = BindWeightsFrom(config, src, WeightPrefix(config));
  if (!w) return w.error();
  ::mkdir(dir.c_str(), 0755);
  {
    std::ofstream f(dir + "/config.json");
    if (!f) return Status::Unavailable("cannot write " + dir + "/config.json");
    f << config_json;
  }
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<TensorToWrite> tensors;
  bytes.reserve(src.recorded().size());
  for (const auto& r : src.recorded()) {
    std::vector<uint8_t> b;
    if (r.keep_f32) {
      b.resize(r.values.size() * 4);
      std::memcpy(b.data(), r.values.data(), b.size());
    } else {
      b.resize(r.values.size() * 2);
      for (size_t i = 0; i < r.values.size(); ++i) {
        const uint16_t h = F32ToBf16(r.values[i]);
        std::memcpy(&b[2 * i], &h, 2);
      }
    }
    bytes.push_back(std::move(b));
    tensors.push_back({r.name, r.keep_f32 ? DType::kF32 : DType::kBF16, r.shape, bytes.back()});
  }
  return WriteSafetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
}

}  // namespace gyre
