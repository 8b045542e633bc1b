// verify parallel. Sections: model + inputs; checks; tp; ep; cp; driver; rendering; CLI.
// To add a plan: write its rank function (tensor_parallel.h style), a reference if the ops lack
// one (reference.h), then a Verify<Plan> here that appends one OpCheck per op in dataflow order.
#include "parallel/verify_parallel.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/random_weights.h"
#include "ops/basic.h"
#include "parallel/expert_parallel.h"
#include "parallel/reference.h"
#include "parallel/tensor_parallel.h"
#include "runtime/model.h"

namespace gyre::parallel {

namespace {

constexpr double kExactTol = 0.0;
constexpr double kTpTol = 1e-5;
constexpr double kCpTol = 1e-4;

// ---- model + inputs ------------------------------------------------------------------------------

// A glm5_next config small enough for 2 CPU cores, with every dimension a plan splits divisible
// by 1, 2, 4 and 8 (vocabulary 240 also by 3, 5, 6): layer 0 KDA + MoE, layer 1 DSA + MoE.
const char* kVerifyConfig = R"({
  "model_type": "glm5_next", "vocab_size": 240, "hidden_size": 64, "intermediate_size": 96,
  "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8,
  "q_lora_rank": 32, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "v_head_dim": 16, "qk_rope_head_dim": 0,
  "index_n_heads": 4, "index_head_dim": 16, "index_topk": 16, "index_kpool": 4,
  "linear_num_heads": 8, "linear_head_dim": 16, "n_routed_experts": 16, "num_experts_per_tok": 4,
  "n_group": 2, "topk_group": 1, "n_shared_experts": 1,
  "layer_types": ["linear_attention", "deepseek_sparse_attention"], "indexer_types": ["full", "full"],
  "mlp_layer_types": ["sparse", "sparse"], "eos_token_id": 239})";

// The CP check's KDA layer: wider heads (K = 32) so the state has room to remember.
constexpr int64_t kCpHeads = 2, kCpHeadDim = 32;

std::string Describe(const ModelConfig& c) {
  std::ostringstream s;
  s << "glm5_next D=" << c.hidden_size << " V=" << c.vocab_size << " kda H=" << c.linear_num_heads
    << " K=" << c.linear_head_dim << " mla H=" << c.num_attention_heads << " experts=" << c.n_routed_experts
    << " top" << c.num_experts_per_tok;
  return s.str();
}

// A model built from the seed and the engine's own outputs on random tokens.
struct Fixture {
  std::unique_ptr<Model> model;
  std::map<std::string, std::vector<float>> captured;  // Model::Forward intermediates by name
  int64_t n = 0;
  const std::vector<float>& at(const std::string& name) const { return captured.at(name); }
};

Result<Fixture> MakeFixture(uint64_t seed, int64_t n) {
  GYRE_ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(kVerifyConfig));
  GYRE_ASSIGN_OR_RETURN(ModelWeights weights, RandomWeights(config, seed));
  Fixture f;
  f.n = n;
  f.model = Model::FromWeights(std::move(config), std::move(weights));
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % f.model->config().vocab_size);
  SequenceState st = f.model->NewSequence();
  SeqInput in{&st, ids, true};
  std::vector<float> logits;
  auto capture = [&](std::string_view name, std::span<const float> d, std::vector<int64_t>) {
    f.captured[std::string(name)] = std::vector<float>(d.begin(), d.end());
  };
  GYRE_RETURN_IF_ERROR(f.model->Forward(std::span<const SeqInput>(&in, 1), &logits, capture));
  return f;
}

// ---- checks --------------------------------------------------------------------------------------

