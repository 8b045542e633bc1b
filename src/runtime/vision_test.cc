// Vision tower (runtime/vision.h): patch order and RoPE against hand-computed values, attention
// against a double-precision reference, per-image isolation, the placeholder merge, and parity
// with transformers on tests/fixtures/glm5_tiny/vision_golden.safetensors
// (tools/golden/make_vision_goldens.py).
#include "runtime/vision.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/dtype.h"
#include "model/safetensors.h"
#include "ops/basic.h"
#include "ops/vision.h"
#include "runtime/model.h"

namespace gyre {
namespace {

std::string FixtureDir() { return std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/glm5_tiny"; }

std::vector<float> RandomVec(size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

struct Tower {
  VisionConfig config;
  VisionWeights weights;
};

Tower LoadTower() {
  auto c = LoadVisionConfig(FixtureDir());
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->has_value());
  auto files = WeightFiles::Open(FixtureDir());
  EXPECT_TRUE(files.ok()) << files.status().ToString();
  auto w = BindVisionWeights(**c, **files);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  return {**c, std::move(*w)};
}

TEST(VisionPositions, BlockMajorOrderOn4x6Grid) {
  const auto pos = VisionPatchPositions({1, 4, 6}, 2);
  // Blocks row-major (2 block rows × 3 block columns), row-major inside each 2×2 block.
  const std::vector<std::pair<int32_t, int32_t>> want = {
      {0, 0}, {0, 1}, {1, 0}, {1, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {0, 4}, {0, 5}, {1, 4}, {1, 5},
      {2, 0}, {2, 1}, {3, 0}, {3, 1}, {2, 2}, {2, 3}, {3, 2}, {3, 3}, {2, 4}, {2, 5}, {3, 4}, {3, 5}};
  EXPECT_EQ(pos, want);
  // A second temporal slice repeats the list.
  const auto pos2 = VisionPatchPositions({2, 4, 6}, 2);
  ASSERT_EQ(pos2.size(), 48u);
  EXPECT_EQ(std::vector(pos2.begin() + 24, pos2.end()), want);
}

TEST(VisionRope, TablesMatchHandComputedAngles) {
  // head_dim 16: quarters of 4 channels [h | w | h | w], inv_freq[i] = 10000^(-i/4) = 1, 0.1, 0.01, 0.001.
  const std::vector<std::pair<int32_t, int32_t>> pos = {{0, 3}, {2, 5}};
  std::vector<float> cos, sin;
  ops::VisionRopeTables(pos, 16, 10000.0f, &cos, &sin);
  ASSERT_EQ(cos.size(), 32u);
  const double inv[4] = {1.0, 0.1, 0.01, 0.001};
  for (int r = 0; r < 2; ++r) {
    for (int j = 0; j < 16; ++j) {
      const int quarter = j / 4;
      const double coord = quarter % 2 == 0 ? pos[r].first : pos[r].second;
      EXPECT_NEAR(cos[r * 16 + j], std::cos(coord * inv[j % 4]), 1e-6) << r << "," << j;
      EXPECT_NEAR(sin[r * 16 + j], std::sin(coord * inv[j % 4]), 1e-6) << r << "," << j;
    }
  }
  EXPECT_NEAR(cos[5], std::cos(0.3), 1e-6);  // row (0,3), w quarter, i = 1
  EXPECT_FLOAT_EQ(cos[1], 1.0f);             // row (0,3), h quarter: h = 0
}

TEST(VisionAttention, MatchesDoubleReference) {
  const int64_t n = 7, H = 3, hd = 8, D = H * hd, ld = 3 * D;
  const auto qkv = RandomVec(n * ld, 11);
  std::vector<float> out(n * D);
  const std::vector<int64_t> seg = {n};
  ops::VisionAttention(&qkv[0], &qkv[D], &qkv[2 * D], ld, seg, H, hd, out.data());
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < n; ++i) {
      std::vector<double> s(n);
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        double d = 0;
        for (int64_t e = 0; e < hd; ++e) d += double(qkv[i * ld + h * hd + e]) * qkv[j * ld + D + h * hd + e];
        s[j] = d / std::sqrt(double(hd));
        mx = std::max(mx, s[j]);
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t e = 0; e < hd; ++e) {
        double o = 0;
        for (int64_t j = 0; j < n; ++j) o += s[j] / sum * qkv[j * ld + 2 * D + h * hd + e];
        EXPECT_NEAR(out[i * D + h * hd + e], o, 1e-5) << h << " " << i << " " << e;
      }
    }
  }
}

TEST(VisionTower, ImagesDoNotLeakIntoEachOther) {
  const Tower t = LoadTower();
  const int64_t P = t.config.patch_elems(), O = t.config.out_hidden_size;
  const std::vector<ImageGrid> grids = {{1, 4, 6}, {1, 2, 4}};
  auto px = RandomVec((24 + 8) * P, 21);
  std::vector<float> both, alone1, changed;
  ASSERT_TRUE(VisionForward(t.config, t.weights, px, grids, &both).ok());
  ASSERT_EQ(both.size(), size_t((6 + 2) * O));
  // Image 1 alone gives the same rows.
  ASSERT_TRUE(VisionForward(t.config, t.weights, std::span(px).first(24 * P), std::span(grids).first(1), &alone1).ok());
  ASSERT_EQ(alone1.size(), size_t(6 * O));
  EXPECT_LT(ops::Compare(alone1, std::span(both).first(6 * O)).max_abs, 1e-6);
  // Changing image 2 leaves image 1's rows untouched and changes image 2's.
  auto px2 = px;
  const auto other = RandomVec(8 * P, 22);
  std::copy(other.begin(), other.end(), px2.begin() + 24 * P);
  ASSERT_TRUE(VisionForward(t.config, t.weights, px2, grids, &changed).ok());
  EXPECT_EQ(std::vector(changed.begin(), changed.begin() + 6 * O), std::vector(both.begin(), both.begin() + 6 * O));
  EXPECT_GT(ops::Compare(std::span(changed).subspan(6 * O), std::span(both).subspan(6 * O)).max_abs, 1e-3);
}

TEST(VisionTower, DownsampleEqualsTheConvOnDiskWeights) {
  const Tower t = LoadTower();
  auto files = WeightFiles::Open(FixtureDir());
  ASSERT_TRUE(files.ok());
  const TensorView* cw = (*files)->Find("model.visual.downsample.weight");
  ASSERT_NE(cw, nullptr);
  std::vector<float> conv(cw->numel());
  ConvertToF32(cw->dtype, cw->data, conv.size(), conv.data());
  const int64_t D = t.config.hidden_size, O = t.config.out_hidden_size, P = t.config.patch_elems();
  const std::vector<ImageGrid> grids = {{1, 2, 4}};
  const auto px = RandomVec(8 * P, 31);
  std::vector<float> out;
  VisionTrace tr;
  ASSERT_TRUE(VisionForward(t.config, t.weights, px, grids, &out, &tr).ok());
  ASSERT_EQ(tr.downsample.size(), size_t(2 * O));
  for (int64_t blk = 0; blk < 2; ++blk) {
    for (int64_t o = 0; o < O; ++o) {
      double y = t.weights.downsample_bias[o];
      for (int64_t c = 0; c < D; ++c) {
        for (int64_t a = 0; a < 2; ++a) {
          for (int64_t b = 0; b < 2; ++b) {
            y += double(conv[((o * D + c) * 2 + a) * 2 + b]) * tr.post_layernorm[(blk * 4 + a * 2 + b) * D + c];
          }
        }
      }
      EXPECT_NEAR(tr.downsample[blk * O + o], y, 1e-4) << blk << " " << o;
    }
  }
}

TEST(VisionTower, RejectsBadInputs) {
  const Tower t = LoadTower();
  const int64_t P = t.config.patch_elems();
  std::vector<float> out;
  const auto px = RandomVec(8 * P, 41);
  const std::vector<ImageGrid> odd = {{1, 3, 4}};
  EXPECT_FALSE(VisionForward(t.config, t.weights, std::span(px).first(12 * P), odd, &out).ok());
  const std::vector<ImageGrid> g = {{1, 2, 4}};
  EXPECT_FALSE(VisionForward(t.config, t.weights, std::span(px).first(7 * P), g, &out).ok());
  EXPECT_FALSE(VisionForward(t.config, t.weights, px, {}, &out).ok());
}

TEST(VisionMerge, WritesImageRowsSkippingVideoSpans) {
  VisionConfig c;
  c.image_token_id = 9;
  c.video_start_token_id = 7;
  c.video_end_token_id = 8;
  const int64_t D = 2;
  // positions 1, 2 image; 4 inside a video span (ignored); 6 image.
  const std::vector<int32_t> ids = {1, 9, 9, 7, 9, 8, 9};
  std::vector<float> embeds(ids.size() * D, -1.0f);
  const std::vector<float> img = {10, 11, 20, 21, 30, 31};
  ASSERT_TRUE(MergeImageEmbeddings(ids, c, img, D, embeds).ok());
  const std::vector<float> want = {-1, -1, 10, 11, 20, 21, -1, -1, -1, -1, -1, -1, 30, 31};
  EXPECT_EQ(embeds, want);
  EXPECT_FALSE(MergeImageEmbeddings(ids, c, std::span(img).first(4), D, embeds).ok());
}

// ---- parity with transformers ------------------------------------------------------------------

// The golden file's tensors (a missing name fails the test and yields an empty vector).
class Golden {
 public:
  static std::string Path() { return FixtureDir() + "/vision_golden.safetensors"; }
  explicit Golden(std::unique_ptr<SafetensorsFile> f) : f_(std::move(f)) {}
  const TensorView* Find(const std::string& name) const {
    auto it = f_->tensors().find(name);
    EXPECT_NE(it, f_->tensors().end()) << name;
    return it == f_->tensors().end() ? nullptr : &it->second;
  }
  std::vector<float> F32(const std::string& name) const {
    const TensorView* t = Find(name);
    if (!t) return {};
    std::vector<float> v(t->numel());
    ConvertToF32(t->dtype, t->data, v.size(), v.data());
    return v;
  }
  std::vector<int32_t> I32(const std::string& name) const {
    const TensorView* t = Find(name);
    if (!t) return {};
    EXPECT_EQ(t->dtype, DType::kI32) << name;
    std::vector<int32_t> v(t->numel());
    std::memcpy(v.data(), t->data, v.size() * sizeof(int32_t));
    return v;
  }
  std::vector<ImageGrid> Grids() const {
    const auto g = I32("grid_thw");
    std::vector<ImageGrid> grids;
    for (size_t i = 0; i + 2 < g.size(); i += 3) grids.push_back({g[i], g[i + 1], g[i + 2]});
    return grids;
  }

