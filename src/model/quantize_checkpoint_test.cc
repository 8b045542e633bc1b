// quantization_config parsing, `gyre quantize`'s writer, and loading what it writes: the fixture
// glm5_tiny quantized to each scheme loads with the quantized storage attached to exactly the
// tensors quant/policy.h names, at the values the quantizer produced.
#include "model/quantize_checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <stdlib.h>

#include "model/config.h"
#include "model/weights.h"
#include "quant/quant.h"

namespace gyre {
namespace {

const std::string kTiny = std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/glm5_tiny";

std::string WithQuant(const std::string& quant_json) {
  return R"({"model_type": "glm5_next_text", "vocab_size": 61, "hidden_size": 48, "intermediate_size": 56,
    "moe_intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 3, "num_key_value_heads": 3,
    "q_lora_rank": 40, "kv_lora_rank": 24, "qk_nope_head_dim": 20, "v_head_dim": 12, "qk_rope_head_dim": 0,
    "linear_num_heads": 2, "linear_head_dim": 8, "layer_types": ["linear_attention"],
    "mlp_layer_types": ["dense"], "quantization_config": )" +
         quant_json + "}";
}

TEST(QuantConfig, ParsesTheSupportedSchemesAndRejectsTheRest) {
  auto none = ParseModelConfig(WithQuant("null"));
  ASSERT_TRUE(none.ok()) << none.error().ToString();
  EXPECT_EQ(none->quant.scheme, QuantScheme::kNone);
  auto fp8 = ParseModelConfig(
      WithQuant(R"({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 64], "activation_scheme": "dynamic"})"));
  ASSERT_TRUE(fp8.ok()) << fp8.error().ToString();
  EXPECT_EQ(fp8->quant.scheme, QuantScheme::kFp8Block);
  EXPECT_EQ(fp8->quant.block_n, 128);
  EXPECT_EQ(fp8->quant.block_k, 64);
  auto i8 = ParseModelConfig(WithQuant(R"({"quant_method": "gyre-int8", "activation_scheme": "dynamic"})"));
  ASSERT_TRUE(i8.ok());
  EXPECT_EQ(i8->quant.scheme, QuantScheme::kInt8Channel);
  EXPECT_EQ(ParseModelConfig(WithQuant(R"({"quant_method": "awq"})")).error().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(ParseModelConfig(WithQuant(R"({"quant_method": "fp8", "weight_block_size": [128, 128],
                                           "activation_scheme": "static"})"))
                .error()
                .code(),
            StatusCode::kUnimplemented);
  EXPECT_EQ(ParseModelConfig(WithQuant(R"({"quant_method": "fp8"})")).error().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(ParseModelConfig(WithQuant(R"({"quant_method": "fp8", "weight_block_size": [0, 128]})")).error().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseModelConfig(WithQuant(R"([1])")).error().code(), StatusCode::kInvalidArgument);
}

class QuantizeCheckpointTest : public ::testing::TestWithParam<QuantScheme> {};

TEST_P(QuantizeCheckpointTest, WritesWhatLoadsBack) {
  const QuantScheme scheme = GetParam();
  char tmpl[] = "/tmp/gyre_quant_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string out = std::string(tmpl) + "/q";
  QuantizeOptions o;
  o.scheme = scheme;
  auto rep = QuantizeCheckpoint(kTiny, out, o);
  ASSERT_TRUE(rep.ok()) << rep.error().ToString();
  EXPECT_GT(rep->num_quantized, 0);
  EXPECT_LT(rep->bytes_out, rep->bytes_in);
  // Quantizing twice is refused; so is writing over the input.
  EXPECT_EQ(QuantizeCheckpoint(out, out + "2", o).error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeCheckpoint(kTiny, kTiny, o).error().code(), StatusCode::kInvalidArgument);

  auto cfg = LoadModelConfig(out);
  ASSERT_TRUE(cfg.ok()) << cfg.error().ToString();
  EXPECT_EQ(cfg->quant.scheme, scheme);
  auto ref_cfg = LoadModelConfig(kTiny);
  ASSERT_TRUE(ref_cfg.ok());
  auto files = WeightFiles::Open(out);
  auto ref_files = WeightFiles::Open(kTiny);
  ASSERT_TRUE(files.ok() && ref_files.ok());
  auto w = BindWeights(*cfg, **files);
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  auto ref = BindWeights(*ref_cfg, **ref_files);
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(w->num_tensors_used, ref->num_tensors_used);
  EXPECT_EQ(w->num_tensors_ignored, ref->num_tensors_ignored);  // scales count as used

  // Kept in high precision, bit for bit.
  EXPECT_FALSE(w->embed.quant);
  EXPECT_EQ(w->embed.data, ref->embed.data);
  EXPECT_FALSE(w->lm_head.quant);
  EXPECT_EQ(w->lm_head.data, ref->lm_head.data);
  for (size_t l = 0; l < w->layers.size(); ++l) {
    const LayerWeights &a = w->layers[l], &b = ref->layers[l];
    EXPECT_EQ(a.input_norm, b.input_norm);
    EXPECT_FALSE(a.attn_hc.fn.quant);
    if (a.attn == AttnKind::kKda) {
      EXPECT_FALSE(a.kda.f_a.quant);
      EXPECT_FALSE(a.kda.b.quant);
      EXPECT_EQ(a.kda.a_log, b.kda.a_log);
      EXPECT_EQ(a.kda.f_b.data, b.kda.f_b.data);
      // Quantized: the projection holds exactly the dequantized quantizer output.
      ASSERT_TRUE(a.kda.q.quant);
      const QuantizedWeight want = scheme == QuantScheme::kFp8Block
                                       ? QuantizeFp8Block(b.kda.q.data.data(), b.kda.q.rows, b.kda.q.cols)
                                       : QuantizeInt8Channel(b.kda.q.data.data(), b.kda.q.rows, b.kda.q.cols);
      EXPECT_EQ(a.kda.q.quant->q, want.q);
      EXPECT_EQ(a.kda.q.quant->scale, want.scale);
      EXPECT_EQ(a.kda.q.data, Dequantize(want));
    } else {
      EXPECT_TRUE(a.mla.o.quant);
      EXPECT_TRUE(a.mla.kv_a.quant);
    }
    if (a.mlp == MlpKind::kMoe) {
      EXPECT_FALSE(a.moe.router.quant);
      EXPECT_EQ(a.moe.router.data, b.moe.router.data);
      EXPECT_TRUE(a.moe.experts[0].down.quant);
    } else {
      EXPECT_TRUE(a.dense.gate.quant);
    }
  }
  // inspect's per-layer bytes: every layer has quantized bytes, embeddings none.
  const auto groups = BytesByLayer(**files);
  ASSERT_TRUE(groups.count("layers.0"));
  EXPECT_GT(groups.at("layers.0").quantized, 0);
  EXPECT_EQ(groups.at("embed_tokens").quantized, 0);
  std::filesystem::remove_all(tmpl);
}

TEST(QuantizeCheckpoint, KeepPatternsMakeAMixedPolicy) {
  char tmpl[] = "/tmp/gyre_quant_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string out = std::string(tmpl) + "/q";
  QuantizeOptions o;
  o.scheme = QuantScheme::kFp8Block;
  o.keep = {R"(layers\.0\.self_attn\.)", R"(\.experts\.)"};
  auto rep = QuantizeCheckpoint(kTiny, out, o);
  ASSERT_TRUE(rep.ok()) << rep.error().ToString();
  EXPECT_GT(rep->num_kept, 4);
  auto cfg = LoadModelConfig(out);
  auto files = WeightFiles::Open(out);
  ASSERT_TRUE(cfg.ok() && files.ok());
  auto w = BindWeights(*cfg, **files);
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  ASSERT_EQ(w->layers[0].attn, AttnKind::kKda);
  EXPECT_FALSE(w->layers[0].kda.q.quant);
  EXPECT_FALSE(w->layers[0].kda.o.quant);
  for (size_t l = 1; l < w->layers.size(); ++l) {
    if (w->layers[l].attn == AttnKind::kKda) EXPECT_TRUE(w->layers[l].kda.q.quant) << l;
    if (w->layers[l].mlp == MlpKind::kMoe) {
      EXPECT_FALSE(w->layers[l].moe.experts[0].gate.quant) << l;
      if (w->layers[l].moe.has_shared) EXPECT_TRUE(w->layers[l].moe.shared.gate.quant) << l;
    }
  }
  o.keep = {"("};
  EXPECT_EQ(QuantizeCheckpoint(kTiny, out + "2", o).error().code(), StatusCode::kInvalidArgument);
  std::filesystem::remove_all(tmpl);
}

INSTANTIATE_TEST_SUITE_P(Schemes, QuantizeCheckpointTest,
                         ::testing::Values(QuantScheme::kFp8Block, QuantScheme::kInt8Channel));

}  // namespace
}  // namespace gyre
