// The MTP layer (docs/engine.md "MTP layer"): Model::MtpForward against an fp64 reference
// composed here from the reference ops (expanded MLA: K and V computed per head, not absorbed), on
// fresh random weights and inputs, odd sizes and T = 1, 2, 37; and Forward's pre-norm hidden output.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "ops/basic.h"
#include "ops/reference.h"
#include "runtime/model.h"
#include "runtime/random_model_for_tests.h"

namespace gyre {
namespace {

// Odd sizes: D = 48, 3 heads, nope 20, v 12, q LoRA 40, kv LoRA 24, I = 56, V = 61; mHC with 2
// streams in the main layers.
const char* kGlm5Mtp = R"({
  "model_type": "glm5_next", "vocab_size": 61, "hidden_size": 48, "intermediate_size": 56,
  "moe_intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 3, "num_key_value_heads": 3,
  "q_lora_rank": 40, "kv_lora_rank": 24, "qk_nope_head_dim": 20, "v_head_dim": 12, "qk_rope_head_dim": 0,
  "index_n_heads": 2, "index_head_dim": 8, "index_topk": 8, "index_kpool": 4,
  "linear_num_heads": 2, "linear_head_dim": 8, "hc_mult": 2, "swiglu_limit": 1.5,
  "layer_types": ["linear_attention", "deepseek_sparse_attention"], "mlp_layer_types": ["dense", "dense"],
  "num_nextn_predict_layers": 1})";

// kimi_linear: direct q_proj (no q LoRA) and a k_rot part (rope 8), no SwiGLU clamp.
const char* kKimiMtp = R"({
  "model_type": "kimi_linear", "vocab_size": 53, "hidden_size": 32, "intermediate_size": 40,
  "moe_intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
  "q_lora_rank": null, "kv_lora_rank": 16, "qk_nope_head_dim": 12, "qk_rope_head_dim": 8, "v_head_dim": 10,
  "num_experts": 4, "num_experts_per_token": 2, "num_shared_experts": 1,
  "linear_attn_config": {"kda_layers": [1], "full_attn_layers": [2], "head_dim": 8, "num_heads": 2,
                         "short_conv_kernel_size": 4},
  "num_nextn_predict_layers": 1})";

// fp32 vs the fp64 reference, rel-L2 of the logits. Observed ≤ 3e-7 on these sizes; the bound
// leaves room for other BLAS summation orders.
constexpr double kFp32Tol = 1e-5;

// ---- fp64 reference ------------------------------------------------------------------------------

