// ShardModelForTp: every rank's slices put back together give the model's tensors (so no row or
// column is lost, doubled or taken from the wrong head), the shard configs' counts add up, and
// configs that cannot be split are refused with the field named.
#include "parallel/tp_model.h"

#include <gtest/gtest.h>

#include <memory>

#include "model/random_weights.h"
#include "quant/quant.h"

namespace gyre::parallel {
namespace {

// Odd counts on purpose: 5 KDA heads, 3 MLA heads, vocabulary 241, intermediate widths 23 / 11,
// two shared experts: uneven splits everywhere.
const char* kConfig = R"({
  "model_type": "glm5_next", "vocab_size": 241, "hidden_size": 32, "intermediate_size": 23,
  "moe_intermediate_size": 11, "num_hidden_layers": 3, "num_attention_heads": 3, "num_key_value_heads": 3,
  "q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "v_head_dim": 8, "qk_rope_head_dim": 0,
  "index_n_heads": 2, "index_head_dim": 8, "index_topk": 8, "index_kpool": 4,
  "linear_num_heads": 5, "linear_head_dim": 8, "n_routed_experts": 4, "num_experts_per_tok": 2,
  "n_group": 1, "topk_group": 1, "n_shared_experts": 2, "hc_mult": 2,
  "layer_types": ["linear_attention", "deepseek_sparse_attention", "linear_attention"],
  "indexer_types": ["full", "full", "full"],
  "mlp_layer_types": ["dense", "sparse", "sparse"], "eos_token_id": 240})";

struct Model {
  ModelConfig c;
  ModelWeights w;
};

Model Make() {
  Model m;
  auto c = ParseModelConfig(kConfig);
  if (!c.ok()) {
    ADD_FAILURE() << c.status().ToString();
    return m;
  }
  m.c = *c;
  auto w = RandomWeights(m.c, 7);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  m.w = std::move(*w);
  return m;
}

// Concatenation of the shards' rows (blocks = 1) or of each of `blocks` row blocks.
Matrix CatRows(const std::vector<const Matrix*>& parts, int blocks = 1) {
  Matrix m;
  m.cols = parts[0]->cols;
  for (int b = 0; b < blocks; ++b) {
    for (const Matrix* p : parts) {
      const int64_t per = p->rows / blocks;
      m.data.insert(m.data.end(), p->data.begin() + b * per * p->cols, p->data.begin() + (b + 1) * per * p->cols);
      m.rows += per;
    }
  }
  return m;
}

Matrix CatCols(const std::vector<const Matrix*>& parts) {
  Matrix m;
  m.rows = parts[0]->rows;
  for (const Matrix* p : parts) m.cols += p->cols;
  m.data.resize(m.rows * m.cols);
  int64_t c0 = 0;
  for (const Matrix* p : parts) {
    for (int64_t r = 0; r < m.rows; ++r)
      for (int64_t j = 0; j < p->cols; ++j) m.data[r * m.cols + c0 + j] = p->data[r * p->cols + j];
    c0 += p->cols;
  }
  return m;
}

void ExpectSame(const Matrix& a, const Matrix& b, const std::string& what) {
  EXPECT_EQ(a.rows, b.rows) << what;
  EXPECT_EQ(a.cols, b.cols) << what;
  EXPECT_EQ(a.data, b.data) << what;
}

class TpShardSizes : public ::testing::TestWithParam<int> {};

