// Model forward. Sections: load; step scratch; Forward (layer loop, hyper-connections, head);
// KDA layer; attention layer (MLA / DSA); MLP / MoE layer; MTP layer; summary.
#include "runtime/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/trace.h"
#include "model/model_size.h"
#include "ops/attention.h"
#include "ops/basic.h"
#include "ops/hyper_connection.h"
#include "ops/kda.h"
#include "ops/moe.h"

namespace gyre {

// ---- load ----------------------------------------------------------------------------------------

Model::Model(ModelConfig c, ModelWeights w, const ModelOptions& o)
    : config_(std::move(c)), weights_(std::move(w)), num_{o.act} {}

std::unique_ptr<Model> Model::FromWeights(ModelConfig config, ModelWeights weights, const ModelOptions& opts) {
  return std::unique_ptr<Model>(new Model(std::move(config), std::move(weights), opts));
}

Result<std::unique_ptr<Model>> Model::Load(const std::string& dir, const ModelOptions& opts) {
  GYRE_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<WeightFiles> files, WeightFiles::Open(dir));
  BindOptions bo;
  bo.round_to_bf16 = opts.act == ActDType::kBf16;
  auto weights = BindWeights(config, *files, bo);
  if (!weights) return weights.error().WithContext(dir);
  return FromWeights(std::move(config), std::move(*weights), opts);
}

// ---- step scratch --------------------------------------------------------------------------------

struct Model::Step {
  std::span<const SeqInput> batch;
  std::vector<int64_t> offsets;  // token offset of each sequence in the batch, size B+1
  int64_t n = 0;                 // total new tokens
  const CaptureFn* capture = nullptr;
  // Per sequence: the selection of the most recent full DSA layer (for "shared" layers).
  std::vector<ops::Selection> last_selection;
  // q_resid of the current DSA layer (shared with the indexer).
  std::vector<float> q_resid;

  void Capture(const std::string& name, std::span<const float> d, std::vector<int64_t> shape) const {
    if (capture && *capture) (*capture)(name, d, std::move(shape));
  }
};

// ---- Forward -------------------------------------------------------------------------------------

