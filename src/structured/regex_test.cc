// The regex compiler against std::regex (ECMAScript, whole-string match) on random patterns and
// random strings, plus the refusals.
#include "structured/regex.h"

#include <gtest/gtest.h>

#include <random>
#include <regex>

namespace gyre::structured {
namespace {

TEST(Regex, BasicMatches) {
  struct Case {
    const char* re;
    std::vector<const char*> yes, no;
  };
  const std::vector<Case> cases = {
      {"abc", {"abc"}, {"", "ab", "abcd"}},
      {"a|bc", {"a", "bc"}, {"", "abc", "b"}},
      {"(ab)*c?", {"", "ab", "ababc", "c"}, {"a", "abca"}},
      {"[a-c]{2,3}", {"ab", "cca"}, {"a", "abca", "ad"}},
      {"x{3}", {"xxx"}, {"xx", "xxxx"}},
      {"x{2,}", {"xx", "xxxxx"}, {"x"}},
      {"\\d+(\\.\\d+)?", {"1", "12.5"}, {"1.", ".5", "a"}},
      {"[^a]", {"b", "é", "\xE2\x82\xAC"}, {"a", "", "bb", "\xC3"}},
      {".", {"é", "z"}, {"\n", "\xFF", "\xC0\x80"}},
      {"^héllo$", {"héllo"}, {"hello"}},
      {"\\u00e9", {"é"}, {"e"}},
      {"(?:a|b)+", {"abba"}, {""}},
      {"\\w\\s\\W", {"a  ", "_\t-"}, {"ab-"}},
  };
  for (const Case& c : cases) {
    auto dfa = CompileRegex(c.re);
    ASSERT_TRUE(dfa.ok()) << c.re << ": " << dfa.status().ToString();
    for (const char* s : c.yes) EXPECT_TRUE(dfa->Matches(s)) << c.re << " should match " << s;
    for (const char* s : c.no) EXPECT_FALSE(dfa->Matches(s)) << c.re << " should not match " << s;
  }
}

TEST(Regex, RefusesWhatItDoesNotSupport) {
  const std::vector<std::pair<const char*, const char*>> bad = {
      {"a*?", "lazy"},       {"(?=a)", "lookaround"},  {"(a)\\1", "back references"},
      {"a^b", "anchors"},    {"[é]", "non-ASCII"},     {"\\bx", "\\b"},
      {"a{1001}", "1000"},   {"(a", "missing ')'"},    {"a)", "unbalanced"},
      {"[b-a]", "reversed"}, {"*a", "nothing to repeat"},
  };
  for (const auto& [re, word] : bad) {
    auto r = CompileRegex(re);
    ASSERT_FALSE(r.ok()) << re;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(word), std::string::npos) << re << ": " << r.status().message();
  }
  auto big = CompileRegex("(a|b)*a(a|b){14}", 1000);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("states"), std::string::npos);
}

TEST(Regex, TrimmedStatesCanAlwaysComplete) {
  auto dfa = CompileRegex("(ab|ac)d");
  ASSERT_TRUE(dfa.ok());
  // After "a", both 'b' and 'c' are live; 'd' is dead (no completion).
  const int32_t a = dfa->Next(dfa->start(), 'a');
  EXPECT_NE(dfa->Next(a, 'b'), ByteDfa::kDead);
  EXPECT_EQ(dfa->Next(a, 'd'), ByteDfa::kDead);
  const int32_t end = dfa->Walk(dfa->start(), reinterpret_cast<const uint8_t*>("abd"), 3);
  EXPECT_TRUE(dfa->Accepting(end));
  EXPECT_FALSE(dfa->HasExit(end));
}

// Random patterns over {a, b, c} and random strings: the DFA agrees with std::regex.
std::string RandomRegex(std::mt19937_64& rng, int depth) {
  const int k = static_cast<int>(rng() % (depth > 2 ? 3 : 8));
  switch (k) {
    case 0: return std::string(1, "abc"[rng() % 3]);
    case 1: return "[" + std::string(1, "ab"[rng() % 2]) + "-c]";
    case 2: return std::string(1, "abc"[rng() % 3]) + std::string(1, "abc"[rng() % 3]);
    case 3: return "(" + RandomRegex(rng, depth + 1) + "|" + RandomRegex(rng, depth + 1) + ")";
    case 4: return RandomRegex(rng, depth + 1) + RandomRegex(rng, depth + 1);
    case 5: return "(" + RandomRegex(rng, depth + 1) + ")" + std::string(1, "*+?"[rng() % 3]);
    case 6: {
      const int lo = static_cast<int>(rng() % 3), hi = lo + static_cast<int>(rng() % 3);
      return "(" + RandomRegex(rng, depth + 1) + "){" + std::to_string(lo) + "," + std::to_string(hi) + "}";
    }
    default: return "[^" + std::string(1, "abc"[rng() % 3]) + "]";
  }
}

TEST(Regex, AgreesWithStdRegexOnRandomPatterns) {
  std::mt19937_64 rng(20261203);
  int matched = 0, total = 0;
  for (int t = 0; t < 300; ++t) {
    const std::string re = RandomRegex(rng, 0);
    auto dfa = CompileRegex(re);
    ASSERT_TRUE(dfa.ok()) << re << ": " << dfa.status().ToString();
    const std::regex ref(re, std::regex::ECMAScript);
    for (int s = 0; s < 60; ++s) {
      std::string str;
      const int len = static_cast<int>(rng() % 7);
      for (int i = 0; i < len; ++i) str += "abcd"[rng() % 4];
      const bool want = std::regex_match(str, ref);
      EXPECT_EQ(dfa->Matches(str), want) << "pattern " << re << " string '" << str << "'";
      matched += want;
      ++total;
    }
  }
  EXPECT_GT(matched, total / 20);  // the comparison is not vacuous
}

TEST(Regex, QuoteMatchesTheTextOnly) {
  const std::string text = "a.b*c(d)[e]{f}|g\\h/i-j^$+?\n\x01";
  auto dfa = CompileRegex(RegexQuote(text));
  ASSERT_TRUE(dfa.ok()) << dfa.status().ToString();
  EXPECT_TRUE(dfa->Matches(text));
  EXPECT_FALSE(dfa->Matches("a.b*c(d)[e]{f}|g\\h/i-j^$+?\n"));
}

}  // namespace
}  // namespace gyre::structured