// The MTP layer composed from the fp64 reference ops (ops/reference.h; MLA with K and V expanded
// per head), straight from the definition in docs/engine.md. Values pass between ops as fp32.
using ops::ref::Vec;
std::vector<float> F32(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

void AddInto(Vec* x, const Vec& y) {
  for (size_t i = 0; i < x->size(); ++i) (*x)[i] += y[i];
}

// logits [T-1, V].
Vec MtpRef(const Model& m, const std::vector<int32_t>& ids, const std::vector<float>& hidden) {
  namespace ref = ops::ref;
  const ModelConfig& c = m.config();
  const MtpWeights& w = m.weights().mtp;
  const MlaWeights& a = w.mla;
  const int64_t D = c.hidden_size, V = c.vocab_size, n = static_cast<int64_t>(ids.size()) - 1,
                H = c.num_attention_heads, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, vd = c.v_head_dim,
                R = c.kv_lora_rank, qk = nope + rope, I = c.intermediate_size, ql = c.q_lora_rank;
  const double eps = c.rms_norm_eps;
  // x_t = eh_proj([enorm(embed(ids[t+1])) | hnorm(h_t)])
  std::vector<float> e, cat(n * 2 * D);
  for (int64_t t = 0; t < n; ++t) {
    const float* row = m.weights().embed.row(ids[t + 1]);
    e.insert(e.end(), row, row + D);
  }
  const Vec en = ref::RmsNorm(e, n, D, w.enorm, eps);
  const Vec hn = ref::RmsNorm(std::vector<float>(hidden.begin(), hidden.begin() + n * D), n, D, w.hnorm, eps);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t d = 0; d < D; ++d) {
      cat[t * 2 * D + d] = static_cast<float>(en[t * D + d]);
      cat[t * 2 * D + D + d] = static_cast<float>(hn[t * D + d]);
    }
  Vec x = ref::Linear(cat, n, w.eh_proj.data, D, 2 * D);
  // x += o_proj(MLA(input_layernorm(x))), causal over positions 0..t
  const std::vector<float> h = F32(ref::RmsNorm(F32(x), n, D, w.input_norm, eps));
  Vec q;
  if (ql > 0) {
    const Vec qa = ref::RmsNorm(F32(ref::Linear(h, n, a.q_a.data, ql, D)), n, ql, a.q_a_norm, c.qa_norm_eps);
    q = ref::Linear(F32(qa), n, a.q_b.data, H * qk, ql);
  } else {
    q = ref::Linear(h, n, a.q_proj.data, H * qk, D);
  }
  const Vec ckv = ref::Linear(h, n, a.kv_a.data, R + rope, D);
  std::vector<float> cpart, krot;
  std::vector<std::vector<int32_t>> sel(n);
  for (int64_t t = 0; t < n; ++t) {
    cpart.insert(cpart.end(), ckv.begin() + t * (R + rope), ckv.begin() + t * (R + rope) + R);
    krot.insert(krot.end(), ckv.begin() + t * (R + rope) + R, ckv.begin() + (t + 1) * (R + rope));
    for (int32_t j = 0; j <= t; ++j) sel[t].push_back(j);
  }
  const Vec latent = ref::RmsNorm(cpart, n, R, a.kv_a_norm, c.kva_norm_eps);
  const Vec attn = ref::Mla(F32(q), n, F32(latent), krot, a.kv_b.data, H, nope, rope, vd, R,
                            1.0 / std::sqrt(static_cast<double>(qk)), sel);
  AddInto(&x, ref::Linear(F32(attn), n, a.o.data, D, H * vd));
  // x += MLP(post_attention_layernorm(x)); logits = head(norm(x))
  const std::vector<float> h2 = F32(ref::RmsNorm(F32(x), n, D, w.post_norm, eps));
  const Vec g = ref::Linear(h2, n, w.mlp.gate.data, I, D), u = ref::Linear(h2, n, w.mlp.up.data, I, D);
  const Vec act = ref::SwiGlu(F32(g), F32(u), c.swiglu_limit.value_or(0.0f));
  AddInto(&x, ref::Linear(F32(act), n, w.mlp.down.data, D, I));
  return ref::Linear(F32(ref::RmsNorm(F32(x), n, D, w.head_norm, eps)), n, w.head.data, V, D);
}

double RelL2(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// ---- tests ---------------------------------------------------------------------------------------

class MtpForward : public ::testing::TestWithParam<const char*> {};

TEST_P(MtpForward, MatchesFp64Reference) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto m = RandomModel(GetParam(), seed);
  ASSERT_TRUE(m->has_mtp());
  const int64_t D = m->config().hidden_size, V = m->config().vocab_size;
  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t T : {1, 2, 37}) {
    std::vector<int32_t> ids(T);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % V);
    std::vector<float> hidden(T * D);
    for (auto& v : hidden) v = 3.0f * normal(rng);
    std::vector<float> logits((T - 1) * V, std::numeric_limits<float>::quiet_NaN());  // poisoned
    ASSERT_TRUE(m->MtpForward(ids, hidden, &logits).ok());
    ASSERT_EQ(static_cast<int64_t>(logits.size()), (T - 1) * V);
    for (float v : logits) {
      ASSERT_TRUE(std::isfinite(v)) << "T=" << T;
    }
    const std::vector<double> want = MtpRef(*m, ids, hidden);
    if (T > 1) {
      EXPECT_LT(RelL2(logits, want), kFp32Tol) << "T=" << T;
    }
  }
}

