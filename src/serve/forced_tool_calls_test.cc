// Forced tool calls (tool_choice "required" and named functions) over HTTP: a server over the real
// engine, a random-weight glm5_tiny model and the bundled GLM-5 chat template. Whatever the
// random model prefers, a finished answer is tool calls in GLM markup that parse into OpenAI
// tool_calls with the forced name and schema-valid arguments; the regex itself is checked on
// hand-written markup; misuse is a 400 naming tool_choice.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "serve/chat_template.h"
#include "serve/engine_server_for_tests.h"
#include "serve/glm_tool_parser.h"
#include "serve/tool_call_grammar.h"
#include "structured/regex.h"
#include "structured/schema_check_for_tests.h"

namespace gyre::serve::testing {
namespace {

// Parameters the random model can finish: enums, integers, booleans; one free string (`note`,
// optional) so raw-text values are exercised too.
const Json& Tools() {
  static const Json t = Json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo", "New York"]},
                     "days": {"type": "integer"}, "metric": {"type": "boolean"}},
      "required": ["city", "days"]}}},
    {"type": "function", "function": {"name": "set_alarm", "parameters": {"type": "object",
      "properties": {"hour": {"type": "integer"}, "note": {"type": "string"}}, "required": ["hour"]}}},
    {"type": "function", "function": {"name": "ping"}}])");
  return t;
}

const Json* ToolNamed(const std::string& name) {
  for (const Json& t : Tools()) {
    if (t["function"]["name"] == name) return &t;
  }
  return nullptr;
}

bool Matches(const std::string& re, const std::string& text) {
  auto dfa = structured::CompileRegex(re);
  EXPECT_TRUE(dfa.ok()) << dfa.error().ToString();
  if (!dfa.ok()) return false;
  int32_t s = dfa->start();
  for (unsigned char c : text) {
    s = dfa->Next(s, c);
    if (s < 0) return false;
  }
  return dfa->Accepting(s);
}

TEST(ToolCallGrammar, MatchesTheMarkupItAllowsAndNothingElse) {
  auto named = GlmToolCallsRegex(Tools(), "get_weather");
  ASSERT_TRUE(named.ok()) << named.error().ToString();
  const std::string call =
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value><arg_key>days</arg_key>"
      "<arg_value>3</arg_value></tool_call>";
  EXPECT_TRUE(Matches(*named, call));
  // GLM-4.5's newlines are allowed.
  EXPECT_TRUE(Matches(*named,
                      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days"
                      "</arg_key>\n<arg_value>-2</arg_value>\n<arg_key>metric</arg_key>\n<arg_value>true</arg_value>\n"
                      "</tool_call>\n"));
  EXPECT_FALSE(Matches(*named, call + call));  // named: one call
  EXPECT_FALSE(Matches(*named, "Sure." + call));  // nothing before it
  EXPECT_FALSE(Matches(*named, "<tool_call>get_weather<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"));
  EXPECT_FALSE(Matches(*named,  // not in the enum
                       "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value><arg_key>days"
                       "</arg_key><arg_value>3</arg_value></tool_call>"));
  EXPECT_FALSE(Matches(*named,  // days is an integer
                       "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value><arg_key>days"
                       "</arg_key><arg_value>three</arg_value></tool_call>"));
  EXPECT_FALSE(Matches(*named, "<tool_call>set_alarm<arg_key>hour</arg_key><arg_value>7</arg_value></tool_call>"));

  auto any = GlmToolCallsRegex(Tools(), "");
  ASSERT_TRUE(any.ok()) << any.error().ToString();
  const std::string alarm =
      "<tool_call>set_alarm<arg_key>hour</arg_key><arg_value>7</arg_value><arg_key>note</arg_key>"
      "<arg_value>wake <up> a < b</arg_value></tool_call>";
  EXPECT_TRUE(Matches(*any, alarm));
  EXPECT_TRUE(Matches(*any, call + alarm + "<tool_call>ping</tool_call>"));
  EXPECT_FALSE(Matches(*any, ""));  // required: at least one call
  EXPECT_FALSE(Matches(*any, "<tool_call>ping<arg_key>x</arg_key><arg_value>1</arg_value></tool_call>"));
  EXPECT_FALSE(Matches(*any,  // a raw string cannot hold "</"
                       "<tool_call>set_alarm<arg_key>hour</arg_key><arg_value>7</arg_value><arg_key>note</arg_key>"
                       "<arg_value>a</b</arg_value></tool_call>"));
  EXPECT_FALSE(Matches(*any, "<tool_call>nope</tool_call>"));

  // A schema keyword the JSON regex refuses names the parameter.
  const Json bad = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"n": {"type": "integer", "minimum": 3}}}}}])");
  auto refused = GlmToolCallsRegex(bad, "");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("tools[0].function.parameters.properties.n"), std::string::npos)
      << refused.error().message();
}

