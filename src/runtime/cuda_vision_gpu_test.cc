// The vision tower on the GPU (runtime/cuda_vision.h; needs a GPU: ctest label gpu, test binary
// test_vision_gpu, scripts/gpu_check.sh step `vision`).
//
// References and bounds (rel-L2 unless said):
//   transformers 5.17 goldens (tests/fixtures/glm5_tiny/vision_golden.safetensors, two images):
//       every traced stage (patch_embed, block0, post_layernorm, downsample, image_embeds) <= 1e-5,
//       the bound the CPU tower meets (runtime/vision_test.cc; observed there 6e-7 .. 1.2e-6).
//   The golden prompt's logits with the GPU tower's rows fed to the CUDA model as prompt
//       embeddings: <= 1e-4 over all positions (the CPU path's bound: the text model adds fp32
//       reassociation noise per layer).
//   The CPU tower (VisionForward, fp32) on random towers of other shapes (head_dim 20 and 64, one
//       to three images, t = 2 slices, attention chunked by a small score workspace): <= 2e-5
//       with fp32 weights; bf16 weights and GEMM inputs: <= 3e-2 (8 significant bits per GEMM
//       input through a few layers), and >= 10x the fp32 error (so the bf16 path really ran).
//   Bad inputs: the CPU tower's errors (InvalidArgument), nothing written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/dtype.h"
#include "model/safetensors.h"
#include "ops/basic.h"
#include "runtime/cuda_model.h"
#include "runtime/cuda_vision.h"
#include "runtime/model.h"
#include "runtime/model_runner.h"
#include "runtime/random_vision_for_tests.h"
#include "runtime/vision.h"