Status Model::Forward(std::span<const SeqInput> batch, std::vector<float>* logits, const CaptureFn& capture) const {
  const ModelConfig& c = config_;
  const int64_t D = c.hidden_size, V = c.vocab_size;
  Step st;
  st.batch = batch;
  st.capture = &capture;
  st.offsets.push_back(0);
  std::vector<int32_t> ids;
  for (size_t b = 0; b < batch.size(); ++b) {
    if (batch[b].ids.empty()) return Status::InvalidArgument("sequence " + std::to_string(b) + " has no new tokens");
    for (int32_t id : batch[b].ids) {
      if (id < 0 || id >= V) {
        return Status::InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                       std::to_string(V) + ")");
      }
      ids.push_back(id);
    }
    st.offsets.push_back(static_cast<int64_t>(ids.size()));
    const size_t n_in = batch[b].input_embeds.size();
    if (n_in != 0 && n_in != batch[b].ids.size() * static_cast<size_t>(D)) {
      return Status::InvalidArgument("sequence " + std::to_string(b) + ": input_embeds has " + std::to_string(n_in) +
                                     " values, expected ids × hidden_size = " +
                                     std::to_string(batch[b].ids.size() * D));
    }
  }
  // Pages for the new tokens first, so a failure leaves every sequence untouched.
  for (size_t b = 0; b < batch.size(); ++b) {
    SequenceState& s = *batch[b].state;
    Status r = s.Reserve(s.num_tokens + static_cast<int64_t>(batch[b].ids.size()));
    if (!r.ok()) return r.WithContext("sequence " + std::to_string(b));
  }
  const int64_t N = st.n = static_cast<int64_t>(ids.size());
  st.last_selection.resize(batch.size());
  GYRE_SPAN("forward", "step", trace::Attrs{.tokens = N, .detail = "seqs=" + std::to_string(batch.size())});

  std::vector<float> e(N * D);
  ops::Embedding(ids, weights_.embed, e.data());
  for (size_t b = 0; b < batch.size(); ++b) {
    const auto& in = batch[b].input_embeds;
    if (!in.empty()) std::copy(in.begin(), in.end(), e.begin() + st.offsets[b] * D);
  }
  st.Capture("embed_tokens", e, {N, D});

  const bool hc = c.hc_mult > 0;
  const int64_t n_streams = hc ? c.hc_mult : 1;
  std::vector<float> X(N * n_streams * D);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t s = 0; s < n_streams; ++s) std::memcpy(&X[(i * n_streams + s) * D], &e[i * D], D * sizeof(float));

  ops::HcParams hp{c.hc_mult, D, c.rms_norm_eps, c.hc_eps, c.hc_sinkhorn_iters};
  std::vector<float> y(N * D), h(N * D), a(N * D), post(N * n_streams), comb(N * n_streams * n_streams);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& L = weights_.layers[l];
    const std::string ln = "layers." + std::to_string(l);
    GYRE_SPAN(L.attn == AttnKind::kKda ? "layer.kda" : L.attn == AttnKind::kDsa ? "layer.dsa" : "layer.mla", "layer",
              trace::Attrs{.layer = l, .tokens = N});
    // Attention block.
    if (hc) {
      GYRE_SPAN("hc.pre", "op", trace::Attrs{.layer = l, .tokens = N});
      ops::HcPre(X.data(), N, L.attn_hc.fn, L.attn_hc.base, L.attn_hc.scale, hp, post.data(), comb.data(), y.data(),
                 num_);
    } else {
      y = X;
    }
    {
      GYRE_SPAN("rmsnorm", "op", trace::Attrs{.layer = l, .tokens = N});
      ops::RmsNorm(y.data(), N, D, L.input_norm, c.rms_norm_eps, h.data(), num_);
    }
    st.Capture(ln + ".input_layernorm", h, {N, D});
    if (L.attn == AttnKind::kKda) {
      KdaLayer(st, l, h.data(), a.data());
    } else {
      AttnLayer(st, l, h.data(), a.data());
    }
    st.Capture(ln + ".self_attn", a, {N, D});
    if (hc) {
      GYRE_SPAN("hc.post+pre", "op", trace::Attrs{.layer = l, .tokens = N});
      ops::HcPost(X.data(), N, a.data(), post.data(), comb.data(), hp, num_);
      ops::HcPre(X.data(), N, L.ffn_hc.fn, L.ffn_hc.base, L.ffn_hc.scale, hp, post.data(), comb.data(), y.data(),
                 num_);
    } else {
      for (int64_t i = 0; i < N * D; ++i) X[i] = num_.Round(X[i] + a[i]);
      y = X;
    }
    // FFN block.
    ops::RmsNorm(y.data(), N, D, L.post_norm, c.rms_norm_eps, h.data(), num_);
    st.Capture(ln + ".post_attention_layernorm", h, {N, D});
    MlpLayer(st, l, h.data(), a.data());
    st.Capture(ln + ".mlp", a, {N, D});
    if (hc) {
      GYRE_SPAN("hc.post", "op", trace::Attrs{.layer = l, .tokens = N});
      ops::HcPost(X.data(), N, a.data(), post.data(), comb.data(), hp, num_);
      st.Capture(ln, X, {N, n_streams, D});
    } else {
      for (int64_t i = 0; i < N * D; ++i) X[i] = num_.Round(X[i] + a[i]);
      st.Capture(ln, X, {N, D});
    }
  }

  // Head: mean of the streams (glm5), final norm, lm_head — only for the rows that need logits.
  std::vector<int64_t> rows;
  for (size_t b = 0; b < batch.size(); ++b) {
    if (batch[b].all_logits) {
      for (int64_t i = st.offsets[b]; i < st.offsets[b + 1]; ++i) rows.push_back(i);
    } else {
      rows.push_back(st.offsets[b + 1] - 1);
    }
  }
  const bool capture_all = capture && static_cast<int64_t>(rows.size()) != N;
  if (capture_all) {  // diagnostics want every row's norm output
    rows.clear();
    for (int64_t i = 0; i < N; ++i) rows.push_back(i);
  }
  // The pre-norm hidden state of token i: the mean of its streams (one stream without mHC).
  auto stream_mean = [&](int64_t i, float* dst) {
    const float* xs = &X[i * n_streams * D];
    for (int64_t d = 0; d < D; ++d) {
      float acc = 0;
      for (int64_t s = 0; s < n_streams; ++s) acc += xs[s * D + d];
      dst[d] = num_.Round(acc / static_cast<float>(n_streams));
    }
  };
  for (size_t b = 0; b < batch.size(); ++b) {
    if (!batch[b].hidden) continue;
    const int64_t t0 = st.offsets[b], T = st.offsets[b + 1] - t0;
    batch[b].hidden->resize(T * D);
    for (int64_t i = 0; i < T; ++i) stream_mean(t0 + i, batch[b].hidden->data() + i * D);
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  std::vector<float> hm(R * D), hn(R * D);
  for (int64_t r = 0; r < R; ++r) stream_mean(rows[r], &hm[r * D]);
  ops::RmsNorm(hm.data(), R, D, weights_.final_norm, c.rms_norm_eps, hn.data(), num_);
  st.Capture("norm", hn, {R, D});
  std::vector<float> all(R * V);
  {
    GYRE_SPAN("lm_head", "op", trace::Attrs{.tokens = R, .flops = 2 * R * V * D});
    ops::Linear(hn.data(), R, weights_.lm_head, all.data(), num_);
  }
  st.Capture("logits", all, {R, V});
  logits->clear();
  if (capture_all) {
    for (size_t b = 0; b < batch.size(); ++b) {
      const int64_t lo = batch[b].all_logits ? st.offsets[b] : st.offsets[b + 1] - 1;
      logits->insert(logits->end(), all.begin() + lo * V, all.begin() + st.offsets[b + 1] * V);
    }
  } else {
    *logits = std::move(all);
  }
  for (size_t b = 0; b < batch.size(); ++b) {
    SequenceState& s = *batch[b].state;
    if (batch[b].speculative) {
      s.replay.start = s.num_tokens;
      s.replay.num = static_cast<int64_t>(batch[b].ids.size());
    }
    s.num_tokens += batch[b].ids.size();
  }
  return Status();
}

