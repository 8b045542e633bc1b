// SequenceState: everything one sequence carries between forward steps.
//
// KDA layers: the last W-1 pre-conv inputs (conv tail) and the fp32 recurrent state [H, K, V]
// (K-first) — constant size. DSA / MLA layers: the latent c [T, kv_lora] (+ the shared k_rot
// [T, rope] for kimi_linear), and for indexer layers the indexer keys k_I [T, d], pool gate logits
// γ [T, d] and the pooled keys of completed pools [P, d] (computed once per pool).
//
// Thread safety: owned by one sequence; a forward step mutates it. Not copyable by accident.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace gyre {

struct KdaLayerState {
  std::vector<float> conv;       // [W-1, 3P]
  std::vector<float> recurrent;  // [H, K, V]
};

struct AttnLayerState {
  std::vector<float> latent;     // [T, kv_lora]
  std::vector<float> krot;       // [T, rope]
  std::vector<float> idx_k;      // [T, d]
  std::vector<float> idx_gamma;  // [T, d]
  std::vector<float> pool_keys;  // [P, d]
  int64_t num_pools = 0;
};

struct SequenceState {
  explicit SequenceState(const ModelConfig& c);
  SequenceState(SequenceState&&) = default;
  SequenceState& operator=(SequenceState&&) = default;
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;

  int64_t num_tokens = 0;             // tokens already processed
  std::vector<KdaLayerState> kda;     // per layer (empty for non-KDA layers)
  std::vector<AttnLayerState> attn;   // per layer (empty for KDA layers)

  // Bytes held now: KDA state (constant) and attention cache (grows with num_tokens).
  int64_t KdaBytes() const;
  int64_t AttnBytes() const;
};

}  // namespace gyre
