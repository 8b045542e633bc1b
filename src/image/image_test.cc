// Image decoding and preprocessing (image/image.h): decode + RGB conversion and the bicubic resize
// bit-exact against Pillow (tests/fixtures/images/pil, tools/golden/make_image_pil_refs.py), clear
// errors for corrupt / truncated / unsupported / oversized images (bombs refused before
// allocation), and the patch order against an independent reshape/transpose formulation.
#include "image/image.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>

namespace gyre {
namespace {

const std::string kSrc = GYRE_SOURCE_DIR;
const std::string kRefs = kSrc + "/tests/fixtures/images/pil";
const std::string kSeeds = kSrc + "/src/image/testdata/fuzz_image_decode";

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

nlohmann::json Manifest() {
  std::ifstream f(kRefs + "/manifest.json");
  return nlohmann::json::parse(f);
}

size_t CountDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

TEST(ImageDecode, MatchesPillowForEveryModeBothAlphaRules) {
  const auto man = Manifest();
  ASSERT_GE(man["decode"].size(), 10u);
  for (const auto& e : man["decode"]) {
    const std::string name = e["name"];
    const auto bytes = ReadBytes(kSeeds + "/" + e["file"].get<std::string>());
    for (auto [mode, suffix] : {std::pair{AlphaMode::kCompositeOnWhite, ".white.rgb"}, {AlphaMode::kDrop, ".drop.rgb"}}) {
      auto r = DecodeImage(bytes, {}, mode);
      ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
      EXPECT_EQ(r->width, e["w"].get<int64_t>()) << name;
      EXPECT_EQ(r->height, e["h"].get<int64_t>()) << name;
      EXPECT_EQ(CountDiff(r->pixels, ReadBytes(kRefs + "/" + name + suffix)), 0u) << name << suffix << " (PIL mode "
                                                                                    << e["mode"] << ")";
    }
  }
}

TEST(ImageResize, BicubicBitExactWithPillow) {
  const auto man = Manifest();
  RgbImage src{61, 47, ReadBytes(kRefs + "/resize_src_61x47.rgb")};
  ASSERT_EQ(src.pixels.size(), 61u * 47 * 3);
  ASSERT_GE(man["resize"].size(), 5u);
  for (const auto& e : man["resize"]) {
    const int64_t w = e["w"], h = e["h"];
    const RgbImage r = ResizeBicubic(src, w, h);
    ASSERT_EQ(r.width, w);
    ASSERT_EQ(r.height, h);
    EXPECT_EQ(CountDiff(r.pixels, ReadBytes(kRefs + "/" + e["file"].get<std::string>())), 0u) << w << "x" << h;
  }
}

// A PNG signature + IHDR chunk (valid CRC) declaring w × h, then nothing.
std::vector<uint8_t> PngHeader(uint32_t w, uint32_t h) {
  std::vector<uint8_t> v = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
  auto be32 = [&](uint32_t x) {
    for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<uint8_t>(x >> s));
  };
  be32(w);
  be32(h);
  v.insert(v.end(), {8, 2, 0, 0, 0});
  be32(static_cast<uint32_t>(crc32(0, v.data() + 12, 17)));
  return v;
}

TEST(ImageDecode, DecompressionBombsRefusedBeforeAllocation) {
  // 60000 × 60000 RGB would need 10.8 GB; refused from the header alone.
  auto r = DecodeImage(PngHeader(60000, 60000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  EXPECT_NE(r.status().message().find("decompression bomb"), std::string::npos) << r.status().ToString();
  // A JPEG whose SOF0 declares 65000 × 65000.
  auto j = ReadBytes(kSeeds + "/baseline420.jpg");
  bool patched = false;
  for (size_t i = 2; i + 9 < j.size(); ++i) {
    if (j[i] == 0xff && j[i + 1] == 0xc0) {
      j[i + 5] = 0xfd, j[i + 6] = 0xe8, j[i + 7] = 0xfd, j[i + 8] = 0xe8;
      patched = true;
      break;
    }
  }
  ASSERT_TRUE(patched);
  auto rj = DecodeImage(j);
  ASSERT_FALSE(rj.ok());
  EXPECT_EQ(rj.status().code(), StatusCode::kResourceExhausted) << rj.status().ToString();
  // Encoded size over the limit.
  ImageLimits small;
  small.max_bytes = 100;
  auto rb = DecodeImage(ReadBytes(kSeeds + "/baseline420.jpg"), small);
  ASSERT_FALSE(rb.ok());
  EXPECT_EQ(rb.status().code(), StatusCode::kResourceExhausted);
}

TEST(ImageDecode, CorruptTruncatedAndUnsupportedGetClearErrors) {
  for (const char* f : {"rgb.png", "interlaced.png", "baseline420.jpg", "progressive.jpg"}) {
    auto b = ReadBytes(kSeeds + "/" + f);
    auto half = std::vector<uint8_t>(b.begin(), b.begin() + static_cast<long>(b.size() / 2));
    auto r = DecodeImage(half);
    ASSERT_FALSE(r.ok()) << f << " truncated was accepted";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find("corrupt"), std::string::npos) << r.status().ToString();
  }
  auto png = ReadBytes(kSeeds + "/rgb.png");
  png[png.size() / 2] ^= 0x5a;  // inside IDAT: a CRC or zlib error
  auto r = DecodeImage(png);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  const std::string gif = "GIF89a\x01\x00\x01\x00";
  auto g = DecodeImage(std::vector<uint8_t>(gif.begin(), gif.end()));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("only PNG and JPEG"), std::string::npos) << g.status().ToString();
  auto e = DecodeImage(std::vector<uint8_t>{});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
}

TEST(ImagePreprocess, PlanFollowsTheBudgetRule) {
  ImagePreprocessConfig c;
  // §7.6 [run]: 100 × 150 (h × w) is not resized and is padded to 112 × 168.
  auto s = PlanImageSize(150, 100, c);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->content_w, 150);
  EXPECT_EQ(s->content_h, 100);
  EXPECT_EQ(s->canvas_w, 168);
  EXPECT_EQ(s->canvas_h, 112);
  // Over the budget: the canvas holds at most max_tokens tokens.
  auto big = PlanImageSize(4000, 3000, c);
  ASSERT_TRUE(big.ok());
  EXPECT_LE(big->canvas_w * big->canvas_h / (28 * 28), c.max_tokens);
  EXPECT_EQ(big->canvas_w % 28, 0);
  EXPECT_EQ(big->canvas_h % 28, 0);
  // No aspect-ratio limit (the reference has none): 2500 × 10 (w × h) fits a 28 × 2520 canvas.
  auto thin = PlanImageSize(2500, 10, c);
  ASSERT_TRUE(thin.ok());
  EXPECT_EQ(thin->canvas_h, 28);
  EXPECT_EQ(thin->canvas_w, 2520);
  EXPECT_EQ(thin->content_h, 10);
  EXPECT_EQ(thin->content_w, 2500);
  EXPECT_FALSE(PlanImageSize(0, 5, c).ok());
  EXPECT_FALSE(PlanImageSize(int64_t{1} << 25, 5, c).ok());
}