// ---- KDA layer -----------------------------------------------------------------------------------

void Model::KdaLayer(Step& st, int64_t layer, const float* x, float* out) const {
  const ModelConfig& c = config_;
  const KdaWeights& w = weights_.layers[layer].kda;
  const int64_t N = st.n, H = c.linear_num_heads, K = c.linear_head_dim, P = H * K, D = c.hidden_size;
  const ops::KdaShape shape{H, K};
  // u = [q | k | v] per token (pre-conv), gates f, beta and output gate z for the whole batch.
  std::vector<float> u(N * 3 * P), conv(N * 3 * P), qkv(N * P);
  std::vector<float> fa(N * K), f(N * P), g(N * P), braw(N * H), beta(N * H), za(N * K), z(N * P);
  {
    GYRE_SPAN("kda.proj", "op",
              trace::Attrs{.layer = layer, .tokens = N, .flops = 2 * N * D * (3 * P + 2 * K + H) + 4 * N * K * P});
    const Matrix* mats[3] = {&w.q, &w.k, &w.v};
    for (int part = 0; part < 3; ++part) {
      ops::Linear(x, N, *mats[part], qkv.data(), num_);
      for (int64_t i = 0; i < N; ++i) std::memcpy(&u[i * 3 * P + part * P], &qkv[i * P], P * sizeof(float));
    }
    ops::Linear(x, N, w.f_a, fa.data(), num_);
    ops::Linear(fa.data(), N, w.f_b, f.data(), num_);
    ops::KdaGate(f.data(), N, shape, w.dt_bias, w.a_log, c.linear_lower_bound, g.data());
    ops::Linear(x, N, w.b, braw.data(), num_);
    for (int64_t i = 0; i < N * H; ++i) beta[i] = num_.Round(ops::Sigmoid(braw[i]));
    ops::Linear(x, N, w.g_a, za.data(), num_);
    ops::Linear(za.data(), N, w.g_b, z.data(), num_);
  }
  // Per sequence: conv + core (chunked for prefill pieces, recurrent for single-token decode).
  std::vector<float> o(N * P);
  for (size_t b = 0; b < st.batch.size(); ++b) {
    SequenceState& s = *st.batch[b].state;
    const int64_t t0 = st.offsets[b], T = st.offsets[b + 1] - t0;
    // Speculative: the conv tail and recurrent state advance on scratch copies (one per layer and
    // step, not per token); the slot keeps the state before the tokens, the replay their inputs.
    const bool spec = st.batch[b].speculative;
    const int64_t conv_floats = (c.linear_conv_kernel_dim - 1) * 3 * P;
    std::vector<float> conv_scratch, rec_scratch;
    if (spec) {
      conv_scratch.assign(s.KdaConv(layer), s.KdaConv(layer) + conv_floats);
      rec_scratch.assign(s.KdaRecurrent(layer), s.KdaRecurrent(layer) + H * K * K);
    }
    float* conv_state = spec ? conv_scratch.data() : s.KdaConv(layer);
    float* rec_state = spec ? rec_scratch.data() : s.KdaRecurrent(layer);
    {
      GYRE_SPAN("kda.conv", "op", trace::Attrs{.layer = layer, .tokens = T});
      ops::CausalConv1dSilu(&u[t0 * 3 * P], T, 3 * P, w.conv.data.data(), c.linear_conv_kernel_dim, conv_state,
                            &conv[t0 * 3 * P], num_);
    }
    std::vector<float> q(T * P), k(T * P), v(T * P);
    for (int64_t i = 0; i < T; ++i) {
      std::memcpy(&q[i * P], &conv[(t0 + i) * 3 * P], P * sizeof(float));
      std::memcpy(&k[i * P], &conv[(t0 + i) * 3 * P + P], P * sizeof(float));
      std::memcpy(&v[i * P], &conv[(t0 + i) * 3 * P + 2 * P], P * sizeof(float));
    }
    const bool decode = (s.num_tokens > 0 && T == 1) || spec;
    const int64_t state_bytes = H * K * K * 4 * 2;  // read + write of the fp32 state
    if (decode) {
      GYRE_SPAN("kda.recurrent", "op", trace::Attrs{.layer = layer, .tokens = T, .bytes = state_bytes});
      ops::KdaRecurrent(q.data(), k.data(), v.data(), &g[t0 * P], &beta[t0 * H], T, shape, rec_state, &o[t0 * P]);
    } else {
      GYRE_SPAN("kda.chunk", "op", trace::Attrs{.layer = layer, .tokens = T, .bytes = state_bytes});
      ops::KdaChunked(q.data(), k.data(), v.data(), &g[t0 * P], &beta[t0 * H], T, shape, rec_state, &o[t0 * P]);
    }
    if (spec) {  // the ring: this layer's inputs of the speculative tokens
      SequenceState::Replay& rp = s.replay;
      const size_t L = static_cast<size_t>(c.num_hidden_layers);
      for (auto* part : {&rp.u, &rp.k, &rp.v, &rp.g, &rp.beta}) part->resize(L);
      const size_t l = static_cast<size_t>(layer);
      rp.u[l].assign(&u[t0 * 3 * P], &u[(t0 + T) * 3 * P]);
      rp.k[l] = k;
      rp.v[l] = v;
      rp.g[l].assign(&g[t0 * P], &g[(t0 + T) * P]);
      rp.beta[l].assign(&beta[t0 * H], &beta[(t0 + T) * H]);
    }
  }
  num_.Round(o);
  GYRE_SPAN("kda.out", "op", trace::Attrs{.layer = layer, .tokens = N, .flops = 2 * N * P * D});
  std::vector<float> yn(N * P);
  ops::GatedRmsNorm(o.data(), z.data(), N, shape, w.o_norm, c.rms_norm_eps, yn.data(), num_);
  ops::Linear(yn.data(), N, w.o, out, num_);
}

