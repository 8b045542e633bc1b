// Unsharded references. Sections: KDA; DSA selection; MLA; LM head; MoE.
// Each mirrors the matching block of runtime/model.cc with Numerics{kF32} and pos0 = 0.
#include "parallel/reference.h"

#include <cmath>
#include <cstring>

#include "ops/basic.h"
#include "ops/kda.h"
#include "ops/sampling.h"

namespace gyre::parallel {

namespace {
const Numerics kF32{};
}  // namespace

// ---- KDA -----------------------------------------------------------------------------------------

KdaLayerTrace KdaLayerReference(const KdaWeights& w, const ModelConfig& c, const float* x, int64_t n) {
  const int64_t H = c.linear_num_heads, K = c.linear_head_dim, P = H * K, D = c.hidden_size,
                W = c.linear_conv_kernel_dim;
  const ops::KdaShape shape{H, K};
  KdaLayerTrace t;
  t.u.resize(n * 3 * P);
  std::vector<float> part(n * P), fa(n * K), f(n * P), braw(n * H), za(n * K);
  const Matrix* mats[3] = {&w.q, &w.k, &w.v};
  for (int i = 0; i < 3; ++i) {
    ops::Linear(x, n, *mats[i], part.data(), kF32);
    for (int64_t r = 0; r < n; ++r) std::memcpy(&t.u[r * 3 * P + i * P], &part[r * P], P * sizeof(float));
  }
  t.g.resize(n * P);
  ops::Linear(x, n, w.f_a, fa.data(), kF32);
  ops::Linear(fa.data(), n, w.f_b, f.data(), kF32);
  ops::KdaGate(f.data(), n, shape, w.dt_bias, w.a_log, c.linear_lower_bound, t.g.data());
  ops::Linear(x, n, w.b, braw.data(), kF32);
  t.beta.resize(n * H);
  for (int64_t i = 0; i < n * H; ++i) t.beta[i] = ops::Sigmoid(braw[i]);
  t.z.resize(n * P);
  ops::Linear(x, n, w.g_a, za.data(), kF32);
  ops::Linear(za.data(), n, w.g_b, t.z.data(), kF32);

  t.conv.resize(n * 3 * P);
  std::vector<float> conv_state((W - 1) * 3 * P, 0.0f);
  ops::CausalConv1dSilu(t.u.data(), n, 3 * P, w.conv.data.data(), W, conv_state.data(), t.conv.data(), kF32);
  std::vector<float> q(n * P), k(n * P), v(n * P);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(&q[i * P], &t.conv[i * 3 * P], P * sizeof(float));
    std::memcpy(&k[i * P], &t.conv[i * 3 * P + P], P * sizeof(float));
    std::memcpy(&v[i * P], &t.conv[i * 3 * P + 2 * P], P * sizeof(float));
  }
  t.o.resize(n * P);
  t.state.assign(H * K * K, 0.0f);
  ops::KdaChunked(q.data(), k.data(), v.data(), t.g.data(), t.beta.data(), n, shape, t.state.data(), t.o.data());

  std::vector<float> yn(n * P);
  ops::GatedRmsNorm(t.o.data(), t.z.data(), n, shape, w.o_norm, c.rms_norm_eps, yn.data(), kF32);
  t.out.resize(n * D);
  ops::Linear(yn.data(), n, w.o, t.out.data(), kF32);
  return t;
}

// ---- DSA selection -------------------------------------------------------------------------------

ops::Selection DsaSelect(const IndexerWeights& w, const ModelConfig& c, const float* x, const float* q_resid,
                         int64_t n) {
  const int64_t Hi = c.index_n_heads, di = c.index_head_dim, m = c.index_kpool;
  std::vector<float> qi(n * Hi * di), ki_raw(n * di), ki(n * di), gamma(n * di), wts(n * Hi);
  ops::Linear(q_resid, n, w.wq_b, qi.data(), kF32);
  ops::Linear(x, n, w.wk, ki_raw.data(), kF32);
  ops::LayerNorm(ki_raw.data(), n, di, w.k_norm_w, w.k_norm_b, 1e-6f, ki.data(), kF32);
  ops::Linear(x, n, w.compress_gate, gamma.data(), kF32);
  ops::Linear(x, n, w.weights_proj, wts.data(), kF32);
  const float hs = 1.0f / std::sqrt(static_cast<float>(Hi));
  for (auto& v : wts) v *= hs;
  const int64_t np = n / m;  // complete pools of the n tokens
  std::vector<float> pk(np * di);
  for (int64_t p = 0; p < np; ++p)
    ops::PoolKey(&ki[p * m * di], &gamma[p * m * di], w.ape.data.data(), m, di, &pk[p * di], kF32);
  ops::IndexerShape is{Hi, di, m, c.index_topk, c.index_kpool_always_select_tail};
  ops::Selection sel;
  ops::IndexerSelect(qi.data(), wts.data(), n, 0, pk.data(), np, is, &sel);
  return sel;
}

std::vector<float> FlattenSelection(const ops::Selection& s) {
  std::vector<float> f;
  if (s.causal) return {-1.0f};
  for (int64_t o : s.offsets) f.push_back(static_cast<float>(o));
  for (int32_t i : s.indices) f.push_back(static_cast<float>(i));
  return f;
}

// ---- MLA -----------------------------------------------------------------------------------------

