// Tests for the UTF-8 helpers, the byte-level alphabet and the Oniguruma -> PCRE2 translation.
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace gyre::tok {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8Lossy, MatchesRustFromUtf8Lossy) {
  // Expected values follow Rust's String::from_utf8_lossy (one U+FFFD per maximal subpart).
  EXPECT_EQ(Utf8Lossy("plain"), "plain");
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");  // 😀
  EXPECT_EQ(Utf8Lossy("\xE4\xBD"), kFffd);                         // truncated at the end
  EXPECT_EQ(Utf8Lossy("\xE4\xBDx"), kFffd + "x");                  // truncated in the middle
  EXPECT_EQ(Utf8Lossy("\xC0\x80"), kFffd + kFffd);                 // overlong lead
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);     // surrogate
  EXPECT_EQ(Utf8Lossy("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x98"), kFffd);
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x98" "a\x80"), kFffd + "a" + kFffd);
  EXPECT_EQ(Utf8Lossy("\xFF\xFE"), kFffd + kFffd);
  EXPECT_EQ(Utf8Lossy(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(Utf8, Validation) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9llo \xE4\xBD\xA0 \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC3"));
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC1\xBF"));
  EXPECT_FALSE(IsValidUtf8("\x80"));
}

TEST(Utf8, IncompleteTail) {
  EXPECT_EQ(IncompleteUtf8Tail(""), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("abc"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xF0"), 1u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xF0\x9F"), 2u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("a\x80"), 0u);      // stray continuation: emit as U+FFFD now
  EXPECT_EQ(IncompleteUtf8Tail("a\xE0\x80"), 0u);  // can never become valid
}

TEST(ByteLevel, MatchesGpt2BytesToUnicode) {
  EXPECT_EQ(ByteToChar('!'), U'!');
  EXPECT_EQ(ByteToChar('~'), U'~');
  EXPECT_EQ(ByteToChar(0x00), 0x100u);
  EXPECT_EQ(ByteToChar(' '), 0x120u);  // 'Ġ'
  EXPECT_EQ(ByteToChar('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(ByteToChar(0x7F), 0x121u);
  EXPECT_EQ(ByteToChar(0xAD), 0x143u);  // the last of the 68 remapped bytes
  EXPECT_EQ(ByteToChar(0xA1), 0xA1u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(CharToByte(ByteToChar(static_cast<unsigned char>(b))), b);
  EXPECT_EQ(CharToByte(U'Ā' + 200), -1);
}

TEST(ByteLevel, DecodeTokenFallsBackToRawContent) {
  EXPECT_EQ(ByteLevelDecodeToken("\xC4\xA0hello"), " hello");    // "Ġhello"
  EXPECT_EQ(ByteLevelDecodeToken("<|im_end|>"), "<|im_end|>");
  EXPECT_EQ(ByteLevelDecodeToken("<|im_end|>\n"), "<|im_end|>\n");  // '\n' is not in the alphabet
  EXPECT_EQ(ByteLevelDecodeToken("\xE4\xBD\xA0"), "\xE4\xBD\xA0");  // '你' is not either
}

std::vector<MatchRange> Matches(std::string_view pattern, std::string_view text) {
  auto re = Regex::Compile(pattern);
  EXPECT_TRUE(re.ok()) << pattern << ": " << re.error().ToString();
  std::vector<MatchRange> m;
  if (re.ok()) EXPECT_TRUE((*re)->FindAll(text, &m).ok());
  return m;
}

// Expected values were measured with HF tokenizers (Oniguruma) on the same patterns.
TEST(Regex, FollowsOnigClassSemantics) {
  // \s: U+0085 is whitespace, U+180E is not (PCRE2 has it the other way round).
  EXPECT_EQ(Matches(R"(\s+)", "a\xC2\x85" "b"), (std::vector<MatchRange>{{1, 3}}));
  EXPECT_EQ(Matches(R"(\s+)", "a\xE1\xA0\x8E" "b"), (std::vector<MatchRange>{}));
  EXPECT_EQ(Matches(R"(\S+)", "\xE1\xA0\x8E"), (std::vector<MatchRange>{{0, 3}}));
  EXPECT_EQ(Matches(R"([^\s]+)", "a\xC2\x85"), (std::vector<MatchRange>{{0, 1}}));
  // \w takes marks and every number; inside a class it leaves out Other_Number ("²").
  EXPECT_EQ(Matches(R"(\w+)", "e\xCC\x81\xC2\xB2"), (std::vector<MatchRange>{{0, 5}}));
  EXPECT_EQ(Matches(R"([^\w\s]+)", "=\xC2\xB2;"), (std::vector<MatchRange>{{0, 4}}));
  // Escaped backslashes and a leading ']' in a class are not mistaken for escapes.
  EXPECT_EQ(Matches(R"(\\s)", "\\s s"), (std::vector<MatchRange>{{0, 2}}));
  EXPECT_EQ(Matches(R"([]s]+)", "a]s"), (std::vector<MatchRange>{{1, 3}}));
  // Ruby anchors are line anchors.
  EXPECT_EQ(Matches(R"(^x)", "x\nx"), (std::vector<MatchRange>{{0, 1}, {2, 3}}));
}

TEST(Regex, FindAllIteratesLikeOnig) {
  auto re = Regex::Compile("a*");
  ASSERT_TRUE(re.ok()) << re.error().ToString();
  std::vector<MatchRange> m;
  ASSERT_TRUE((*re)->FindAll("baab", &m).ok());
  // onig: (0,0), then "aa" at (1,3), no empty match at 3 right after it, then (4,4).
  EXPECT_EQ(m, (std::vector<MatchRange>{{0, 0}, {1, 3}, {4, 4}}));

  auto nel = Regex::Compile(R"(\s+)");
  ASSERT_TRUE(nel.ok());
  ASSERT_TRUE((*nel)->FindAll("a\xC2\x85" "b", &m).ok());
  EXPECT_EQ(m, (std::vector<MatchRange>{{1, 3}}));

  EXPECT_FALSE(Regex::Compile("(").ok());
}

}  // namespace
}  // namespace gyre::tok
