#include "serve/openai_output.h"

#include <gtest/gtest.h>

namespace gyre::serve {
namespace {

// Feeds `pieces` and returns the concatenated released text, and whether a stop matched.
std::pair<std::string, bool> Feed(const std::vector<std::string>& stops, const std::vector<std::string>& pieces,
                                  bool include_stop = false) {
  StopMatcher m(stops, include_stop);
  std::string out;
  for (const auto& p : pieces) {
    auto r = m.Push(p);
    out += r.text;
    if (r.stopped) return {out, true};
  }
  return {out + m.Flush(), false};
}

TEST(StopMatcher, NoStopsReleasesEverythingAtOnce) {
  StopMatcher m({});
  EXPECT_EQ(m.Push("abc").text, "abc");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcher, MatchInsideOnePiece) {
  EXPECT_EQ(Feed({"END"}, {"helloENDworld"}), (std::pair<std::string, bool>{"hello", true}));
}

TEST(StopMatcher, MatchAcrossPieceBoundaries) {
  EXPECT_EQ(Feed({"END"}, {"hel", "loE", "N", "Dafter"}), (std::pair<std::string, bool>{"hello", true}));
  EXPECT_EQ(Feed({"\n\n"}, {"a\n", "\nb"}), (std::pair<std::string, bool>{"a", true}));
}

TEST(StopMatcher, HoldsOnlyAPossiblePrefix) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.Push("abcE").text, "abc");  // "E" might start END
  EXPECT_EQ(m.Push("x").text, "Ex");      // it did not
  EXPECT_EQ(m.Push("EN").text, "");
  EXPECT_EQ(m.Push("d").text, "ENd");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, FalseStartThenRealMatch) {
  // "EEND": the first E is a false start, the match begins at the second.
  EXPECT_EQ(Feed({"END"}, {"xE", "EN", "D"}), (std::pair<std::string, bool>{"xE", true}));
}

TEST(StopMatcher, EarliestOfSeveralStops) {
  EXPECT_EQ(Feed({"world", "lo"}, {"hello world"}), (std::pair<std::string, bool>{"hel", true}));
  // "abc" starts at 0, before the "b" at 1.
  EXPECT_EQ(Feed({"abc", "b"}, {"a", "bc"}), (std::pair<std::string, bool>{"", true}));
  EXPECT_EQ(Feed({"abd", "b"}, {"a", "bc"}), (std::pair<std::string, bool>{"a", true}));
}

TEST(StopMatcher, IncludeStopKeepsTheMatch) {
  EXPECT_EQ(Feed({"END"}, {"hel", "loE", "N", "Dafter"}, true), (std::pair<std::string, bool>{"helloEND", true}));
  // Of the stops found at the earliest position, the longest is kept.
  EXPECT_EQ(Feed({"a", "ab"}, {"xabc"}, true), (std::pair<std::string, bool>{"xab", true}));
  EXPECT_EQ(Feed({"a", "ab"}, {"xabc"}, false), (std::pair<std::string, bool>{"x", true}));
}

TEST(StopMatcher, UnmatchedTailIsFlushed) {
  EXPECT_EQ(Feed({"END"}, {"abc", "EN"}), (std::pair<std::string, bool>{"abcEN", false}));
}

TEST(StopMatcher, UnarmedTextNeverMatches) {
  // min_tokens: a stop complete in text pushed before arming does not end the output.
  StopMatcher m({"END"});
  auto r = m.Push("aENDb", /*may_stop=*/false);
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.text, "aENDb");
  r = m.Push("cEND", /*may_stop=*/true);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "c");
}

TEST(StopMatcher, StopStartedUnarmedMayCompleteArmed) {
  // vLLM checks the stop strings that end in the new text, so one begun before min_tokens counts.
  StopMatcher m({"END"});
  auto r = m.Push("xEN", /*may_stop=*/false);
  EXPECT_EQ(r.text, "x");  // "EN" is held: it may start END
  r = m.Push("D!", /*may_stop=*/true);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
}

TEST(StopMatcher, HeldFullStopFromUnarmedTextDoesNotMatchLater) {
  // "ab" arrives unarmed and is held (a prefix of "abc"); when armed text follows, the complete
  // "ab" ends in unarmed text and must not match, while "abc" still can.
  {
    StopMatcher m({"ab", "abc"});
    EXPECT_EQ(m.Push("ab", false).text, "");
    auto r = m.Push("x", true);
    EXPECT_FALSE(r.stopped);
    EXPECT_EQ(r.text, "abx");
  }
  {
    StopMatcher m({"ab", "abc"}, /*include_stop=*/true);
    EXPECT_EQ(m.Push("ab", false).text, "");
    auto r = m.Push("c", true);
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.text, "abc");
  }
}

TEST(StopMatcher, MultibyteStop) {
  EXPECT_EQ(Feed({"é!"}, {"caf\xC3\xA9", "!x"}), (std::pair<std::string, bool>{"caf", true}));
}

