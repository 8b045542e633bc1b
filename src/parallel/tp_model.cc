#include "parallel/tp_model.h"

#include <string>

#include "parallel/shard.h"

namespace gyre::parallel {

namespace {

bool Quantized(const Matrix& m) { return m.quant != nullptr; }

bool AnyQuantized(const ModelWeights& w) {
  if (Quantized(w.embed) || Quantized(w.lm_head)) return true;
  for (const LayerWeights& l : w.layers) {
    const KdaWeights& k = l.kda;
    for (const Matrix* m : {&k.q, &k.k, &k.v, &k.f_a, &k.f_b, &k.b, &k.g_a, &k.g_b, &k.o})
      if (Quantized(*m)) return true;
    const MlaWeights& a = l.mla;
    for (const Matrix* m : {&a.q_a, &a.q_b, &a.q_proj, &a.kv_a, &a.kv_b, &a.o, &a.indexer.wq_b, &a.indexer.wk,
                            &a.indexer.weights_proj, &a.indexer.compress_gate})
      if (Quantized(*m)) return true;
    for (const MlpWeights* p : {&l.dense, &l.moe.shared})
      if (Quantized(p->gate) || Quantized(p->up) || Quantized(p->down)) return true;
    for (const MlpWeights& e : l.moe.experts)
      if (Quantized(e.gate) || Quantized(e.up) || Quantized(e.down)) return true;
  }
  return false;
}

// Rows [r0, r1) of each of `parts` consecutive blocks of `block` rows.
Matrix SliceBlocks(const Matrix& w, int parts, int64_t block, int64_t r0, int64_t r1) {
  Matrix m;
  m.rows = parts * (r1 - r0);
  m.cols = w.cols;
  for (int p = 0; p < parts; ++p) {
    const Matrix piece = SliceRows(w, p * block + r0, p * block + r1);
    m.data.insert(m.data.end(), piece.data.begin(), piece.data.end());
  }
  return m;
}

void ShardSwiGlu(MlpWeights* m, int size, int rank) {
  const Range i = Split(m->gate.rows, size, rank);
  m->gate = SliceRows(m->gate, i.begin, i.end);
  m->up = SliceRows(m->up, i.begin, i.end);
  m->down = SliceCols(m->down, i.begin, i.end);
}

Status NeedItems(const char* what, int64_t items, int size) {
  if (items < size)
    return Status::InvalidArgument("tensor parallel " + std::to_string(size) + ": " + what + " = " +
                                   std::to_string(items) + " has fewer items than ranks");
  return Status::Ok();
}

}  // namespace

Result<TpModelShard> ShardModelForTp(const ModelConfig& c, const ModelWeights& w, int size, int rank,
                                     const TpShardOptions& opts) {
  const bool ep = opts.expert_parallel;
  const bool shard_mlp = opts.shard_mlp || ep;
  if (size < 1 || rank < 0 || rank >= size)
    return Status::InvalidArgument("tensor parallel: rank " + std::to_string(rank) + " of " + std::to_string(size));
  if (AnyQuantized(w))
    return Status::Unimplemented("tensor parallel: quantized (W8A8) weights are not sharded yet; use the bf16 "
                                 "checkpoint or --tp 1");
  bool kda = false, mla = false, dense = false, moe = false;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    kda |= c.layer_types[l] == AttnKind::kKda;
    mla |= c.layer_types[l] != AttnKind::kKda;
    dense |= c.mlp_layer_types[l] == MlpKind::kDense;
    moe |= c.mlp_layer_types[l] != MlpKind::kDense;
  }
  if (kda) GYRE_RETURN_IF_ERROR(NeedItems("linear_num_heads", c.linear_num_heads, size));
  if (mla) GYRE_RETURN_IF_ERROR(NeedItems("num_attention_heads", c.num_attention_heads, size));
  if (shard_mlp && dense) GYRE_RETURN_IF_ERROR(NeedItems("intermediate_size", c.intermediate_size, size));
  if (shard_mlp && moe && !ep) GYRE_RETURN_IF_ERROR(NeedItems("moe_intermediate_size", c.moe_intermediate_size, size));
  if (ep && moe) GYRE_RETURN_IF_ERROR(NeedItems("n_routed_experts", c.n_routed_experts, size));
  if (ep && moe && c.n_shared_experts > 0)
    GYRE_RETURN_IF_ERROR(NeedItems("moe_intermediate_size x n_shared_experts",
                                   c.moe_intermediate_size * c.n_shared_experts, size));

  TpModelShard s;
  s.config = c;
  s.config.num_nextn_predict_layers = 0;
  const Range kh = Split(c.linear_num_heads, size, rank);
  const Range mh = Split(c.num_attention_heads, size, rank);
  s.config.linear_num_heads = kh.size();
  s.config.num_attention_heads = mh.size();
  if (shard_mlp) {
    s.config.intermediate_size = Split(c.intermediate_size, size, rank).size();
    if (!ep) s.config.moe_intermediate_size = Split(c.moe_intermediate_size, size, rank).size();
  }
  const Range experts = ep ? Split(c.n_routed_experts, size, rank) : Range{0, c.n_routed_experts};
  s.expert_begin = experts.begin;
  s.expert_count = experts.size();

