#include "quant/kv_policy_search.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "quant/kv_cache.h"

namespace gyre {
namespace {

constexpr int64_t kVocab = 50, kPositions = 40;

std::vector<float> RandomLogits(uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, 3.0f);
  std::vector<float> x(kVocab * kPositions);
  for (float& v : x) v = n(g);
  return x;
}

TEST(CompareLogitRows, SelfIsZeroAndPerturbationCounts) {
  const std::vector<float> a = RandomLogits(1);
  auto same = CompareLogitRows(a, a, kVocab);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->mean_kl, 0.0);
  EXPECT_EQ(same->top1, 1.0);
  EXPECT_EQ(same->positions, kPositions);
  std::vector<float> b = a;
  for (int64_t p = 0; p < kPositions; ++p) b[p * kVocab] += 100.0f;  // token 0 wins every row of b
  auto diff = CompareLogitRows(a, b, kVocab);
  ASSERT_TRUE(diff.ok());
  EXPECT_GT(diff->mean_kl, 1.0);
  EXPECT_LT(diff->top1, 0.2);
  // A shift of a whole row changes no softmax.
  std::vector<float> c = a;
  for (float& v : c) v += 7.0f;
  EXPECT_NEAR(CompareLogitRows(a, c, kVocab)->mean_kl, 0.0, 1e-9);
  EXPECT_FALSE(CompareLogitRows(a, std::vector<float>(a.begin(), a.end() - 1), kVocab).ok());
  EXPECT_FALSE(CompareLogitRows(std::vector<float>(7), std::vector<float>(7), kVocab).ok());
}

// A model whose logits move by a known amount per (layer, dtype): the perturbation of layer l in
// dtype d is eps[l][d] times a fixed random direction per layer, so costs are close to additive
// but not exactly.
struct FakeModel {
  std::vector<float> ref = RandomLogits(7);
  std::map<std::pair<int64_t, KvDtype>, float> eps;
  int calls = 0;
  Result<std::vector<float>> operator()(const KvCachePolicy& p) {
    ++calls;
    std::vector<float> out = ref;
    for (size_t l = 0; l < p.layers.size(); ++l) {
      auto it = eps.find({static_cast<int64_t>(l), p.layers[l]});
      if (it == eps.end()) continue;
      std::mt19937 g(100 + static_cast<uint32_t>(l));
      std::normal_distribution<float> n(0.0f, 1.0f);
      for (float& v : out) v += it->second * n(g);
    }
    return out;
  }
};

TEST(KvPolicySearch, MovesCheapLayersWithinTheBudgetAndRejectsTheRest) {
  // Layers 0, 2 are KDA; 1, 3, 4, 5 attention. bf16 costs ~nothing; layer 5 is fragile in 8 bits.
  const std::vector<bool> attn{false, true, false, true, true, true};
  FakeModel m;
  for (int64_t l : {1, 3, 4, 5}) m.eps[{l, KvDtype::kBf16}] = 0.001f;
  m.eps[{1, KvDtype::kInt8}] = 0.01f, m.eps[{1, KvDtype::kFp8}] = 0.03f;
  m.eps[{3, KvDtype::kInt8}] = 0.05f, m.eps[{3, KvDtype::kFp8}] = 0.02f;
  m.eps[{4, KvDtype::kInt8}] = 0.025f, m.eps[{4, KvDtype::kFp8}] = 0.04f;
  m.eps[{5, KvDtype::kInt8}] = 1.0f, m.eps[{5, KvDtype::kFp8}] = 2.0f;
  KvPolicySearchOptions o;
  o.max_kl = 2e-3;
  auto r = SearchKvPolicy(attn, kVocab, [&](const KvCachePolicy& p) { return m(p); }, o);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  // 1 reference + 1 base + 4 layers × 2 candidates + 4 moves.
  EXPECT_EQ(r->runs, 14);
  EXPECT_EQ(m.calls, 14);
  EXPECT_EQ(r->singles.size(), 8u);
  // Each moved layer took its cheaper candidate; the fragile layer was tried and undone.
  EXPECT_EQ(r->policy.layers[1], KvDtype::kInt8);
  EXPECT_EQ(r->policy.layers[3], KvDtype::kFp8);
  EXPECT_EQ(r->policy.layers[4], KvDtype::kInt8);
  EXPECT_EQ(r->policy.layers[5], KvDtype::kBf16);
  EXPECT_EQ(r->policy.layers[0], KvDtype::kF32);  // KDA
  EXPECT_EQ(r->moved, (std::vector<int64_t>{1, 3, 4}));  // ascending single cost
  EXPECT_EQ(r->rejected, (std::vector<int64_t>{5}));
  EXPECT_LE(r->final_cost.mean_kl, o.max_kl);
  EXPECT_GT(r->final_cost.mean_kl, r->base_cost.mean_kl);
  // The proposal round-trips through the policy file parser.
  auto back = ParseKvCachePolicy(r->PolicyJson(), attn);
  ASSERT_TRUE(back.ok()) << back.error().ToString() << "\n" << r->PolicyJson();
  EXPECT_EQ(back->layers, r->policy.layers);
  const nlohmann::json rep = r->Report(100, 80);
  EXPECT_EQ(rep["singles"].size(), 8u);
  EXPECT_EQ(rep["cache_bytes_per_token_final"], 80);

  // A zero budget moves nothing: every 8-bit move costs something.
  o.max_kl = r->base_cost.mean_kl;
  auto none = SearchKvPolicy(attn, kVocab, [&](const KvCachePolicy& p) { return m(p); }, o);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->moved.empty());
  EXPECT_EQ(none->rejected.size(), 4u);
}

TEST(KvPolicySearch, RefusesWhatItCannotSearch) {
  FakeModel m;
  auto run = [&](const KvCachePolicy& p) { return m(p); };
  KvPolicySearchOptions o;
  EXPECT_FALSE(SearchKvPolicy({false, false}, kVocab, run, o).ok());  // no attention layer
  o.candidates.clear();
  EXPECT_FALSE(SearchKvPolicy({true}, kVocab, run, o).ok());
  // The base alone over budget.
  KvPolicySearchOptions b;
  m.eps[{0, KvDtype::kBf16}] = 1.0f;
  b.max_kl = 1e-6;
  auto r = SearchKvPolicy({true}, kVocab, run, b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("base dtype bf16"), std::string::npos);
  // A failing run is passed through.
  auto failing = [](const KvCachePolicy&) -> Result<std::vector<float>> { return Status::Unavailable("no gpu"); };
  EXPECT_EQ(SearchKvPolicy({true}, kVocab, failing, KvPolicySearchOptions{}).error().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gyre
