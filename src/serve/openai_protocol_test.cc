#include "serve/openai_protocol.h"

#include <gtest/gtest.h>

namespace gyre::serve {
namespace {

// The field named by a parse error (as ApiError reports it).
template <typename R>
std::string ErrorParam(const R& r) {
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "<ok>";
  EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument) << r.error().ToString();
  return ApiError::FromStatus(r.error()).param;
}

TEST(ParseChat, Minimal) {
  auto r = ParseChatRequest(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->gen.model, "m");
  EXPECT_FALSE(r->gen.stream);
  EXPECT_FALSE(r->gen.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r->gen.temperature, 1.0f);
  EXPECT_EQ(r->messages.size(), 1u);
  EXPECT_TRUE(r->add_generation_prompt);
  EXPECT_TRUE(r->tools.is_null());
  EXPECT_TRUE(r->chat_template_kwargs.is_object());
}

TEST(ParseChat, AllSamplingFields) {
  auto r = ParseChatRequest(R"({"messages": [{"role": "user", "content": "hi"}], "stream": true,
      "stream_options": {"include_usage": true}, "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9,
      "top_k": 40, "min_p": 0.05, "seed": 123, "stop": ["a", "bc"], "logprobs": true, "top_logprobs": 3,
      "ignore_eos": true, "stop_token_ids": [5, 6], "n": 1, "frequency_penalty": 0, "presence_penalty": 0.0,
      "tools": [{"type": "function", "function": {"name": "f"}}], "chat_template_kwargs": {"enable_thinking": false},
      "user": "recorded nowhere", "some_unknown_field": null})");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  const GenerationRequest& g = r->gen;
  EXPECT_TRUE(g.stream);
  EXPECT_TRUE(g.include_usage);
  EXPECT_EQ(g.max_tokens, 7);
  EXPECT_FLOAT_EQ(g.temperature, 0.5f);
  EXPECT_FLOAT_EQ(g.top_p, 0.9f);
  EXPECT_EQ(g.top_k, 40);
  EXPECT_FLOAT_EQ(g.min_p, 0.05f);
  EXPECT_EQ(g.seed, 123u);
  EXPECT_EQ(g.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(g.logprobs);
  EXPECT_EQ(g.top_logprobs, 3);
  EXPECT_TRUE(g.ignore_eos);
  EXPECT_EQ(g.stop_token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(r->tools.size(), 1u);
  EXPECT_EQ(r->chat_template_kwargs["enable_thinking"], false);
}

TEST(ParseChat, MaxTokensAliasAndNulls) {
  auto r = ParseChatRequest(R"({"messages": [{"role": "user", "content": null}], "max_tokens": 3,
                                "temperature": null, "stop": null, "seed": null, "top_k": -1})");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->gen.max_tokens, 3);
  EXPECT_FLOAT_EQ(r->gen.temperature, 1.0f);
  EXPECT_EQ(r->gen.top_k, 0);
  EXPECT_FALSE(r->gen.seed.has_value());
  auto s = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}], "stop": "END"})");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->gen.stop, std::vector<std::string>{"END"});
  auto f = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5.0})");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->gen.max_tokens, 5);
}

TEST(ParseChat, ContentPartsAreJoined) {
  auto r = ParseChatRequest(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                {"type": "text", "text": "b"}]}]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->messages[0]["content"], "a\nb");
  // Image parts (docs/vision.md): listed with their field, a sentinel in the text; one without a
  // url is refused by its field; outside user messages they are refused.
  auto img = ParseChatRequest(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                  {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}}]}]})");
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  ASSERT_EQ(img->images.size(), 1u);
  EXPECT_EQ(img->images[0].field, "messages[0].content[1].image_url");
  EXPECT_EQ(img->messages[0]["content"], std::string("a") + kImageSentinel);
  EXPECT_EQ(ErrorParam(ParseChatRequest(
                R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})")),
            "messages[0].content[0].image_url");
  EXPECT_EQ(ErrorParam(ParseChatRequest(
                R"({"messages": [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})")),
            "messages[0].content");
}