// ---- attention layer (MLA / DSA) ----------------------------------------------------------------

namespace {
// One MLA layer's projections of n tokens (shared by the main MLA/DSA layers and the MTP layer).
struct MlaProjection {
  std::vector<float> q;        // [n, H, nope + rope]
  std::vector<float> q_resid;  // [n, q_lora]: normalised q_a output (q LoRA path only; the indexer's input)
  std::vector<float> ckv;      // [n, kv_lora + rope]: kv_a output, [c before its norm | k_rot]
  std::vector<float> latent;   // [n, kv_lora]: kv_a_layernorm(c), the cached latent
};
void ProjectMla(const MlaWeights& w, const ModelConfig& c, const float* x, int64_t n, const Numerics& num,
                MlaProjection* p) {
  const int64_t H = c.num_attention_heads, qk = c.qk_head_dim(), R = c.kv_lora_rank, rope = c.qk_rope_head_dim;
  p->q.resize(n * H * qk);
  p->ckv.resize(n * (R + rope));
  p->latent.resize(n * R);
  if (c.q_lora_rank > 0) {
    std::vector<float> qa(n * c.q_lora_rank);
    p->q_resid.resize(n * c.q_lora_rank);
    ops::Linear(x, n, w.q_a, qa.data(), num);
    ops::RmsNorm(qa.data(), n, c.q_lora_rank, w.q_a_norm, c.qa_norm_eps, p->q_resid.data(), num);
    ops::Linear(p->q_resid.data(), n, w.q_b, p->q.data(), num);
  } else {
    ops::Linear(x, n, w.q_proj, p->q.data(), num);
  }
  ops::Linear(x, n, w.kv_a, p->ckv.data(), num);
  // ckv rows are [c (R) | k_rot (rope)]; normalise the c part of each row.
  for (int64_t i = 0; i < n; ++i)
    ops::RmsNorm(&p->ckv[i * (R + rope)], 1, R, w.kv_a_norm, c.kva_norm_eps, &p->latent[i * R], num);
}
}  // namespace

