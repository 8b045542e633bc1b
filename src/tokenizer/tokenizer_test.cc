// Tests for Tokenizer / StreamDecoder / LoadTokenizerConfig on small inline tokenizer.json files.
//
// Sections: helpers; BPE merging; added tokens; normalizer and pre-tokenizers; decoding and
// streaming; malformed input; config; concurrency. Golden tests against HF output live in
// tokenizer_golden_test.cc. To add a case, build a tokenizer with MakeJson() and tweak fields.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <unistd.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/unicode.h"

namespace gyre {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<int32_t>;

std::string Bl(std::string_view raw) {  // raw bytes -> byte-level token string
  std::string s;
  tok::AppendByteLevel(raw, &s);
  return s;
}

// A byte-level BPE tokenizer.json: token id b is byte b (as its byte-level char); merge i of
// `merges` (raw strings) creates token 256 + i. ByteLevel pre-tokenizer (GPT-2 regex, no prefix
// space) and decoder; no normalizer; no added tokens.
Json MakeJson(const std::vector<std::pair<std::string, std::string>>& merges) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[Bl(std::string(1, static_cast<char>(b)))] = b;
  Json merge_list = Json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    merge_list.push_back(Json::array({Bl(a), Bl(b)}));
    if (!vocab.contains(Bl(a + b))) vocab[Bl(a + b)] = next++;
  }
  return Json{
      {"version", "1.0"},
      {"added_tokens", Json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false},
        {"byte_fallback", false}, {"ignore_merges", false}, {"vocab", vocab},
        {"merges", merge_list}}},
  };
}

Json AddedToken(int id, const std::string& content, bool special, bool lstrip = false,
                bool rstrip = false, bool normalized = false, bool single_word = false) {
  return Json{{"id", id},         {"content", content}, {"single_word", single_word},
              {"lstrip", lstrip}, {"rstrip", rstrip},   {"normalized", normalized},
              {"special", special}};
}