OpCheck Check(std::string op, std::string rule, std::span<const float> got, std::span<const float> want, double tol,
              int64_t tokens) {
  OpCheck c;
  c.op = std::move(op);
  c.rule = std::move(rule);
  c.tokens = tokens;
  c.tolerance = tol;
  if (got.size() != want.size()) {
    c.rel_l2 = c.max_abs = std::numeric_limits<double>::infinity();
    c.note = "size mismatch: sharded " + std::to_string(got.size()) + " elements, reference " +
             std::to_string(want.size());
    return c;
  }
  const ops::Diff d = ops::Compare(got, want);
  c.rel_l2 = d.rel_l2;
  c.max_abs = d.max_abs;
  c.worst_index = d.worst_index;
  c.bitwise = d.max_abs == 0.0;
  c.pass = tol == 0.0 ? c.bitwise : d.rel_l2 <= tol;  // NaN fails both
  return c;
}

// n copies of v (the reference for a result every rank holds).
std::vector<float> Repeat(const std::vector<float>& v, int n) {
  std::vector<float> r;
  for (int i = 0; i < n; ++i) r.insert(r.end(), v.begin(), v.end());
  return r;
}

std::vector<float> Concat(std::initializer_list<const std::vector<float>*> parts) {
  std::vector<float> r;
  for (const auto* p : parts) r.insert(r.end(), p->begin(), p->end());
  return r;
}

// ---- tp ------------------------------------------------------------------------------------------

Status VerifyTpKda(const Fixture& f, int n, InjectedFault fault, std::vector<OpCheck>* out) {
  const ModelConfig& c = f.model->config();
  const KdaWeights& w = f.model->weights().layers[0].kda;
  const int64_t N = f.n, H = c.linear_num_heads, K = c.linear_head_dim, P = H * K;
  const std::vector<float>& x = f.at("layers.0.input_layernorm");
  std::vector<KdaTpShard> shards;
  for (int r = 0; r < n; ++r) shards.push_back(ShardKda(w, c, n, r));
  if (fault == InjectedFault::kShardOffset && n > 1) {
    for (int r = 0; r < n; ++r) {
      Matrix next = ShardKda(w, c, n, (r + 1) % n).conv;
      if (next.rows == shards[r].conv.rows) shards[r].conv = std::move(next);  // uneven splits keep their own
    }
  }
  std::vector<KdaLayerTrace> tr(n);
  GYRE_RETURN_IF_ERROR(RunOnRanks(n, [&](Communicator& comm) {
    return KdaTpForward(comm, shards[comm.rank()], c, x.data(), N, &tr[comm.rank()]);
  }));
  const KdaLayerTrace ref = KdaLayerReference(w, c, x.data(), N);

  // Recombine: column-parallel outputs go back to their global columns by head.
  std::vector<float> u(N * 3 * P), g(N * P), beta(N * H), z(N * P), conv(N * 3 * P), o(N * P), state(H * K * K);
  std::vector<float> outs;
  for (int r = 0; r < n; ++r) {
    const Range hr = shards[r].heads;
    const int64_t Pl = hr.size() * K, c0 = hr.begin * K;
    for (int part = 0; part < 3; ++part) {
      for (int64_t i = 0; i < N; ++i) {
        std::copy_n(&tr[r].u[i * 3 * Pl + part * Pl], Pl, &u[i * 3 * P + part * P + c0]);
        std::copy_n(&tr[r].conv[i * 3 * Pl + part * Pl], Pl, &conv[i * 3 * P + part * P + c0]);
      }
    }
    PutColumns(tr[r].g.data(), N, Pl, g.data(), P, c0);
    PutColumns(tr[r].z.data(), N, Pl, z.data(), P, c0);
    PutColumns(tr[r].beta.data(), N, hr.size(), beta.data(), H, hr.begin);
    PutColumns(tr[r].o.data(), N, Pl, o.data(), P, c0);
    std::copy(tr[r].state.begin(), tr[r].state.end(), state.begin() + hr.begin * K * K);
    outs.insert(outs.end(), tr[r].out.begin(), tr[r].out.end());
  }
  out->push_back(Check("kda.proj", "column-parallel by head: q,k,v,f_b,g_b,b gathered by head",
                       Concat({&u, &g, &beta, &z}), Concat({&ref.u, &ref.g, &ref.beta, &ref.z}), kTpTol, N));
  out->push_back(Check("kda.conv", "per-channel shard: channels gathered", conv, ref.conv, kTpTol, N));
  out->push_back(Check("kda.core", "per-head shard: outputs + final states gathered by head", Concat({&o, &state}),
                       Concat({&ref.o, &ref.state}), kTpTol, N));
  out->push_back(Check("kda.out", "row-parallel o_proj + AllReduceSum: every rank's copy", outs, Repeat(ref.out, n),
                       kTpTol, N));
  out->push_back(Check("engine.kda_layer", "rank 0's layer output vs Model::Forward", tr[0].out,
                       f.at("layers.0.self_attn"), kTpTol, N));
  return Status();
}