void Model::AttnLayer(Step& st, int64_t layer, const float* x, float* out) const {
  const ModelConfig& c = config_;
  const LayerWeights& L = weights_.layers[layer];
  const MlaWeights& w = L.mla;
  const int64_t N = st.n, H = c.num_attention_heads, qk = c.qk_head_dim(), R = c.kv_lora_rank,
                rope = c.qk_rope_head_dim;
  const bool dsa = L.attn == AttnKind::kDsa;
  const int64_t Hi = c.index_n_heads, di = c.index_head_dim;
  // Projections for the whole batch: q (LoRA or direct), latent c (+ k_rot), indexer inputs.
  MlaProjection proj;
  {
    GYRE_SPAN("mla.proj", "op", trace::Attrs{.layer = layer, .tokens = N});
    ProjectMla(w, c, x, N, num_, &proj);
  }
  std::vector<float> qi, ki, gamma, wts;
  if (dsa && w.has_indexer) {
    GYRE_SPAN("dsa.indexer.proj", "op", trace::Attrs{.layer = layer, .tokens = N});
    const IndexerWeights& iw = w.indexer;
    std::vector<float> ki_raw(N * di);
    qi.resize(N * Hi * di);
    ki.resize(N * di);
    gamma.resize(N * di);
    wts.resize(N * Hi);
    ops::Linear(proj.q_resid.data(), N, iw.wq_b, qi.data(), num_);
    ops::Linear(x, N, iw.wk, ki_raw.data(), num_);
    ops::LayerNorm(ki_raw.data(), N, di, iw.k_norm_w, iw.k_norm_b, 1e-6f, ki.data(), num_);
    ops::Linear(x, N, iw.compress_gate, gamma.data(), num_);
    ops::Linear(x, N, iw.weights_proj, wts.data(), num_);
    const float hs = 1.0f / std::sqrt(static_cast<float>(Hi));
    for (auto& v : wts) v *= hs;
  }

  ops::MlaShape ms{H, c.qk_nope_head_dim, rope, c.v_head_dim, R, 1.0f / std::sqrt(static_cast<float>(qk))};
  std::vector<float> attn(N * H * c.v_head_dim);
  for (size_t b = 0; b < st.batch.size(); ++b) {
    SequenceState& s = *st.batch[b].state;
    const AttnRowLayout& lay = s.layout();
    const int64_t t0 = st.offsets[b], T = st.offsets[b + 1] - t0, pos0 = s.num_tokens;
    // Write this step's rows into the sequence's pages.
    for (int64_t i = 0; i < T; ++i) {
      float* row = s.AttnRow(pos0 + i);
      std::memcpy(row + lay.latent[layer], &proj.latent[(t0 + i) * R], R * sizeof(float));
      if (rope > 0) {
        std::memcpy(row + lay.krot[layer], &proj.ckv[(t0 + i) * (R + rope) + R], rope * sizeof(float));
      }
      if (dsa && w.has_indexer) {
        std::memcpy(row + lay.idx_k[layer], &ki[(t0 + i) * di], di * sizeof(float));
        std::memcpy(row + lay.idx_gamma[layer], &gamma[(t0 + i) * di], di * sizeof(float));
      }
    }
    ops::Selection sel;
    if (!dsa) {
      sel.causal = true;
    } else if (w.has_indexer) {
      GYRE_SPAN("dsa.indexer.select", "op", trace::Attrs{.layer = layer, .tokens = T});
      const int64_t m = c.index_kpool, total = pos0 + T;
      std::vector<float>& pk = s.pool_keys[layer];
      int64_t& np = s.num_pools[layer];
      std::vector<float> kbuf(m * di), gbuf(m * di);
      while ((np + 1) * m <= total) {  // pools completed by this step: pooled key computed once
        for (int64_t r = 0; r < m; ++r) {
          const float* row = s.AttnRow(np * m + r);
          std::memcpy(&kbuf[r * di], row + lay.idx_k[layer], di * sizeof(float));
          std::memcpy(&gbuf[r * di], row + lay.idx_gamma[layer], di * sizeof(float));
        }
        pk.resize((np + 1) * di);
        ops::PoolKey(kbuf.data(), gbuf.data(), w.indexer.ape.data.data(), m, di, &pk[np * di], num_);
        ++np;
      }
      ops::IndexerShape is{Hi, di, m, c.index_topk, c.index_kpool_always_select_tail};
      ops::IndexerSelect(&qi[t0 * Hi * di], &wts[t0 * Hi], T, pos0, pk.data(), np, is, &sel);
      st.last_selection[b] = sel;
    } else {
      // "shared" layer: reuse the selection of the most recent full DSA layer in this step. The
      // reference (transformers 5.17) supports this only directly after a full DSA layer and
      // raises otherwise; gyre implements the documented semantics for any preceding full layer.
      sel = st.last_selection[b];
    }
    GYRE_SPAN("mla.attn", "op", trace::Attrs{.layer = layer, .tokens = T, .detail = "ctx=" + std::to_string(pos0 + T)});
    ops::MlaAttention(&proj.q[t0 * H * qk], T, pos0, s.View(lay.latent[layer]),
                      s.View(std::max<int64_t>(lay.krot[layer], 0)), w.kv_b, ms, sel, &attn[t0 * H * c.v_head_dim],
                      num_);
  }
  GYRE_SPAN("mla.out", "op", trace::Attrs{.layer = layer, .tokens = N});
  ops::Linear(attn.data(), N, w.o, out, num_);
}

