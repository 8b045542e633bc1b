// config.json parsing: derived fields exactly as transformers 5.17 derives them (checked against
// the reference's resolved configs of the fixtures), the documented schedules, and the errors.
#include "model/config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace gyre {
namespace {

using json = nlohmann::json;

std::string Read(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
std::string Fx(const std::string& n) { return std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/" + n; }

std::vector<std::string> AttnNames(const ModelConfig& c) {
  std::vector<std::string> r;
  for (auto t : c.layer_types)
    r.push_back(t == AttnKind::kKda ? "linear_attention"
                                    : (t == AttnKind::kDsa ? "deepseek_sparse_attention" : "full_attention"));
  return r;
}
std::vector<std::string> MlpNames(const ModelConfig& c) {
  std::vector<std::string> r;
  for (auto t : c.mlp_layer_types) r.push_back(t == MlpKind::kDense ? "dense" : "sparse");
  return r;
}
std::vector<std::string> IdxNames(const ModelConfig& c) {
  std::vector<std::string> r;
  for (auto t : c.indexer_types) r.push_back(t == IndexerKind::kFull ? "full" : "shared");
  return r;
}

void ExpectMatchesResolved(const std::string& fixture) {
  auto c = LoadModelConfig(Fx(fixture));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  json r = json::parse(Read(Fx(fixture) + "/resolved_config.json"));
  if (r.contains("text_config") && r["text_config"].is_object()) r = r["text_config"];
  EXPECT_EQ(AttnNames(*c), r["layer_types"].get<std::vector<std::string>>()) << fixture;
  EXPECT_EQ(MlpNames(*c), r["mlp_layer_types"].get<std::vector<std::string>>()) << fixture;
  if (r.contains("indexer_types")) EXPECT_EQ(IdxNames(*c), r["indexer_types"].get<std::vector<std::string>>());
  if (r.contains("linear_lower_bound")) {
    EXPECT_EQ(c->linear_lower_bound.has_value(), !r["linear_lower_bound"].is_null()) << fixture;
  }
  EXPECT_EQ(c->hidden_size, r["hidden_size"].get<int64_t>());
  EXPECT_EQ(c->vocab_size, r["vocab_size"].get<int64_t>());
  EXPECT_EQ(c->linear_num_heads, r["linear_num_heads"].get<int64_t>());
  EXPECT_EQ(c->linear_head_dim, r["linear_head_dim"].get<int64_t>());
  EXPECT_EQ(c->qk_head_dim(), r["qk_head_dim"].get<int64_t>());
  EXPECT_EQ(c->max_position_embeddings, r.value("max_position_embeddings", int64_t{0})) << fixture;
}

TEST(ModelConfig, FixturesMatchReferenceResolvedConfigs) {
  ExpectMatchesResolved("glm5_tiny");
  ExpectMatchesResolved("glm5_flat");
  ExpectMatchesResolved("kimi_tiny");
}

TEST(ModelConfig, Glm5Defaults) {
  auto c = ParseModelConfig(R"({"model_type": "glm5_next"})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->num_hidden_layers, 45);
  EXPECT_EQ(c->NumLayers(AttnKind::kDsa), 11);
  EXPECT_EQ(c->NumLayers(AttnKind::kKda), 34);
  EXPECT_EQ(c->layer_types[3], AttnKind::kDsa);
  EXPECT_EQ(c->layer_types[44], AttnKind::kKda);
  EXPECT_EQ(c->mlp_layer_types[2], MlpKind::kDense);
  EXPECT_EQ(c->mlp_layer_types[3], MlpKind::kMoe);
  EXPECT_EQ(*c->linear_lower_bound, -5.0f);
  EXPECT_EQ(c->qk_head_dim(), 256);
  EXPECT_EQ(*c->swiglu_limit, 10.0f);
  for (auto t : c->indexer_types) EXPECT_EQ(t, IndexerKind::kFull);
  EXPECT_EQ(c->max_position_embeddings, 0);  // absent: unknown, nothing is capped by it
}

TEST(ModelConfig, IndexerSchedules) {
  auto two = ParseModelConfig(R"({"model_type": "glm5_next", "num_hidden_layers": 8, "index_topk_freq": 2})");
  ASSERT_TRUE(two.ok());
  std::string s;
  for (auto t : two->indexer_types) s += t == IndexerKind::kFull ? 'F' : 'S';
  EXPECT_EQ(s, "FFSFSFSF");
  auto three = ParseModelConfig(
      R"({"model_type": "glm5_next", "num_hidden_layers": 12, "index_topk_freq": 3, "index_skip_topk_offset": 5})");
  ASSERT_TRUE(three.ok());
  s.clear();
  for (auto t : three->indexer_types) s += t == IndexerKind::kFull ? 'F' : 'S';
  EXPECT_EQ(s, "FFFFFSSFSSFS");
  auto pat = ParseModelConfig(R"({"model_type": "glm5_next", "num_hidden_layers": 4, "index_topk_pattern": "FSFS"})");
  ASSERT_TRUE(pat.ok());
  EXPECT_EQ(pat->indexer_types[1], IndexerKind::kShared);
}

// Found by config_fuzz's UBSan build: i - offset + 1 overflowed for an offset near INT64_MIN.
TEST(ModelConfig, IndexerOffsetOutOfRangeIsAnError) {
  auto far = ParseModelConfig(
      R"({"model_type": "glm5_next", "num_hidden_layers": 4, "index_skip_topk_offset": -9223372036854775808})");
  ASSERT_FALSE(far.ok());
  EXPECT_NE(far.error().message().find("'index_skip_topk_offset'"), std::string::npos) << far.error().message();
  auto edge = ParseModelConfig(
      R"({"model_type": "glm5_next", "num_hidden_layers": 4, "index_skip_topk_offset": -1048576, "index_topk_freq": 2})");
  EXPECT_TRUE(edge.ok());
}

TEST(ModelConfig, LinearAttnConfigGate) {
  auto a = ParseModelConfig(R"({"model_type": "glm5_next", "linear_attn_config": {"gate_lower_bound": null}})");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a->linear_lower_bound, -5.0f);
  auto b = ParseModelConfig(
      R"({"model_type": "glm5_next", "linear_attn_config": {"gate_lower_bound": null, "safe_gate": false}})");
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->linear_lower_bound.has_value());
  auto d = ParseModelConfig(R"({"model_type": "glm5_next", "linear_lower_bound": null})");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->linear_lower_bound.has_value());
}

TEST(ModelConfig, KimiOneBasedLayerListsAndDefaults) {
  auto c = ParseModelConfig(R"({"model_type": "kimi_linear", "num_hidden_layers": 27,
    "linear_attn_config": {"kda_layers": [1,2,3,5,6,7,9,10,11,13,14,15,17,18,19,21,22,23,25,26],
                           "full_attn_layers": [4,8,12,16,20,24,27]}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<int> mla;
  for (int i = 0; i < 27; ++i)
    if (c->layer_types[i] == AttnKind::kMla) mla.push_back(i);
  EXPECT_EQ(mla, (std::vector<int>{3, 7, 11, 15, 19, 23, 26}));
  EXPECT_EQ(c->mlp_layer_types[0], MlpKind::kDense);
  EXPECT_EQ(c->mlp_layer_types[1], MlpKind::kMoe);
  EXPECT_FALSE(c->linear_lower_bound.has_value());
  EXPECT_EQ(c->q_lora_rank, 0);
  EXPECT_FLOAT_EQ(c->kva_norm_eps, 1e-6f);
  EXPECT_EQ(c->n_routed_experts, 256);
  auto def = ParseModelConfig(R"({"model_type": "kimi_linear", "num_hidden_layers": 9})");
  ASSERT_TRUE(def.ok());
  EXPECT_EQ(def->layer_types[4], AttnKind::kMla);  // i && i % 4 == 0
  EXPECT_EQ(def->layer_types[0], AttnKind::kKda);
}

TEST(ModelConfig, Errors) {
  struct Case {
    const char* json;
    const char* want;
  } cases[] = {
      {"not json", "not valid JSON"},
      {"[1,2]", "JSON object"},
      {R"({"hidden_size": 4})", "no model_type"},
      {R"({"model_type": "llama"})", "unsupported model_type 'llama'"},
      {R"({"model_type": "glm5_next", "num_key_value_heads": 8})", "num_key_value_heads"},
      {R"({"model_type": "glm5_next", "index_topk": 100, "index_kpool": 16})", "divisible"},
      {R"({"model_type": "glm5_next", "qk_rope_head_dim": 64})", "NoPE"},
      {R"({"model_type": "glm5_next", "q_lora_rank": null})", "q_lora_rank"},
      {R"({"model_type": "glm5_next", "hidden_size": "big"})", "'hidden_size' must be an integer"},
      {R"({"model_type": "glm5_next", "num_hidden_layers": 4, "layer_types": ["linear_attention"]})", "entries"},
      {R"({"model_type": "glm5_next", "layer_types": ["bogus"], "num_hidden_layers": 1})", "bogus"},
      {R"({"model_type": "kimi_linear", "num_hidden_layers": 2, "linear_attn_config": {"kda_layers": [0], "full_attn_layers": [2]}})",
       "1-based"},
      {R"({"model_type": "glm5_next", "hidden_act": "gelu"})", "hidden_act"},
      {R"({"model_type": "glm5_next", "num_nextn_predict_layers": 2})",
       "num_nextn_predict_layers = 2 is not supported"},
      {R"({"model_type": "kimi_linear", "num_nextn_predict_layers": -1})", "num_nextn_predict_layers = -1"},
      {R"({"model_type": "glm5_next", "num_nextn_predict_layers": 1, "intermediate_size": 0})",
       "intermediate_size (MTP layer)"},
  };
  for (const auto& cs : cases) {
    auto c = ParseModelConfig(cs.json);
    ASSERT_FALSE(c.ok()) << cs.json;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << cs.json;
    EXPECT_NE(c.status().message().find(cs.want), std::string::npos) << cs.json << " -> " << c.status().message();
  }
  EXPECT_EQ(LoadModelConfig("/nonexistent").status().code(), StatusCode::kNotFound);
}

// num_nextn_predict_layers: default 0, read from text_config, the flat layout, or the top level of
// the composite config (like the token ids).
TEST(ModelConfig, NumNextnPredictLayers) {
  struct Case {
    const char* json;
    int64_t want;
  } cases[] = {
      {R"({"model_type": "glm5_next"})", 0},
      {R"({"model_type": "glm5_next", "num_nextn_predict_layers": 1})", 1},
      {R"({"model_type": "glm5_next", "text_config": {"num_nextn_predict_layers": 1}})", 1},
      {R"({"model_type": "glm5_next", "num_nextn_predict_layers": 1, "text_config": {}})", 1},
      {R"({"model_type": "glm5_next", "num_nextn_predict_layers": 1,
           "text_config": {"num_nextn_predict_layers": 0}})", 0},
      {R"({"model_type": "kimi_linear", "num_nextn_predict_layers": 1})", 1},
  };
  for (const auto& cs : cases) {
    auto c = ParseModelConfig(cs.json);
    ASSERT_TRUE(c.ok()) << cs.json << ": " << c.status().ToString();
    EXPECT_EQ(c->num_nextn_predict_layers, cs.want) << cs.json;
  }
}

// Regression: sizes from the file are bounded before anything is allocated (num_hidden_layers 1e9
// without layer lists aborted with an uncaught bad_alloc), and nesting is limited (a deeply nested
// config.json crashed generate and serve).
TEST(ModelConfig, HugeSizesAndDeepNestingAreErrorsNotCrashes) {
  for (const char* field : {"num_hidden_layers", "vocab_size", "hidden_size", "n_routed_experts"}) {
    const std::string text = std::string(R"({"model_type": "glm5_next", ")") + field + R"(": 1e9})";
    auto c = ParseModelConfig(text);
    ASSERT_FALSE(c.ok()) << field;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find(field), std::string::npos) << c.status().message();
  }
  auto k = ParseModelConfig(R"({"model_type": "kimi_linear", "num_hidden_layers": 1000000000})");
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("num_hidden_layers"), std::string::npos);
  const std::string deep = R"({"model_type": "glm5_next", "x": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
  auto d = ParseModelConfig(deep);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("nests deeper"), std::string::npos) << d.status().message();
}

}  // namespace
}  // namespace gyre
