// KV cache dtypes on the CudaModel (needs a GPU; ctest label gpu, scripts/gpu_check.sh step kvcache):
// the trained fixture tests/fixtures/glm5_mini run with its attention layers' latent rows in fp32,
// bf16, fp8 and int8 (quant/kv_cache.h), and with a mixed per-layer policy. The op-level proof that
// the kernels read exactly the encoded values is `gyre verify ops --backend cuda --op mla.attention`
// (mla_host.h); this test measures what each dtype costs the model and checks the model plumbing.
//
// Inputs: 64 prompt tokens of the fixture's golden text (logits of every position), then 16 decode
// steps fed the text's next 16 tokens (teacher forcing; logits of each step). Reference: the same
// CudaModel and weights with an fp32 cache.
//
// Bounds (docs/quantization.md "KV cache dtype"):
//   bf16 weights + bf16 cache: bit-identical to the fp32 cache. The bf16 path rounds every cache row
//       to bf16 as it loads it (docs/cuda.md "bf16 path"), so storing it rounded loses nothing.
//   fp32 weights: logits rel-L2 to the fp32 cache <= 5e-4 (bf16), 2e-3 (int8), 8e-3 (fp8), and
//       bf16 < int8 < fp8 (8 significant bits; 8 bits over the row's range; 4 significant bits). Set
//       at ~10x the first GPU run's values (3.8e-5, 2.0e-4, 7.5e-4 on H100, 2026-12-06); the first
//       bounds (5e-3 / 3e-2 / 6e-2, from the formats' element errors) were 100x loose. A cache
//       written without its scale, or read with another row's, lands at O(1).
//   greedy: where the argmax differs from the reference, the reference's top-2 margin must be under
//       0.1 standard deviations of that position's logits (a near tie).
//   mixed policy ({"default": "bf16", "layers": {first attention layer: "fp8"}}): differs from both
//       uniform policies (so the per-layer entry is applied), and costs no more than uniform fp8.
//   pages: bytes_per_page is the sum of the row formats; ReadPages / WritePages carry a page
//       between two models of the same policy byte for byte.
// GYRE_KV_REPORT=FILE writes the measured table (the accuracy report's KV part) as JSON.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "model/safetensors.h"
#include "ops/basic.h"
#include "quant/kv_cache.h"
#include "runtime/cuda_model.h"
#include "runtime/gpu_fixture_for_tests.h"
#include "runtime/kv_policy_flags.h"
#include "runtime/model.h"
#include "runtime/model_runner.h"
#include "runtime/parity.h"

