// Writing a quantized checkpoint (`gyre quantize`) and summarising the bytes of one (`gyre
// inspect`). Layout and formats: docs/quantization.md.
//
// The output folder is HF-shaped: `model.safetensors` with every tensor of the input (in name
// order), the quantized ones replaced by their quantized weight plus scale tensor, a config.json
// equal to the input's with a top-level `quantization_config`, and the input's other small files
// (tokenizer, generation config, chat template) copied. Which tensors are quantized: quant/policy.h.
//
//   fp8-block: `X.weight` F8_E4M3 [N, K] + `X.weight_scale_inv` F32 [ceil(N/bn), ceil(K/bk)];
//              quantization_config {quant_method: "fp8", fmt: "e4m3", weight_block_size: [bn, bk],
//              activation_scheme: "dynamic"} (DeepSeek-V3 / GLM-4.5-FP8).
//   int8:      `X.weight` I8 [N, K] + `X.weight_scale` F32 [N, 1];
//              quantization_config {quant_method: "gyre-int8", weight: "int8 symmetric per output
//              channel", activation_scheme: "dynamic" (per token, symmetric)}.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/safetensors.h"
#include "quant/scheme.h"

namespace gyre {

struct QuantizeOptions {
  QuantScheme scheme = QuantScheme::kFp8Block;
  int64_t block_n = 128, block_k = 128;  // fp8 only
  // Tensors whose full name matches one of these ECMAScript regexes (searched, not anchored)
  // stay in their checkpoint dtype even when quant/policy.h would quantize them: a mixed policy,
  // e.g. `layers\.0\.` keeps layer 0 whole.
  std::vector<std::string> keep;
};

struct QuantizeReport {
  int64_t num_tensors = 0;    // tensors in the input
  int64_t num_quantized = 0;  // of them, quantized
  int64_t num_kept = 0;       // the policy would quantize them, a `keep` pattern kept them
  int64_t bytes_in = 0, bytes_out = 0;  // tensor data, all files
};

// Quantizes the checkpoint in `model_dir` into `out_dir` (created if absent).
// Errors: InvalidArgument when the scheme is kNone, out_dir is model_dir, a keep pattern is not a
// valid regex, or the input is already quantized (its config has a quantization_config); NotFound / DataLoss / InvalidArgument from
// reading the input (config.json, safetensors); Unavailable when a file cannot be written (a
// partial output may remain).
Result<QuantizeReport> QuantizeCheckpoint(const std::string& model_dir, const std::string& out_dir,
                                          const QuantizeOptions& opts);

// Drops the quantized storage of every Matrix of `w` (Matrix::quant), leaving the dequantized
// values: the same weights run weight-only, without activation quantization (an ablation of
// `gyre quantize-eval --weight-only`). Returns how many matrices had quantized storage.
struct ModelWeights;
int64_t DropQuantizedStorage(ModelWeights* w);

// Tensor bytes of a checkpoint grouped by layer: key "layers.N" for `...layers.N.*` tensors, else
// "embed_tokens", "lm_head", "norm" or "other". `quantized` counts F8_E4M3 / I8 tensors and their
// scales; `high_precision` the rest.
struct GroupBytes {
  int64_t quantized = 0, high_precision = 0;
  int64_t num_quantized_weights = 0;
};
std::map<std::string, GroupBytes> BytesByLayer(const WeightFiles& files);

}  // namespace gyre
