#include "parallel/memory_plan.h"

#include "quant/kv_cache.h"

#include <algorithm>
#include <cstdio>

#include "model/model_size.h"
#include "parallel/shard.h"

namespace gyre::parallel {

const char* WeightDtypeName(WeightDtype d) {
  switch (d) {
    case WeightDtype::kBf16: return "bf16";
    case WeightDtype::kFp8: return "fp8";
    case WeightDtype::kInt8: return "int8";
  }
  return "?";
}

const char* CacheDtypeName(CacheDtype d) {
  switch (d) {
    case CacheDtype::kBf16: return "bf16";
    case CacheDtype::kFp8: return "fp8";
    case CacheDtype::kInt8: return "int8";
    case CacheDtype::kFp32: return "fp32";
  }
  return "?";
}

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t Largest(int64_t total, int64_t n) { return Split(total, static_cast<int>(n), 0).size(); }

// Bytes of `elems` GEMM-weight elements stored as `d` (scales included; see WeightDtype).
// NOTE: the int8 scale count takes every matrix's input width as D: exact for projections that
// read the hidden state, (D / I)× too low for the down projections (< 0.2 % of their bytes).
int64_t GemmBytes(int64_t elems, WeightDtype d, int64_t hidden) {
  switch (d) {
    case WeightDtype::kBf16: return 2 * elems;
    case WeightDtype::kFp8: return elems + 4 * CeilDiv(elems, 128 * 128);
    case WeightDtype::kInt8: return elems + 4 * CeilDiv(elems, hidden);
  }
  return 0;
}

// Cache bytes per token of one attention layer, as the CUDA model stores it (quant/kv_cache.h): the
// latent and k_rot rows in the cache dtype (bf16 / fp8 / int8 rows padded to 16 bytes, the 8-bit
// ones with an fp32 scale), the indexer's k_I and γ rows in fp32 whatever the dtype, and its pooled
// keys in fp32, one row per pool of index_kpool tokens when that divides the page (rounded up to a
// byte per token), else one row per token (ops/cuda/mla_cuda.h PoolKeyDiv).
int64_t CacheBytesPerToken(const ModelConfig& c, int64_t layer, CacheDtype d, int64_t page_tokens) {
  const AttnCacheElems e = ComputeAttnCacheElems(c, layer);
  if (e.total() == 0) return 0;
  const KvDtype kv = d == CacheDtype::kBf16 ? KvDtype::kBf16
                     : d == CacheDtype::kFp8 ? KvDtype::kFp8
                     : d == CacheDtype::kInt8 ? KvDtype::kInt8
                                              : KvDtype::kF32;
  int64_t b = 0;
  if (e.latent > 0) b += KvRowBytes(kv, e.latent);
  if (e.krot > 0) b += KvRowBytes(kv, e.krot);
  const int64_t m = c.index_kpool, div = m > 0 && page_tokens % m == 0 ? m : 1;
  return b + 4 * (e.index_key + e.index_gamma) + (4 * e.index_key + div - 1) / div;  // k_I, γ, pooled keys
}

Status CheckShape(const ModelConfig& c, const PlanOptions& o) {
  auto bad = [](const std::string& m) { return Status::InvalidArgument("plan: " + m); };
  for (auto [name, v] : {std::pair<const char*, int64_t>{"--gpus", o.num_gpus}, {"--tp", o.tp}, {"--ep", o.ep},
                         {"--pp", o.pp}, {"--cp", o.cp}, {"--max-num-seqs", o.max_num_seqs},
                         {"--max-model-len", o.max_model_len}, {"--max-batch-tokens", o.max_batch_tokens},
                         {"page_tokens", o.page_tokens}}) {
    if (v < 1) return bad(std::string(name) + " must be >= 1 (got " + std::to_string(v) + ")");
  }
  if (o.gpu_memory_bytes <= 0) return bad("--gpu-memory must be > 0");
  if (o.reserve_bytes < 0) return bad("--reserve must be >= 0");
  if (o.num_gpus % o.pp != 0) {
    return bad(std::to_string(o.num_gpus) + " GPUs do not split into pp=" + std::to_string(o.pp) + " equal stages");
  }
  const int64_t g = o.num_gpus / o.pp;
  if (g % (o.tp * o.cp) != 0) {
    return bad("a stage's " + std::to_string(g) + " GPUs are not a multiple of tp·cp = " + std::to_string(o.tp * o.cp));
  }
  if (g % o.ep != 0) {
    return bad("ep=" + std::to_string(o.ep) + " does not divide a stage's " + std::to_string(g) + " GPUs");
  }
  if (o.pp > c.num_hidden_layers) {
    return bad("pp=" + std::to_string(o.pp) + " exceeds the " + std::to_string(c.num_hidden_layers) + " layers");
  }
  const bool has_kda = c.NumLayers(AttnKind::kKda) > 0, has_attn = c.num_hidden_layers > c.NumLayers(AttnKind::kKda);
  if (has_kda && o.tp > c.linear_num_heads) {
    return bad("tp=" + std::to_string(o.tp) + " exceeds the " + std::to_string(c.linear_num_heads) + " KDA heads");
  }
  if (has_attn && o.tp > c.num_attention_heads) {
    return bad("tp=" + std::to_string(o.tp) + " exceeds the " + std::to_string(c.num_attention_heads) + " MLA heads");
  }
  if (c.vocab_size % o.tp != 0) {
    return bad("the vocabulary " + std::to_string(c.vocab_size) + " is not divisible by tp=" + std::to_string(o.tp) +
               " (the LM head's all-gather needs equal slices)");
  }
  const bool has_moe = std::count(c.mlp_layer_types.begin(), c.mlp_layer_types.end(), MlpKind::kMoe) > 0;
  if (has_moe && o.ep > c.n_routed_experts) {
    return bad("ep=" + std::to_string(o.ep) + " exceeds the " + std::to_string(c.n_routed_experts) + " routed experts");
  }
  if (o.cp > 1 && !has_kda) return bad("cp > 1 splits KDA prefill, and the model has no KDA layer");
  if (o.max_num_seqs > (int64_t(1) << 40) || o.max_model_len > (int64_t(1) << 40)) {
    return bad("--max-num-seqs and --max-model-len must be <= 2^40");
  }
  // Byte sums below are int64: refuse configs whose parameters alone approach that.
  __int128 elems = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) elems += ComputeLayerParams(c, l).total();
  if (elems > (__int128(1) << 56)) return bad("the model has more than 2^56 parameters");
  return Status::Ok();
}