// The grids transformers 5.17's Glm5NextImageProcessorPil gave for the test images of
// tools/gpu/image_goldens.py (H100 run of 2026-12-05, bench/results/image_goldens_2026-12-05/
// image_goldens.json): unresized, upscaled (under 16 tokens) and downscaled-free large images.
TEST(ImagePreprocess, GridsMatchTheTransformersProcessor) {
  struct Case {
    int64_t h, w, grid_h, grid_w;
  };
  const Case cases[] = {{100, 150, 8, 12}, {336, 336, 24, 24},  {20, 30, 8, 10},      {40, 900, 4, 66},
                        {64, 200, 6, 16},  {120, 300, 10, 22},  {90, 70, 10, 8},      {77, 131, 8, 12},
                        {90, 90, 8, 8},    {375, 500, 28, 36},  {201, 157, 16, 12},   {123, 77, 12, 8},
                        {2100, 1500, 150, 108}, {2400, 2800, 166, 192}};
  for (const Case& k : cases) {
    auto s = PlanImageSize(k.w, k.h, {});
    ASSERT_TRUE(s.ok()) << k.h << "x" << k.w;
    EXPECT_EQ(s->canvas_h / 14, k.grid_h) << k.h << "x" << k.w;
    EXPECT_EQ(s->canvas_w / 14, k.grid_w) << k.h << "x" << k.w;
  }
  // Under the minimum the content is scaled uniformly (one side fills the canvas, the other is
  // padded); content sizes read off the goldens' zero padding (h x w → content h x w).
  const Case content[] = {{20, 30, 93, 140}, {90, 70, 140, 108}, {77, 131, 98, 168}, {90, 90, 112, 112},
                          {123, 77, 168, 105}};
  for (const Case& k : content) {
    auto s = PlanImageSize(k.w, k.h, {});
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->content_h, k.grid_h) << k.h << "x" << k.w;
    EXPECT_EQ(s->content_w, k.grid_w) << k.h << "x" << k.w;
  }
  // Over the budget the content keeps its aspect ratio inside the largest canvas that fits:
  // 2400 x 2800 → a 2324 x 2688 canvas (7,968 tokens), content 2304 x 2688 (scale 0.96).
  auto big = PlanImageSize(2800, 2400, {});
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->content_h, 2304);
  EXPECT_EQ(big->content_w, 2688);
}