namespace gyre {
namespace {

const std::string kDir = Glm5MiniDir();
std::vector<int32_t> GoldenIds(size_t n) { return gyre::GoldenIds(kDir, n); }

struct RunOut {
  std::vector<float> prefill;             // [64, V]
  std::vector<std::vector<float>> steps;  // 16 × [V]
  RunnerCapacity cap;
  int64_t kv_bytes = 0;
};

Result<RunOut> RunModel(const Model& m, const KvCachePolicy& policy, bool bf16, std::span<const int32_t> prompt,
                        std::span<const int32_t> forced) {
  CudaModelOptions o = SmallCudaOptions(bf16);
  o.kv_cache = policy;
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> g, CudaModel::FromHost(m.config(), m.weights(), o));
  RunOut r;
  r.cap = g->capacity();
  r.kv_bytes = g->stats().kv_bytes;
  RunnerSession sess(*g);
  GYRE_ASSIGN_OR_RETURN(int s, sess.NewSequence());
  RunnerSession::Input in{s, prompt, {}, true};
  GYRE_RETURN_IF_ERROR(sess.Step(std::span<const RunnerSession::Input>(&in, 1), nullptr, &r.prefill));
  for (const int32_t& id : forced) {
    std::vector<float> lg;
    RunnerSession::Input d{s, std::span<const int32_t>(&id, 1), {}, true};
    GYRE_RETURN_IF_ERROR(sess.Step(std::span<const RunnerSession::Input>(&d, 1), nullptr, &lg));
    r.steps.push_back(std::move(lg));
  }
  sess.Release(s);
  return r;
}

struct Cost {
  double prefill_rel = 0, decode_rel = 0, kl = 0, top1 = 0;
  int positions = 0, flips = 0, clear_flips = 0;
};

// Per position: KL(ref || got) of the softmaxes, argmax agreement, near-tie rule.
void Position(std::span<const float> ref, std::span<const float> got, Cost* c) {
  const size_t V = ref.size();
  const float mr = *std::max_element(ref.begin(), ref.end()), mg = *std::max_element(got.begin(), got.end());
  double zr = 0, zg = 0;
  for (size_t v = 0; v < V; ++v) zr += std::exp(double(ref[v]) - mr), zg += std::exp(double(got[v]) - mg);
  double kl = 0, mean = 0, var = 0;
  for (size_t v = 0; v < V; ++v) {
    const double lp = double(ref[v]) - mr - std::log(zr), lq = double(got[v]) - mg - std::log(zg);
    kl += std::exp(lp) * (lp - lq);
    mean += ref[v];
  }
  mean /= double(V);
  for (size_t v = 0; v < V; ++v) var += (ref[v] - mean) * (ref[v] - mean);
  c->kl += kl;
  const auto ar = std::max_element(ref.begin(), ref.end()) - ref.begin();
  const auto ag = std::max_element(got.begin(), got.end()) - got.begin();
  ++c->positions;
  if (ar == ag) {
    c->top1 += 1;
    return;
  }
  ++c->flips;
  float top2 = -INFINITY;
  for (size_t v = 0; v < V; ++v)
    if (static_cast<ptrdiff_t>(v) != ar) top2 = std::max(top2, ref[v]);
  if (ref[ar] - top2 >= 0.1 * std::sqrt(var / double(V))) ++c->clear_flips;
}

Cost Measure(const RunOut& ref, const RunOut& got, int64_t V) {
  Cost c;
  c.prefill_rel = ops::Compare(got.prefill, ref.prefill).rel_l2;
  std::vector<float> a, b;
  for (size_t i = 0; i < ref.steps.size(); ++i) {
    a.insert(a.end(), ref.steps[i].begin(), ref.steps[i].end());
    b.insert(b.end(), got.steps[i].begin(), got.steps[i].end());
  }
  c.decode_rel = ops::Compare(b, a).rel_l2;
  for (size_t p = 0; p < ref.prefill.size() / V; ++p)
    Position(std::span<const float>(ref.prefill.data() + p * V, V), std::span<const float>(got.prefill.data() + p * V, V), &c);
  for (size_t i = 0; i < ref.steps.size(); ++i) Position(ref.steps[i], got.steps[i], &c);
  c.kl /= c.positions;
  c.top1 /= c.positions;
  return c;
}

class KvCacheGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = Model::Load(kDir);
    ASSERT_TRUE(m.ok()) << m.error().ToString();
    model_ = std::move(*m);
    const std::vector<int32_t> ids = GoldenIds(80);
    ASSERT_EQ(ids.size(), 80u);
    prompt_.assign(ids.begin(), ids.begin() + 64);
    forced_.assign(ids.begin() + 64, ids.end());
    const ModelConfig& c = model_->config();
    is_attention_ = AttentionLayerMask(c);
  }
  KvCachePolicy Uniform(KvDtype d) const { return UniformKvPolicy(model_->config().num_hidden_layers, d); }
  Result<RunOut> Run(const KvCachePolicy& p, bool bf16) const { return RunModel(*model_, p, bf16, prompt_, forced_); }
  std::unique_ptr<Model> model_;
  std::vector<int32_t> prompt_, forced_;
  std::vector<bool> is_attention_;
};

