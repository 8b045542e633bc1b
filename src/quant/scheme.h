// The weight/activation quantization schemes gyre loads and runs (docs/quantization.md).
//
//   kFp8Block:   weights float8_e4m3fn with one fp32 `weight_scale_inv` per [block_n, block_k]
//                block (DeepSeek-V3 / GLM-4.5-FP8 checkpoints: quant_method "fp8"); activations
//                quantized on the fly per token and block_k-channel group.
//   kInt8Channel: weights int8 with one fp32 `weight_scale` per output channel (symmetric);
//                activations int8 per token (dynamic, symmetric); int32 accumulation. gyre's own
//                scheme: quant_method "gyre-int8".
#pragma once

#include <cstdint>
#include <string>

namespace gyre {

enum class QuantScheme { kNone, kFp8Block, kInt8Channel };

// "none", "fp8-block", "int8" (the spellings of `gyre quantize --scheme`).
const char* QuantSchemeName(QuantScheme s);

// The `quantization_config` of a config.json, as far as gyre uses it.
struct QuantConfig {
  QuantScheme scheme = QuantScheme::kNone;
  std::string quant_method;             // as written: "fp8", "gyre-int8"; empty when none
  int64_t block_n = 128, block_k = 128;  // fp8 weight_block_size [out, in]
};

}  // namespace gyre