// Weights of one GPU of the stage covering layers [b, e).
void StageWeights(const ModelConfig& c, const PlanOptions& o, bool first, bool last, StageMemory* s) {
  const int64_t D = c.hidden_size;
  const WeightDtype w = o.weights;
  const OuterParams outer = ComputeOuterParams(c);
  if (first) s->embedding = 2 * outer.embedding;
  if (last) {
    // A tied LM head reads the embedding; a last stage that is not the first keeps its own copy.
    const int64_t head = outer.lm_head > 0 ? outer.lm_head : (first ? 0 : outer.embedding);
    s->lm_head = 2 * (head / c.vocab_size) * Largest(c.vocab_size, o.tp);
    s->norms_hc_router += 4 * outer.final_norm;
  }
  for (int64_t l = s->layer_begin; l < s->layer_end; ++l) {
    const LayerParams p = ComputeLayerParams(c, l);
    s->kda += GemmBytes(p.kda_per_head * Largest(p.num_kda_heads, o.tp) + p.kda_replicated, w, D);
    s->attention += GemmBytes(p.mla_per_head * Largest(p.num_mla_heads, o.tp) + p.mla_replicated, w, D);
    s->attention += 2 * p.indexer;
    s->dense_mlp += GemmBytes(p.dense_mlp, w, D);
    s->routed_experts += GemmBytes(p.routed_per_expert * Largest(p.num_routed_experts, o.ep), w, D);
    s->shared_experts += GemmBytes(p.shared_experts, w, D);
    s->norms_hc_router += 4 * (p.norms_hc + p.router);
  }
}

// Cache, state and activations of one GPU of stage `s` for `seqs` sequences of `len` tokens on its
// replica. 128-bit: the capacity searches probe counts whose products overflow int64.
struct StageLoad {
  __int128 cache = 0, state = 0, act = 0;
};

