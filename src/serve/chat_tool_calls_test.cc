// Tool calls and reasoning through the chat endpoint: the FakeEngine "says" GLM markup (the
// bundled GLM-5 template renders the prompt) and the HTTP answers are checked, streamed and not.
#include <gtest/gtest.h>

#include "serve/server_test_fixture.h"

namespace gyre::serve::testing {
namespace {

const char* kCallOutput =
    "The user wants Paris weather.</think>Let me check."
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
    "<arg_value>3</arg_value></tool_call>";

const Json& Tools() {
  static const Json t = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather for a city", "parameters": {"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}])");
  return t;
}

class ChatToolCallsTest : public ServerTest {
 protected:
  // Starts a server whose fake model says `text` once, then EOS; chats render with glm5.jinja.
  void StartSaying(const std::string& text) {
    UseGlmTemplate();
    FakeEngineOptions eo;
    eo.script = *tok_->Encode(text, /*parse_special=*/true);
    eo.script.push_back(1014);  // <|endoftext|>: the answer ends with "stop"
    Start(eo);
  }
  static Json ToolChat(Json extra = Json::object()) {
    Json b = Chat({{"tools", Tools()}, {"max_tokens", 500}});
    for (auto& [k, v] : extra.items()) b[k] = v;
    return b;
  }
  // The streamed answer: deltas concatenated per kind, the tool call deltas, the finish reason.
  struct Streamed {
    std::string reasoning, content, finish_reason;
    Json tool_call_deltas = Json::array();
  };
  Streamed Stream(Json body) {
    body["stream"] = true;
    const Reply r = Post("/v1/chat/completions", body);
    EXPECT_EQ(r.status, 200) << r.body;
    Streamed s;
    for (const std::string& ev : r.events()) {
      if (ev == "[DONE]") continue;
      const Json c = Json::parse(ev);
      const Json& choice = c["choices"][0];
      const Json& d = choice["delta"];
      if (d.contains("reasoning_content")) s.reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("content")) s.content += d["content"].get<std::string>();
      if (d.contains("tool_calls")) {
        for (const Json& tc : d["tool_calls"]) s.tool_call_deltas.push_back(tc);
      }
      if (!choice["finish_reason"].is_null()) s.finish_reason = choice["finish_reason"];
    }
    return s;
  }
};

TEST_F(ChatToolCallsTest, NonStreamedAnswerCarriesToolCalls) {
  StartSaying(kCallOutput);
  const Reply r = Post("/v1/chat/completions", ToolChat());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json choice = r.json()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  const Json& m = choice["message"];
  EXPECT_EQ(m["content"], "Let me check.");
  EXPECT_EQ(m["reasoning_content"], "The user wants Paris weather.");
  ASSERT_EQ(m["tool_calls"].size(), 1u) << r.body;
  const Json& call = m["tool_calls"][0];
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_GT(call["id"].get<std::string>().size(), 5u + 8u);
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  ASSERT_TRUE(call["function"]["arguments"].is_string());
  EXPECT_EQ(Json::parse(call["function"]["arguments"].get<std::string>()), (Json{{"city", "Paris"}, {"days", 3}}));
}