// ---- MLP / MoE layer -----------------------------------------------------------------------------

namespace {
void SwiGluMlp(const MlpWeights& w, const float* x, int64_t n, float limit, float* out, const Numerics& num) {
  const int64_t I = w.gate.rows;
  std::vector<float> g(n * I), u(n * I), a(n * I);
  ops::Linear(x, n, w.gate, g.data(), num);
  ops::Linear(x, n, w.up, u.data(), num);
  ops::SwiGlu(g.data(), I, u.data(), I, n, I, limit, a.data(), num);
  ops::Linear(a.data(), n, w.down, out, num);
}
}  // namespace

void Model::MlpLayer(Step& st, int64_t layer, const float* x, float* out) const {
  const ModelConfig& c = config_;
  const LayerWeights& L = weights_.layers[layer];
  const int64_t N = st.n, D = c.hidden_size;
  const float limit = c.swiglu_limit.value_or(0.0f);
  if (L.mlp == MlpKind::kDense) {
    GYRE_SPAN("mlp.dense", "op", trace::Attrs{.layer = layer, .tokens = N, .flops = 6 * N * D * c.intermediate_size});
    SwiGluMlp(L.dense, x, N, limit, out, num_);
    return;
  }
  const MoeWeights& w = L.moe;
  const int64_t E = c.n_routed_experts, k = c.num_experts_per_tok;
  std::vector<float> logits(N * E), wts(N * k);
  std::vector<int32_t> idx(N * k);
  {
    GYRE_SPAN("moe.router", "op", trace::Attrs{.layer = layer, .tokens = N, .flops = 2 * N * D * E});
    ops::LinearF32(x, N, w.router, logits.data());
    ops::RouterParams rp{E, k, c.n_group, c.topk_group, c.norm_topk_prob, c.routed_scaling_factor};
    ops::Route(logits.data(), N, w.bias, rp, idx.data(), wts.data());
  }
  // Group the (token, slot) pairs by expert; run each hit expert once over its tokens.
  std::vector<std::vector<std::pair<int64_t, float>>> by_expert(E);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < k; ++j) by_expert[idx[i * k + j]].push_back({i, wts[i * k + j]});
  std::vector<float> acc(N * D, 0.0f), xs, ys;
  GYRE_SPAN("moe.experts", "op",
            trace::Attrs{.layer = layer, .tokens = N, .flops = 6 * N * k * D * c.moe_intermediate_size});
  for (int64_t e = 0; e < E; ++e) {
    const auto& hits = by_expert[e];
    if (hits.empty()) continue;
    const int64_t m = static_cast<int64_t>(hits.size());
    xs.resize(m * D);
    ys.resize(m * D);
    for (int64_t r = 0; r < m; ++r) std::memcpy(&xs[r * D], x + hits[r].first * D, D * sizeof(float));
    SwiGluMlp(w.experts[e], xs.data(), m, limit, ys.data(), num_);
    for (int64_t r = 0; r < m; ++r) {
      float* dst = &acc[hits[r].first * D];
      const float wt = hits[r].second;
      for (int64_t d = 0; d < D; ++d) dst[d] += ys[r * D + d] * wt;
    }
  }
  if (w.has_shared) {
    GYRE_SPAN("moe.shared", "op", trace::Attrs{.layer = layer, .tokens = N});
    std::vector<float> sh(N * D);
    SwiGluMlp(w.shared, x, N, limit, sh.data(), num_);
    for (int64_t i = 0; i < N * D; ++i) out[i] = num_.Round(num_.Round(acc[i]) + sh[i]);
  } else {
    for (int64_t i = 0; i < N * D; ++i) out[i] = num_.Round(acc[i]);
  }
}