  ModelWeights& o = s.weights;
  o.embed = w.embed;
  o.final_norm = w.final_norm;
  o.prefix = w.prefix;
  const int64_t V = c.vocab_size, D = c.hidden_size;
  s.vocab_rows = (V + size - 1) / size;
  {
    const int64_t r0 = std::min<int64_t>(V, rank * s.vocab_rows), r1 = std::min<int64_t>(V, r0 + s.vocab_rows);
    o.lm_head = SliceRows(w.lm_head, r0, r1);
    o.lm_head.rows = s.vocab_rows;
    o.lm_head.data.resize(s.vocab_rows * D, 0.0f);
  }
  o.layers.resize(w.layers.size());
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& in = w.layers[l];
    LayerWeights& out = o.layers[l];
    out.attn = in.attn;
    out.mlp = in.mlp;
    out.input_norm = in.input_norm;
    out.post_norm = in.post_norm;
    out.attn_hc = in.attn_hc;
    out.ffn_hc = in.ffn_hc;
    if (in.attn == AttnKind::kKda) {
      const KdaWeights& k = in.kda;
      KdaWeights& ko = out.kda;
      const int64_t K = c.linear_head_dim, P = c.linear_num_heads * K, c0 = kh.begin * K, c1 = kh.end * K;
      ko.q = SliceRows(k.q, c0, c1);
      ko.k = SliceRows(k.k, c0, c1);
      ko.v = SliceRows(k.v, c0, c1);
      ko.conv = SliceBlocks(k.conv, 3, P, c0, c1);
      ko.f_a = k.f_a;
      ko.g_a = k.g_a;
      ko.f_b = SliceRows(k.f_b, c0, c1);
      ko.g_b = SliceRows(k.g_b, c0, c1);
      ko.dt_bias = SliceVec(k.dt_bias, c0, c1);
      ko.a_log = SliceVec(k.a_log, kh.begin, kh.end);
      ko.b = SliceRows(k.b, kh.begin, kh.end);
      ko.o_norm = k.o_norm;
      ko.o = SliceCols(k.o, c0, c1);
    } else {
      const MlaWeights& a = in.mla;
      MlaWeights& ao = out.mla;
      const int64_t qk = c.qk_head_dim(), kvh = c.qk_nope_head_dim + c.v_head_dim, vh = c.v_head_dim;
      ao.q_a = a.q_a;
      ao.q_a_norm = a.q_a_norm;
      if (a.q_b.rows > 0) ao.q_b = SliceRows(a.q_b, mh.begin * qk, mh.end * qk);
      if (a.q_proj.rows > 0) ao.q_proj = SliceRows(a.q_proj, mh.begin * qk, mh.end * qk);
      ao.kv_a = a.kv_a;
      ao.kv_a_norm = a.kv_a_norm;
      ao.kv_b = SliceRows(a.kv_b, mh.begin * kvh, mh.end * kvh);
      ao.o = SliceCols(a.o, mh.begin * vh, mh.end * vh);
      ao.has_indexer = a.has_indexer;
      ao.indexer = a.indexer;
    }
    out.dense = in.dense;
    out.moe = in.moe;
    if (shard_mlp) {
      if (in.mlp == MlpKind::kDense) {
        ShardSwiGlu(&out.dense, size, rank);
      } else {
        if (ep) {
          out.moe.experts.assign(in.moe.experts.begin() + experts.begin, in.moe.experts.begin() + experts.end);
        } else {
          for (MlpWeights& e : out.moe.experts) ShardSwiGlu(&e, size, rank);
        }
        if (out.moe.has_shared) ShardSwiGlu(&out.moe.shared, size, rank);
      }
    }
  }
  return s;
}

Result<TpModelShard> ShardModelForPp(const ModelConfig& c, const ModelWeights& w, int size, int rank) {
  if (size < 1 || rank < 0 || rank >= size)
    return Status::InvalidArgument("pipeline parallel: stage " + std::to_string(rank) + " of " + std::to_string(size));
  GYRE_RETURN_IF_ERROR(NeedItems("num_hidden_layers", c.num_hidden_layers, size));
  const Range layers = Split(c.num_hidden_layers, size, rank);
  // A shared-indexer DSA layer takes the selection of the most recent full DSA layer of the step;
  // that layer must be on this stage.
  for (int64_t l = layers.begin; l < layers.end; ++l) {
    if (c.layer_types[l] != AttnKind::kDsa) continue;
    if (c.indexer_types[l] == IndexerKind::kFull) break;
    bool earlier_full = false;
    for (int64_t e = 0; e < layers.begin; ++e)
      earlier_full |= c.layer_types[e] == AttnKind::kDsa && c.indexer_types[e] == IndexerKind::kFull;
    if (earlier_full)
      return Status::Unimplemented("pipeline parallel: stage " + std::to_string(rank) + " starts at layer " +
                                   std::to_string(layers.begin) + ", whose DSA layer " + std::to_string(l) +
                                   " shares an earlier stage's indexer selection (not sent between stages yet)");
    break;
  }
  TpModelShard s;
  s.config = c;
  s.config.num_nextn_predict_layers = 0;
  s.config.num_hidden_layers = layers.size();
  auto cut = [&](auto& v) {
    using V = std::decay_t<decltype(v)>;
    v = V(v.begin() + layers.begin, v.begin() + layers.end);
  };
  cut(s.config.layer_types);
  cut(s.config.mlp_layer_types);
  if (static_cast<int64_t>(s.config.indexer_types.size()) == c.num_hidden_layers) cut(s.config.indexer_types);
  ModelWeights& o = s.weights;
  o.embed = w.embed;
  o.final_norm = w.final_norm;
  o.lm_head = w.lm_head;
  o.prefix = w.prefix;
  o.layers.assign(w.layers.begin() + layers.begin, w.layers.begin() + layers.end);
  s.vocab_rows = c.vocab_size;
  s.expert_count = 0;
  return s;
}

}  // namespace gyre::parallel