TEST(ParseChat, FieldErrorsNameTheField) {
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  auto bad = [&](const std::string& extra) { return ErrorParam(ParseChatRequest("{" + m + ", " + extra + "}")); };
  EXPECT_EQ(bad(R"("temperature": 3)"), "temperature");
  EXPECT_EQ(bad(R"("temperature": "hot")"), "temperature");
  EXPECT_EQ(bad(R"("top_p": 0)"), "top_p");
  EXPECT_EQ(bad(R"("top_p": 1.5)"), "top_p");
  EXPECT_EQ(bad(R"("top_k": -2)"), "top_k");
  EXPECT_EQ(bad(R"("min_p": -0.1)"), "min_p");
  EXPECT_EQ(bad(R"("max_tokens": 0)"), "max_tokens");
  EXPECT_EQ(bad(R"("max_tokens": 1.5)"), "max_tokens");
  EXPECT_EQ(bad(R"("max_completion_tokens": "ten")"), "max_completion_tokens");
  EXPECT_EQ(bad(R"("n": 129)"), "n");
  EXPECT_EQ(bad(R"("seed": "x")"), "seed");
  EXPECT_EQ(bad(R"("stop": 5)"), "stop");
  EXPECT_EQ(bad(R"("stop": [""])"), "stop");
  EXPECT_EQ(bad(R"("stream": "yes")"), "stream");
  EXPECT_EQ(bad(R"("stream_options": {"include_usage": true})"), "stream_options");  // needs stream
  EXPECT_EQ(bad(R"("logprobs": 1)"), "logprobs");
  EXPECT_EQ(bad(R"("top_logprobs": 2)"), "top_logprobs");  // needs logprobs: true
  EXPECT_EQ(bad(R"("logprobs": true, "top_logprobs": 21)"), "top_logprobs");
  EXPECT_EQ(bad(R"("frequency_penalty": 2.5)"), "frequency_penalty");
  EXPECT_EQ(bad(R"("logit_bias": {"5": 101})"), "logit_bias");
  EXPECT_EQ(bad(R"("response_format": {"type": "yaml"})"), "response_format");
  EXPECT_EQ(bad(R"("guided_choice": "a")"), "guided_choice");
  EXPECT_EQ(bad(R"("guided_regex": "a", "guided_choice": ["a"])"), "guided_choice");
  EXPECT_EQ(bad(R"("min_tokens": 3, "max_tokens": 2)"), "min_tokens");
  EXPECT_EQ(bad(R"("tools": {})"), "tools");
  EXPECT_EQ(bad(R"("chat_template_kwargs": [])"), "chat_template_kwargs");
  EXPECT_EQ(bad(R"("model": 5)"), "model");
  EXPECT_EQ(ErrorParam(ParseChatRequest(R"({"model": "m"})")), "messages");
  EXPECT_EQ(ErrorParam(ParseChatRequest(R"({"messages": []})")), "messages");
  EXPECT_EQ(ErrorParam(ParseChatRequest(R"({"messages": [{"content": "x"}]})")), "messages[0].role");
}

TEST(ParseChat, UnknownFieldsAreRefusedNotIgnored) {
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  auto r = ParseChatRequest("{" + m + R"(, "frobnicate": 1})");
  EXPECT_EQ(ErrorParam(r), "frobnicate");
  EXPECT_NE(r.error().message().find("not a request field"), std::string::npos) << r.error().message();
  auto other = ParseChatRequest("{" + m + R"(, "suffix": "x"})");
  EXPECT_EQ(ErrorParam(other), "suffix");
  EXPECT_NE(other.error().message().find("/v1/completions"), std::string::npos) << other.error().message();
  EXPECT_EQ(ErrorParam(ParseCompletionRequest(R"({"prompt": "x", "max_completion_tokens": 3})")),
            "max_completion_tokens");
  EXPECT_EQ(ErrorParam(ParseChatRequest("{" + m + R"(, "stream": true, "stream_options": {"x": true}})")),
            "stream_options.x");
  EXPECT_TRUE(ParseChatRequest("{" + m + R"(, "frobnicate": null})").ok());  // null is "unset"
}

