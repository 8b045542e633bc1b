// TP plans. Sections: KDA over heads; MLA over heads; LM head over the vocabulary.
#include "parallel/tensor_parallel.h"

#include <cmath>
#include <cstring>

#include "ops/attention.h"
#include "ops/basic.h"
#include "ops/kda.h"
#include "ops/sampling.h"
#include "parallel/reference.h"

namespace gyre::parallel {

namespace {
const Numerics kF32{};
}  // namespace

// ---- KDA over heads ------------------------------------------------------------------------------

KdaTpShard ShardKda(const KdaWeights& w, const ModelConfig& c, int size, int rank) {
  const int64_t K = c.linear_head_dim, P = c.linear_num_heads * K;
  KdaTpShard s;
  s.heads = Split(c.linear_num_heads, size, rank);
  const int64_t c0 = s.heads.begin * K, c1 = s.heads.end * K;  // this rank's channels of one of q/k/v
  s.q = SliceRows(w.q, c0, c1);
  s.k = SliceRows(w.k, c0, c1);
  s.v = SliceRows(w.v, c0, c1);
  s.f_a = w.f_a;
  s.g_a = w.g_a;
  s.f_b = SliceRows(w.f_b, c0, c1);
  s.g_b = SliceRows(w.g_b, c0, c1);
  s.dt_bias = SliceVec(w.dt_bias, c0, c1);
  s.a_log = SliceVec(w.a_log, s.heads.begin, s.heads.end);
  s.b = SliceRows(w.b, s.heads.begin, s.heads.end);
  // conv rows are [q channels | k channels | v channels]; keep this rank's slice of each.
  s.conv.rows = 3 * (c1 - c0);
  s.conv.cols = w.conv.cols;
  for (int part = 0; part < 3; ++part) {
    const Matrix piece = SliceRows(w.conv, part * P + c0, part * P + c1);
    s.conv.data.insert(s.conv.data.end(), piece.data.begin(), piece.data.end());
  }
  s.o_norm = w.o_norm;
  s.o = SliceCols(w.o, c0, c1);
  return s;
}

Status KdaTpForward(Communicator& comm, const KdaTpShard& w, const ModelConfig& c, const float* x, int64_t n,
                    KdaLayerTrace* t) {
  const int64_t Hl = w.heads.size(), K = c.linear_head_dim, Pl = Hl * K, D = c.hidden_size,
                W = c.linear_conv_kernel_dim;
  const ops::KdaShape shape{Hl, K};
  // kda.proj: column-parallel, no communication.
  t->u.resize(n * 3 * Pl);
  std::vector<float> part(n * Pl), fa(n * K), f(n * Pl), braw(n * Hl), za(n * K);
  const Matrix* mats[3] = {&w.q, &w.k, &w.v};
  for (int i = 0; i < 3; ++i) {
    ops::Linear(x, n, *mats[i], part.data(), kF32);
    PutColumns(part.data(), n, Pl, t->u.data(), 3 * Pl, i * Pl);
  }
  t->g.resize(n * Pl);
  ops::Linear(x, n, w.f_a, fa.data(), kF32);
  ops::Linear(fa.data(), n, w.f_b, f.data(), kF32);
  ops::KdaGate(f.data(), n, shape, w.dt_bias, w.a_log, c.linear_lower_bound, t->g.data());
  ops::Linear(x, n, w.b, braw.data(), kF32);
  t->beta.resize(n * Hl);
  for (int64_t i = 0; i < n * Hl; ++i) t->beta[i] = ops::Sigmoid(braw[i]);
  t->z.resize(n * Pl);
  ops::Linear(x, n, w.g_a, za.data(), kF32);
  ops::Linear(za.data(), n, w.g_b, t->z.data(), kF32);

  // kda.conv: depthwise, so each rank convolves its own channels.
  t->conv.resize(n * 3 * Pl);
  std::vector<float> conv_state((W - 1) * 3 * Pl, 0.0f);
  ops::CausalConv1dSilu(t->u.data(), n, 3 * Pl, w.conv.data.data(), W, conv_state.data(), t->conv.data(), kF32);

  // kda.core: heads are independent.
  std::vector<float> q(n * Pl), k(n * Pl), v(n * Pl);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(&q[i * Pl], &t->conv[i * 3 * Pl], Pl * sizeof(float));
    std::memcpy(&k[i * Pl], &t->conv[i * 3 * Pl + Pl], Pl * sizeof(float));
    std::memcpy(&v[i * Pl], &t->conv[i * 3 * Pl + 2 * Pl], Pl * sizeof(float));
  }
  t->o.resize(n * Pl);
  t->state.assign(Hl * K * K, 0.0f);
  ops::KdaChunked(q.data(), k.data(), v.data(), t->g.data(), t->beta.data(), n, shape, t->state.data(),
                  t->o.data());

  // kda.out: gated norm per head, o_proj row-parallel, then the partial sums are all-reduced.
  std::vector<float> yn(n * Pl);
  ops::GatedRmsNorm(t->o.data(), t->z.data(), n, shape, w.o_norm, c.rms_norm_eps, yn.data(), kF32);
  t->out.resize(n * D);
  ops::Linear(yn.data(), n, w.o, t->out.data(), kF32);
  return comm.AllReduceSum(t->out);
}

// ---- MLA over heads ------------------------------------------------------------------------------