namespace gyre {
namespace {

std::string FixtureDir() {
  return std::filesystem::exists("tests/fixtures/glm5_tiny/config.json")
             ? std::string("tests/fixtures/glm5_tiny")
             : std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/glm5_tiny";
}

struct Tower {
  VisionConfig config;
  VisionWeights weights;
};

Tower LoadTower() {
  auto c = LoadVisionConfig(FixtureDir());
  EXPECT_TRUE(c.ok() && c->has_value()) << c.status().ToString();
  auto files = WeightFiles::Open(FixtureDir());
  EXPECT_TRUE(files.ok()) << files.status().ToString();
  auto w = BindVisionWeights(**c, **files);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  return {**c, std::move(*w)};
}

std::vector<float> F32(const SafetensorsFile& f, const std::string& name) {
  auto it = f.tensors().find(name);
  EXPECT_NE(it, f.tensors().end()) << name;
  if (it == f.tensors().end()) return {};
  std::vector<float> v(it->second.numel());
  ConvertToF32(it->second.dtype, it->second.data, v.size(), v.data());
  return v;
}

std::vector<int32_t> I32(const SafetensorsFile& f, const std::string& name) {
  auto it = f.tensors().find(name);
  EXPECT_NE(it, f.tensors().end()) << name;
  if (it == f.tensors().end()) return {};
  std::vector<int32_t> v(it->second.numel());
  std::memcpy(v.data(), it->second.data, v.size() * 4);
  return v;
}

TEST(CudaVisionGolden, TowerAndPromptLogitsMatchTransformersFp32) {
  const std::string path = FixtureDir() + "/vision_golden.safetensors";
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const SafetensorsFile& g = **file;
  Tower t = LoadTower();
  auto tower = CudaVisionTower::FromHost(t.config, t.weights);
  ASSERT_TRUE(tower.ok()) << tower.status().ToString();
  const auto gi = I32(g, "grid_thw");
  std::vector<ImageGrid> grids;
  for (size_t i = 0; i + 2 < gi.size(); i += 3) grids.push_back({gi[i], gi[i + 1], gi[i + 2]});
  ASSERT_EQ(grids.size(), 2u);
  std::vector<float> out;
  VisionTrace tr;
  ASSERT_TRUE((*tower)->Forward(F32(g, "pixel_values"), grids, &out, &tr).ok());
  const struct {
    const char* name;
    const std::vector<float>* ours;
  } checks[] = {{"patch_embed", &tr.patch_embed}, {"block0", &tr.block0}, {"post_layernorm", &tr.post_layernorm},
                {"downsample", &tr.downsample},   {"image_embeds", &out}};
  for (const auto& ch : checks) {
    const auto ref = F32(g, ch.name);
    ASSERT_EQ(ch.ours->size(), ref.size()) << ch.name;
    const auto d = ops::Compare(*ch.ours, ref);
    std::printf("[cuda vision parity] %-14s rel_l2 %.3e max_abs %.3e\n", ch.name, d.rel_l2, d.max_abs);
    EXPECT_LT(d.rel_l2, 1e-5) << ch.name;
  }

  // The golden prompt through the CUDA model with these rows as its prompt embeddings.
  t.config.image_token_id = 1010;  // the golden's stand-in id (vision_golden.json "ids")
  auto model = Model::Load(FixtureDir());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const Model& m = **model;
  const int64_t D = m.config().hidden_size, V = m.config().vocab_size;
  const auto ids = I32(g, "input_ids");
  auto embeds = std::make_shared<PromptEmbeds>();
  embeds->width = D;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == t.config.image_token_id) embeds->positions.push_back(static_cast<int64_t>(i));
  ASSERT_EQ(embeds->positions.size() * D, out.size());
  embeds->rows = out;
  CudaModelOptions o;
  o.max_seqs = 2;
  o.max_batch_tokens = 64;
  o.kv_tokens = 256;
  o.page_tokens = 16;
  auto gm = CudaModel::FromHost(m.config(), m.weights(), o);
  ASSERT_TRUE(gm.ok()) << gm.status().ToString();
  RunnerSession sess(**gm);
  auto seq = sess.NewSequence();
  ASSERT_TRUE(seq.ok());
  std::vector<float> logits;
  RunnerSession::Input in{*seq, ids, {}, true, embeds.get()};
  ASSERT_TRUE(sess.Step(std::span<const RunnerSession::Input>(&in, 1), nullptr, &logits).ok());
  const auto ref = F32(g, "logits");
  ASSERT_EQ(logits.size(), ref.size());
  ASSERT_EQ(logits.size(), ids.size() * V);
  const auto d = ops::Compare(logits, ref);
  const auto text = ops::Compare(F32(g, "logits_text_only"), ref);
  std::printf("[cuda vision parity] prompt logits rel_l2 %.3e (text-only logits are %.3e away)\n", d.rel_l2,
              text.rel_l2);
  EXPECT_LT(d.rel_l2, 1e-4);
  EXPECT_GT(text.rel_l2, 1e-2) << "the image rows barely change the logits: the check could not fail";
}

struct Shape {
  const char* name;
  int64_t hidden, heads, inter, out, proj_inter, depth;
  std::vector<ImageGrid> grids;
  int64_t score_bytes;  // the attention's score workspace (small: several chunks per segment)
};

TEST(CudaVisionTower, MatchesTheCpuTowerOnOtherShapes) {
  const std::vector<Shape> shapes = {
      {"hd20_one_image", 100, 5, 160, 72, 96, 2, {{1, 6, 8}}, 256 << 20},
      {"hd64_three_images_chunked", 128, 2, 256, 96, 192, 2, {{1, 4, 4}, {2, 6, 10}, {1, 2, 14}}, 2 * 60 * 7 * 4},
      {"hd64_large_image", 256, 4, 512, 128, 256, 1, {{1, 32, 40}}, 4 << 20},
  };
  for (const Shape& sh : shapes) {
    VisionConfig c;
    c.hidden_size = sh.hidden;
    c.num_heads = sh.heads;
    c.intermediate_size = sh.inter;
    c.out_hidden_size = sh.out;
    c.projection_intermediate_size = sh.proj_inter;
    c.depth = sh.depth;
    const VisionWeights w = RandomVisionWeights(c, 7);
    int64_t n = 0;
    for (const ImageGrid& g : sh.grids) n += g.t * g.h * g.w;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> px(-2.0f, 2.0f);
    std::vector<float> pv(n * c.patch_elems());
    for (float& x : pv) x = px(rng);
    std::vector<float> want;
    ASSERT_TRUE(VisionForward(c, w, pv, sh.grids, &want).ok()) << sh.name;
    double err[2] = {0, 0};
    for (bool bf16 : {false, true}) {
      CudaVisionOptions o;
      o.bf16_weights = bf16;
      o.score_workspace_bytes = sh.score_bytes;
      auto tower = CudaVisionTower::FromHost(c, w, o);
      ASSERT_TRUE(tower.ok()) << sh.name << ": " << tower.status().ToString();
      std::vector<float> got(want.size(), std::nanf(""));
      ASSERT_TRUE((*tower)->Forward(pv, sh.grids, &got).ok()) << sh.name;
      ASSERT_EQ(got.size(), want.size());
      err[bf16] = ops::Compare(got, want).rel_l2;
      std::printf("[cuda vision] %-26s %s: rel_l2 to the cpu tower %.3e (%lld patches, %.3f ms)\n", sh.name,
                  bf16 ? "bf16" : "fp32", err[bf16], static_cast<long long>(n), (*tower)->stats().last_ms);
    }
    EXPECT_LE(err[0], 2e-5) << sh.name;
    EXPECT_LE(err[1], 3e-2) << sh.name;
    EXPECT_GE(err[1], 10 * err[0]) << sh.name << ": the bf16 tower is as exact as fp32 (did it run bf16?)";
  }
}

TEST(CudaVisionTower, RefusesWhatTheCpuTowerRefuses) {
  const Tower t = LoadTower();
  auto tower = CudaVisionTower::FromHost(t.config, t.weights);
  ASSERT_TRUE(tower.ok()) << tower.status().ToString();
  const int64_t pe = t.config.patch_elems();
  std::vector<float> out = {1.0f};
  std::vector<ImageGrid> odd = {{1, 3, 4}};  // h not a multiple of the merge size
  EXPECT_EQ((*tower)->Forward(std::vector<float>(12 * pe), odd, &out).code(), StatusCode::kInvalidArgument);
  std::vector<ImageGrid> ok = {{1, 2, 4}};
  EXPECT_EQ((*tower)->Forward(std::vector<float>(7 * pe), ok, &out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*tower)->Forward({}, {}, &out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out, std::vector<float>{1.0f}) << "a refused call wrote its output";
}

}  // namespace
}  // namespace gyre
