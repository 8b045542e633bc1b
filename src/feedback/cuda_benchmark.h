// GPU model benchmark (CUDA builds only): `gyre bench model --backend cuda --config FILE
// --random-weights`. Builds the config's weights directly in GPU memory (bf16 GEMM operands by
// default), then measures in one run:
//   ceilings   device-to-device copy bandwidth (read + write bytes / time) and the bf16 GEMM rate
//              (cuBLASLt, 8192³)
//   prefill    tokens/s for each prompt length, in pieces of `prefill_chunk` tokens
//   decode     tokens/s for each batch size at `context` tokens of history (one eager step per
//              token, host loop included), and the step's bandwidth roofline: bytes of weights
//              touched (all dense weights, the expected distinct experts of the batch), KDA state
//              read + write, DSA indexer keys and selected latent rows, over the copy bandwidth
//   layers     per-layer milliseconds of the last step of each measurement (CUDA events), and a
//              projection to `project_layers` layers of the config's layer pattern from the
//              per-(attention, MLP) type costs
// Numbers, not assertions.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/config.h"
#include "quant/kv_cache.h"

namespace gyre {

struct CudaBenchOptions {
  std::vector<int64_t> prompt_lens{4096, 32768};
  std::vector<int64_t> batches{1, 16, 64, 256};
  int64_t context = 1024;
  int64_t steps = 32;
  int64_t prefill_chunk = 8192;
  uint64_t seed = 0;
  bool bf16 = true;
  int64_t project_layers = 45;  // 0: no projection
  KvDtype kv_cache = KvDtype::kF32;  // every attention layer's latent / k_rot rows
};

Result<nlohmann::json> BenchCudaModel(const ModelConfig& config, const CudaBenchOptions& opts);

}  // namespace gyre