TEST_P(TpShardSizes, ShardsReassembleTheModel) {
  const int n = GetParam();
  Model m = Make();
  std::vector<TpModelShard> s;
  for (int r = 0; r < n; ++r) {
    auto sh = ShardModelForTp(m.c, m.w, n, r);
    ASSERT_TRUE(sh.ok()) << sh.status().ToString();
    s.push_back(std::move(*sh));
  }
  auto all = [&](auto get) {
    std::vector<const Matrix*> v;
    for (const TpModelShard& x : s) v.push_back(get(x));
    return v;
  };
  int64_t kh = 0, mh = 0, inter = 0, moe_inter = 0;
  for (const TpModelShard& x : s) {
    kh += x.config.linear_num_heads;
    mh += x.config.num_attention_heads;
    inter += x.config.intermediate_size;
    moe_inter += x.config.moe_intermediate_size;
    EXPECT_EQ(x.config.vocab_size, m.c.vocab_size);
    EXPECT_EQ(x.vocab_rows, (m.c.vocab_size + n - 1) / n);
    EXPECT_EQ(x.weights.lm_head.rows, x.vocab_rows);
    EXPECT_EQ(x.weights.embed.data, m.w.embed.data);
  }
  EXPECT_EQ(kh, m.c.linear_num_heads);
  EXPECT_EQ(mh, m.c.num_attention_heads);
  EXPECT_EQ(inter, m.c.intermediate_size);
  EXPECT_EQ(moe_inter, m.c.moe_intermediate_size);

  // LM head: the blocks in rank order are the vocabulary, then zero padding.
  Matrix lm = CatRows(all([](const TpModelShard& x) { return &x.weights.lm_head; }));
  ASSERT_GE(lm.rows, m.c.vocab_size);
  EXPECT_EQ(std::vector<float>(lm.data.begin(), lm.data.begin() + m.w.lm_head.data.size()), m.w.lm_head.data);
  for (size_t i = m.w.lm_head.data.size(); i < lm.data.size(); ++i) ASSERT_EQ(lm.data[i], 0.0f) << i;

  for (size_t l = 0; l < m.w.layers.size(); ++l) {
    const LayerWeights& full = m.w.layers[l];
    const std::string at = "layer " + std::to_string(l) + " ";
    auto L = [l](const TpModelShard& x) -> const LayerWeights& { return x.weights.layers[l]; };
    if (full.attn == AttnKind::kKda) {
      ExpectSame(CatRows(all([&](const TpModelShard& x) { return &L(x).kda.q; })), full.kda.q, at + "q");
      ExpectSame(CatRows(all([&](const TpModelShard& x) { return &L(x).kda.v; })), full.kda.v, at + "v");
      ExpectSame(CatRows(all([&](const TpModelShard& x) { return &L(x).kda.conv; }), 3), full.kda.conv, at + "conv");
      ExpectSame(CatRows(all([&](const TpModelShard& x) { return &L(x).kda.g_b; })), full.kda.g_b, at + "g_b");
      ExpectSame(CatRows(all([&](const TpModelShard& x) { return &L(x).kda.b; })), full.kda.b, at + "b");
      ExpectSame(CatCols(all([&](const TpModelShard& x) { return &L(x).kda.o; })), full.kda.o, at + "o");
      std::vector<float> a_log, dt;
      for (const TpModelShard& x : s) {
        a_log.insert(a_log.end(), L(x).kda.a_log.begin(), L(x).kda.a_log.end());
        dt.insert(dt.end(), L(x).kda.dt_bias.begin(), L(x).kda.dt_bias.end());
        ExpectSame(L(x).kda.f_a, full.kda.f_a, at + "f_a replicated");
      }
      EXPECT_EQ(a_log, full.kda.a_log) << at;
      EXPECT_EQ(dt, full.kda.dt_bias) << at;
    } else {
      ExpectSame(CatRows(all([&](const TpModelShard& x) { return &L(x).mla.q_b; })), full.mla.q_b, at + "q_b");
      ExpectSame(CatRows(all([&](const TpModelShard& x) { return &L(x).mla.kv_b; })), full.mla.kv_b, at + "kv_b");
      ExpectSame(CatCols(all([&](const TpModelShard& x) { return &L(x).mla.o; })), full.mla.o, at + "mla o");
      for (const TpModelShard& x : s) {
        ExpectSame(L(x).mla.kv_a, full.mla.kv_a, at + "kv_a replicated");
        ExpectSame(L(x).mla.indexer.wk, full.mla.indexer.wk, at + "indexer replicated");
      }
    }
    if (full.mlp == MlpKind::kDense) {
      ExpectSame(CatRows(all([&](const TpModelShard& x) { return &L(x).dense.up; })), full.dense.up, at + "up");
      ExpectSame(CatCols(all([&](const TpModelShard& x) { return &L(x).dense.down; })), full.dense.down, at + "down");
    } else {
      for (size_t e = 0; e < full.moe.experts.size(); ++e) {
        ExpectSame(CatRows(all([&](const TpModelShard& x) { return &L(x).moe.experts[e].gate; })),
                   full.moe.experts[e].gate, at + "expert gate");
        ExpectSame(CatCols(all([&](const TpModelShard& x) { return &L(x).moe.experts[e].down; })),
                   full.moe.experts[e].down, at + "expert down");
      }
      ExpectSame(CatRows(all([&](const TpModelShard& x) { return &L(x).moe.shared.gate; })), full.moe.shared.gate,
                 at + "shared gate");
      ExpectSame(CatCols(all([&](const TpModelShard& x) { return &L(x).moe.shared.down; })), full.moe.shared.down,
                 at + "shared down");
      for (const TpModelShard& x : s) ExpectSame(L(x).moe.router, full.moe.router, at + "router replicated");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, TpShardSizes, ::testing::Values(1, 2, 3));

TEST(TpShard, ReplicatedMlpStaysWhole) {
  Model m = Make();
  auto s = ShardModelForTp(m.c, m.w, 2, 1, {.shard_mlp = false});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->config.intermediate_size, m.c.intermediate_size);
  EXPECT_EQ(s->weights.layers[1].moe.experts[0].down.data, m.w.layers[1].moe.experts[0].down.data);
  EXPECT_EQ(s->config.linear_num_heads, 2);  // heads 3..4 of 5
}

TEST(TpShard, ExpertParallelSplitsExpertsWhole) {
  Model m = Make();
  std::vector<MlpWeights> experts;
  int64_t next = 0;
  for (int r = 0; r < 3; ++r) {
    auto s = ShardModelForTp(m.c, m.w, 3, r, {.shard_mlp = true, .expert_parallel = true});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->expert_begin, next);
    EXPECT_EQ(s->config.moe_intermediate_size, m.c.moe_intermediate_size);  // experts whole
    EXPECT_EQ(s->config.n_routed_experts, m.c.n_routed_experts);            // the router is whole
    const auto& moe = s->weights.layers[1].moe;
    ASSERT_EQ(static_cast<int64_t>(moe.experts.size()), s->expert_count);
    EXPECT_EQ(moe.router.data, m.w.layers[1].moe.router.data);
    experts.insert(experts.end(), moe.experts.begin(), moe.experts.end());
    next += s->expert_count;
    // The shared expert and the dense MLP are split by width.
    EXPECT_LT(moe.shared.gate.rows, m.w.layers[1].moe.shared.gate.rows);
    EXPECT_LT(s->weights.layers[0].dense.gate.rows, m.w.layers[0].dense.gate.rows);
  }
  ASSERT_EQ(experts.size(), m.w.layers[1].moe.experts.size());
  for (size_t e = 0; e < experts.size(); ++e) {
    EXPECT_EQ(experts[e].gate.data, m.w.layers[1].moe.experts[e].gate.data) << e;
    EXPECT_EQ(experts[e].down.data, m.w.layers[1].moe.experts[e].down.data) << e;
  }
  // 4 experts cannot go to 5 ranks (nor can 3 MLA heads, which is checked first).
  EXPECT_EQ(ShardModelForTp(m.c, m.w, 5, 0, {.expert_parallel = true}).status().code(), StatusCode::kInvalidArgument);
}