Status VerifyTpMla(const Fixture& f, int n, std::vector<OpCheck>* out) {
  const ModelConfig& c = f.model->config();
  const LayerWeights& L = f.model->weights().layers[1];
  const int64_t N = f.n, H = c.num_attention_heads, qk = c.qk_head_dim(), vd = c.v_head_dim;
  const std::vector<float>& x = f.at("layers.1.input_layernorm");
  std::vector<MlaTpShard> shards;
  for (int r = 0; r < n; ++r) shards.push_back(ShardMla(L, c, n, r));
  std::vector<MlaLayerTrace> tr(n);
  GYRE_RETURN_IF_ERROR(RunOnRanks(n, [&](Communicator& comm) {
    return MlaTpForward(comm, shards[comm.rank()], c, x.data(), N, &tr[comm.rank()]);
  }));
  const MlaLayerTrace ref = MlaLayerReference(L, c, x.data(), N);

  std::vector<float> q(N * H * qk), attn(N * H * vd), latents, sels, outs;
  for (int r = 0; r < n; ++r) {
    const Range hr = shards[r].heads;
    PutColumns(tr[r].q.data(), N, hr.size() * qk, q.data(), H * qk, hr.begin * qk);
    PutColumns(tr[r].attn.data(), N, hr.size() * vd, attn.data(), H * vd, hr.begin * vd);
    latents.insert(latents.end(), tr[r].latent.begin(), tr[r].latent.end());
    sels.insert(sels.end(), tr[r].selection.begin(), tr[r].selection.end());
    outs.insert(outs.end(), tr[r].out.begin(), tr[r].out.end());
  }
  const std::vector<float> ref_latents = Repeat(ref.latent, n);
  out->push_back(Check("mla.proj", "q_b column-parallel by head (gathered); latent replicated (every rank's copy)",
                       Concat({&q, &latents}), Concat({&ref.q, &ref_latents}), kTpTol, N));
  out->push_back(
      Check("mla.indexer", "replicated: every rank's selection", sels, Repeat(ref.selection, n), kExactTol, N));
  out->push_back(
      Check("mla.attn", "per-head shard (kv_b rows of its heads): gathered by head", attn, ref.attn, kTpTol, N));
  out->push_back(Check("mla.out", "row-parallel o_proj + AllReduceSum: every rank's copy", outs, Repeat(ref.out, n),
                       kTpTol, N));
  out->push_back(Check("engine.mla_layer", "rank 0's layer output vs Model::Forward", tr[0].out,
                       f.at("layers.1.self_attn"), kTpTol, N));
  return Status();
}

