// Model parity against golden outputs of the reference (transformers), with the first diverging
// layer and op named. Goldens are safetensors files written by tools/golden/make_goldens.py:
// `input_ids` [T] i32, `logits` [T, V], and named intermediates of one full forward
// (`embed_tokens`, `layers.{i}.input_layernorm`, `.self_attn`, `.post_attention_layernorm`,
// `.mlp`, `layers.{i}`, `norm`), plus `greedy_ids` / `decode_logits` of a cached generation.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/safetensors.h"
#include "runtime/model.h"

namespace gyre {

struct ParityEntry {
  std::string name;  // capture name, in forward order
  double rel_l2 = 0, max_abs = 0;
  int64_t worst_index = -1;
  bool within = true;
};

struct ParityReport {
  std::vector<ParityEntry> entries;   // every capture present in both, in forward order
  std::optional<size_t> first_divergence;  // index into entries of the first one over tolerance
  double logits_rel_l2 = 0;
  double tolerance = 0;
  // "first divergence at layers.3.self_attn (dsa): rel-L2 2.1e-02 > 1e-03 ..." or "all within".
  std::string Summary(const ModelConfig& c) const;
};

// A safetensors tensor (any supported dtype) as fp32 values.
std::vector<float> TensorToF32(const TensorView& t);

// Runs one full forward of the golden's `input_ids` and compares every named intermediate with
// the golden file at `golden_path`. Errors: NotFound / DataLoss for the file, InvalidArgument if
// the golden does not fit the model (vocab, ids).
Result<ParityReport> CheckParity(const Model& model, const std::string& golden_path, double tolerance);

// The golden's greedy continuation: `greedy_ids` and the prompt (first `prompt_len` input ids).
struct GoldenGreedy {
  std::vector<int32_t> prompt, greedy;
  std::vector<float> decode_logits;  // [N, V], may be empty
};
Result<GoldenGreedy> LoadGoldenGreedy(const std::string& golden_path, int64_t prompt_len);

}  // namespace gyre