TEST(PpShard, StagesHoldTheirLayersWhole) {
  Model m = Make();
  for (int n : {1, 2, 3}) {
    int64_t next = 0;
    for (int r = 0; r < n; ++r) {
      auto s = ShardModelForPp(m.c, m.w, n, r);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      const int64_t L = s->config.num_hidden_layers;
      ASSERT_EQ(static_cast<int64_t>(s->weights.layers.size()), L);
      ASSERT_EQ(static_cast<int64_t>(s->config.layer_types.size()), L);
      ASSERT_EQ(static_cast<int64_t>(s->config.mlp_layer_types.size()), L);
      for (int64_t l = 0; l < L; ++l) {
        EXPECT_EQ(s->config.layer_types[l], m.c.layer_types[next + l]);
        EXPECT_EQ(s->weights.layers[l].input_norm, m.w.layers[next + l].input_norm);
        EXPECT_EQ(s->weights.layers[l].attn_hc.fn.data, m.w.layers[next + l].attn_hc.fn.data);
      }
      next += L;
      EXPECT_EQ(s->config.linear_num_heads, m.c.linear_num_heads);
      EXPECT_EQ(s->weights.lm_head.data, m.w.lm_head.data);
      EXPECT_EQ(s->vocab_rows, m.c.vocab_size);
    }
    EXPECT_EQ(next, m.c.num_hidden_layers);
  }
  EXPECT_EQ(ShardModelForPp(m.c, m.w, 4, 0).status().code(), StatusCode::kInvalidArgument);  // 3 layers
}

TEST(PpShard, RefusesAStageThatWouldNeedAnEarlierStagesIndexer) {
  std::string cfg = kConfig;
  auto swap = [&](const std::string& a, const std::string& b) { cfg.replace(cfg.find(a), a.size(), b); };
  swap(R"("layer_types": ["linear_attention", "deepseek_sparse_attention", "linear_attention"])",
       R"("layer_types": ["deepseek_sparse_attention", "linear_attention", "deepseek_sparse_attention"])");
  swap(R"("indexer_types": ["full", "full", "full"])", R"("indexer_types": ["full", "full", "shared"])");
  auto c = ParseModelConfig(cfg);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto w = RandomWeights(*c, 3);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_TRUE(ShardModelForPp(*c, *w, 2, 0).ok());
  auto s1 = ShardModelForPp(*c, *w, 2, 1);  // layers [2, 3): a shared DSA layer whose indexer is on stage 0
  ASSERT_FALSE(s1.ok());
  EXPECT_EQ(s1.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(s1.status().message().find("indexer"), std::string::npos);
}

TEST(TpShard, RefusesWhatCannotBeSplit) {
  Model m = Make();
  auto too_many = ShardModelForTp(m.c, m.w, 4, 0);  // 3 MLA heads
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.status().message().find("num_attention_heads"), std::string::npos) << too_many.status().message();
  EXPECT_EQ(ShardModelForTp(m.c, m.w, 2, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardModelForTp(m.c, m.w, 0, 0).status().code(), StatusCode::kInvalidArgument);
  m.w.layers[2].moe.experts[1].down.quant = std::make_shared<QuantizedWeight>();
  auto q = ShardModelForTp(m.c, m.w, 2, 0);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace gyre::parallel