Status VerifyTpLmHead(const Fixture& f, int n, std::vector<OpCheck>* out) {
  const ModelConfig& c = f.model->config();
  const Matrix& lm = f.model->weights().lm_head;
  const std::vector<float>& h = f.at("norm");
  const int64_t R = static_cast<int64_t>(h.size()) / c.hidden_size;
  std::vector<LmHeadTpShard> shards;
  for (int r = 0; r < n; ++r) shards.push_back(ShardLmHead(lm, n, r));
  std::vector<LmHeadTrace> tr(n);
  GYRE_RETURN_IF_ERROR(RunOnRanks(n, [&](Communicator& comm) {
    return LmHeadTpForward(comm, shards[comm.rank()], c.vocab_size, h.data(), R, &tr[comm.rank()]);
  }));
  const LmHeadTrace ref = LmHeadReference(lm, h.data(), R);
  std::vector<float> logits, argmax;
  for (int r = 0; r < n; ++r) {
    logits.insert(logits.end(), tr[r].logits.begin(), tr[r].logits.end());
    argmax.insert(argmax.end(), tr[r].argmax.begin(), tr[r].argmax.end());
  }
  out->push_back(Check("lm_head.logits", "row-parallel by vocabulary + AllGather: every rank's copy", logits,
                       Repeat(ref.logits, n), kTpTol, R));
  out->push_back(Check("lm_head.argmax", "local max + id, max over ranks: greedy tokens on every rank", argmax,
                       Repeat(ref.argmax, n), kExactTol, R));
  out->push_back(Check("engine.logits", "rank 0's logits vs Model::Forward", tr[0].logits, f.at("logits"), kTpTol, R));
  return Status();
}

// ---- ep ------------------------------------------------------------------------------------------

Status VerifyEp(const Fixture& f, int n, InjectedFault fault, std::vector<OpCheck>* out) {
  const ModelConfig& c = f.model->config();
  const MoeWeights& w = f.model->weights().layers[0].moe;
  const int64_t N = f.n, D = c.hidden_size;
  const std::vector<float>& x = f.at("layers.0.post_attention_layernorm");
  std::vector<MoeEpShard> shards;
  for (int r = 0; r < n; ++r) shards.push_back(ShardMoe(w, c, n, r));
  if (fault == InjectedFault::kShardOffset && n > 1) {
    for (int r = 0; r < n; ++r) {
      const MoeEpShard next = ShardMoe(w, c, n, (r + 1) % n);
      for (size_t i = 0; i < shards[r].owned.size() && i < next.owned.size(); ++i) shards[r].owned[i] = next.owned[i];
    }
  }
  std::vector<MoeEpTrace> tr(n);
  GYRE_RETURN_IF_ERROR(RunOnRanks(n, [&](Communicator& comm) {
    const Range tok = Split(N, n, comm.rank());
    return MoeEpForward(comm, shards[comm.rank()], c, &x[tok.begin * D], tok.size(), tok.begin, &tr[comm.rank()]);
  }));
  const MoeTrace ref = MoeLayerReference(w, c, x.data(), N);

  std::vector<float> ids, wts, pairs, xs, ys, outs;
  for (int r = 0; r < n; ++r) {
    const size_t half = tr[r].route.size() / 2;
    ids.insert(ids.end(), tr[r].route.begin(), tr[r].route.begin() + half);
    wts.insert(wts.end(), tr[r].route.begin() + half, tr[r].route.end());
    for (size_t i = 0; i < tr[r].pair_expert.size(); ++i) {
      pairs.push_back(static_cast<float>(tr[r].pair_expert[i]));
      pairs.push_back(static_cast<float>(tr[r].pair_token[i]));
    }
    xs.insert(xs.end(), tr[r].pair_x.begin(), tr[r].pair_x.end());
    ys.insert(ys.end(), tr[r].pair_y.begin(), tr[r].pair_y.end());
    outs.insert(outs.end(), tr[r].out.begin(), tr[r].out.end());
  }
  std::vector<float> ref_pairs;
  for (size_t i = 0; i < ref.pair_expert.size(); ++i) {
    ref_pairs.push_back(static_cast<float>(ref.pair_expert[i]));
    ref_pairs.push_back(static_cast<float>(ref.pair_token[i]));
  }
  const std::vector<float> route = Concat({&ids, &wts});
  out->push_back(Check("moe.route", "token shards (router replicated): expert ids + weights gathered by token", route,
                       ref.route, kTpTol, N));
  out->push_back(Check("moe.dispatch", "AllToAllV to the expert's owner: (expert, token, row) per expert, by token",
                       Concat({&pairs, &xs}), Concat({&ref_pairs, &ref.pair_x}), kExactTol, N));
  out->push_back(Check("moe.experts", "experts partitioned by rank: outputs per (expert, token)", ys, ref.pair_y,
                       kTpTol, N));
  out->push_back(Check("moe.combine", "AllToAllV back + weighted sum in expert order + replicated shared expert",
                       outs, ref.out, kTpTol, N));
  out->push_back(Check("engine.moe_layer", "gathered layer output vs Model::Forward", outs, f.at("layers.0.mlp"),
                       kTpTol, N));
  return Status();
}