TEST(LossyUtf8, ReplacesInvalidBytes) {
  EXPECT_EQ(LossyUtf8("abc"), "abc");
  EXPECT_EQ(LossyUtf8("\xC3\xA9"), "\xC3\xA9");
  EXPECT_EQ(LossyUtf8("\xC3"), "\xEF\xBF\xBD");
  EXPECT_EQ(LossyUtf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(LossyUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
}

class TextOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = Tokenizer::FromFile(std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/glm5_tiny");
    ASSERT_TRUE(t.ok()) << t.error().ToString();
    tok_ = std::move(*t);
  }
  std::vector<int32_t> Encode(const std::string& s) { return *tok_->Encode(s); }
  static TokenEvent Ev(int32_t id, float lp = -0.5f, std::vector<std::pair<int32_t, float>> top = {}) {
    TokenEvent e;
    e.id = id;
    e.logprob = lp;
    e.top = std::move(top);
    return e;
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(TextOutputTest, StreamsTheDecodedText) {
  TextOutput out(*tok_, OutputOptions{});
  std::string streamed;
  const auto ids = Encode("Hello world, this is a test.");
  for (int32_t id : ids) streamed += out.OnToken(Ev(id)).text;
  streamed += out.Finish().text;
  EXPECT_EQ(streamed, "Hello world, this is a test.");
  EXPECT_EQ(out.text(), streamed);
  EXPECT_EQ(out.num_tokens(), static_cast<int64_t>(ids.size()));
  EXPECT_TRUE(out.logprobs().is_null());
}

TEST_F(TextOutputTest, NeverSplitsAUtf8Character) {
  const auto ids = Encode("\xC3\xA9");  // é is two byte-level tokens in this vocab
  ASSERT_EQ(ids.size(), 2u);
  TextOutput out(*tok_, OutputOptions{});
  EXPECT_EQ(out.OnToken(Ev(ids[0])).text, "");
  EXPECT_EQ(out.OnToken(Ev(ids[1])).text, "\xC3\xA9");
}

TEST_F(TextOutputTest, StopSequenceAcrossTokens) {
  OutputOptions o;
  o.stop = {"is a"};
  TextOutput out(*tok_, o);
  std::string streamed;
  bool stopped = false;
  for (int32_t id : Encode("Hello world, this is a test.")) {
    auto d = out.OnToken(Ev(id));
    streamed += d.text;
    if (d.stopped) {
      stopped = true;
      break;
    }
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(streamed, "Hello world, this ");
  EXPECT_EQ(out.text(), "Hello world, this ");
}

TEST_F(TextOutputTest, SpecialTokensAreSkippedButCounted) {
  TextOutput out(*tok_, OutputOptions{});
  std::string s;
  for (int32_t id : Encode("Hi")) s += out.OnToken(Ev(id)).text;
  s += out.OnToken(Ev(1014)).text;  // <|endoftext|>
  s += out.Finish().text;
  EXPECT_EQ(s, "Hi");
  EXPECT_EQ(out.num_tokens(), static_cast<int64_t>(Encode("Hi").size()) + 1);
  OutputOptions keep;
  keep.skip_special = false;
  TextOutput raw(*tok_, keep);
  EXPECT_EQ(raw.OnToken(Ev(1014)).text, "<|endoftext|>");
}

TEST_F(TextOutputTest, ChatLogprobs) {
  OutputOptions o;
  o.logprobs = true;
  o.top_logprobs = 2;
  TextOutput out(*tok_, o);
  const auto ids = Encode("Hello");
  auto d = out.OnToken(Ev(ids[0], -0.25f, {{ids[0], -0.25f}, {1014, -2.0f}}));
  ASSERT_TRUE(d.logprobs.contains("content"));
  const Json& e = d.logprobs["content"][0];
  EXPECT_EQ(e["token"], tok_->TokenBytes(ids[0]));
  EXPECT_FLOAT_EQ(e["logprob"].get<float>(), -0.25f);
  ASSERT_TRUE(e["bytes"].is_array());
  EXPECT_EQ(e["bytes"].size(), tok_->TokenBytes(ids[0]).size());
  ASSERT_EQ(e["top_logprobs"].size(), 2u);
  EXPECT_EQ(e["top_logprobs"][1]["token"], "<|endoftext|>");
  EXPECT_EQ(out.logprobs()["content"].size(), 1u);
}

TEST_F(TextOutputTest, LegacyLogprobsWithOffsets) {
  OutputOptions o;
  o.chat = false;
  o.logprobs = true;
  o.top_logprobs = 1;
  TextOutput out(*tok_, o);
  const auto ids = Encode("Hello world");
  for (int32_t id : ids) out.OnToken(Ev(id, -1.0f, {{id, -1.0f}}));
  const Json& lp = out.logprobs();
  ASSERT_EQ(lp["tokens"].size(), ids.size());
  EXPECT_EQ(lp["token_logprobs"].size(), ids.size());
  EXPECT_EQ(lp["top_logprobs"].size(), ids.size());
  EXPECT_EQ(lp["text_offset"][0], 0);
  EXPECT_EQ(lp["text_offset"][1], tok_->TokenBytes(ids[0]).size());
  EXPECT_TRUE(lp["top_logprobs"][0].is_object());
  std::string joined;
  for (const auto& t : lp["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(joined, "Hello world");
}

}  // namespace
}  // namespace gyre::serve