 private:
  std::unique_ptr<SafetensorsFile> f_;
};

#define GYRE_OPEN_GOLDEN(g)                                                                              \
  if (!std::filesystem::exists(Golden::Path())) {                                                       \
    GTEST_SKIP() << "no " << Golden::Path() << " yet: run tools/golden/make_vision_goldens.py on the GPU machine"; \
  }                                                                                                     \
  auto g##_file = SafetensorsFile::Open(Golden::Path());                                               \
  ASSERT_TRUE(g##_file.ok()) << g##_file.status().ToString();                                          \
  const Golden g(std::move(*g##_file))

TEST(VisionGolden, TowerMatchesTransformersFp32) {
  GYRE_OPEN_GOLDEN(golden);
  const Tower t = LoadTower();
  const std::vector<ImageGrid> grids = golden.Grids();
  ASSERT_EQ(grids.size(), 2u);
  std::vector<float> out;
  VisionTrace tr;
  ASSERT_TRUE(VisionForward(t.config, t.weights, golden.F32("pixel_values"), grids, &out, &tr).ok());
  constexpr double kTol = 1e-5;
  const struct {
    const char* name;
    const std::vector<float>* ours;
  } checks[] = {{"patch_embed", &tr.patch_embed}, {"block0", &tr.block0}, {"post_layernorm", &tr.post_layernorm},
                {"downsample", &tr.downsample},   {"image_embeds", &out}};
  for (const auto& ch : checks) {
    const auto ref = golden.F32(ch.name);
    ASSERT_EQ(ch.ours->size(), ref.size()) << ch.name;
    const auto d = ops::Compare(*ch.ours, ref);
    std::printf("[vision parity] %-14s rel_l2 %.3e max_abs %.3e\n", ch.name, d.rel_l2, d.max_abs);
    EXPECT_LT(d.rel_l2, kTol) << ch.name;
  }
  // The RoPE tables too (block-major positions of both images).
  std::vector<std::pair<int32_t, int32_t>> pos;
  for (const auto& g : grids) {
    auto p = VisionPatchPositions(g, t.config.spatial_merge_size);
    pos.insert(pos.end(), p.begin(), p.end());
  }
  std::vector<float> cos, sin;
  ops::VisionRopeTables(pos, t.config.head_dim(), t.config.rope_theta, &cos, &sin);
  EXPECT_LT(ops::Compare(cos, golden.F32("rope_cos")).max_abs, 1e-6);
  EXPECT_LT(ops::Compare(sin, golden.F32("rope_sin")).max_abs, 1e-6);
}

TEST(VisionGolden, PromptWithImagesLogitsMatchTransformersFp32) {
  GYRE_OPEN_GOLDEN(golden);
  Tower t = LoadTower();
  // The golden's placeholder id (the fixture's 154854 is outside the tiny vocabulary; see
  // vision_golden.json "ids").
  t.config.image_token_id = 1010;
  const std::vector<ImageGrid> grids = golden.Grids();
  std::vector<float> image;
  ASSERT_TRUE(VisionForward(t.config, t.weights, golden.F32("pixel_values"), grids, &image).ok());

  auto model = Model::Load(FixtureDir());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const Model& m = **model;
  const int64_t D = m.config().hidden_size, V = m.config().vocab_size;
  const auto ids = golden.I32("input_ids");
  const int64_t T = static_cast<int64_t>(ids.size());
  std::vector<float> embeds(T * D);
  ops::Embedding(ids, m.weights().embed, embeds.data());
  ASSERT_TRUE(MergeImageEmbeddings(ids, t.config, image, D, embeds).ok());

  const auto ref = golden.F32("logits"), ref_text = golden.F32("logits_text_only");
  ASSERT_EQ(ref.size(), size_t(T * V));
  std::vector<float> logits;
  SequenceState st = m.NewSequence();
  SeqInput in{&st, ids, /*all_logits=*/true};
  in.input_embeds = embeds;
  ASSERT_TRUE(m.Forward(std::span<const SeqInput>(&in, 1), &logits).ok());
  ASSERT_EQ(logits.size(), ref.size());
  const auto d = ops::Compare(logits, ref);
  const auto dl = ops::Compare(std::span(logits).last(V), std::span(ref).last(V));
  std::printf("[vision parity] logits all rel_l2 %.3e, last token rel_l2 %.3e max_abs %.3e\n", d.rel_l2, dl.rel_l2,
              dl.max_abs);
  // The text model adds its own fp32 reassociation noise (golden_test: ~1e-6 per layer, 8 layers);
  // observed 9e-6 over all rows, 5e-6 on the last token.
  constexpr double kLogitsTol = 1e-4;
  EXPECT_LT(d.rel_l2, kLogitsTol);
  EXPECT_LT(dl.rel_l2, kLogitsTol);
  // Without the merge (placeholder rows from the table) the logits are the reference's
  // text-only ones and differ from the image ones: the merge is what the test measures.
  SequenceState st2 = m.NewSequence();
  SeqInput plain{&st2, ids, true};
  ASSERT_TRUE(m.Forward(std::span<const SeqInput>(&plain, 1), &logits).ok());
  EXPECT_LT(ops::Compare(logits, ref_text).rel_l2, kLogitsTol);
  EXPECT_GT(ops::Compare(logits, ref).rel_l2, 1e-2);
  // A wrong-sized input_embeds is rejected.
  SequenceState st3 = m.NewSequence();
  SeqInput bad{&st3, ids, true};
  bad.input_embeds = std::span<const float>(embeds).first(D);
  EXPECT_FALSE(m.Forward(std::span<const SeqInput>(&bad, 1), &logits).ok());
}

}  // namespace
}  // namespace gyre