// The pre-norm hidden output: the mean of the last layer's streams (one stream for kimi), for
// every new token of the sequences that ask, poisoned first; the logits do not change.
TEST_P(MtpForward, ForwardHiddenIsTheInputOfTheFinalNorm) {
  auto m = RandomModel(GetParam(), 9);
  const ModelConfig& c = m->config();
  const int64_t D = c.hidden_size, n_streams = std::max<int64_t>(c.hc_mult, 1), L = c.num_hidden_layers;
  const std::vector<int32_t> a = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5}, b = {2, 7, 1, 8};
  std::vector<float> last, want_a, want_b;
  CaptureFn capture = [&](std::string_view name, std::span<const float> d, std::vector<int64_t>) {
    if (name == "layers." + std::to_string(L - 1)) last.assign(d.begin(), d.end());
  };
  SequenceState sa = m->NewSequence(), sb = m->NewSequence();
  std::vector<float> ha(a.size() * D, std::numeric_limits<float>::quiet_NaN()), logits, plain;
  std::vector<SeqInput> batch = {{&sa, a, false, &ha}, {&sb, b, true, nullptr}};
  ASSERT_TRUE(m->Forward(batch, &logits).ok());
  ASSERT_EQ(ha.size(), a.size() * D);
  SequenceState sa2 = m->NewSequence(), sb2 = m->NewSequence();
  std::vector<SeqInput> again = {{&sa2, a, false}, {&sb2, b, true}};
  ASSERT_TRUE(m->Forward(again, &plain, capture).ok());
  ASSERT_EQ(last.size(), (a.size() + b.size()) * n_streams * D);
  for (size_t i = 0; i < a.size(); ++i) {
    for (int64_t d = 0; d < D; ++d) {
      double acc = 0;
      for (int64_t s = 0; s < n_streams; ++s) acc += last[(i * n_streams + s) * D + d];
      ASSERT_NEAR(ha[i * D + d], acc / n_streams, 1e-5 * (1 + std::abs(acc))) << "token " << i << " d " << d;
    }
  }
  SequenceState sa3 = m->NewSequence(), sb3 = m->NewSequence();
  std::vector<SeqInput> plain_batch = {{&sa3, a, false}, {&sb3, b, true}};
  ASSERT_TRUE(m->Forward(plain_batch, &plain).ok());
  EXPECT_EQ(logits, plain);
}

INSTANTIATE_TEST_SUITE_P(Archs, MtpForward, ::testing::Values(kGlm5Mtp, kKimiMtp));

TEST(MtpForwardErrors, NoLayerBadShapesAndIds) {
  auto m = RandomModel(kGlm5Mtp, 1);
  const int64_t D = m->config().hidden_size;
  std::vector<float> logits = {42.0f};
  const std::vector<int32_t> ids = {1, 2, 3};
  const std::vector<float> hidden(3 * D, 0.5f);
  EXPECT_EQ(m->MtpForward({}, {}, &logits).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m->MtpForward(ids, std::span<const float>(hidden).first(2 * D), &logits).code(),
            StatusCode::kInvalidArgument);
  const std::vector<int32_t> bad = {1, 61, 3};
  Status s = m->MtpForward(bad, hidden, &logits);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("61"), std::string::npos);
  EXPECT_EQ(logits, std::vector<float>{42.0f});  // untouched on error

  std::string no_mtp = kGlm5Mtp;
  no_mtp.replace(no_mtp.find("\"num_nextn_predict_layers\": 1"), 29, "\"num_nextn_predict_layers\": 0");
  auto plain = RandomModel(no_mtp.c_str(), 1);
  EXPECT_FALSE(plain->has_mtp());
  s = plain->MtpForward(ids, hidden, &logits);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no MTP layer"), std::string::npos);
}

}  // namespace
}  // namespace gyre
