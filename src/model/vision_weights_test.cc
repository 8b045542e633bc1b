// VisionConfig parsing and BindVisionWeights (model/vision_weights.h).
#include "model/vision_weights.h"

#include <gtest/gtest.h>

namespace gyre {
namespace {

std::string FixtureDir() { return std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/glm5_tiny"; }

TEST(VisionConfig, ReadsTheFixture) {
  auto c = LoadVisionConfig(FixtureDir());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->has_value());
  const VisionConfig& v = **c;
  EXPECT_EQ(v.depth, 1);
  EXPECT_EQ(v.hidden_size, 32);
  EXPECT_EQ(v.num_heads, 2);
  EXPECT_EQ(v.head_dim(), 16);
  EXPECT_EQ(v.intermediate_size, 64);
  EXPECT_EQ(v.out_hidden_size, 64);
  EXPECT_EQ(v.projection_intermediate_size, 128);
  EXPECT_EQ(v.patch_elems(), 3 * 2 * 14 * 14);
  EXPECT_EQ(v.image_token_id, 154854);
  EXPECT_EQ(v.video_start_token_id, 154832);
  EXPECT_FLOAT_EQ(v.rope_theta, 10000.0f);
}

TEST(VisionConfig, DefaultsAndAbsence) {
  auto none = ParseVisionConfig(R"({"model_type": "glm5_next"})");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto def = ParseVisionConfig(R"({"vision_config": {}})");
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ((*def)->depth, 24);
  EXPECT_EQ((*def)->hidden_size, 1024);
  EXPECT_EQ((*def)->out_hidden_size, 1536);
  EXPECT_EQ((*def)->projection_intermediate_size, 10240);
  auto alias = ParseVisionConfig(R"({"vision_config": {"hidden_size": 64, "num_attention_heads": 4}})");
  ASSERT_TRUE(alias.ok());
  EXPECT_EQ((*alias)->num_heads, 4);
}

TEST(VisionConfig, RejectsUnsupported) {
  for (const char* bad : {R"({"vision_config": {"hidden_act": "gelu"}})",
                          R"({"vision_config": {"rope_parameters": {"rope_type": "default"}}})",
                          R"({"vision_config": {"hidden_size": 30, "num_heads": 4}})",
                          R"({"vision_config": {"hidden_size": 24, "num_heads": 4}})",  // head dim 6
                          R"({"vision_config": {"depth": "x"}})", R"({"vision_config": 3})", "{"}) {
    EXPECT_FALSE(ParseVisionConfig(bad).ok()) << bad;
  }
}

TEST(VisionWeights, BindsTheFixtureTower) {
  auto c = LoadVisionConfig(FixtureDir());
  ASSERT_TRUE(c.ok() && c->has_value());
  auto files = WeightFiles::Open(FixtureDir());
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  auto w = BindVisionWeights(**c, **files);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->num_tensors_used, 25);  // every model.visual.* tensor of KEYS.txt
  EXPECT_EQ(w->patch_embed.rows, 32);
  EXPECT_EQ(w->patch_embed.cols, 1176);
  EXPECT_EQ(w->downsample.cols, 4 * 32);
  ASSERT_EQ(w->blocks.size(), 1u);
  EXPECT_EQ(w->blocks[0].qkv_bias.size(), 96u);
  // A config asking for a second block names the missing tensor.
  VisionConfig deeper = **c;
  deeper.depth = 2;
  auto missing = BindVisionWeights(deeper, **files);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().ToString().find("model.visual.blocks.1.norm1.weight"), std::string::npos)
      << missing.status().ToString();
  VisionConfig wider = **c;
  wider.intermediate_size = 65;
  auto shape = BindVisionWeights(wider, **files);
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(shape.status().ToString().find("expected shape"), std::string::npos) << shape.status().ToString();
}

}  // namespace
}  // namespace gyre