std::unique_ptr<Tokenizer> Load(const Json& j) {
  auto t = Tokenizer::FromJson(j.dump());
  EXPECT_TRUE(t.ok()) << t.error().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

int32_t Id(const Tokenizer& t, std::string_view raw) {
  auto id = t.TokenToId(Bl(raw));
  EXPECT_TRUE(id.has_value()) << "no token for \"" << raw << "\"";
  return id.value_or(-1);
}

Ids Encode(const Tokenizer& t, std::string_view text, bool parse_special = true) {
  auto ids = t.Encode(text, parse_special);
  EXPECT_TRUE(ids.ok()) << ids.error().ToString();
  return ids.ok() ? *ids : Ids{};
}

std::string Decode(const Tokenizer& t, const Ids& ids, bool skip_special = false) {
  auto s = t.Decode(ids, skip_special);
  EXPECT_TRUE(s.ok()) << s.error().ToString();
  return s.ok() ? *s : std::string();
}

Ids Bytes(std::string_view raw) {  // ids of the single-byte tokens of `raw`
  Ids ids;
  for (char c : raw) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

// ---------------------------------------------------------------------------------------------
// BPE merging

TEST(TokenizerBpe, MergesApplyInRankOrder) {
  auto ab_first = Load(MakeJson({{"a", "b"}, {"b", "c"}}));
  auto bc_first = Load(MakeJson({{"b", "c"}, {"a", "b"}}));
  ASSERT_TRUE(ab_first && bc_first);
  EXPECT_EQ(Encode(*ab_first, "abc"), (Ids{Id(*ab_first, "ab"), 'c'}));
  EXPECT_EQ(Encode(*bc_first, "abc"), (Ids{'a', Id(*bc_first, "bc")}));

  auto chain = Load(MakeJson({{"a", "b"}, {"b", "c"}, {"ab", "c"}}));
  ASSERT_TRUE(chain);
  EXPECT_EQ(Encode(*chain, "abc"), (Ids{Id(*chain, "abc")}));
  EXPECT_EQ(Encode(*chain, "abcabc"), (Ids{Id(*chain, "abc"), Id(*chain, "abc")}));
}

TEST(TokenizerBpe, EqualRanksMergeLeftmostFirst) {
  auto t = Load(MakeJson({{"a", "a"}}));
  ASSERT_TRUE(t);
  EXPECT_EQ(Encode(*t, "aaa"), (Ids{Id(*t, "aa"), 'a'}));
  EXPECT_EQ(Encode(*t, "aaaa"), (Ids{Id(*t, "aa"), Id(*t, "aa")}));
}

TEST(TokenizerBpe, MergesStayInsidePreTokens) {
  auto t = Load(MakeJson({{" ", "b"}, {"a", " "}}));
  ASSERT_TRUE(t);
  // The GPT-2 pattern splits "a b" into "a" and " b", so "a " can never merge.
  EXPECT_EQ(Encode(*t, "a b"), (Ids{'a', Id(*t, " b")}));
}

TEST(TokenizerBpe, StringMergeFormAndIgnoreMerges) {
  Json j = MakeJson({});
  j["model"]["merges"] = Json::array({"a b", "#version: 0.2 is skipped", "ab c"});
  j["model"]["vocab"]["ab"] = 256;
  j["model"]["vocab"]["abc"] = 257;
  j["model"]["vocab"]["xyz"] = 258;  // reachable only through ignore_merges
  auto t = Load(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(Encode(*t, "abc"), (Ids{257}));
  EXPECT_EQ(Encode(*t, "xyz"), (Ids{'x', 'y', 'z'}));
  j["model"]["ignore_merges"] = true;
  auto ignoring = Load(j);
  ASSERT_TRUE(ignoring);
  EXPECT_EQ(Encode(*ignoring, "xyz"), (Ids{258}));
}

TEST(TokenizerBpe, UnknownCharsUseUnkToken) {
  // Without the ByteLevel pre-tokenizer, chars outside the vocab reach the model.
  Json j = MakeJson({});
  j["pre_tokenizer"] = nullptr;
  j["model"]["vocab"]["<unk>"] = 300;
  j["model"]["unk_token"] = "<unk>";
  auto t = Load(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(Encode(*t, "a\xE2\x82\xAC\xE2\x82\xAC" "b"), (Ids{'a', 300, 300, 'b'}));
  j["model"]["fuse_unk"] = true;
  auto fused = Load(j);
  ASSERT_TRUE(fused);
  EXPECT_EQ(Encode(*fused, "a\xE2\x82\xAC\xE2\x82\xAC" "b"), (Ids{'a', 300, 'b'}));
}

// ---------------------------------------------------------------------------------------------
// Added tokens

TEST(TokenizerAdded, MatchedBeforeBpeLongestFirst) {
  Json j = MakeJson({{"<", "a"}});
  j["added_tokens"] = Json::array({AddedToken(257, "<a>", true), AddedToken(258, "<a>b", false)});
  auto t = Load(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->vocab_size(), 259);
  EXPECT_EQ(Encode(*t, "x<a>y"), (Ids{'x', 257, 'y'}));
  EXPECT_EQ(Encode(*t, "x<a>by"), (Ids{'x', 258, 'y'}));
  EXPECT_EQ(Encode(*t, "<a<a>"), (Ids{'<', 'a', 257}));  // "<a" is plain text, then the token
  EXPECT_EQ(t->TokenToId("<a>"), 257);
  EXPECT_TRUE(t->IsSpecial(257));
  EXPECT_FALSE(t->IsSpecial(258));
  EXPECT_FALSE(t->IsSpecial('a'));
}

TEST(TokenizerAdded, ParseSpecialFalseKeepsSpecialTokensAsText) {
  Json j = MakeJson({});
  j["added_tokens"] = Json::array({AddedToken(256, "<s>", true), AddedToken(257, "<n>", false)});
  auto t = Load(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(Encode(*t, "<s><n>", true), (Ids{256, 257}));
  EXPECT_EQ(Encode(*t, "<s><n>", false), (Ids{'<', 's', '>', 257}));
}

TEST(TokenizerAdded, LstripAndRstripAbsorbWhitespace) {
  Json j = MakeJson({});
  j["added_tokens"] = Json::array({AddedToken(256, "<m>", true, /*lstrip=*/true,
                                              /*rstrip=*/true),
                                   AddedToken(257, "<l>", true, /*lstrip=*/true),
                                   AddedToken(258, "<r>", true, false, /*rstrip=*/true)});
  auto t = Load(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(Encode(*t, "a  <m> \t b"), (Ids{'a', 256, 'b'}));
  EXPECT_EQ(Encode(*t, "a  <l>  b"), (Ids{'a', 257, ' ', ' ', 'b'}));
  EXPECT_EQ(Encode(*t, "a  <r>  b"), (Ids{'a', ' ', ' ', 258, 'b'}));
  // Unicode whitespace counts too (U+3000).
  EXPECT_EQ(Encode(*t, "a\xE3\x80\x80<l>"), (Ids{'a', 257}));
}

TEST(TokenizerAdded, SingleWordOnlyMatchesWholeWords) {
  Json j = MakeJson({});
  j["added_tokens"] = Json::array({AddedToken(256, "cat", false, false, false, false,
                                              /*single_word=*/true)});
  auto t = Load(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(Encode(*t, "a cat"), (Ids{'a', ' ', 256}));
  EXPECT_EQ(Encode(*t, "cats"), (Ids{'c', 'a', 't', 's'}));
}

TEST(TokenizerAdded, NormalizedTokensMatchAfterNormalization) {
  Json j = MakeJson({});
  j["normalizer"] = {{"type", "NFC"}};
  // "é" decomposed in the file; normalized=true matches it against NFC text.
  j["added_tokens"] = Json::array({AddedToken(256, "e\xCC\x81!", false, false, false,
                                              /*normalized=*/true)});
  auto t = Load(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(Encode(*t, "x\xC3\xA9!"), (Ids{'x', 256}));
  EXPECT_EQ(Encode(*t, "xe\xCC\x81!"), (Ids{'x', 256}));
}

TEST(TokenizerAdded, IdsFollowHfAssignment) {
  Json j = MakeJson({});
  // An added token whose content is already in the vocab keeps the vocab id.
  j["added_tokens"] = Json::array({AddedToken(97, "a", true), AddedToken(256, "<x>", true)});
  auto t = Load(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->TokenToId("a"), 97);
  EXPECT_EQ(t->TokenToId("<x>"), 256);
  EXPECT_TRUE(t->IsSpecial(97));
  EXPECT_EQ(Decode(*t, {97, 'b', 256}, /*skip_special=*/true), "b");
}

// ---------------------------------------------------------------------------------------------
// Normalizer and pre-tokenizers

TEST(TokenizerNormalizer, NfcApplied) {
  Json j = MakeJson({{"\xC3", "\xA9"}});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", Json::array({{{"type", "NFC"}}})}};
  auto t = Load(j);
  ASSERT_TRUE(t);
  const Ids composed = Encode(*t, "caf\xC3\xA9");
  EXPECT_EQ(composed, (Ids{'c', 'a', 'f', 256}));
  EXPECT_EQ(Encode(*t, "cafe\xCC\x81"), composed);
  EXPECT_EQ(Decode(*t, composed), "caf\xC3\xA9");
}

TEST(TokenizerPreTokenizer, ByteLevelPrefixSpace) {
  Json j = MakeJson({{" ", "h"}});
  j["pre_tokenizer"]["add_prefix_space"] = true;
  auto t = Load(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(Encode(*t, "hh"), (Ids{256, 'h'}));
  EXPECT_EQ(Encode(*t, " hh"), (Ids{256, 'h'}));  // already starts with a space
}

TEST(TokenizerPreTokenizer, Gpt2PatternSplitsContractionsAndSpaces) {
  auto t = Load(MakeJson({{"'", "m"}, {"I", "'"}, {" ", " "}}));
  ASSERT_TRUE(t);
  EXPECT_EQ(Encode(*t, "I'm"), (Ids{'I', Id(*t, "'m")}));
  // "\s+(?!\S)" leaves the last space of a run to the next word: "a", "  ", " b".
  EXPECT_EQ(Encode(*t, "a   b"), (Ids{'a', Id(*t, "  "), ' ', 'b'}));
}

Json SplitJson(const std::string& behavior, bool invert = false) {
  Json j = MakeJson({{"a", "-"}, {"-", "b"}, {"a", "b"}});
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       Json::array({{{"type", "Split"},
                     {"pattern", {{"String", "-"}}},
                     {"behavior", behavior},
                     {"invert", invert}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  return j;
}

TEST(TokenizerPreTokenizer, SplitBehaviors) {
  auto isolated = Load(SplitJson("Isolated"));
  auto removed = Load(SplitJson("Removed"));
  auto prev = Load(SplitJson("MergedWithPrevious"));
  auto next = Load(SplitJson("MergedWithNext"));
  auto contiguous = Load(SplitJson("Contiguous"));
  ASSERT_TRUE(isolated && removed && prev && next && contiguous);
  const int32_t a_dash = Id(*isolated, "a-"), dash_b = Id(*isolated, "-b");
  EXPECT_EQ(Encode(*isolated, "a-b"), (Ids{'a', '-', 'b'}));
  EXPECT_EQ(Encode(*removed, "a-b"), (Ids{'a', 'b'}));
  EXPECT_EQ(Encode(*prev, "a-b"), (Ids{a_dash, 'b'}));
  EXPECT_EQ(Encode(*next, "a-b"), (Ids{'a', dash_b}));
  EXPECT_EQ(Encode(*contiguous, "a--b"), (Ids{'a', '-', '-', 'b'}));
  // With invert, the non-matches are the delimiters: "a" and "b" are removed.
  auto inverted = Load(SplitJson("Removed", /*invert=*/true));
  ASSERT_TRUE(inverted);
  EXPECT_EQ(Encode(*inverted, "a-b"), (Ids{'-'}));
  // Merges never cross a split: "ab" merges only when no '-' separates it.
  EXPECT_EQ(Encode(*isolated, "ab"), (Ids{Id(*isolated, "ab")}));
}

TEST(TokenizerPreTokenizer, SplitRegexIsolatedKeepsGaps) {
  Json j = MakeJson({{"a", "b"}, {"b", "1"}});
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       Json::array({{{"type", "Split"},
                     {"pattern", {{"Regex", "\\p{N}"}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  auto t = Load(j);
  ASSERT_TRUE(t);
  // Pieces: "ab", "1", "ab": "b1" can never merge.
  EXPECT_EQ(Encode(*t, "ab1ab"), (Ids{Id(*t, "ab"), '1', Id(*t, "ab")}));
}

// ---------------------------------------------------------------------------------------------
// Decoding and streaming

TEST(TokenizerDecode, ByteRoundTripAndLossyReplacement) {
  auto t = Load(MakeJson({}));
  ASSERT_TRUE(t);
  // Every byte string decodes like Rust's from_utf8_lossy.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string raw(rng() % 12, '\0');
    for (char& c : raw) c = static_cast<char>(rng() % 256);
    EXPECT_EQ(Decode(*t, Bytes(raw)), tok::Utf8Lossy(raw));
  }
  EXPECT_EQ(Decode(*t, Bytes("\xE4\xBD" "a")), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(Decode(*t, Bytes("\xED\xA0\x80")), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  // Valid UTF-8 survives Encode -> Decode.
  for (const std::string& text : std::vector<std::string>{
           "", "x", "h\xC3\xA9llo w\xC3\xB6rld", "\xF0\x9F\x98\x80\xF0\x9F\x98\x83",
           "\xE4\xBD\xA0\xE5\xA5\xBD\n\t \r\n", std::string("\0\x01\x7F", 3)}) {
    EXPECT_EQ(Decode(*t, Encode(*t, text)), text);
  }
}

TEST(TokenizerDecode, TokenBytesAndSkipSpecial) {
  Json j = MakeJson({{" ", "a"}});
  j["added_tokens"] =
      Json::array({AddedToken(257, "<|end|>", true), AddedToken(258, "\n\n", false)});
  auto t = Load(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->TokenBytes(256), " a");
  EXPECT_EQ(t->TokenBytes(257), "<|end|>");
  EXPECT_EQ(t->TokenBytes(258), "\n\n");
  EXPECT_EQ(t->TokenBytes(-1), "");
  EXPECT_EQ(t->TokenBytes(259), "");
  const Ids ids = Encode(*t, "x a<|end|>\n\n");
  EXPECT_EQ(ids, (Ids{'x', 256, 257, 258}));
  EXPECT_EQ(Decode(*t, ids), "x a<|end|>\n\n");
  EXPECT_EQ(Decode(*t, ids, /*skip_special=*/true), "x a\n\n");
}

TEST(TokenizerDecode, IdsOutOfRangeAreInvalidArgument) {
  auto t = Load(MakeJson({}));
  ASSERT_TRUE(t);
  for (int32_t bad : {-1, 256, INT32_MAX}) {
    auto r = t->Decode(Ids{'a', bad});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.error().message().find("ids[1]"), std::string::npos) << r.error().message();
  }
}

TEST(TokenizerDecode, EncodeRejectsInvalidUtf8) {
  auto t = Load(MakeJson({}));
  ASSERT_TRUE(t);
  auto r = t->Encode("ab\xC3");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
}

// Feeds `ids` one by one; checks that no Push result ends inside a char and that the whole
// stream equals Decode.
void ExpectStreamMatchesDecode(const Tokenizer& t, const Ids& ids, bool skip_special = false) {
  StreamDecoder stream(t, skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = stream.Push(id);
    EXPECT_TRUE(tok::IsValidUtf8(piece)) << "partial char after id " << id;
    streamed += piece;
  }
  streamed += stream.Flush();
  EXPECT_EQ(streamed, Decode(t, ids, skip_special));
}

TEST(StreamDecoder, NeverSplitsACharAndEqualsDecode) {
  Json j = MakeJson({{"\xF0", "\x9F"}, {"\xF0\x9F", "\x98"}});
  j["added_tokens"] = Json::array({AddedToken(258, "<s>", true)});
  auto t = Load(j);
  ASSERT_TRUE(t);
  const std::string emoji_cjk =
      "\xF0\x9F\x98\x80\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 \xE4\xBD\xA0\xE5\xA5\xBD "
      "\xED\x95\x9C\xEA\xB5\xAD";
  const Ids ids = Encode(*t, emoji_cjk);
  ExpectStreamMatchesDecode(*t, ids);
  EXPECT_EQ(Decode(*t, ids), emoji_cjk);

  // Byte-at-a-time: the emoji appears only with its 4th byte.
  StreamDecoder stream(*t);
  EXPECT_EQ(stream.Push(0xF0), "");
  EXPECT_EQ(stream.Push(0x9F), "");
  EXPECT_EQ(stream.Push(0x98), "");
  EXPECT_EQ(stream.Push(0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(stream.Push(0xE4), "");
  EXPECT_EQ(stream.Flush(), "\xEF\xBF\xBD");  // lossy remainder

  // Special tokens interleaved, with and without skipping; random byte soup (invalid too).
  Ids mixed = ids;
  mixed.insert(mixed.begin() + 3, 258);
  ExpectStreamMatchesDecode(*t, mixed);
  ExpectStreamMatchesDecode(*t, mixed, /*skip_special=*/true);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    Ids soup(rng() % 10);
    for (int32_t& id : soup) {
      id = static_cast<int32_t>(rng() % 2 ? 0x80 + rng() % 0x80 : rng() % t->vocab_size());
    }
    ExpectStreamMatchesDecode(*t, soup);
  }
}

// ---------------------------------------------------------------------------------------------
// Malformed input: every case is InvalidArgument and names the offending field.

struct BadCase {
  std::string name;
  std::function<void(Json&)> mutate;
  std::string expected_in_message;
};

TEST(TokenizerMalformed, ErrorsNameTheField) {
  const std::vector<BadCase> cases = {
      {"no model", [](Json& j) { j.erase("model"); }, "model"},
      {"vocab not object", [](Json& j) { j["model"]["vocab"] = Json::array(); }, "model.vocab"},
      {"negative id", [](Json& j) { j["model"]["vocab"]["zz"] = -3; }, "model.vocab"},
      {"sparse ids", [](Json& j) { j["model"]["vocab"]["zz"] = 2000000000; }, "sparse"},
      {"merge not in vocab", [](Json& j) { j["model"]["merges"] = Json::array({"q zz"}); },
       "model.merges[0]"},
      {"merge with two spaces", [](Json& j) { j["model"]["merges"] = Json::array({"a b c"}); },
       "model.merges[0]"},
      {"merge wrong type", [](Json& j) { j["model"]["merges"] = Json::array({42}); },
       "model.merges[0]"},
      {"model type", [](Json& j) { j["model"]["type"] = "WordPiece"; }, "WordPiece"},
      {"dropout", [](Json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout"},
      {"subword prefix", [](Json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       "continuing_subword_prefix"},
      {"normalizer type", [](Json& j) { j["normalizer"] = {{"type", "Lowercase"}}; },
       "Lowercase"},
      {"normalizer in sequence",
       [](Json& j) {
         j["normalizer"] = {{"type", "Sequence"},
                            {"normalizers", Json::array({{{"type", "NFC"}}, {{"type", "Strip"}}})}};
       },
       "normalizer.normalizers[1]"},
      {"pre_tokenizer type", [](Json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; },
       "Whitespace"},
      {"pre_tokenizer no type", [](Json& j) { j["pre_tokenizer"] = Json::object(); },
       "pre_tokenizer.type"},
      {"bad regex",
       [](Json& j) {
         j["pre_tokenizer"] = {{"type", "Split"},
                               {"pattern", {{"Regex", "(unclosed"}}},
                               {"behavior", "Isolated"}};
       },
       "pre_tokenizer.pattern"},
      {"bad behavior",
       [](Json& j) {
         j["pre_tokenizer"] = {{"type", "Split"},
                               {"pattern", {{"String", "-"}}},
                               {"behavior", "Sideways"}};
       },
       "Sideways"},
      {"no decoder", [](Json& j) { j.erase("decoder"); }, "decoder"},
      {"decoder type", [](Json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "WordPiece"},
      {"added not array", [](Json& j) { j["added_tokens"] = Json::object(); }, "added_tokens"},
      {"added no content",
       [](Json& j) { j["added_tokens"] = Json::array({{{"id", 300}, {"special", true}}}); },
       "added_tokens[0].content"},
      {"added bool type",
       [](Json& j) {
         Json t = AddedToken(300, "<x>", true);
         t["lstrip"] = "yes";
         j["added_tokens"] = Json::array({t});
       },
       "added_tokens[0].lstrip"},
  };
  for (const BadCase& c : cases) {
    Json j = MakeJson({{"a", "b"}});
    c.mutate(j);
    auto t = Tokenizer::FromJson(j.dump());
    ASSERT_FALSE(t.ok()) << c.name;
    EXPECT_EQ(t.error().code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(t.error().message().find(c.expected_in_message), std::string::npos)
        << c.name << ": " << t.error().message();
  }
  for (const std::string& text :
       std::vector<std::string>{"", "{", "[]", "null", "{\"model\": 5}", "\xFF"}) {
    auto t = Tokenizer::FromJson(text);
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_EQ(t.error().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(t.error().message().find("tokenizer.json"), std::string::npos);
  }
}

TEST(TokenizerFile, FromFileAndNotFound) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("gyre_tokenizer_test_file_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << MakeJson({{"a", "b"}}).dump();
  auto from_dir = Tokenizer::FromFile(dir.string());
  ASSERT_TRUE(from_dir.ok()) << from_dir.error().ToString();
  EXPECT_EQ(Encode(**from_dir, "ab"), (Ids{256}));
  EXPECT_TRUE(Tokenizer::FromFile((dir / "tokenizer.json").string()).ok());
  auto missing = Tokenizer::FromFile((dir / "nope.json").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------------------------------------
// tokenizer_config.json

class TokenizerConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gyre_tokenizer_config_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& text) { std::ofstream(dir_ / "tokenizer_config.json") << text; }
  std::filesystem::path dir_;
};

TEST_F(TokenizerConfigTest, ReadsFields) {
  Write(R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
            "pad_token": null, "add_bos_token": true, "chat_template": "{{ messages }}",
            "model_max_length": 1000000000000000019884624838656})");
  auto c = LoadTokenizerConfig(dir_.string());
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->bos_token, "<s>");
  EXPECT_EQ(c->eos_token, "</s>");
  EXPECT_FALSE(c->pad_token.has_value());
  EXPECT_TRUE(c->add_bos_token);
  EXPECT_EQ(c->chat_template, "{{ messages }}");
  EXPECT_EQ(c->model_max_length, INT64_MAX);
}

TEST_F(TokenizerConfigTest, TemplateListAndDefaults) {
  Write(R"({"chat_template": [{"name": "tool_use", "template": "T"},
                               {"name": "default", "template": "D"}],
            "model_max_length": 32768})");
  auto c = LoadTokenizerConfig(dir_.string());
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->chat_template, "D");
  EXPECT_EQ(c->model_max_length, 32768);
  EXPECT_FALSE(c->bos_token.has_value());
  EXPECT_FALSE(c->add_bos_token);
}

TEST_F(TokenizerConfigTest, Errors) {
  auto missing = LoadTokenizerConfig((dir_ / "absent").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), StatusCode::kNotFound);
  for (const std::string& bad : {std::string("{"), std::string(R"({"eos_token": 3})"),
                                 std::string(R"({"add_bos_token": "yes"})"),
                                 std::string(R"({"chat_template": [{"template": "x"}]})")}) {
    Write(bad);
    auto c = LoadTokenizerConfig(dir_.string());
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.error().code(), StatusCode::kInvalidArgument) << bad;
  }
  Write(R"({"eos_token": 3})");
  EXPECT_NE(LoadTokenizerConfig(dir_.string()).error().message().find("eos_token"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Concurrency: Encode is const and shares the BPE cache.

TEST(TokenizerConcurrency, ParallelEncodeMatchesSerial) {
  const Json j = MakeJson({{"t", "h"}, {"th", "e"}, {" ", "the"}, {"a", "n"}, {" ", "an"}});
  // The expected ids come from another instance, so `t` starts with an empty cache and the threads
  // below fill it concurrently: the writes its lock guards (encoding here first would leave them
  // only cache hits, and Encode without the write lock passed; tools/mutate.py bpe_cache_unlocked).
  auto t = Load(j), serial = Load(j);
  ASSERT_TRUE(t && serial);
  std::vector<std::string> texts;
  for (int i = 0; i < 512; ++i) texts.push_back("the an " + std::to_string(i * 7919) + " then w" + std::to_string(i));
  std::vector<Ids> expected;
  for (const auto& s : texts) expected.push_back(Encode(*serial, s));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      for (int rep = 0; rep < 50; ++rep) {
        for (size_t i = th; i < texts.size(); i += 1) {
          auto ids = t->Encode(texts[i]);
          if (!ids.ok() || *ids != expected[i]) ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace gyre