TEST_F(ChatToolCallsTest, StreamedAnswerSendsToolCallDeltas) {
  StartSaying(kCallOutput);
  const Streamed s = Stream(ToolChat());
  EXPECT_EQ(s.reasoning, "The user wants Paris weather.");
  EXPECT_EQ(s.content, "Let me check.");
  EXPECT_EQ(s.finish_reason, "tool_calls");
  ASSERT_EQ(s.tool_call_deltas.size(), 1u);
  const Json& d = s.tool_call_deltas[0];
  EXPECT_EQ(d["index"], 0);
  EXPECT_EQ(d["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(d["type"], "function");
  EXPECT_EQ(d["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(d["function"]["arguments"].get<std::string>()), (Json{{"city", "Paris"}, {"days", 3}}));
}

TEST_F(ChatToolCallsTest, TwoCallsAreIndexedWithTheirOwnIds) {
  StartSaying("</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"
              "<tool_call>get_weather<arg_key>city</arg_key><arg_value>東京</arg_value></tool_call>");
  const Streamed s = Stream(ToolChat());
  ASSERT_EQ(s.tool_call_deltas.size(), 2u);
  EXPECT_EQ(s.tool_call_deltas[0]["index"], 0);
  EXPECT_EQ(s.tool_call_deltas[1]["index"], 1);
  EXPECT_NE(s.tool_call_deltas[0]["id"], s.tool_call_deltas[1]["id"]);
  EXPECT_EQ(Json::parse(s.tool_call_deltas[1]["function"]["arguments"].get<std::string>())["city"], "東京");
  EXPECT_EQ(s.content, "");
  EXPECT_EQ(s.reasoning, "");
  const Reply r = Post("/v1/chat/completions", ToolChat());
  const Json m = r.json()["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null()) << r.body;
  EXPECT_FALSE(m.contains("reasoning_content"));
  EXPECT_EQ(m["tool_calls"].size(), 2u);
}

TEST_F(ChatToolCallsTest, CallCutByMaxTokensIsContentAndFinishesWithLength) {
  const std::string out = "</think>Sure.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>";
  StartSaying(out);
  const int n = static_cast<int>(tok_->Encode(out, true)->size());
  Json body = ToolChat({{"max_tokens", n}});
  const Reply r = Post("/v1/chat/completions", body);
  const Json choice = r.json()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
  EXPECT_EQ(choice["message"]["content"], "Sure.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>");
  const Streamed s = Stream(body);
  EXPECT_EQ(s.content, "Sure.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>");
  EXPECT_TRUE(s.tool_call_deltas.empty());
  EXPECT_EQ(s.finish_reason, "length");
}

TEST_F(ChatToolCallsTest, WithoutToolsOrWithToolChoiceNoneTheMarkupIsContent) {
  StartSaying(kCallOutput);
  for (const Json& body : {Chat({{"max_tokens", 500}}), ToolChat({{"tool_choice", "none"}})}) {
    const Reply r = Post("/v1/chat/completions", body);
    const Json choice = r.json()["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "stop") << r.body;
    EXPECT_FALSE(choice["message"].contains("tool_calls"));
    EXPECT_EQ(choice["message"]["reasoning_content"], "The user wants Paris weather.");
    EXPECT_NE(choice["message"]["content"].get<std::string>().find("<tool_call>get_weather<arg_key>city"),
              std::string::npos);
  }
}

TEST_F(ChatToolCallsTest, ThinkingOffMeansNoReasoningSplit) {
  StartSaying("<think>plan</think>answer");
  const Reply on = Post("/v1/chat/completions", Chat({{"max_tokens", 100}}));
  EXPECT_EQ(on.json()["choices"][0]["message"]["reasoning_content"], "plan") << on.body;
  EXPECT_EQ(on.json()["choices"][0]["message"]["content"], "answer");
  const Json off_body = Chat({{"max_tokens", 100}, {"chat_template_kwargs", {{"enable_thinking", false}}}});
  const Reply off = Post("/v1/chat/completions", off_body);
  const Json m = off.json()["choices"][0]["message"];
  EXPECT_FALSE(m.contains("reasoning_content")) << off.body;
  EXPECT_EQ(m["content"], "plananswer");  // <think> and </think> are special tokens: skipped as text
  const Streamed s = Stream(off_body);
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "plananswer");
}

TEST_F(ChatToolCallsTest, StreamedReasoningArrivesBeforeTheContent) {
  StartSaying("step one, step two</think>\nThe answer.");
  Json body = Chat({{"max_tokens", 100}, {"stream", true}});
  const Reply r = Post("/v1/chat/completions", body);
  std::vector<std::string> kinds;
  for (const std::string& ev : r.events()) {
    if (ev == "[DONE]") continue;
    const Json d = Json::parse(ev)["choices"][0]["delta"];
    if (d.contains("reasoning_content")) kinds.push_back("r");
    if (d.contains("content") && !d["content"].get<std::string>().empty()) kinds.push_back("c");
  }
  ASSERT_GE(kinds.size(), 3u) << r.body;  // reasoning streams token by token
  EXPECT_EQ(kinds.front(), "r");
  EXPECT_EQ(kinds.back(), "c");
  EXPECT_TRUE(std::is_sorted(kinds.begin(), kinds.end(), [](auto& a, auto& b) { return a == "r" && b == "c"; }));
  const Streamed s = Stream(body);
  EXPECT_EQ(s.reasoning, "step one, step two");
  EXPECT_EQ(s.content, "The answer.");
}

// The fake engine ignores constraints (forced_tool_calls_test runs the real one): here, that
// "required" and a named function reach the engine as a constraint and "auto" does not.
TEST_F(ChatToolCallsTest, RequiredAndNamedToolChoiceReachTheEngineAsAConstraint) {
  StartSaying(kCallOutput);
  const Json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  for (const Json& choice : {Json("required"), named, Json("auto")}) {
    const Reply r = Post("/v1/chat/completions", ToolChat({{"tool_choice", choice}}));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(engine_->submitted().back().constraint != nullptr, choice != "auto") << choice.dump();
  }
}

TEST_F(ChatToolCallsTest, ToolHistoryRendersThroughTheTemplate) {
  StartSaying("</think>It is sunny in Paris.");
  const Json messages = Json::parse(R"([
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 3}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])");
  const Reply r = Post("/v1/chat/completions", ToolChat({{"messages", messages}}));
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(engine_->submitted().size(), 1u);
  const std::string prompt = *tok_->Decode(engine_->submitted()[0].prompt);
  EXPECT_NE(prompt.find("<|assistant|></think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris"
                        "</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"
                        "<|observation|><tool_response>sunny</tool_response><|assistant|><think>"),
            std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find(R"("name": "get_weather")"), std::string::npos) << prompt;  // the tools section
  EXPECT_EQ(r.json()["choices"][0]["message"]["content"], "It is sunny in Paris.");
  EXPECT_EQ(r.json()["choices"][0]["finish_reason"], "stop");
}

}  // namespace
}  // namespace gyre::serve::testing