TEST_F(KvCacheGpu, Bf16CacheIsExactOnTheBf16Path) {
  auto ref = Run(Uniform(KvDtype::kF32), true);
  auto got = Run(Uniform(KvDtype::kBf16), true);
  ASSERT_TRUE(ref.ok() && got.ok()) << (ref.ok() ? got.error().ToString() : ref.error().ToString());
  EXPECT_EQ(got->prefill, ref->prefill) << "prefill logits rel-L2 " << ops::Compare(got->prefill, ref->prefill).rel_l2;
  for (size_t i = 0; i < ref->steps.size(); ++i) EXPECT_EQ(got->steps[i], ref->steps[i]) << "decode step " << i;
  EXPECT_LT(got->kv_bytes, ref->kv_bytes);
}

TEST_F(KvCacheGpu, AccuracyPerDtypeAndMixedPolicy) {
  const int64_t V = model_->config().vocab_size;
  auto ref = Run(Uniform(KvDtype::kF32), false);
  ASSERT_TRUE(ref.ok()) << ref.error().ToString();
  nlohmann::json report = nlohmann::json::array();
  std::map<std::string, Cost> cost;
  auto add = [&](const std::string& name, const KvCachePolicy& p) -> const RunOut* {
    static std::map<std::string, RunOut> keep;
    auto got = Run(p, false);
    EXPECT_TRUE(got.ok()) << name << ": " << (got.ok() ? "" : got.error().ToString());
    if (!got.ok()) return nullptr;
    const Cost c = Measure(*ref, *got, V);
    cost[name] = c;
    std::printf("[kv %s] logits rel-L2 prefill %.3e decode %.3e; KL %.3e; top-1 %.4f (%d flips, %d clear); "
                "kv bytes %lld (fp32 %lld); bytes/page %lld\n",
                name.c_str(), c.prefill_rel, c.decode_rel, c.kl, c.top1, c.flips, c.clear_flips,
                static_cast<long long>(got->kv_bytes), static_cast<long long>(ref->kv_bytes),
                static_cast<long long>(got->cap.bytes_per_page));
    report.push_back({{"policy", name},
                      {"weights", "fp32"},
                      {"prefill_logits_rel_l2", c.prefill_rel},
                      {"decode_logits_rel_l2", c.decode_rel},
                      {"mean_kl", c.kl},
                      {"top1_agreement", c.top1},
                      {"positions", c.positions},
                      {"argmax_flips", c.flips},
                      {"clear_flips", c.clear_flips},
                      {"kv_bytes", got->kv_bytes},
                      {"kv_bytes_fp32", ref->kv_bytes},
                      {"bytes_per_page", got->cap.bytes_per_page}});
    EXPECT_EQ(c.clear_flips, 0) << name << ": an argmax differs where the fp32 cache's choice is clear";
    keep[name] = std::move(*got);
    return &keep[name];
  };
  add("bf16", Uniform(KvDtype::kBf16));
  add("int8", Uniform(KvDtype::kInt8));
  add("fp8", Uniform(KvDtype::kFp8));
  ASSERT_EQ(cost.size(), 3u);
  EXPECT_LE(cost["bf16"].prefill_rel, 5e-4);
  EXPECT_LE(cost["int8"].prefill_rel, 2e-3);
  EXPECT_LE(cost["fp8"].prefill_rel, 8e-3);
  for (const char* d : {"bf16", "int8", "fp8"}) {
    EXPECT_GT(cost[d].prefill_rel, 0.0) << d << ": no cost at all (is the policy applied?)";
    EXPECT_LE(cost[d].decode_rel, 2 * std::max(cost[d].prefill_rel, 1e-3)) << d;
  }
  EXPECT_LT(cost["bf16"].prefill_rel, cost["int8"].prefill_rel);
  EXPECT_LT(cost["int8"].prefill_rel, cost["fp8"].prefill_rel);

  // Mixed: the first attention layer in fp8, the others bf16.
  int64_t first = -1;
  for (size_t l = 0; l < is_attention_.size() && first < 0; ++l)
    if (is_attention_[l]) first = static_cast<int64_t>(l);
  ASSERT_GE(first, 0);
  auto mixed = ParseKvCachePolicy(R"({"default": "bf16", "layers": {")" + std::to_string(first) + R"(": "fp8"}})",
                                  is_attention_);
  ASSERT_TRUE(mixed.ok()) << mixed.error().ToString();
  add("bf16 + layer " + std::to_string(first) + " fp8", *mixed);
  const Cost& mc = cost["bf16 + layer " + std::to_string(first) + " fp8"];
  EXPECT_NE(mc.prefill_rel, cost["bf16"].prefill_rel) << "the per-layer fp8 entry changed nothing";
  EXPECT_NE(mc.prefill_rel, cost["fp8"].prefill_rel);
  EXPECT_LE(mc.prefill_rel, cost["fp8"].prefill_rel);

  if (const char* path = std::getenv("GYRE_KV_REPORT")) {
    std::ofstream f(path);
    f << nlohmann::json{{"fixture", kDir}, {"reference", "same CudaModel, fp32 weights, fp32 cache"},
                        {"inputs", "64 golden prompt tokens (all logits) + 16 teacher-forced decode steps"},
                        {"rows", report}}
             .dump(2);
  }
}