// ---- cp ------------------------------------------------------------------------------------------

// Activations of a KDA layer after its projections, drawn so that the state remembers across the
// sequence: per channel a decay time scale log-uniform in [64, 65536] tokens, and write strengths
// β ∈ [0.001, 0.01] (with isotropic keys the delta rule forgets at about β(2−β)/K per token, so
// the horizon is ~3k–30k tokens). Random projection weights instead give β ≈ 0.5 and decays of a
// few tokens: every shard then forgets its start state within ~50 tokens, the merge is nearly
// trivially right, and a low-precision merge's error does not grow with length (docs/parallel.md
// has both measurements).
struct CpInputs {
  std::vector<float> u, g, beta, z;
};
CpInputs MakeCpInputs(uint64_t seed, int64_t T, int64_t H, int64_t K, CpRegime regime) {
  const int64_t P = H * K;
  std::mt19937_64 rng(seed ^ (0x51ed27ull * static_cast<uint64_t>(T)));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  CpInputs in;
  in.u.resize(T * 3 * P);
  for (auto& v : in.u) v = normal(rng);
  std::vector<float> tau(P);
  for (auto& t : tau) t = std::exp(std::log(64.0f) + uni(rng) * (std::log(65536.0f) - std::log(64.0f)));
  in.g.resize(T * P);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t c = 0; c < P; ++c) in.g[i * P + c] = -(0.5f + uni(rng)) / tau[c];
  in.beta.resize(T * H);
  const bool long_memory = regime == CpRegime::kLongMemory;
  for (auto& b : in.beta) b = long_memory ? 0.001f + 0.009f * uni(rng) : 0.02f + 0.2f * uni(rng);
  in.z.resize(T * P);
  for (auto& v : in.z) v = normal(rng);
  return in;
}