// ---- MTP layer -----------------------------------------------------------------------------------

Status Model::MtpForward(std::span<const int32_t> ids, std::span<const float> hidden,
                         std::vector<float>* logits) const {
  const ModelConfig& c = config_;
  const int64_t D = c.hidden_size, T = static_cast<int64_t>(ids.size());
  if (!weights_.has_mtp) return Status::InvalidArgument("the model has no MTP layer (num_nextn_predict_layers = 0)");
  if (T == 0) return Status::InvalidArgument("the MTP layer needs at least one token");
  if (static_cast<int64_t>(hidden.size()) != T * D) {
    return Status::InvalidArgument("hidden holds " + std::to_string(hidden.size()) + " values, expected [" +
                                   std::to_string(T) + ", " + std::to_string(D) + "]");
  }
  GYRE_RETURN_IF_ERROR(CheckIds(ids, c.vocab_size));
  const int64_t n = T - 1;  // MTP positions: row t pairs ids[t + 1] with hidden[t]
  logits->resize(n * c.vocab_size);
  if (n == 0) return Status();
  std::vector<float> keys(n * mtp_key_floats()), out_hidden;
  MtpRows(ids.subspan(1), hidden.first(n * D), 0, keys.data(), n, &out_hidden, logits->data());
  return Status();
}

Status Model::MtpStep(std::span<const int32_t> ids, std::span<const float> hidden, int64_t pos0, float* keys,
                      int64_t logit_rows, std::vector<float>* out_hidden, std::vector<float>* logits) const {
  const ModelConfig& c = config_;
  const int64_t D = c.hidden_size, n = static_cast<int64_t>(ids.size());
  if (!weights_.has_mtp) return Status::InvalidArgument("the model has no MTP layer (num_nextn_predict_layers = 0)");
  if (n == 0) return Status::InvalidArgument("the MTP layer needs at least one row");
  if (pos0 < 0) return Status::InvalidArgument("MTP position " + std::to_string(pos0) + " is negative");
  if (logit_rows < 0 || logit_rows > n)
    return Status::InvalidArgument("logit rows " + std::to_string(logit_rows) + " outside [0, " + std::to_string(n) + "]");
  if (static_cast<int64_t>(hidden.size()) != n * D) {
    return Status::InvalidArgument("hidden holds " + std::to_string(hidden.size()) + " values, expected [" +
                                   std::to_string(n) + ", " + std::to_string(D) + "]");
  }
  GYRE_RETURN_IF_ERROR(CheckIds(ids, c.vocab_size));
  logits->resize(logit_rows * c.vocab_size);
  MtpRows(ids, hidden, pos0, keys, logit_rows, out_hidden, logits->data());
  return Status();
}

Status Model::CheckIds(std::span<const int32_t> ids, int64_t V) {
  for (int32_t id : ids) {
    if (id < 0 || id >= V) {
      return Status::InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                     std::to_string(V) + ")");
    }
  }
  return Status();
}

