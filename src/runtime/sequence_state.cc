#include "runtime/sequence_state.h"

namespace gyre {

SequenceState::SequenceState(const ModelConfig& c) {
  kda.resize(c.num_hidden_layers);
  attn.resize(c.num_hidden_layers);
  const int64_t P = c.linear_num_heads * c.linear_head_dim;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    if (c.layer_types[i] == AttnKind::kKda) {
      kda[i].conv.assign((c.linear_conv_kernel_dim - 1) * 3 * P, 0.0f);
      kda[i].recurrent.assign(c.linear_num_heads * c.linear_head_dim * c.linear_head_dim, 0.0f);
    }
  }
}

int64_t SequenceState::KdaBytes() const {
  int64_t b = 0;
  for (const auto& k : kda) b += (k.conv.size() + k.recurrent.size()) * sizeof(float);
  return b;
}

int64_t SequenceState::AttnBytes() const {
  int64_t b = 0;
  for (const auto& a : attn)
    b += (a.latent.size() + a.krot.size() + a.idx_k.size() + a.idx_gamma.size() + a.pool_keys.size()) * sizeof(float);
  return b;
}

}  // namespace gyre