StageLoad Load(const ModelConfig& c, const PlanOptions& o, const StageMemory& s, int64_t seqs, int64_t len) {
  StageLoad r;
  r.cache = __int128(s.cache_bytes_per_token) * (CeilDiv(len, o.page_tokens) * o.page_tokens) * seqs;
  r.state = __int128(s.kda_state_bytes_per_sequence) * seqs;
  r.act = ActivationBytes(c, o, s.layer_begin, s.layer_end, o.max_batch_tokens, len,
                          std::min(seqs, o.max_batch_tokens));
  return r;
}

bool Fits(const ModelConfig& c, const PlanOptions& o, const StageMemory& s, int64_t seqs, int64_t len) {
  const StageLoad l = Load(c, o, s, seqs, len);
  return __int128(s.weights()) + s.reserve_bytes + l.cache + l.state + l.act <= o.gpu_memory_bytes;
}

// Stored amounts saturate at 2^60 bytes, so a StageMemory's sums cannot overflow.
int64_t Clamp64(__int128 v) { return static_cast<int64_t>(std::min<__int128>(v, int64_t(1) << 60)); }

// The largest x in [0, hi] with ok(x) (ok is monotone: true up to some point).
template <typename F>
int64_t LargestTrue(int64_t hi, F ok) {
  if (!ok(1)) return 0;
  int64_t lo = 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (ok(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

std::string GiB(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1 << 30));
  return buf;
}

std::string Refusal(const MemoryPlan& p) {
  const StageMemory& s = p.stages[p.worst_stage];
  const PlanOptions& o = p.options;
  const std::string where = p.stages.size() > 1 ? "stage " + std::to_string(s.stage) + ": " : "";
  const std::string have = " > " + GiB(o.gpu_memory_bytes) + " per GPU";
  if (s.weights() + s.reserve_bytes > o.gpu_memory_bytes) {
    return where + "weights " + GiB(s.weights()) + " + reserve " + GiB(s.reserve_bytes) + have +
           " before any cache: shard further (--tp, --ep, --pp), use --weights fp8|int8, or add GPUs";
  }
  std::string m = where + "weights " + GiB(s.weights()) + " + DSA cache " + GiB(s.cache_bytes) + " + KDA state " +
                  GiB(s.kda_state_bytes) + " + activations " + GiB(s.activation_bytes) + " + reserve " +
                  GiB(s.reserve_bytes) + " = " + GiB(s.used()) + have + " for " + std::to_string(o.max_num_seqs) +
                  " sequences of " + std::to_string(o.max_model_len) + " tokens";
  if (p.max_seqs_at_max_model_len > 0) {
    m += "; at most " + std::to_string(p.max_seqs_at_max_model_len) + " sequences of that length fit";
  } else {
    m += "; not one sequence of that length fits (longest single request: " +
         std::to_string(p.max_context_per_request) + " tokens)";
  }
  return m;
}

}  // namespace