class ForcedToolCallsTest : public ::testing::Test {
 protected:
  void StartWith(bool glm_template) {
    EngineOptions eo;
    eo.max_num_seqs = 12;
    ChatRenderFn render;
    if (glm_template) {
      std::ifstream in(std::string(GYRE_SOURCE_DIR) + "/src/serve/testdata/chat_templates/glm5.jinja");
      std::stringstream ss;
      ss << in.rdbuf();
      auto t = ChatTemplate::Compile(ss.str());
      ASSERT_TRUE(t.ok()) << t.error().ToString();
      std::shared_ptr<ChatTemplate> shared = std::move(*t);
      render = [shared](const Json& ctx) { return shared->Render(ctx); };
    } else {
      render = [](const Json& ctx) -> Result<std::string> {
        std::string s;
        for (const auto& m : ctx["messages"]) s += m["content"].get<std::string>();
        return s;
      };
    }
    es_.Start(7, eo, render);
  }
  void TearDown() override { es_.Stop(); }
  Reply Post(const Json& body) { return es_.Post("/v1/chat/completions", body.dump()); }
  static Json Body(const Json& choice, int seed, bool stream) {
    return {{"model", "tiny"},   {"messages", Json::array({{{"role", "user"}, {"content", "Weather?"}}})},
            {"tools", Tools()},  {"tool_choice", choice},
            {"max_tokens", 200}, {"temperature", 1.0},
            {"seed", seed},      {"stream", stream}};
  }
  // Checks one finished call against its tool's schema; returns its name.
  static std::string CheckCall(const Json& call) {
    EXPECT_EQ(call["type"], "function");
    const std::string name = call["function"]["name"];
    const Json* tool = ToolNamed(name);
    EXPECT_NE(tool, nullptr) << name;
    const Json args = Json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
    EXPECT_TRUE(args.is_object()) << call.dump();
    if (tool && args.is_object() && tool->at("function").contains("parameters")) {
      EXPECT_TRUE(structured::testing::Validates(args, tool->at("function")["parameters"])) << call.dump();
    } else if (tool) {
      EXPECT_TRUE(args.empty()) << call.dump();
    }
    return name;
  }

  EngineServer es_;
};

TEST_F(ForcedToolCallsTest, NamedAndRequiredGiveSchemaValidCalls) {
  StartWith(true);
  constexpr int kRequests = 12;
  std::vector<Reply> replies(kRequests);
  std::vector<std::thread> threads;  // concurrent: the engine batches them
  for (int seed = 0; seed < kRequests; ++seed) {
    const Json choice = seed % 2 == 0 ? Json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}
                                      : Json("required");
    threads.emplace_back([this, &replies, choice, seed] { replies[seed] = Post(Body(choice, seed, false)); });
  }
  for (std::thread& t : threads) t.join();
  int finished = 0;
  std::set<std::string> names_seen;
  for (int seed = 0; seed < kRequests; ++seed) {
    const bool named = seed % 2 == 0;
    const Reply& r = replies[seed];
    ASSERT_EQ(r.status, 200) << r.body;
    const Json j = r.json();
    const Json& ch = j["choices"][0];
    if (ch["finish_reason"] == "length") continue;  // a free string ran out of tokens
    ++finished;
    EXPECT_EQ(ch["finish_reason"], "tool_calls") << r.body;
    const Json& calls = ch["message"]["tool_calls"];
    ASSERT_TRUE(calls.is_array() && !calls.empty()) << r.body;
    if (named) EXPECT_EQ(calls.size(), 1u) << r.body;
    for (const Json& c : calls) {
      const std::string name = CheckCall(c);
      if (named) EXPECT_EQ(name, "get_weather");
      names_seen.insert(name);
    }
    const Json& content = ch["message"]["content"];
    EXPECT_TRUE(content.is_null() || content == "") << r.body;
  }
  EXPECT_GE(finished, 8);
  EXPECT_GE(names_seen.size(), 2u);  // "required" is not secretly one tool
}

TEST_F(ForcedToolCallsTest, StreamedNamedCallArrivesAsToolCallDeltas) {
  StartWith(true);
  int finished = 0;
  std::vector<Reply> replies(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([this, &replies, i] {
      replies[i] = Post(Body(Json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}, 20 + i, true));
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Reply& r : replies) {
    ASSERT_EQ(r.status, 200) << r.body;
    std::string finish, content, args, name;
    for (const std::string& e : r.events()) {
      if (e == "[DONE]") continue;
      const Json c = Json::parse(e);
      if (c["choices"].empty()) continue;
      const Json& ch = c["choices"][0];
      if (ch["finish_reason"].is_string()) finish = ch["finish_reason"];
      const Json& d = ch["delta"];
      if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
      if (d.contains("tool_calls")) {
        for (const Json& tc : d["tool_calls"]) {
          EXPECT_EQ(tc["index"], 0);
          if (tc["function"].contains("name")) name += tc["function"]["name"].get<std::string>();
          if (tc["function"].contains("arguments")) args += tc["function"]["arguments"].get<std::string>();
        }
      }
    }
    if (finish == "length") continue;
    ++finished;
    EXPECT_EQ(finish, "tool_calls");
    EXPECT_EQ(content, "");
    EXPECT_EQ(name, "get_weather");
    const Json a = Json::parse(args, nullptr, false);
    ASSERT_TRUE(a.is_object()) << args;
    EXPECT_TRUE(structured::testing::Validates(a, ToolNamed("get_weather")->at("function")["parameters"])) << args;
  }
  EXPECT_GE(finished, 3);
}

TEST_F(ForcedToolCallsTest, MisuseIs400NamingToolChoice) {
  StartWith(true);
  Json b = Body(Json{{"type", "function"}, {"function", {{"name", "nope"}}}}, 1, false);
  Reply r = Post(b);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["param"], "tool_choice") << r.body;
  b = Body("required", 1, false);
  b["response_format"] = {{"type", "json_object"}};
  r = Post(b);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["param"], "tool_choice") << r.body;
  EXPECT_NE(r.body.find("response_format"), std::string::npos) << r.body;
}

TEST_F(ForcedToolCallsTest, ATemplateWithoutGlmMarkupRefusesForcedCalls) {
  StartWith(false);
  const Reply r = Post(Body("required", 1, false));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["param"], "tool_choice") << r.body;
  EXPECT_NE(r.body.find("markup"), std::string::npos) << r.body;
  Json b = Body("auto", 1, false);  // auto is not forced: fine with any template
  EXPECT_EQ(Post(b).status, 200);
}

}  // namespace
}  // namespace gyre::serve::testing