MlaTpShard ShardMla(const LayerWeights& L, const ModelConfig& c, int size, int rank) {
  const MlaWeights& w = L.mla;
  const int64_t qk = c.qk_head_dim(), blk = c.qk_nope_head_dim + c.v_head_dim, v = c.v_head_dim;
  MlaTpShard s;
  s.heads = Split(c.num_attention_heads, size, rank);
  const int64_t h0 = s.heads.begin, h1 = s.heads.end;
  if (c.q_lora_rank > 0) {
    s.q_a = w.q_a;
    s.q_a_norm = w.q_a_norm;
    s.q_b = SliceRows(w.q_b, h0 * qk, h1 * qk);
  } else {
    s.q_b = SliceRows(w.q_proj, h0 * qk, h1 * qk);
  }
  s.kv_a = w.kv_a;
  s.kv_a_norm = w.kv_a_norm;
  s.kv_b = SliceRows(w.kv_b, h0 * blk, h1 * blk);
  s.o = SliceCols(w.o, h0 * v, h1 * v);
  s.dsa = L.attn == AttnKind::kDsa;
  if (s.dsa) s.indexer = w.indexer;
  return s;
}

Status MlaTpForward(Communicator& comm, const MlaTpShard& w, const ModelConfig& c, const float* x, int64_t n,
                    MlaLayerTrace* t) {
  const int64_t Hl = w.heads.size(), qk = c.qk_head_dim(), R = c.kv_lora_rank, rope = c.qk_rope_head_dim;
  // mla.proj: q column-parallel by head; the q LoRA down-projection and the latent replicated.
  t->q.resize(n * Hl * qk);
  std::vector<float> q_resid;
  if (c.q_lora_rank > 0) {
    std::vector<float> qa(n * c.q_lora_rank);
    q_resid.resize(n * c.q_lora_rank);
    ops::Linear(x, n, w.q_a, qa.data(), kF32);
    ops::RmsNorm(qa.data(), n, c.q_lora_rank, w.q_a_norm, c.qa_norm_eps, q_resid.data(), kF32);
    ops::Linear(q_resid.data(), n, w.q_b, t->q.data(), kF32);
  } else {
    ops::Linear(x, n, w.q_b, t->q.data(), kF32);
  }
  std::vector<float> ckv(n * (R + rope));
  ops::Linear(x, n, w.kv_a, ckv.data(), kF32);
  t->latent.resize(n * R);
  for (int64_t i = 0; i < n; ++i)
    ops::RmsNorm(&ckv[i * (R + rope)], 1, R, w.kv_a_norm, c.kva_norm_eps, &t->latent[i * R], kF32);

  // mla.indexer: replicated (head-independent; every rank selects the same keys).
  ops::Selection sel;
  if (w.dsa) sel = DsaSelect(w.indexer, c, x, q_resid.data(), n);
  t->selection = FlattenSelection(sel);

  // mla.attn: this rank's heads against the replicated latent.
  ops::MlaShape ms{Hl, c.qk_nope_head_dim, rope, c.v_head_dim, R, 1.0f / std::sqrt(static_cast<float>(qk))};
  const ops::RowView latent{t->latent.data(), nullptr, 1, R, 0};
  const ops::RowView krot{ckv.data(), nullptr, 1, R + rope, R};
  t->attn.resize(n * Hl * c.v_head_dim);
  ops::MlaAttention(t->q.data(), n, 0, latent, krot, w.kv_b, ms, sel, t->attn.data(), kF32);

  // mla.out: row-parallel o_proj, all-reduce.
  t->out.resize(n * c.hidden_size);
  ops::Linear(t->attn.data(), n, w.o, t->out.data(), kF32);
  return comm.AllReduceSum(t->out);
}

// ---- LM head over the vocabulary -----------------------------------------------------------------

LmHeadTpShard ShardLmHead(const Matrix& lm_head, int size, int rank) {
  LmHeadTpShard s;
  s.vocab = Split(lm_head.rows, size, rank);
  s.w = SliceRows(lm_head, s.vocab.begin, s.vocab.end);
  return s;
}

Status LmHeadTpForward(Communicator& comm, const LmHeadTpShard& w, int64_t vocab, const float* h, int64_t r,
                       LmHeadTrace* t) {
  const int n = comm.size();
  if (vocab % n != 0) {
    return Status::InvalidArgument("lm_head TP needs the vocabulary (" + std::to_string(vocab) +
                                   ") to split evenly over " + std::to_string(n) + " ranks");
  }
  const int64_t Vl = w.w.rows;
  // lm_head.logits: local [r, Vl], all-gather (rank-major blocks), then interleave to [r, V].
  std::vector<float> local(r * Vl), gathered(n * r * Vl);
  ops::Linear(h, r, w.w, local.data(), kF32);
  GYRE_RETURN_IF_ERROR(comm.AllGather(local, gathered));
  t->logits.resize(r * vocab);
  for (int s = 0; s < n; ++s) PutColumns(&gathered[s * r * Vl], r, Vl, t->logits.data(), vocab, s * Vl);

  // lm_head.argmax: local (max, global id) per row; the max over ranks, ties → lower rank (= lower
  // id, since vocabulary slices ascend with the rank), the same rule as ops::Argmax.
  std::vector<float> best(2 * r), all(n * 2 * r);
  for (int64_t i = 0; i < r; ++i) {
    const int32_t j = ops::Argmax(std::span<const float>(&local[i * Vl], Vl));
    best[2 * i] = local[i * Vl + j];
    best[2 * i + 1] = static_cast<float>(w.vocab.begin + j);
  }
  GYRE_RETURN_IF_ERROR(comm.AllGather(best, all));
  t->argmax.resize(r);
  for (int64_t i = 0; i < r; ++i) {
    int win = 0;
    for (int s = 1; s < n; ++s)
      if (all[s * 2 * r + 2 * i] > all[win * 2 * r + 2 * i]) win = s;
    t->argmax[i] = all[win * 2 * r + 2 * i + 1];
  }
  return Status();
}

}  // namespace gyre::parallel