void Model::MtpRows(std::span<const int32_t> ids, std::span<const float> hidden, int64_t pos0, float* keys,
                    int64_t logit_rows, std::vector<float>* out_hidden, float* logits) const {
  const ModelConfig& c = config_;
  const int64_t D = c.hidden_size, n = static_cast<int64_t>(ids.size());
  const MtpWeights& w = weights_.mtp;
  const float eps = c.rms_norm_eps;
  GYRE_SPAN("mtp", "layer", trace::Attrs{.layer = c.num_hidden_layers, .tokens = n});
  // Input: x = eh_proj([enorm(embed(ids[i])) | hnorm(hidden[i])]).
  std::vector<float> e(n * D), en(n * D), hn(n * D), cat(n * 2 * D);
  std::vector<float>& x = *out_hidden;
  x.resize(n * D);
  ops::Embedding(ids, weights_.embed, e.data());
  ops::RmsNorm(e.data(), n, D, w.enorm, eps, en.data(), num_);
  ops::RmsNorm(hidden.data(), n, D, w.hnorm, eps, hn.data(), num_);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(&cat[i * 2 * D], &en[i * D], D * sizeof(float));
    std::memcpy(&cat[i * 2 * D + D], &hn[i * D], D * sizeof(float));
  }
  ops::Linear(cat.data(), n, w.eh_proj, x.data(), num_);
  // Attention block: dense causal MLA over MTP positions 0..pos0 + i (no indexer); the keys of
  // this call's rows go to keys[pos0 ..], the earlier ones are read from keys[0 .. pos0).
  const int64_t H = c.num_attention_heads, R = c.kv_lora_rank, rope = c.qk_rope_head_dim, kf = R + rope;
  std::vector<float> h(n * D), a(n * D), attn(n * H * c.v_head_dim);
  ops::RmsNorm(x.data(), n, D, w.input_norm, eps, h.data(), num_);
  MlaProjection p;
  ProjectMla(w.mla, c, h.data(), n, num_, &p);
  for (int64_t i = 0; i < n; ++i) {
    float* row = keys + (pos0 + i) * kf;
    std::memcpy(row, &p.latent[i * R], R * sizeof(float));
    std::memcpy(row + R, &p.ckv[i * kf + R], rope * sizeof(float));
  }
  const ops::MlaShape ms{H, c.qk_nope_head_dim, rope, c.v_head_dim, R,
                         1.0f / std::sqrt(static_cast<float>(c.qk_head_dim()))};
  const ops::RowView latent{keys, nullptr, 1, kf, 0}, krot{keys, nullptr, 1, kf, R};
  ops::MlaAttention(p.q.data(), n, pos0, latent, krot, w.mla.kv_b, ms, ops::Selection{}, attn.data(), num_);
  ops::Linear(attn.data(), n, w.mla.o, a.data(), num_);
  for (int64_t i = 0; i < n * D; ++i) x[i] = num_.Round(x[i] + a[i]);
  // FFN block: dense SwiGLU (the model's swiglu_limit, as in its dense layers).
  ops::RmsNorm(x.data(), n, D, w.post_norm, eps, h.data(), num_);
  SwiGluMlp(w.mlp, h.data(), n, c.swiglu_limit.value_or(0.0f), a.data(), num_);
  for (int64_t i = 0; i < n * D; ++i) x[i] = num_.Round(x[i] + a[i]);
  // Head of the last logit_rows rows: shared_head.head(shared_head.norm(x)).
  if (logit_rows == 0) return;
  const float* last = x.data() + (n - logit_rows) * D;
  ops::RmsNorm(last, logit_rows, D, w.head_norm, eps, h.data(), num_);
  ops::Linear(h.data(), logit_rows, w.head, logits, num_);
}

// ---- summary -------------------------------------------------------------------------------------

ModelSummary Summarize(const ModelConfig& c) {
  ModelSummary s;
  // NOTE: each term fits in int64 under ParseModelConfig's bounds, but the sum over 4096 layers of
  // 65536 experts does not: the totals add up in 128 bits and saturate (found by config_fuzz).
  const OuterParams outer = ComputeOuterParams(c);
  __int128 total = __int128(outer.embedding) + outer.lm_head + outer.final_norm, unselected = 0;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const LayerParams p = ComputeLayerParams(c, i);
    total += p.total();
    switch (c.layer_types[i]) {
      case AttnKind::kKda: {
        ++s.num_kda;
        const KdaStateElems st = ComputeKdaStateElems(c, i);
        s.kda_state_bytes_per_sequence += st.conv_tail * 2 + st.recurrent * 4;  // bf16 tail, fp32 state
        break;
      }
      case AttnKind::kDsa:
      case AttnKind::kMla:
        (c.layer_types[i] == AttnKind::kDsa ? s.num_dsa : s.num_mla)++;
        s.attn_cache_bytes_per_token += ComputeAttnCacheElems(c, i).total() * 2;  // bf16
        break;
    }
    if (c.mlp_layer_types[i] == MlpKind::kDense) {
      ++s.num_dense;
    } else {
      ++s.num_moe;
      unselected += __int128(c.n_routed_experts - c.num_experts_per_tok) * p.routed_per_expert;
    }
  }
  auto saturate = [](__int128 v) {
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
    return static_cast<int64_t>(std::clamp<__int128>(v, kMin, kMax));
  };
  s.params_total = saturate(total);
  s.params_active = saturate(total - unselected);
  return s;
}

}  // namespace gyre