TEST(ParseChat, RolesAndToolCalls) {
  auto r = ParseChatRequest(R"({"messages": [{"role": "developer", "content": "be brief"},
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]})");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->messages[0]["role"], "system");
  const Json& args = r->messages[2]["tool_calls"][0]["function"]["arguments"];
  ASSERT_TRUE(args.is_object());
  EXPECT_EQ(args.dump(), R"({"city":"Paris","days":2})");  // key order kept
  EXPECT_EQ(r->messages[3]["role"], "tool");
  EXPECT_EQ(r->messages[3]["tool_call_id"], "c1");
  auto bad = [](const std::string& msgs) { return ErrorParam(ParseChatRequest(R"({"messages": )" + msgs + "}")); };
  EXPECT_EQ(bad(R"([{"role": "user", "content": "x"}, {"role": "function", "content": "y"}])"), "messages[1].role");
  EXPECT_EQ(bad(R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{nope"}}]}])"),
            "messages[0].tool_calls[0].function.arguments");
  EXPECT_EQ(bad(R"([{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}])"),
            "messages[0].tool_calls[0].function.name");
  EXPECT_EQ(bad(R"([{"role": "user", "content": "x", "tool_calls": []}])"), "messages[0].tool_calls");
}

TEST(ParseChat, ToolsAndToolChoice) {
  const std::string m = R"("messages": [{"role": "user", "content": "x"}], )";
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}])";
  auto parse = [&](const std::string& extra) { return ParseChatRequest("{" + m + extra + "}"); };
  auto none = parse(tools + R"(, "tool_choice": "none")");
  ASSERT_TRUE(none.ok()) << none.error().ToString();
  EXPECT_TRUE(none->tools.is_null());  // withheld from the template
  auto aut = parse(tools + R"(, "tool_choice": "auto")");
  ASSERT_TRUE(aut.ok()) << aut.error().ToString();
  EXPECT_EQ(aut->tools.size(), 1u);
  auto named = [&](const std::string& name) {
    return parse(tools + R"(, "tool_choice": {"type": "function", "function": {"name": ")" + name + R"("}})");
  };
  auto missing = named("g");
  EXPECT_EQ(ErrorParam(missing), "tool_choice");
  EXPECT_NE(missing.error().message().find("'g', which is not in 'tools'"), std::string::npos);
  // Forced calls: a regex constraint from tool_choice (the grammar is tested in forced_tool_calls_test).
  auto known = named("f");
  ASSERT_TRUE(known.ok()) << known.error().ToString();
  EXPECT_EQ(known->forced_tool, "f");
  ASSERT_TRUE(known->gen.constraint.has_value());
  EXPECT_EQ(known->gen.constraint_field, "tool_choice");
  EXPECT_NE(known->gen.constraint->regex.find("<tool_call>f"), std::string::npos);
  auto required = parse(tools + R"(, "tool_choice": "required")");
  ASSERT_TRUE(required.ok()) << required.error().ToString();
  EXPECT_EQ(required->forced_tool, "");
  EXPECT_EQ(ErrorParam(parse(tools + R"(, "tool_choice": "required", "guided_regex": "a")")), "tool_choice");
  EXPECT_EQ(ErrorParam(parse(R"("tool_choice": "auto")")), "tool_choice");  // no tools
  EXPECT_EQ(ErrorParam(parse(R"("tools": [{"type": "function", "function": {"name": ""}}])")), "tools[0].function.name");
  EXPECT_EQ(ErrorParam(parse(R"("tools": [{"type": "custom", "function": {"name": "f"}}])")), "tools[0].type");
  EXPECT_EQ(ErrorParam(parse(R"("tools": [{"function": {"name": "f", "parameters": []}}])")),
            "tools[0].function.parameters");
  EXPECT_EQ(ErrorParam(parse(R"("tools": [{"function": {"name": "f", "strict": true}}])")), "tools[0].function.strict");
}

