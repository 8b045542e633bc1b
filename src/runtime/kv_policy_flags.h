// The KV cache policy of a CUDA model from the command line's flags (quant/kv_cache.h), shared by
// `gyre serve`, `gyre eval` and `gyre kv-policy-search`. Header-only, plain C++.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "quant/kv_cache.h"

namespace gyre {

// Per layer: true for an attention (MLA/DSA) layer, the layers a KV policy may name.
inline std::vector<bool> AttentionLayerMask(const ModelConfig& c) {
  std::vector<bool> m(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) m[l] = c.layer_types[l] != AttnKind::kKda;
  return m;
}

// `--kv-cache-policy FILE` when given, else a uniform `--kv-cache-dtype` (callers refuse both at once).
inline Result<KvCachePolicy> KvPolicyFromFlags(const ModelConfig& c, const std::string& dtype,
                                               const std::string& policy_file) {
  if (!policy_file.empty()) return LoadKvCachePolicy(policy_file, AttentionLayerMask(c));
  GYRE_ASSIGN_OR_RETURN(KvDtype d, ParseKvDtype(dtype));
  return UniformKvPolicy(c.num_hidden_layers, d);
}

}  // namespace gyre
