// GlmToolParser and ThinkSplitter over the fixtures in testdata/tool_calls (one NAME.txt per
// model output, the expected parse in expected.json), fed at every split point, then unit cases.
#include "serve/glm_tool_parser.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "serve/reasoning_parser.h"

namespace gyre::serve {
namespace {

const std::string kDir = std::string(GYRE_SOURCE_DIR) + "/src/serve/testdata/tool_calls/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const Json& Expected() {
  static const Json j = Json::parse(ReadFile(kDir + "expected.json"));
  return j;
}

// What the reasoning split and the tool parser made of a whole output.
struct Parsed {
  std::string reasoning, content;
  Json calls = Json::array();  // [{"name", "arguments": parsed object}]
};

void Collect(const std::vector<ToolParseEvent>& events, Parsed* p) {
  for (const ToolParseEvent& e : events) {
    if (!e.is_call) {
      EXPECT_FALSE(e.content.empty());
      p->content += e.content;
      continue;
    }
    const Json args = Json::parse(e.call.arguments, nullptr, false);
    EXPECT_TRUE(args.is_object()) << e.call.arguments;
    p->calls.push_back({{"name", e.call.name}, {"arguments", args}});
  }
}

// Feeds `pieces` through ThinkSplitter → GlmToolParser, as the chat endpoint does.
Parsed ParseOutput(const std::vector<std::string_view>& pieces, bool starts_inside) {
  ThinkSplitter think(starts_inside);
  GlmToolParser tools(Expected()["tools"]);
  Parsed p;
  auto feed = [&](ThinkSplitter::Split s, bool last) {
    p.reasoning += s.reasoning;
    Collect(tools.Push(s.content), &p);
    if (last) Collect(tools.Finish(), &p);
  };
  for (std::string_view piece : pieces) feed(think.Push(piece), false);
  feed(think.Finish(), true);
  return p;
}

void ExpectCase(const Parsed& got, const Json& want, const std::string& where) {
  EXPECT_EQ(got.reasoning, want["reasoning"].get<std::string>()) << where;
  EXPECT_EQ(got.content, want["content"].get<std::string>()) << where;
  EXPECT_EQ(got.calls, want["tool_calls"]) << where;
}

TEST(GlmToolParserFixtures, EveryFixtureHasAnExpectation) {
  int n = 0;
  for (const auto& [name, want] : Expected()["cases"].items()) {
    EXPECT_FALSE(ReadFile(kDir + name + ".txt").empty()) << name;
    ++n;
  }
  EXPECT_GE(n, 10);
}

TEST(GlmToolParserFixtures, WholeOutput) {
  for (const auto& [name, want] : Expected()["cases"].items()) {
    const std::string text = ReadFile(kDir + name + ".txt");
    ExpectCase(ParseOutput({text}, want["starts_inside"]), want, name);
  }
}

TEST(GlmToolParserFixtures, EverySplitPoint) {
  for (const auto& [name, want] : Expected()["cases"].items()) {
    const std::string text = ReadFile(kDir + name + ".txt");
    const std::string_view v(text);
    for (size_t i = 0; i <= text.size(); ++i) {
      ExpectCase(ParseOutput({v.substr(0, i), v.substr(i)}, want["starts_inside"]), want, name + " split at " + std::to_string(i));
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(GlmToolParserFixtures, OneBytePerPiece) {
  for (const auto& [name, want] : Expected()["cases"].items()) {
    const std::string text = ReadFile(kDir + name + ".txt");
    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < text.size(); ++i) bytes.push_back(std::string_view(text).substr(i, 1));
    ExpectCase(ParseOutput(bytes, want["starts_inside"]), want, name + " byte by byte");
  }
}

// Three pieces, at every pair of split points, for the fixtures with two calls.
TEST(GlmToolParserFixtures, EveryPairOfSplitPoints) {
  for (const char* name : {"glm5_two_calls", "glm5_malformed_call"}) {
    const Json& want = Expected()["cases"][name];
    const std::string text = ReadFile(kDir + name + ".txt");
    const std::string_view v(text);
    for (size_t i = 0; i <= text.size(); ++i) {
      for (size_t j = i; j <= text.size(); ++j) {
        ExpectCase(ParseOutput({v.substr(0, i), v.substr(i, j - i), v.substr(j)}, want["starts_inside"]), want,
                   std::string(name) + " split at " + std::to_string(i) + "," + std::to_string(j));
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// ---- GlmToolParser ----------------------------------------------------------------------------

std::vector<ToolParseEvent> PushAll(GlmToolParser& p, std::string_view text) {
  std::vector<ToolParseEvent> out = p.Push(text);
  for (auto& e : p.Finish()) out.push_back(std::move(e));
  return out;
}

TEST(GlmToolParser, WithoutSchemasJsonValuesStayJsonAndTheRestIsText) {
  GlmToolParser p;
  ParsedToolCall c;
  ASSERT_TRUE(p.ParseCall("f<arg_key>n</arg_key><arg_value>1.5</arg_value><arg_key>b</arg_key><arg_value>false"
                          "</arg_value><arg_key>o</arg_key><arg_value>{\"k\": [1]}</arg_value><arg_key>s</arg_key>"
                          "<arg_value>hello world</arg_value><arg_key>q</arg_key><arg_value>\"quoted\"</arg_value>"
                          "<arg_key>z</arg_key><arg_value>null</arg_value>",
                          &c));
  EXPECT_EQ(c.name, "f");
  EXPECT_EQ(Json::parse(c.arguments),
            Json::parse(R"({"n": 1.5, "b": false, "o": {"k": [1]}, "s": "hello world", "q": "\"quoted\"", "z": "null"})"));
}

TEST(GlmToolParser, ArgumentsKeepTheModelsOrder) {
  GlmToolParser p;
  ParsedToolCall c;
  ASSERT_TRUE(p.ParseCall("f<arg_key>z</arg_key><arg_value>1</arg_value><arg_key>a</arg_key><arg_value>2</arg_value>", &c));
  EXPECT_EQ(c.arguments, R"({"z":1,"a":2})");
}

TEST(GlmToolParser, MalformedBodiesAreRefused) {
  GlmToolParser p;
  ParsedToolCall c;
  EXPECT_FALSE(p.ParseCall("", &c));
  EXPECT_FALSE(p.ParseCall("  \n", &c));
  EXPECT_FALSE(p.ParseCall("<arg_key>a</arg_key><arg_value>1</arg_value>", &c));  // no name
  EXPECT_FALSE(p.ParseCall("f<arg_key>a</arg_key>", &c));                          // no value
  EXPECT_FALSE(p.ParseCall("f<arg_key>a</arg_key><arg_value>1", &c));              // value not closed
  EXPECT_FALSE(p.ParseCall("f<arg_key>a</arg_key><arg_value>1</arg_value>junk", &c));
  EXPECT_FALSE(p.ParseCall("f<arg_key> </arg_key><arg_value>1</arg_value>", &c));  // empty key
  EXPECT_FALSE(p.ParseCall("f<x>", &c));
}

TEST(GlmToolParser, DeeplyNestedValueIsAString) {
  GlmToolParser p;
  ParsedToolCall c;
  const std::string deep(5000, '[');
  ASSERT_TRUE(p.ParseCall("f<arg_key>a</arg_key><arg_value>" + deep + "</arg_value>", &c));
  EXPECT_EQ(Json::parse(c.arguments)["a"], deep);
}

TEST(GlmToolParser, TextWithoutCallsIsReleasedAsSoonAsItCannotBeATag) {
  GlmToolParser p;
  auto e = p.Push("hello <tool");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].content, "hello");  // " <tool" may start a call (and its whitespace is layout)
  e = p.Push("s>");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].content, " <tools>");
  EXPECT_TRUE(p.Finish().empty());
}

TEST(GlmToolParser, CallIsReportedWhenItCloses) {
  GlmToolParser p;
  EXPECT_TRUE(p.Push("<tool_call>f<arg_key>a</arg_key><arg_value>x</arg_value>").empty());
  auto e = p.Push("</tool_call>\nafter");
  ASSERT_EQ(e.size(), 2u);
  EXPECT_TRUE(e[0].is_call);
  EXPECT_EQ(e[0].call.arguments, R"({"a":"x"})");
  EXPECT_EQ(e[1].content, "after");
}

TEST(GlmToolParser, UnclosedCallComesBackWithItsLeadingSpace) {
  GlmToolParser p;
  std::string content;
  for (const ToolParseEvent& e : PushAll(p, "ok \n<tool_call>f<arg_key>a")) {
    EXPECT_FALSE(e.is_call);
    content += e.content;
  }
  EXPECT_EQ(content, "ok \n<tool_call>f<arg_key>a");
}

// ---- ThinkSplitter ----------------------------------------------------------------------------

TEST(ThinkSplitter, PromptThatOpensThinking) {
  EXPECT_TRUE(PromptOpensThinking("[gMASK]<sop><|user|>hi<|assistant|><think>"));
  EXPECT_TRUE(PromptOpensThinking("<|assistant|><think>\n"));
  EXPECT_FALSE(PromptOpensThinking("<|assistant|></think>"));
  EXPECT_FALSE(PromptOpensThinking("<|assistant|>\n<think></think>"));
  EXPECT_FALSE(PromptOpensThinking(""));
}

TEST(ThinkSplitter, CloseTagWithoutOpeningIsContentWhenThePromptDidNotOpenIt) {
  ThinkSplitter s(false);
  ThinkSplitter::Split a = s.Push("text</think>more");
  ThinkSplitter::Split b = s.Finish();
  EXPECT_EQ(a.reasoning + b.reasoning, "");
  EXPECT_EQ(a.content + b.content, "text</think>more");
}

TEST(ThinkSplitter, ReasoningStreamsBeforeTheBlockCloses) {
  ThinkSplitter s(true);
  EXPECT_EQ(s.Push("step one, ").reasoning, "step one,");  // the space may precede </think>
  EXPECT_EQ(s.Push("step two").reasoning, " step two");
  ThinkSplitter::Split d = s.Push("</think>\n\nAnswer");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Answer");
}

TEST(ThinkSplitter, OpeningRepeatedAfterThePromptOpenedTheBlockIsDropped) {
  ThinkSplitter s(true);
  ThinkSplitter::Split a = s.Push("\n<thi");
  ThinkSplitter::Split b = s.Push("nk>plan</think>answer");
  EXPECT_EQ(a.reasoning + b.reasoning, "plan");
  EXPECT_EQ(a.content + b.content, "answer");
  ThinkSplitter cut(true);
  EXPECT_EQ(cut.Push("<thin").reasoning, "");
  EXPECT_EQ(cut.Finish().reasoning, "<thin");  // cut off: reasoning, not lost
}

TEST(ThinkSplitter, EmptyOutput) {
  ThinkSplitter s(false);
  ThinkSplitter::Split d = s.Finish();
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "");
}

}  // namespace
}  // namespace gyre::serve