TEST(ParseChat, ContinueFinalMessage) {
  const std::string m = R"("messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "Once"}])";
  auto r = ParseChatRequest("{" + m + R"(, "continue_final_message": true})");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_TRUE(r->continue_final_message);
  EXPECT_FALSE(r->add_generation_prompt);  // the default gives way, as in vLLM
  EXPECT_EQ(ErrorParam(ParseChatRequest("{" + m + R"(, "continue_final_message": true, "add_generation_prompt": true})")),
            "continue_final_message");
  EXPECT_EQ(ErrorParam(ParseChatRequest(
                R"({"messages": [{"role": "assistant", "content": null}], "continue_final_message": true})")),
            "continue_final_message");
  EXPECT_EQ(ErrorParam(ParseChatRequest("{" + m + R"(, "chat_template_kwargs": {"add_generation_prompt": true}})")),
            "chat_template_kwargs.add_generation_prompt");
}

TEST(ParseChat, MalformedBody) {
  auto r = ParseChatRequest("{not json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.error().message().find("not valid JSON"), std::string::npos);
  EXPECT_FALSE(ParseChatRequest("[1, 2]").ok());
  EXPECT_FALSE(ParseChatRequest("").ok());
}

TEST(ParseCompletion, PromptShapes) {
  auto t = ParseCompletionRequest(R"({"prompt": "hello"})");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->prompt_is_ids);
  EXPECT_EQ(t->prompt_text, "hello");
  auto ids = ParseCompletionRequest(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(ids.ok());
  EXPECT_TRUE(ids->prompt_is_ids);
  EXPECT_EQ(ids->prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  auto one = ParseCompletionRequest(R"({"prompt": ["hello"]})");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->prompt_text, "hello");
  auto nested = ParseCompletionRequest(R"({"prompt": [[4, 5]]})");
  ASSERT_TRUE(nested.ok());
  EXPECT_EQ(nested->prompt_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(ErrorParam(ParseCompletionRequest(R"({"prompt": ["a", "b"]})")), "prompt");
  EXPECT_EQ(ErrorParam(ParseCompletionRequest(R"({"prompt": []})")), "prompt");
  EXPECT_EQ(ErrorParam(ParseCompletionRequest(R"({"prompt": ""})")), "prompt");
  EXPECT_EQ(ErrorParam(ParseCompletionRequest(R"({"prompt": [1, -2]})")), "prompt");
  EXPECT_EQ(ErrorParam(ParseCompletionRequest(R"({"prompt": 7})")), "prompt");
  EXPECT_EQ(ErrorParam(ParseCompletionRequest(R"({"max_tokens": 2})")), "prompt");
}

TEST(ParseCompletion, LegacyLogprobsAndExtensions) {
  auto r = ParseCompletionRequest(R"({"prompt": "x", "logprobs": 2, "ignore_eos": true, "max_tokens": 9})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->gen.logprobs);
  EXPECT_EQ(r->gen.top_logprobs, 2);
  EXPECT_TRUE(r->gen.ignore_eos);
  auto z = ParseCompletionRequest(R"({"prompt": "x", "logprobs": 0})");
  ASSERT_TRUE(z.ok());
  EXPECT_TRUE(z->gen.logprobs);
  EXPECT_EQ(z->gen.top_logprobs, 0);
  EXPECT_EQ(ErrorParam(ParseCompletionRequest(R"({"prompt": "x", "logprobs": true})")), "logprobs");
  EXPECT_EQ(ErrorParam(ParseCompletionRequest(R"({"prompt": "x", "echo": true, "logprobs": 1})")), "echo");
  EXPECT_EQ(ErrorParam(ParseCompletionRequest(R"({"prompt": "x", "best_of": 3})")), "best_of");
  EXPECT_EQ(ErrorParam(ParseCompletionRequest(R"({"prompt": "x", "suffix": "y"})")), "suffix");
}

TEST(ApiError, StatusMapping) {
  EXPECT_EQ(ApiError::FromStatus(Status::InvalidArgument("x")).status, 400);
  EXPECT_EQ(ApiError::FromStatus(Status::NotFound("x")).status, 404);
  const ApiError busy = ApiError::FromStatus(Status::ResourceExhausted("x"));
  EXPECT_EQ(busy.status, 429);
  EXPECT_EQ(busy.retry_after_s, 1);
  EXPECT_EQ(ApiError::FromStatus(Status::Unavailable("x")).status, 503);
  EXPECT_EQ(ApiError::FromStatus(Status(StatusCode::kDeadlineExceeded, "x")).status, 504);
  EXPECT_EQ(ApiError::FromStatus(Status::Internal("x")).status, 500);
  EXPECT_EQ(ApiError::FromStatus(Status::DataLoss("x")).status, 500);
  const ApiError ctx = ApiError::FromStatus(Status::InvalidArgument("This model's maximum context length is 8"));
  EXPECT_EQ(ctx.code, "context_length_exceeded");
}

TEST(ApiError, JsonShape) {
  ApiError e = ApiError::FromStatus(Status::InvalidArgument("'temperature' must be a number"));
  const Json j = Json::parse(e.Body());
  ASSERT_TRUE(j.contains("error"));
  const Json& o = j["error"];
  EXPECT_EQ(o["message"], "'temperature' must be a number");
  EXPECT_EQ(o["type"], "invalid_request_error");
  EXPECT_EQ(o["param"], "temperature");
  EXPECT_TRUE(o.contains("code"));
  EXPECT_TRUE(o["code"].is_null());
  const Json plain = Json::parse(ApiError::FromStatus(Status::Internal("boom")).Body());
  EXPECT_TRUE(plain["error"]["param"].is_null());
  EXPECT_EQ(plain["error"]["type"], "server_error");
}

TEST(Responses, ChatChunkShapes) {
  const ResponseMeta m{"chatcmpl-1", 1700000000, "tiny"};
  const Json first = ChatChunk(m, Json{{"role", "assistant"}, {"content", ""}}, nullptr, "", false);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["id"], "chatcmpl-1");
  EXPECT_EQ(first["created"], 1700000000);
  EXPECT_EQ(first["model"], "tiny");
  ASSERT_EQ(first["choices"].size(), 1u);
  EXPECT_EQ(first["choices"][0]["index"], 0);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(first["choices"][0]["logprobs"].is_null());
  EXPECT_FALSE(first.contains("usage"));
  const Json last = ChatChunk(m, Json::object(), nullptr, "length", true);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_TRUE(last["usage"].is_null());
  const Json usage = ChatUsageChunk(m, 5, 3);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 8);
}

TEST(Responses, FullResponses) {
  const ResponseMeta m{"x", 1, "tiny"};
  const Json c = ChatResponse(m, AssistantMessage("hi"), nullptr, "stop", 4, 2);
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_EQ(c["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(c["choices"][0]["message"]["content"], "hi");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(c["usage"], (Json{{"prompt_tokens", 4}, {"completion_tokens", 2}, {"total_tokens", 6}}));
  const Json t = CompletionResponse(m, "yo", nullptr, "length", 1, 1);
  EXPECT_EQ(t["object"], "text_completion");
  EXPECT_EQ(t["choices"][0]["text"], "yo");
  const Json tc = CompletionChunk(m, "a", nullptr, "", true);
  EXPECT_EQ(tc["object"], "text_completion");
  EXPECT_TRUE(tc["usage"].is_null());
}

TEST(Responses, AssistantMessageWithToolCallsAndReasoning) {
  EXPECT_EQ(AssistantMessage("hi"), (Json{{"role", "assistant"}, {"content", "hi"}}));
  const Json call = ToolCallJson("call_1", "f", R"({"a":1})");
  EXPECT_EQ(call, Json::parse(R"({"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}})"));
  const Json m = AssistantMessage("", "why", Json::array({call}));
  EXPECT_TRUE(m["content"].is_null());  // OpenAI: no text beside the calls
  EXPECT_EQ(m["reasoning_content"], "why");
  EXPECT_EQ(m["tool_calls"], Json::array({call}));
  EXPECT_EQ(AssistantMessage("", ""), (Json{{"role", "assistant"}, {"content", ""}}));
}

TEST(Responses, SseFraming) {
  EXPECT_EQ(SseData(Json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  // Invalid UTF-8 never throws; it is replaced.
  const std::string s = SseData(Json{{"t", std::string("\xff")}});
  EXPECT_NE(s.find("\xEF\xBF\xBD"), std::string::npos);
}

TEST(Responses, Ids) {
  const std::string a = NewResponseId("chatcmpl-"), b = NewResponseId("chatcmpl-");
  EXPECT_EQ(a.rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(a.size(), 9u + 24u);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace gyre::serve
