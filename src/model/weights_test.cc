// Weight binding of the MTP layer (docs/engine.md "MTP layer"): bound under the main layers'
// prefix iff num_nextn_predict_layers is 1, ignored when it is 0, and a missing tensor is named.
#include "model/weights.h"

#include <gtest/gtest.h>

#include <set>
#include <stdlib.h>

#include "model/random_weights.h"

namespace gyre {
namespace {

// A small glm5_next config (2 layers) with `mtp` MTP layers; nested (text_config) or flat.
std::string Glm5Config(int mtp, bool nested) {
  const std::string text = R"("vocab_size": 61, "hidden_size": 48, "intermediate_size": 56,
    "moe_intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 3, "num_key_value_heads": 3,
    "q_lora_rank": 40, "kv_lora_rank": 24, "qk_nope_head_dim": 20, "v_head_dim": 12, "qk_rope_head_dim": 0,
    "index_n_heads": 2, "index_head_dim": 8, "index_topk": 8, "index_kpool": 4,
    "linear_num_heads": 2, "linear_head_dim": 8, "hc_mult": 2,
    "layer_types": ["linear_attention", "deepseek_sparse_attention"], "mlp_layer_types": ["dense", "dense"],
    "num_nextn_predict_layers": )" + std::to_string(mtp);
  return nested ? R"({"model_type": "glm5_next", "text_config": {)" + text + "}}"
                : R"({"model_type": "glm5_next_text", )" + text + "}";
}

const char* const kMtpTensors[] = {
    "enorm.weight", "hnorm.weight", "eh_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight",
    "self_attn.q_a_proj.weight", "self_attn.q_a_layernorm.weight", "self_attn.q_b_proj.weight",
    "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_a_layernorm.weight", "self_attn.kv_b_proj.weight",
    "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
    "shared_head.norm.weight", "shared_head.head.weight"};

// Random tensors, except that one name is missing.
class MissingOne : public TensorSource {
 public:
  explicit MissingOne(std::string missing) : missing_(std::move(missing)), src_(3, false) {}
  Status Fetch(const std::string& name, const std::vector<int64_t>& shape, bool keep_f32,
               std::vector<float>* out) override {
    if (name == missing_) return Status::NotFound("missing tensor '" + name + "'");
    return src_.Fetch(name, shape, keep_f32, out);
  }

 private:
  std::string missing_;
  RandomTensorSource src_;
};

TEST(MtpWeights, BoundWithTheSpecShapesUnderEitherPrefix) {
  for (bool nested : {true, false}) {
    auto c = ParseModelConfig(Glm5Config(1, nested));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const std::string prefix = nested ? "model.language_model." : "model.";
    RandomTensorSource src(7, /*record=*/true);
    auto w = BindWeightsFrom(*c, src, prefix);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE(w->has_mtp);
    std::set<std::string> fetched;
    for (const auto& r : src.recorded()) fetched.insert(r.name);
    for (const char* t : kMtpTensors) EXPECT_TRUE(fetched.count(prefix + "layers.2." + t)) << prefix << t;
    const MtpWeights& m = w->mtp;
    EXPECT_EQ(m.eh_proj.rows, 48);
    EXPECT_EQ(m.eh_proj.cols, 96);
    EXPECT_EQ(m.mla.q_b.rows, 3 * 20);
    EXPECT_EQ(m.mla.kv_a.rows, 24);
    EXPECT_EQ(m.mla.kv_b.rows, 3 * (20 + 12));
    EXPECT_EQ(m.mla.o.cols, 3 * 12);
    EXPECT_FALSE(m.mla.has_indexer);
    EXPECT_EQ(m.mlp.gate.rows, 56);
    EXPECT_EQ(m.head.rows, 61);
    EXPECT_EQ(m.head_norm.size(), 48u);
  }
}

TEST(MtpWeights, MissingTensorIsNamed) {
  auto c = ParseModelConfig(Glm5Config(1, true));
  ASSERT_TRUE(c.ok());
  for (const char* t : {"enorm.weight", "self_attn.kv_b_proj.weight", "shared_head.head.weight"}) {
    const std::string name = std::string("model.language_model.layers.2.") + t;
    MissingOne src(name);
    auto w = BindWeightsFrom(*c, src, "model.language_model.");
    ASSERT_FALSE(w.ok()) << t;
    EXPECT_EQ(w.status().code(), StatusCode::kNotFound);
    EXPECT_NE(w.status().message().find("missing tensor '" + name + "'"), std::string::npos) << w.status().message();
    EXPECT_NE(w.status().message().find("MTP layer 2"), std::string::npos) << w.status().message();
  }
}

// A checkpoint file with an MTP layer: bound from the files when the config asks for it, ignored
// (and counted as ignored) when num_nextn_predict_layers is 0; a checkpoint without one fails to
// load with num_nextn_predict_layers 1, naming the first MTP tensor.
TEST(MtpWeights, FromFilesBoundOrIgnoredByTheConfig) {
  std::string dir = testing::TempDir() + "/gyre_mtp_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  ASSERT_TRUE(WriteRandomCheckpoint(Glm5Config(1, true), dir + "/with", 5).ok());
  ASSERT_TRUE(WriteRandomCheckpoint(Glm5Config(0, true), dir + "/without", 5).ok());
  auto with = WeightFiles::Open(dir + "/with");
  auto without = WeightFiles::Open(dir + "/without");
  ASSERT_TRUE(with.ok() && without.ok());
  auto c1 = ParseModelConfig(Glm5Config(1, true));
  auto c0 = ParseModelConfig(Glm5Config(0, true));
  ASSERT_TRUE(c1.ok() && c0.ok());

  auto w1 = BindWeights(*c1, **with);
  ASSERT_TRUE(w1.ok()) << w1.status().ToString();
  EXPECT_TRUE(w1->has_mtp);
  EXPECT_EQ(w1->num_tensors_ignored, 0);
  auto w0 = BindWeights(*c0, **with);
  ASSERT_TRUE(w0.ok()) << w0.status().ToString();
  EXPECT_FALSE(w0->has_mtp);
  EXPECT_EQ(w0->num_tensors_ignored, static_cast<int64_t>(std::size(kMtpTensors)));

  auto missing = BindWeights(*c1, **without);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing tensor 'model.language_model.layers.2.enorm.weight'"),
            std::string::npos)
      << missing.status().message();
}

}  // namespace
}  // namespace gyre
