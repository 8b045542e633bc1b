// The trained fixture (tests/fixtures/glm5_mini) quantized by QuantizeCheckpoint and run W8A8 on
// the CPU: its logits stay close to the unquantized model's, and the activation quantization is
// really applied in the model (a weight-only run of the same weights gives other logits).
// Bounds are ~3x the values measured at the commit that added them (docs/quantization.md):
// logits rel-L2 0.022 (fp8) / 0.014 (int8) and top-1 agreement 0.95 / 0.976 on held-out text.
#include <gtest/gtest.h>

#include <filesystem>
#include <stdlib.h>

#include "model/quantize_checkpoint.h"
#include "model/safetensors.h"
#include "ops/basic.h"
#include "runtime/model.h"
#include "runtime/parity.h"

namespace gyre {
namespace {

const std::string kDir = std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/glm5_mini";

std::vector<float> AllLogits(const Model& m, std::span<const int32_t> ids) {
  SequenceState st = m.NewSequence();
  std::vector<float> logits;
  const SeqInput in{&st, ids, /*all_logits=*/true};
  EXPECT_TRUE(m.Forward(std::span<const SeqInput>(&in, 1), &logits).ok());
  return logits;
}

double Top1Agreement(const std::vector<float>& a, const std::vector<float>& b, int64_t V) {
  const int64_t rows = static_cast<int64_t>(a.size()) / V;
  int64_t agree = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const std::span<const float> ra(a.data() + r * V, V), rb(b.data() + r * V, V);
    agree += std::max_element(ra.begin(), ra.end()) - ra.begin() == std::max_element(rb.begin(), rb.end()) - rb.begin();
  }
  return static_cast<double>(agree) / rows;
}

class QuantModelTest : public ::testing::TestWithParam<QuantScheme> {};

TEST_P(QuantModelTest, StaysCloseToTheUnquantizedModel) {
  char tmpl[] = "/tmp/gyre_qmodel_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  QuantizeOptions o;
  o.scheme = GetParam();
  ASSERT_TRUE(QuantizeCheckpoint(kDir, tmpl, o).ok());
  auto ref = Model::Load(kDir);
  auto q = Model::Load(tmpl);
  ASSERT_TRUE(ref.ok() && q.ok());
  std::filesystem::remove_all(tmpl);
  EXPECT_EQ((*q)->config().quant.scheme, GetParam());

  auto f = SafetensorsFile::Open(kDir + "/golden_long.safetensors");
  ASSERT_TRUE(f.ok());
  std::vector<int32_t> ids;
  for (float v : TensorToF32((*f)->tensors().at("input_ids"))) ids.push_back(static_cast<int32_t>(v));
  ids.resize(96);
  const int64_t V = (*ref)->config().vocab_size;
  const std::vector<float> a = AllLogits(**ref, ids), b = AllLogits(**q, ids);
  const double rel = ops::Compare(b, a).rel_l2;
  EXPECT_LT(rel, 0.07);
  EXPECT_GT(rel, 1e-3);  // it is quantized
  EXPECT_GE(Top1Agreement(a, b, V), 0.85);

  // The activations are quantized too: the same weights without their quantized storage differ.
  ModelWeights weight_only = (*q)->weights();
  EXPECT_GT(DropQuantizedStorage(&weight_only), 100);
  auto wo = Model::FromWeights((*q)->config(), std::move(weight_only));
  const std::vector<float> c = AllLogits(*wo, ids);
  EXPECT_GT(ops::Compare(b, c).rel_l2, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Schemes, QuantModelTest, ::testing::Values(QuantScheme::kFp8Block, QuantScheme::kInt8Channel),
                         [](const auto& info) { return std::string(info.param == QuantScheme::kFp8Block ? "fp8" : "int8"); });

}  // namespace
}  // namespace gyre