MlaLayerTrace MlaLayerReference(const LayerWeights& L, const ModelConfig& c, const float* x, int64_t n) {
  const MlaWeights& w = L.mla;
  const int64_t H = c.num_attention_heads, qk = c.qk_head_dim(), R = c.kv_lora_rank, rope = c.qk_rope_head_dim;
  MlaLayerTrace t;
  t.q.resize(n * H * qk);
  std::vector<float> q_resid;
  if (c.q_lora_rank > 0) {
    std::vector<float> qa(n * c.q_lora_rank);
    q_resid.resize(n * c.q_lora_rank);
    ops::Linear(x, n, w.q_a, qa.data(), kF32);
    ops::RmsNorm(qa.data(), n, c.q_lora_rank, w.q_a_norm, c.qa_norm_eps, q_resid.data(), kF32);
    ops::Linear(q_resid.data(), n, w.q_b, t.q.data(), kF32);
  } else {
    ops::Linear(x, n, w.q_proj, t.q.data(), kF32);
  }
  std::vector<float> ckv(n * (R + rope));
  ops::Linear(x, n, w.kv_a, ckv.data(), kF32);
  t.latent.resize(n * R);
  for (int64_t i = 0; i < n; ++i)
    ops::RmsNorm(&ckv[i * (R + rope)], 1, R, w.kv_a_norm, c.kva_norm_eps, &t.latent[i * R], kF32);
  const bool dsa = L.attn == AttnKind::kDsa;
  ops::Selection sel;
  if (dsa) sel = DsaSelect(w.indexer, c, x, q_resid.data(), n);
  t.selection = FlattenSelection(sel);
  ops::MlaShape ms{H, c.qk_nope_head_dim, rope, c.v_head_dim, R, 1.0f / std::sqrt(static_cast<float>(qk))};
  const ops::RowView latent{t.latent.data(), nullptr, 1, R, 0};
  const ops::RowView krot{ckv.data(), nullptr, 1, R + rope, R};
  t.attn.resize(n * H * c.v_head_dim);
  ops::MlaAttention(t.q.data(), n, 0, latent, krot, w.kv_b, ms, sel, t.attn.data(), kF32);
  t.out.resize(n * c.hidden_size);
  ops::Linear(t.attn.data(), n, w.o, t.out.data(), kF32);
  return t;
}

// ---- LM head -------------------------------------------------------------------------------------

LmHeadTrace LmHeadReference(const Matrix& lm_head, const float* h, int64_t r) {
  const int64_t V = lm_head.rows;
  LmHeadTrace t;
  t.logits.resize(r * V);
  ops::Linear(h, r, lm_head, t.logits.data(), kF32);
  for (int64_t i = 0; i < r; ++i)
    t.argmax.push_back(static_cast<float>(ops::Argmax(std::span<const float>(&t.logits[i * V], V))));
  return t;
}

// ---- MoE -----------------------------------------------------------------------------------------

ops::RouterParams RouterParamsOf(const ModelConfig& c) {
  return {c.n_routed_experts, c.num_experts_per_tok, c.n_group, c.topk_group, c.norm_topk_prob,
          c.routed_scaling_factor};
}

void SwiGluMlp(const MlpWeights& w, const float* x, int64_t n, float limit, float* out) {
  const int64_t I = w.gate.rows;
  std::vector<float> g(n * I), u(n * I), a(n * I);
  ops::Linear(x, n, w.gate, g.data(), kF32);
  ops::Linear(x, n, w.up, u.data(), kF32);
  ops::SwiGlu(g.data(), I, u.data(), I, n, I, limit, a.data(), kF32);
  ops::Linear(a.data(), n, w.down, out, kF32);
}

MoeTrace MoeLayerReference(const MoeWeights& w, const ModelConfig& c, const float* x, int64_t n) {
  const int64_t E = c.n_routed_experts, k = c.num_experts_per_tok, D = c.hidden_size;
  const float limit = c.swiglu_limit.value_or(0.0f);
  std::vector<float> logits(n * E), wts(n * k);
  std::vector<int32_t> idx(n * k);
  ops::LinearF32(x, n, w.router, logits.data());
  ops::Route(logits.data(), n, w.bias, RouterParamsOf(c), idx.data(), wts.data());
  MoeTrace t;
  for (int32_t e : idx) t.route.push_back(static_cast<float>(e));
  t.route.insert(t.route.end(), wts.begin(), wts.end());

  std::vector<std::vector<std::pair<int64_t, float>>> by_expert(E);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) by_expert[idx[i * k + j]].push_back({i, wts[i * k + j]});
  std::vector<float> acc(n * D, 0.0f), xs, ys;
  for (int64_t e = 0; e < E; ++e) {
    const auto& hits = by_expert[e];
    if (hits.empty()) continue;
    const int64_t m = static_cast<int64_t>(hits.size());
    xs.resize(m * D);
    ys.resize(m * D);
    for (int64_t r = 0; r < m; ++r) std::memcpy(&xs[r * D], x + hits[r].first * D, D * sizeof(float));
    SwiGluMlp(w.experts[e], xs.data(), m, limit, ys.data());
    for (int64_t r = 0; r < m; ++r) {
      t.pair_expert.push_back(static_cast<int32_t>(e));
      t.pair_token.push_back(static_cast<int32_t>(hits[r].first));
      float* dst = &acc[hits[r].first * D];
      for (int64_t d = 0; d < D; ++d) dst[d] += ys[r * D + d] * hits[r].second;
    }
    t.pair_x.insert(t.pair_x.end(), xs.begin(), xs.end());
    t.pair_y.insert(t.pair_y.end(), ys.begin(), ys.end());
  }
  t.out = std::move(acc);
  if (w.has_shared) {
    std::vector<float> sh(n * D);
    SwiGluMlp(w.shared, x, n, limit, sh.data());
    for (int64_t i = 0; i < n * D; ++i) t.out[i] += sh[i];
  }
  return t;
}

}  // namespace gyre::parallel