int64_t ActivationBytes(const ModelConfig& c, const PlanOptions& o, int64_t layer_begin, int64_t layer_end,
                        int64_t batch_tokens, int64_t context, int64_t logit_rows) {
  const int64_t D = c.hidden_size, n = std::max<int64_t>(c.hc_mult, 1);
  bool kda = false, attn = false, indexer = false, moe = false, dense = false;
  for (int64_t l = layer_begin; l < layer_end; ++l) {
    kda |= c.layer_types[l] == AttnKind::kKda;
    attn |= c.layer_types[l] != AttnKind::kKda;
    indexer |= c.layer_types[l] == AttnKind::kDsa && c.indexer_types[l] == IndexerKind::kFull;
    moe |= c.mlp_layer_types[l] == MlpKind::kMoe;
    dense |= c.mlp_layer_types[l] == MlpKind::kDense;
  }
  // Floats per token of the step, each term a buffer of the CUDA model's step scratch.
  int64_t per_token = (n + 7) * D;  // residual streams + norm / mixer / residual temporaries
  if (kda) per_token += 11 * Largest(c.linear_num_heads, o.tp) * c.linear_head_dim;  // u (3P), q k v f g z o yn
  if (attn) {
    const int64_t h = Largest(c.num_attention_heads, o.tp), R = c.kv_lora_rank;
    per_token += h * (c.qk_head_dim() + c.v_head_dim) + R + c.q_lora_rank;  // q, attention out, latent, q residual
    per_token += 2 * h * R;                                                 // absorbed q and output in latent space
  }
  if (indexer) per_token += c.index_n_heads * c.index_head_dim + 2 * c.index_head_dim + c.index_n_heads;
  int64_t width = dense ? c.intermediate_size : 0;
  if (moe) width = std::max(width, c.moe_intermediate_size * std::max<int64_t>(c.n_shared_experts, 1));
  per_token += 3 * width;  // SwiGLU gate|up and activation
  if (moe) {
    const int64_t k = c.num_experts_per_tok;
    per_token += c.n_routed_experts + 2 * k + k * (D + 3 * c.moe_intermediate_size);  // router, gathered rows
    if (o.ep > 1) per_token += 2 * k * D;  // dispatch + combine receive buffers
  }
  int64_t bytes = 4 * batch_tokens * per_token;
  if (indexer) bytes += 4 * batch_tokens * CeilDiv(context, c.index_kpool);  // pool scores of the chunk
  if (layer_end == c.num_hidden_layers) bytes += 4 * logit_rows * c.vocab_size;
  return bytes;
}

Result<MemoryPlan> PlanMemory(const ModelConfig& c, const PlanOptions& o) {
  GYRE_RETURN_IF_ERROR(CheckShape(c, o));
  MemoryPlan p;
  p.options = o;
  p.gpus_per_stage = o.num_gpus / o.pp;
  p.dp = p.gpus_per_stage / (o.tp * o.cp);
  p.seqs_per_replica = CeilDiv(o.max_num_seqs, p.dp);
  for (int64_t s = 0; s < o.pp; ++s) {
    StageMemory m;
    const Range r = Split(c.num_hidden_layers, static_cast<int>(o.pp), static_cast<int>(s));
    m.stage = s;
    m.layer_begin = r.begin;
    m.layer_end = r.end;
    StageWeights(c, o, s == 0, s == o.pp - 1, &m);
    for (int64_t l = r.begin; l < r.end; ++l) {
      m.cache_bytes_per_token += CacheBytesPerToken(c, l, o.kv_cache, o.page_tokens);
      const KdaStateElems st = ComputeKdaStateElems(c, l);
      if (st.recurrent == 0) continue;
      const int64_t heads = Largest(c.linear_num_heads, o.tp);
      m.kda_state_bytes_per_sequence += 4 * (st.conv_tail + st.recurrent) / c.linear_num_heads * heads;
    }
    m.reserve_bytes = o.reserve_bytes;
    const StageLoad l = Load(c, o, m, p.seqs_per_replica, o.max_model_len);
    m.cache_bytes = Clamp64(l.cache);
    m.kda_state_bytes = Clamp64(l.state);
    m.activation_bytes = Clamp64(l.act);
    m.headroom_bytes = o.gpu_memory_bytes - m.used();
    if (s == 0 || m.headroom_bytes < p.stages[p.worst_stage].headroom_bytes) p.worst_stage = s;
    p.stages.push_back(m);
  }
  // Capacity answers: every stage must hold its part of the sequences.
  const int64_t max_len = int64_t(1) << 40;
  auto all_fit = [&](int64_t seqs, int64_t len) {
    return std::all_of(p.stages.begin(), p.stages.end(),
                       [&](const StageMemory& s) { return Fits(c, o, s, seqs, len); });
  };
  p.max_context_per_request =
      LargestTrue(max_len / o.page_tokens, [&](int64_t pages) { return all_fit(1, pages * o.page_tokens); }) *
      o.page_tokens;
  p.max_seqs_at_max_model_len =
      LargestTrue(max_len, [&](int64_t seqs) { return all_fit(seqs, o.max_model_len); }) * p.dp;
  if (p.stages[p.worst_stage].headroom_bytes < 0) p.refusal = Refusal(p);
  return p;
}

}  // namespace gyre::parallel