TEST_F(KvCacheGpu, PageBytesFollowThePolicyAndPagesTransfer) {
  const ModelConfig& c = model_->config();
  for (const KvDtype d : {KvDtype::kF32, KvDtype::kBf16, KvDtype::kFp8, KvDtype::kInt8}) {
    CudaModelOptions o;
    o.max_seqs = 2;
    o.max_batch_tokens = 64;
    o.kv_tokens = 256;
    o.page_tokens = 16;
    o.kv_cache = Uniform(d);
    auto a = CudaModel::FromHost(c, model_->weights(), o);
    auto b = CudaModel::FromHost(c, model_->weights(), o);
    ASSERT_TRUE(a.ok() && b.ok()) << KvDtypeName(d);
    int64_t want = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      if (!is_attention_[l]) continue;
      want += KvRowBytes(d, c.kv_lora_rank) + (c.qk_rope_head_dim > 0 ? KvRowBytes(d, c.qk_rope_head_dim) : 0);
      if (c.layer_types[l] == AttnKind::kDsa && c.indexer_types[l] == IndexerKind::kFull) {
        const int64_t div = o.page_tokens % c.index_kpool == 0 ? c.index_kpool : 1;  // pooled keys: a row per pool
        want += 2 * 4 * c.index_head_dim + (4 * c.index_head_dim + div - 1) / div;
      }
    }
    EXPECT_EQ((*a)->capacity().bytes_per_page, want * o.page_tokens) << KvDtypeName(d);  // (exact when 4·di % div == 0)
    // A prefill on a, its first two pages read out, written into b, and read back from b.
    RunnerSession sess(**a);
    auto s = sess.NewSequence();
    ASSERT_TRUE(s.ok());
    const std::span<const int32_t> ids(prompt_.data(), 32);
    RunnerSession::Input in{*s, ids, {}, false};
    ASSERT_TRUE(sess.Step(std::span<const RunnerSession::Input>(&in, 1), nullptr).ok());
    const std::vector<PageId> pages{0, 1};
    const size_t bytes = 2 * static_cast<size_t>((*a)->capacity().bytes_per_page);
    std::vector<std::byte> img(bytes), back(bytes, std::byte{0x5a});
    ASSERT_TRUE((*a)->ReadPages(pages, img).ok());
    ASSERT_TRUE((*b)->WritePages(pages, img).ok());
    ASSERT_TRUE((*b)->ReadPages(pages, back).ok());
    EXPECT_EQ(img, back) << KvDtypeName(d);
    EXPECT_NE(std::count(img.begin(), img.end(), std::byte{0}), static_cast<ptrdiff_t>(bytes)) << "nothing written";
  }
}

}  // namespace
}  // namespace gyre