Status VerifyCpLength(const KdaCpWeights& w, int n, int64_t T, uint64_t seed, const VerifyParallelOptions& opts,
                      std::vector<OpCheck>* out) {
  const int64_t H = w.shape.num_heads, K = w.shape.head_dim, P = H * K, C3 = 3 * P, D = w.o.rows,
                Wc = w.conv.cols;
  const CpInputs in = MakeCpInputs(seed, T, H, K, opts.cp_regime);
  const Numerics f32{};

  // Sharded.
  KdaCpOptions co;
  co.precision = opts.merge_precision;
  std::vector<KdaCpTrace> tr(n);
  GYRE_RETURN_IF_ERROR(RunOnRanks(n, [&](Communicator& comm) {
    const Range tok = Split(T, n, comm.rank());
    int64_t u0 = tok.begin;
    if (opts.fault == InjectedFault::kShardOffset && comm.rank() == 1) u0 -= 1;
    KdaCpInputs ci{&in.u[u0 * C3], &in.g[tok.begin * P], &in.beta[tok.begin * H], &in.z[tok.begin * P], tok.size()};
    return KdaCpForward(comm, w, co, ci, &tr[comm.rank()]);
  }));

  // Reference: the engine's ops over the whole sequence, the core in the shards' pieces (the
  // engine's chunked prefill), recording the true state at every shard boundary.
  std::vector<float> conv(T * C3), conv_state((Wc - 1) * C3, 0.0f);
  ops::CausalConv1dSilu(in.u.data(), T, C3, w.conv.data.data(), Wc, conv_state.data(), conv.data(), f32);
  std::vector<float> q(T * P), k(T * P), v(T * P), o(T * P), state(H * K * K, 0.0f), boundaries;
  for (int64_t i = 0; i < T; ++i) {
    std::copy_n(&conv[i * C3], P, &q[i * P]);
    std::copy_n(&conv[i * C3 + P], P, &k[i * P]);
    std::copy_n(&conv[i * C3 + 2 * P], P, &v[i * P]);
  }
  for (int r = 0; r < n; ++r) {
    const Range tok = Split(T, n, r);
    if (r > 0) boundaries.insert(boundaries.end(), state.begin(), state.end());
    const int64_t b = tok.begin;
    ops::KdaChunked(&q[b * P], &k[b * P], &v[b * P], &in.g[b * P], &in.beta[b * H], tok.size(), w.shape,
                    state.data(), &o[b * P]);
  }
  boundaries.insert(boundaries.end(), state.begin(), state.end());  // the final state
  std::vector<float> yn(T * P), y(T * D);
  ops::GatedRmsNorm(o.data(), in.z.data(), T, w.shape, w.o_norm, w.eps, yn.data(), f32);
  ops::Linear(yn.data(), T, w.o, y.data(), f32);

  std::vector<float> g_conv, g_states, g_o, g_out;
  for (int r = 0; r < n; ++r) {
    g_conv.insert(g_conv.end(), tr[r].conv.begin(), tr[r].conv.end());
    if (r > 0) g_states.insert(g_states.end(), tr[r].s_start.begin(), tr[r].s_start.end());
    g_o.insert(g_o.end(), tr[r].o.begin(), tr[r].o.end());
    g_out.insert(g_out.end(), tr[r].out.begin(), tr[r].out.end());
  }
  g_states.insert(g_states.end(), tr[n - 1].s_end.begin(), tr[n - 1].s_end.end());
  const std::string prec = MergePrecisionName(opts.merge_precision);
  out->push_back(Check("kda.conv", "token shards + 3-row halo from the previous rank (AllToAllV): gathered by token",
                       g_conv, conv, kCpTol, T));
  out->push_back(Check("kda.cp_merge",
                       "exclusive scan S_r+1 = M_r S_r + H_r over AllGather'd [M|H] (" + prec +
                           "): initial states of ranks 1..n-1 + final state",
                       g_states, boundaries, kCpTol, T));
  out->push_back(Check("kda.core", "o = o_zero + P·S_r per rank: gathered by token", g_o, o, kCpTol, T));
  out->push_back(Check("kda.out", "token-local gated norm + o_proj: gathered by token", g_out, y, kCpTol, T));
  return Status();
}

Status VerifyCp(uint64_t seed, int n, const VerifyParallelOptions& opts, std::vector<OpCheck>* out,
                std::string* model) {
  GYRE_ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfig(kVerifyConfig));
  c.linear_num_heads = kCpHeads;
  c.linear_head_dim = kCpHeadDim;
  GYRE_ASSIGN_OR_RETURN(ModelWeights weights, RandomWeights(c, seed));
  const KdaWeights& kw = weights.layers[0].kda;
  KdaCpWeights w;
  w.shape = {kCpHeads, kCpHeadDim};
  w.conv = kw.conv;
  w.o_norm = kw.o_norm;
  w.o = kw.o;
  w.eps = c.rms_norm_eps;
  *model = "glm5_next KDA layer H=" + std::to_string(kCpHeads) + " K=V=" + std::to_string(kCpHeadDim) +
           " D=" + std::to_string(c.hidden_size) + ", synthetic " +
           (opts.cp_regime == CpRegime::kLongMemory ? "long" : "short") + "-memory activations";
  for (int64_t T : opts.cp_lengths) {
    if (T < n * (c.linear_conv_kernel_dim - 1)) {
      return Status::InvalidArgument("cp length " + std::to_string(T) + " is too short for " + std::to_string(n) +
                                     " ranks");
    }
    GYRE_RETURN_IF_ERROR(VerifyCpLength(w, n, T, seed, opts, out).WithContext("T=" + std::to_string(T)));
  }
  return Status();
}

}  // namespace