TEST(ImagePreprocess, PatchOrderNormalisationAndPadding) {
  std::mt19937 rng(11);
  RgbImage img{150, 100, std::vector<uint8_t>(150 * 100 * 3)};
  for (auto& p : img.pixels) p = static_cast<uint8_t>(rng() & 0xff);
  ImagePreprocessConfig c;
  auto r = PreprocessImage(img, c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->grid_t, 1);
  EXPECT_EQ(r->grid_h, 8);
  EXPECT_EQ(r->grid_w, 12);
  EXPECT_EQ(r->num_tokens, 24);
  ASSERT_EQ(r->pixel_values.size(), 96u * 1176);
  // Independent formulation: the canvas as [T=2][C][gh/2][2][14][gw/2][2][14], transposed to
  // (gh/2, gw/2, 2, 2, C, T, 14, 14) and flattened, as the reference processor does.
  const int gh = 8, gw = 12;
  size_t checked = 0;
  for (int bh = 0; bh < gh / 2; ++bh)
    for (int bw = 0; bw < gw / 2; ++bw)
      for (int mh = 0; mh < 2; ++mh)
        for (int mw = 0; mw < 2; ++mw)
          for (int ch = 0; ch < 3; ++ch)
            for (int t = 0; t < 2; ++t)
              for (int py = 0; py < 14; ++py)
                for (int px = 0; px < 14; ++px) {
                  const int y = (bh * 2 + mh) * 14 + py, x = (bw * 2 + mw) * 14 + px;
                  const size_t flat = (((((((static_cast<size_t>(bh) * (gw / 2) + bw) * 2 + mh) * 2 + mw) * 3 + ch) * 2 +
                                        t) * 14 + py) * 14 + px);
                  const double v = (y < 100 && x < 150) ? img.pixels[(y * 150 + x) * 3 + ch] / 255.0 : 0.0;
                  const double want = (v - c.mean[ch]) / c.std[ch];
                  ASSERT_NEAR(r->pixel_values[flat], want, 1e-5) << y << "," << x << "," << ch;
                  ++checked;
                }
  EXPECT_EQ(checked, r->pixel_values.size());
}

}  // namespace
}  // namespace gyre
