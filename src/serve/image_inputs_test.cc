// serve/image_inputs.h: base64, the URL rules (data:, file:// only under the allowed folder,
// http(s) refused), and the placeholder expansion with the prompt-embedding positions.
#include "serve/image_inputs.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "serve/openai_protocol.h"

namespace gyre::serve {
namespace {

TEST(ImageInputs, Base64DecodesAndRefusesGarbage) {
  auto r = DecodeBase64("aGVsbG8gd29ybGQ=");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::string(r->begin(), r->end()), "hello world");
  auto nopad = DecodeBase64("aGk");
  ASSERT_TRUE(nopad.ok());
  EXPECT_EQ(std::string(nopad->begin(), nopad->end()), "hi");
  EXPECT_FALSE(DecodeBase64("aGk*").ok());
  EXPECT_FALSE(DecodeBase64("a").ok());
}

TEST(ImageInputs, UrlRules) {
  ImageInputOptions o;
  const std::string f = "messages[0].content[0].image_url";
  auto d = LoadImageUrl("data:image/png;base64,aGk=", f, o);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->size(), 2u);
  for (const char* bad : {"https://x/a.png", "http://x/a.png", "ftp://x", "data:image/png,raw", "data:text/plain;base64,aGk="}) {
    auto r = LoadImageUrl(bad, f, o);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().rfind("'" + f + "'", 0), 0u) << r.status().message();
  }
  const std::string dir = std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/images";
  EXPECT_FALSE(LoadImageUrl("file://" + dir + "/rgb_140x112.png", f, o).ok());  // no flag
  o.allowed_local_media_path = dir;
  EXPECT_TRUE(LoadImageUrl("file://" + dir + "/rgb_140x112.png", f, o).ok());
  auto escape = LoadImageUrl("file://" + dir + "/../glm5_tiny/config.json", f, o);
  ASSERT_FALSE(escape.ok());
  EXPECT_NE(escape.status().message().find("outside"), std::string::npos) << escape.status().message();
}

TEST(ImageInputs, PlaceholderExpansionAndPositions) {
  VisionConfig vc;
  vc.image_token_id = 9;
  vc.image_start_token_id = 7;
  vc.image_end_token_id = 8;
  std::vector<EncodedImage> imgs(2);
  imgs[0].num_tokens = 2;
  imgs[0].embeds = {1, 2, 3, 4};  // width 2
  imgs[1].num_tokens = 1;
  imgs[1].embeds = {5, 6};
  const std::string s = kImageSentinel;
  auto enc = [](const std::string& t, bool first) {
    std::vector<int32_t> ids;
    if (first) ids.push_back(100);  // BOS
    for (char c : t) ids.push_back(static_cast<int32_t>(c));
    return Result<std::vector<int32_t>>(ids);
  };
  auto p = BuildImagePrompt("ab" + s + "c" + s, imgs, vc, enc);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->ids, (std::vector<int32_t>{100, 'a', 'b', 7, 9, 9, 8, 'c', 7, 9, 8}));
  EXPECT_EQ(p->embeds->positions, (std::vector<int64_t>{4, 5, 9}));
  EXPECT_EQ(p->embeds->width, 2);
  EXPECT_EQ(p->embeds->rows, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  auto dropped = BuildImagePrompt("ab" + s, imgs, vc, enc);  // the template lost an image
  EXPECT_FALSE(dropped.ok());
}

// /tokenize counts an image's tokens without the tower: the count must be the one preprocessing
// gives, on every test image (tiny, wide, over the budget, grey, palette, JPEG).
TEST(ImageInputs, TokenCountEqualsPreprocessing) {
  const std::string root = GYRE_SOURCE_DIR;
  auto enc = LoadImageEncoder(root + "/tests/fixtures/glm5_tiny", {});
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  int64_t checked = 0;
  for (const std::string& dir : {root + "/tests/fixtures/images", root + "/tests/fixtures/images/golden"}) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".png" && ext != ".jpg") continue;
      std::ifstream f(entry.path(), std::ios::binary);
      const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(f), {}};
      auto n = ImageTokenCount(**enc, bytes, "f");
      auto img = DecodeImage(bytes, (*enc)->options.limits);
      ASSERT_EQ(n.ok(), img.ok()) << entry.path();
      if (!n.ok()) continue;
      auto pre = PreprocessImage(*img, (*enc)->preprocess);
      ASSERT_TRUE(pre.ok()) << entry.path();
      EXPECT_EQ(*n, pre->num_tokens) << entry.path();
      ++checked;
    }
  }
  EXPECT_GE(checked, 14);
  auto bad = ImageTokenCount(**enc, std::vector<uint8_t>{0x89, 'P', 'N', 'G'}, "messages[0].content[0].image_url");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("'messages[0].content[0].image_url'", 0), 0u) << bad.status().message();
}

}  // namespace
}  // namespace gyre::serve
