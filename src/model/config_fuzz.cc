// libFuzzer target: config.json text → ParseModelConfig (model/config.h), then what `gyre inspect`
// does with an accepted config: Summarize (runtime/model.h) and WeightPrefix.
//
// Whatever the bytes, parsing must neither crash, hang, throw nor overflow (UBSan), and a refusal
// is InvalidArgument. An accepted config keeps the contract the model code relies on (trap on
// violation):
//   * vocab_size, hidden_size and num_hidden_layers are positive; layer_types and
//     mlp_layer_types have num_hidden_layers entries and indexer_types at least that many;
//   * KDA layers have positive head counts, sizes and conv width;
//   * MoE layers have 1 <= num_experts_per_tok <= n_routed_experts, and n_group divides the
//     experts into groups of at least 2 with topk_group in [1, n_group];
//   * num_nextn_predict_layers is 0 or 1;
//   * Summarize's counts add up (num_kda + num_dsa + num_mla and num_dense + num_moe are
//     num_hidden_layers).
//
// Run: scripts/fuzz.sh (seeds: src/model/testdata/fuzz_config/, the fixtures' config.json files).
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/config.h"
#include "model/weights.h"
#include "runtime/model.h"

namespace {

void CheckAccepted(const gyre::ModelConfig& c) {
  using gyre::AttnKind;
  using gyre::MlpKind;
  const int64_t L = c.num_hidden_layers;
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || L <= 0) __builtin_trap();
  if (static_cast<int64_t>(c.layer_types.size()) != L || static_cast<int64_t>(c.mlp_layer_types.size()) != L ||
      static_cast<int64_t>(c.indexer_types.size()) < L) {
    __builtin_trap();
  }
  if (c.NumLayers(AttnKind::kKda) > 0 &&
      (c.linear_num_heads <= 0 || c.linear_head_dim <= 0 || c.linear_conv_kernel_dim <= 0)) {
    __builtin_trap();
  }
  bool any_moe = false;
  for (MlpKind m : c.mlp_layer_types) any_moe |= m == MlpKind::kMoe;
  if (any_moe) {
    if (c.num_experts_per_tok < 1 || c.num_experts_per_tok > c.n_routed_experts) __builtin_trap();
    if (c.n_group < 1 || c.n_routed_experts % c.n_group != 0 || c.n_routed_experts / c.n_group < 2) __builtin_trap();
    if (c.topk_group < 1 || c.topk_group > c.n_group) __builtin_trap();
  }
  if (c.num_nextn_predict_layers != 0 && c.num_nextn_predict_layers != 1) __builtin_trap();

  const gyre::ModelSummary s = gyre::Summarize(c);
  if (s.num_kda + s.num_dsa + s.num_mla != L || s.num_dense + s.num_moe != L) __builtin_trap();
  (void)gyre::WeightPrefix(c);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = gyre::ParseModelConfig(text);
  if (config.ok()) {
    CheckAccepted(*config);
  } else if (config.error().code() != gyre::StatusCode::kInvalidArgument) {
    __builtin_trap();
  }
  return 0;
}
