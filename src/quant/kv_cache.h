// Storage dtypes of the DSA/MLA cache rows on the GPU, and the per-layer policy that chooses them
// (docs/quantization.md "KV cache dtype"; issue 14 item 4).
//
// What is stored in the chosen dtype: the attention rows every key is read from at decode, the
// latent [rows, kv_lora_rank] and, when the config has one, the rotary key k_rot [rows, rope].
// The DSA indexer's rows (k_I, γ, pooled keys) and every KDA state stay fp32 (not offered: the
// indexer's top-k choice is discrete, and its rows are 3·index_head_dim of the row bytes).
//
// Row formats (one row per token slot; every row size a multiple of 16 bytes, so the kernels' 16-byte
// loads stay aligned):
//   fp32  width floats                                   4·width bytes
//   bf16  width bf16, round-to-nearest-even              2·width, rounded up to 16
//   fp8   width float8_e4m3fn codes, then one fp32 scale  round_up(width, 16) + 16
//         s = max(amax(row), 1e-4) / 448, code = e4m3(x / s) (saturating, quotient in fp32),
//         value = decode(code) · s
//   int8  width int8 codes, then one fp32 scale           round_up(width, 16) + 16
//         s = max(amax(row), 1e-8) / 127, code = clamp(round_half_even(x / s), ±127), value = code · s
// One scale per token row (and per part: latent and k_rot each have theirs), as the activation
// encoders of quant.h use per token. The GPU encoders are bit-exact with KvEncodeRow (tested).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gyre {

enum class KvDtype : int { kF32 = 0, kBf16 = 1, kFp8 = 2, kInt8 = 3 };

const char* KvDtypeName(KvDtype d);  // "fp32", "bf16", "fp8", "int8"
// Accepts the names above and vLLM's spellings: auto (fp32 here), float32, bfloat16, fp8_e4m3.
// fp8_e5m2 and anything else: InvalidArgument naming the value and the accepted ones.
Result<KvDtype> ParseKvDtype(std::string_view s);

// Bytes of one cache row of `width` values, and where a scaled row's fp32 scale sits.
int64_t KvRowBytes(KvDtype d, int64_t width);
int64_t KvScaleOffset(int64_t width);  // fp8 / int8 only: round_up(width, 16)

// Reference encoder / decoder of one row (the GPU's CacheWrite and the attention kernels' loads
// are checked against them). row: KvRowBytes(d, x.size()) bytes; padding bytes are written as 0.
void KvEncodeRow(KvDtype d, std::span<const float> x, uint8_t* row);
void KvDecodeRow(KvDtype d, const uint8_t* row, std::span<float> out);

// The dtype of every layer's cache (entries of KDA layers are unused and stay fp32).
struct KvCachePolicy {
  std::vector<KvDtype> layers;
  bool uniform_fp32() const;
  std::string Describe() const;  // "fp32" when uniform, else "bf16 x9, fp8 x2 (layers 3, 7)" style
};

// A uniform policy.
KvCachePolicy UniformKvPolicy(int64_t num_layers, KvDtype d);

// The policy file of `--kv-cache-policy` (JSON):
//   {"default": "bf16", "layers": {"3": "fp8", "11": "int8"}}
// `default` (optional, else fp32) applies to every attention layer not listed. Layer keys are
// decimal model layer indices; each must be an attention (MLA/DSA) layer of the model (is_attention
// [l] true): listing a KDA layer, an index out of range, an unknown dtype or any other top-level key is
// an InvalidArgument naming it. (A key given twice: the JSON parser keeps the last.)
Result<KvCachePolicy> ParseKvCachePolicy(std::string_view json_text, const std::vector<bool>& is_attention);
Result<KvCachePolicy> LoadKvCachePolicy(const std::string& path, const std::vector<bool>& is_attention);

}  // namespace gyre
