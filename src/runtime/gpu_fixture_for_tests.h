// Helpers of the GPU test binaries (test_quant_gpu, test_kv_cache_gpu): where the glm5_mini fixture
// is, its golden token ids, and the small CudaModel options both use. Test-only; needs gtest and GYRE_SOURCE_DIR.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "model/safetensors.h"
#include "runtime/cuda_model.h"
#include "runtime/parity.h"

namespace gyre {

// The fixture under the working directory when there (a packed binary run from another checkout's
// root, as scripts/gpu_check.sh does), else under the source tree it was built from.
inline std::string Glm5MiniDir() {
  return std::filesystem::exists("tests/fixtures/glm5_mini/config.json")
             ? std::string("tests/fixtures/glm5_mini")
             : std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/glm5_mini";
}

// The first n input ids of the fixture's golden_long.safetensors (a real text).
inline std::vector<int32_t> GoldenIds(const std::string& dir, size_t n) {
  auto f = SafetensorsFile::Open(dir + "/golden_long.safetensors");
  EXPECT_TRUE(f.ok());
  std::vector<int32_t> ids;
  if (!f.ok()) return ids;
  for (float v : TensorToF32((*f)->tensors().at("input_ids"))) ids.push_back(static_cast<int32_t>(v));
  ids.resize(std::min(ids.size(), n));
  return ids;
}

// The CudaModel sizes of these tests: 4 sequences, 128-token steps, 1024 cache tokens, 16-token pages.
inline CudaModelOptions SmallCudaOptions(bool bf16) {
  CudaModelOptions o;
  o.bf16_weights = bf16;
  o.max_seqs = 4;
  o.max_batch_tokens = 128;
  o.kv_tokens = 1024;
  o.page_tokens = 16;
  return o;
}

}  // namespace gyre