// ---- driver --------------------------------------------------------------------------------------

const OpCheck* ParallelReport::FirstFailure() const {
  for (const auto& c : checks)
    if (!c.pass) return &c;
  return nullptr;
}

const OpCheck* ParallelReport::WorstFailure() const {
  const OpCheck* worst = nullptr;
  auto excess = [](const OpCheck& c) { return c.tolerance > 0 ? c.rel_l2 / c.tolerance : HUGE_VAL; };
  for (const auto& c : checks)
    if (!c.pass && (!worst || excess(c) > excess(*worst))) worst = &c;
  return worst;
}

Result<ParallelReport> VerifyParallel(const std::string& plan, const VerifyParallelOptions& opts) {
  const auto eq = plan.find('=');
  ParallelReport rep;
  rep.plan = plan;
  rep.kind = plan.substr(0, eq);
  int n = 0;
  if (eq != std::string::npos) {
    try {
      size_t used = 0;
      n = std::stoi(plan.substr(eq + 1), &used);
      if (used != plan.size() - eq - 1) n = 0;
    } catch (...) {
      n = 0;
    }
  }
  if ((rep.kind != "tp" && rep.kind != "ep" && rep.kind != "cp") || n < 1 || n > 8) {
    return Status::InvalidArgument("plan '" + plan + "' is not one of tp=N, ep=N, cp=N with N in [1, 8]");
  }
  if (rep.kind != "cp" && opts.merge_precision != MergePrecision::kF32) {
    return Status::InvalidArgument(std::string("merge precision ") + MergePrecisionName(opts.merge_precision) +
                                   " applies to cp plans only, not '" + plan + "'");
  }
  rep.size = n;
  rep.seed = opts.seed;
  if (rep.seed == 0) {  // fresh: 48 bits, so the seed survives JSON readers that parse numbers as doubles
    std::random_device rd;
    rep.seed = ((static_cast<uint64_t>(rd()) << 16) ^ rd()) & 0xffffffffffffull;
    if (rep.seed == 0) rep.seed = 1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (rep.kind == "cp") {
    rep.merge_precision = MergePrecisionName(opts.merge_precision);
    GYRE_RETURN_IF_ERROR(VerifyCp(rep.seed, n, opts, &rep.checks, &rep.model));
  } else {
    GYRE_ASSIGN_OR_RETURN(Fixture f, MakeFixture(rep.seed, opts.tokens));
    rep.model = Describe(f.model->config());
    if (rep.kind == "tp") {
      GYRE_RETURN_IF_ERROR(VerifyTpKda(f, n, opts.fault, &rep.checks));
      GYRE_RETURN_IF_ERROR(VerifyTpMla(f, n, &rep.checks));
      GYRE_RETURN_IF_ERROR(VerifyTpLmHead(f, n, &rep.checks));
    } else {
      GYRE_RETURN_IF_ERROR(VerifyEp(f, n, opts.fault, &rep.checks));
    }
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rep.pass = rep.FirstFailure() == nullptr;
  return rep;
}

// ---- rendering -----------------------------------------------------------------------------------

nlohmann::json ReportToJson(const ParallelReport& r) {
  nlohmann::json j;
  j["plan"] = r.plan;
  j["kind"] = r.kind;
  j["size"] = r.size;
  j["seed"] = r.seed;
  if (!r.merge_precision.empty()) j["merge_precision"] = r.merge_precision;
  j["model"] = r.model;
  j["pass"] = r.pass;
  j["seconds"] = r.seconds;
  j["ran_on"] = "CPU, in-process ranks (std::thread + InProcessGroup); no GPU, no NCCL";
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  for (const auto& c : r.checks) {
    nlohmann::json o = {{"op", c.op},           {"rule", c.rule},          {"tokens", c.tokens},
                        {"rel_l2", num(c.rel_l2)}, {"max_abs", num(c.max_abs)}, {"worst_index", c.worst_index},
                        {"tolerance", c.tolerance}, {"bitwise", c.bitwise}, {"pass", c.pass}};
    if (!c.note.empty()) o["note"] = c.note;
    j["checks"].push_back(std::move(o));
  }
  if (const OpCheck* f = r.FirstFailure()) j["first_failure"] = {{"op", f->op}, {"tokens", f->tokens}};
  if (const OpCheck* w = r.WorstFailure()) j["worst_failure"] = {{"op", w->op}, {"tokens", w->tokens}};
  return j;
}

std::string ReportToText(const ParallelReport& r) {
  std::ostringstream s;
  char line[256];
  s << "verify parallel " << r.plan << (r.merge_precision.empty() ? "" : " merge=" + r.merge_precision)
    << " seed=" << r.seed << " (" << r.model << ")\n";
  std::snprintf(line, sizeof line, "  %-18s %6s %11s %11s %8s %9s  %s\n", "op", "tokens", "rel_l2", "max_abs",
                "worst", "tol", "result");
  s << line;
  for (const auto& c : r.checks) {
    std::snprintf(line, sizeof line, "  %-18s %6lld %11.3e %11.3e %8lld %9.1e  %s%s\n", c.op.c_str(),
                  static_cast<long long>(c.tokens), c.rel_l2, c.max_abs, static_cast<long long>(c.worst_index),
                  c.tolerance, c.pass ? "pass" : "FAIL", c.bitwise ? " (bitwise)" : "");
    s << line;
    if (!c.note.empty()) s << "      " << c.note << "\n";
  }
  if (const OpCheck* f = r.FirstFailure()) {
    std::snprintf(line, sizeof line, "FAIL: %s at %lld tokens: rel_l2 %.3e > tolerance %.1e", f->op.c_str(),
                  static_cast<long long>(f->tokens), f->rel_l2, f->tolerance);
    s << line;
    if (f->tolerance > 0 && std::isfinite(f->rel_l2)) {
      std::snprintf(line, sizeof line, " (%.0fx)", f->rel_l2 / f->tolerance);
      s << line;
    }
    s << "\n";
    const OpCheck* worst = r.WorstFailure();
    if (worst != f) {
      std::snprintf(line, sizeof line, "worst: %s at %lld tokens: rel_l2 %.3e (%.0fx the tolerance)\n",
                    worst->op.c_str(), static_cast<long long>(worst->tokens), worst->rel_l2,
                    worst->tolerance > 0 ? worst->rel_l2 / worst->tolerance : 0.0);
      s << line;
    }
  } else {
    std::snprintf(line, sizeof line, "PASS: %zu checks in %.2f s\n", r.checks.size(), r.seconds);
    s << line;
  }
  s << "(CPU only: ranks are threads of one process; nothing here ran on GPUs or NCCL)\n";
  return s.str();
}

// ---- CLI -----------------------------------------------------------------------------------------

int RunVerifyParallelCli(const std::string& plan, const std::string& merge_precision, uint64_t seed, bool json) {
  VerifyParallelOptions opts;
  opts.seed = seed;
  if (!ParseMergePrecision(merge_precision, &opts.merge_precision)) {
    std::cerr << "gyre verify parallel: --merge-precision must be fp32, bf16 or tf32, not '" << merge_precision
              << "'\n";
    return 2;
  }
  auto rep = VerifyParallel(plan, opts);
  if (!rep.ok()) {
    std::cerr << "gyre verify parallel: " << rep.status().ToString() << "\n";
    return rep.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (json) {
    std::cout << ReportToJson(*rep).dump(2) << "\n";
  } else {
    std::cout << ReportToText(*rep);
  }
  return rep->pass ? 0 : 1;
}

}  // namespace gyre::parallel
