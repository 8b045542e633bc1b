// POST /v1/responses end to end over the HTTP server and a FakeEngine: the prompt the input items
// and instructions make, the Response object, the typed stream events (order, sequence numbers,
// deltas that add up to the final object), reasoning and function_call output items with the GLM
// template, and every field of the Responses table honoured or refused by name.
//
// Sections: helpers; text answers (non-streamed, streamed); reasoning and tool calls; input items;
// every field (with a coverage check over the kResponses rows of openai_fields.cc).
#include <set>

#include "serve/openai_fields.h"
#include "serve/responses_protocol.h"
#include "serve/server_test_fixture.h"

namespace gyre::serve::testing {
namespace {

// ---- helpers ----------------------------------------------------------------------------------

const char* kCallOutput =
    "The user wants Paris weather.</think>Let me check."
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
    "<arg_value>3</arg_value></tool_call>";

const Json& Tools() {
  static const Json t = Json::parse(R"([{"type": "function", "name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}])");
  return t;
}

// One typed event of a Responses stream.
struct Event {
  std::string name;  // the "event:" line
  Json data;
};

// The events of an SSE body with "event:" and "data:" lines.
std::vector<Event> Events(const std::string& body) {
  std::vector<Event> out;
  size_t pos = 0;
  while (true) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    const std::string block = body.substr(pos, end - pos);
    pos = end + 2;
    Event e;
    size_t line_start = 0;
    while (line_start < block.size()) {
      size_t nl = block.find('\n', line_start);
      if (nl == std::string::npos) nl = block.size();
      const std::string line = block.substr(line_start, nl - line_start);
      if (line.rfind("event: ", 0) == 0) e.name = line.substr(7);
      if (line.rfind("data: ", 0) == 0) e.data = Json::parse(line.substr(6), nullptr, false);
      line_start = nl + 1;
    }
    out.push_back(std::move(e));
  }
  return out;
}

class ResponsesTest : public ServerTest {
 protected:
  // A server whose fake model says `text` once then EOS, rendering with glm5.jinja.
  void StartSaying(const std::string& text) {
    UseGlmTemplate();
    FakeEngineOptions eo;
    eo.script = *tok_->Encode(text, /*parse_special=*/true);
    eo.script.push_back(1014);  // <|endoftext|>
    Start(eo);
  }
  static Json Body(Json extra = Json::object()) {
    Json b = {{"model", "tiny"}, {"input", "Hi"}, {"max_output_tokens", 5}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return b;
  }
  std::vector<int32_t> Ids(const std::string& text) const { return *tok_->Encode(text, true); }
  std::string Decode(const std::vector<int32_t>& ids) const { return *tok_->Decode(ids); }
  // The text of the first `n` tokens of the default script.
  std::string Script(size_t n) const {
    const auto s = *tok_->Encode("Hello world, this is a test.");
    return Decode(std::vector<int32_t>(s.begin(), s.begin() + static_cast<long>(n)));
  }
  std::string LastPrompt() const { return Decode(engine_->submitted().back().prompt); }

  // Checks the stream's invariants and returns its events: one "event:" name per data, equal to
  // data.type; sequence numbers 0, 1, 2, ...; created and in_progress first; one terminal event
  // last; no [DONE].
  std::vector<Event> CheckedStream(const Reply& r) {
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers.at("content-type"), "text/event-stream");
    EXPECT_EQ(r.body.find("[DONE]"), std::string::npos);
    std::vector<Event> ev = Events(r.body);
    EXPECT_GE(ev.size(), 3u);
    for (size_t i = 0; i < ev.size(); ++i) {
      EXPECT_EQ(ev[i].name, ev[i].data["type"]) << i;
      EXPECT_EQ(ev[i].data["sequence_number"], static_cast<int64_t>(i));
    }
    if (ev.size() >= 3) {
      EXPECT_EQ(ev[0].name, "response.created");
      EXPECT_EQ(ev[0].data["response"]["status"], "in_progress");
      EXPECT_EQ(ev[0].data["response"]["output"], Json::array());
      EXPECT_EQ(ev[1].name, "response.in_progress");
      const std::string last = ev.back().name;
      EXPECT_TRUE(last == "response.completed" || last == "response.incomplete" || last == "response.failed") << last;
    }
    return ev;
  }
  // Rebuilds the output items from the events the way a client does, checking each event refers
  // to the item it should.
  static Json Accumulate(const std::vector<Event>& ev) {
    Json output = Json::array();
    for (const Event& e : ev) {
      const Json& d = e.data;
      if (e.name == "response.output_item.added") {
        EXPECT_EQ(d["output_index"], output.size());
        output.push_back(d["item"]);
        continue;
      }
      if (!d.contains("output_index")) continue;
      const size_t i = d["output_index"].get<size_t>();
      EXPECT_LT(i, output.size()) << e.name;
      if (i >= output.size()) continue;
      Json& item = output[i];
      if (d.contains("item_id")) EXPECT_EQ(d["item_id"], item["id"]) << e.name;
      if (e.name == "response.content_part.added") item["content"].push_back(d["part"]);
      if (e.name == "response.output_text.delta" || e.name == "response.reasoning_text.delta") {
        item["content"][0]["text"] = item["content"][0]["text"].get<std::string>() + d["delta"].get<std::string>();
      }
      if (e.name == "response.function_call_arguments.delta") {
        item["arguments"] = item["arguments"].get<std::string>() + d["delta"].get<std::string>();
      }
      if (e.name == "response.output_text.done" || e.name == "response.reasoning_text.done") {
        EXPECT_EQ(d["text"], item["content"][0]["text"]) << e.name;
      }
      if (e.name == "response.output_item.done") {
        Json done = d["item"];
        // What the deltas built equals the done item, but for its status.
        Json built = item;
        built["status"] = done["status"];
        EXPECT_EQ(built, done);
        item = done;
      }
    }
    return output;
  }
};

// ---- text answers -----------------------------------------------------------------------------

TEST_F(ResponsesTest, NonStreamedTextAnswer) {
  Start();
  const Reply r = Post("/v1/responses", Body({{"metadata", {{"k", "v"}}}, {"user", "u-1"}, {"temperature", 0.7}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["id"].get<std::string>().rfind("resp_", 0), 0u);
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["status"], "incomplete");  // cut at max_output_tokens
  EXPECT_EQ(j["incomplete_details"], (Json{{"reason", "max_output_tokens"}}));
  EXPECT_TRUE(j["error"].is_null());
  ASSERT_EQ(j["output"].size(), 1u) << r.body;
  const Json& msg = j["output"][0];
  EXPECT_EQ(msg["type"], "message");
  EXPECT_EQ(msg["role"], "assistant");
  EXPECT_EQ(msg["status"], "incomplete");
  EXPECT_EQ(msg["id"].get<std::string>().rfind("msg_", 0), 0u);
  ASSERT_EQ(msg["content"].size(), 1u);
  EXPECT_EQ(msg["content"][0]["type"], "output_text");
  EXPECT_EQ(msg["content"][0]["text"], Script(5));
  EXPECT_EQ(msg["content"][0]["annotations"], Json::array());
  // The prompt: the input string as one user message; the limit from max_output_tokens.
  const RequestParams p = engine_->submitted().back();
  EXPECT_EQ(p.prompt, Ids("[gMASK]<sop><|user|>Hi<|assistant|>"));
  EXPECT_EQ(p.max_tokens, 5);
  EXPECT_FLOAT_EQ(p.sampling.temperature, 0.7f);
  EXPECT_EQ(j["usage"]["input_tokens"], static_cast<int64_t>(p.prompt.size()));
  EXPECT_EQ(j["usage"]["output_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], static_cast<int64_t>(p.prompt.size()) + 5);
  // Repeated from the request.
  EXPECT_EQ(j["metadata"], (Json{{"k", "v"}}));
  EXPECT_EQ(j["user"], "u-1");
  EXPECT_EQ(j["temperature"], 0.7);
  EXPECT_EQ(j["max_output_tokens"], 5);
  EXPECT_EQ(j["store"], false);
  EXPECT_EQ(j["tool_choice"], "auto");
  EXPECT_EQ(j["tools"], Json::array());
}

TEST_F(ResponsesTest, StreamedEventsAddUpToTheResponse) {
  Start();
  const Reply full = Post("/v1/responses", Body());
  const Reply r = Post("/v1/responses", Body({{"stream", true}}));
  const std::vector<Event> ev = CheckedStream(r);
  ASSERT_GE(ev.size(), 8u);
  EXPECT_EQ(ev[2].name, "response.output_item.added");
  EXPECT_EQ(ev[3].name, "response.content_part.added");
  EXPECT_EQ(ev[3].data["part"]["text"], "");
  std::string deltas;
  size_t i = 4;
  for (; i < ev.size() && ev[i].name == "response.output_text.delta"; ++i) deltas += ev[i].data["delta"].get<std::string>();
  EXPECT_EQ(deltas, Script(5));
  ASSERT_EQ(ev.size(), i + 4);
  EXPECT_EQ(ev[i].name, "response.output_text.done");
  EXPECT_EQ(ev[i + 1].name, "response.content_part.done");
  EXPECT_EQ(ev[i + 2].name, "response.output_item.done");
  EXPECT_EQ(ev[i + 3].name, "response.incomplete");
  const Json final = ev.back().data["response"];
  EXPECT_EQ(final["status"], "incomplete");
  EXPECT_EQ(final["output"], Accumulate(ev));
  EXPECT_EQ(final["output"][0]["content"][0]["text"], full.json()["output"][0]["content"][0]["text"]);
  EXPECT_EQ(final["usage"], full.json()["usage"]);
  EXPECT_EQ(final["id"], ev[0].data["response"]["id"]);
  EXPECT_EQ(r.headers.at("x-request-id"), final["id"]);
}

// ---- reasoning and tool calls -----------------------------------------------------------------

TEST_F(ResponsesTest, ReasoningMessageAndFunctionCallItems) {
  StartSaying(kCallOutput);
  const Json body = Body({{"tools", Tools()}, {"max_output_tokens", 500}});
  const Reply r = Post("/v1/responses", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  EXPECT_EQ(j["status"], "completed");
  ASSERT_EQ(j["output"].size(), 3u) << r.body;
  const Json& rs = j["output"][0];
  EXPECT_EQ(rs["type"], "reasoning");
  EXPECT_EQ(rs["content"], Json::parse(R"([{"type": "reasoning_text", "text": "The user wants Paris weather."}])"));
  EXPECT_EQ(j["output"][1]["content"][0]["text"], "Let me check.");
  const Json& fc = j["output"][2];
  EXPECT_EQ(fc["type"], "function_call");
  EXPECT_EQ(fc["name"], "get_weather");
  EXPECT_EQ(fc["status"], "completed");
  EXPECT_EQ(fc["call_id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(fc["id"].get<std::string>().rfind("fc_", 0), 0u);
  EXPECT_EQ(Json::parse(fc["arguments"].get<std::string>()), (Json{{"city", "Paris"}, {"days", 3}}));
  // The tools reached the template in chat form.
  EXPECT_EQ(last_context_["tools"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(j["tools"], Tools());  // repeated as sent

  Json sb = body;
  sb["stream"] = true;
  const std::vector<Event> ev = CheckedStream(Post("/v1/responses", sb));
  const Json built = Accumulate(ev);
  ASSERT_EQ(built.size(), 3u);
  EXPECT_EQ(built[0]["content"][0]["text"], "The user wants Paris weather.");
  EXPECT_EQ(built[1]["content"][0]["text"], "Let me check.");
  EXPECT_EQ(Json::parse(built[2]["arguments"].get<std::string>()), (Json{{"city", "Paris"}, {"days", 3}}));
  EXPECT_EQ(ev.back().name, "response.completed");
  EXPECT_EQ(ev.back().data["response"]["output"], built);
  std::set<std::string> names;
  for (const Event& e : ev) names.insert(e.name);
  for (const char* n : {"response.reasoning_text.delta", "response.reasoning_text.done",
                        "response.function_call_arguments.delta", "response.function_call_arguments.done"}) {
    EXPECT_TRUE(names.count(n)) << n;
  }
}

TEST_F(ResponsesTest, ReasoningEffortNoneTurnsThinkingOff) {
  StartSaying("Plain answer.");
  const Reply r = Post("/v1/responses", Body({{"reasoning", {{"effort", "none"}}}, {"max_output_tokens", 50}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(last_context_["enable_thinking"], false);
  ASSERT_EQ(r.json()["output"].size(), 1u);
  EXPECT_EQ(r.json()["output"][0]["content"][0]["text"], "Plain answer.");
  EXPECT_EQ(r.json()["reasoning"]["effort"], "none");
}

// ---- input items ------------------------------------------------------------------------------

TEST_F(ResponsesTest, InstructionsAndMessageItemsMakeThePrompt) {
  Start();
  const Json input = Json::parse(R"([
    {"role": "developer", "content": "Be brief."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"},
                                                    {"type": "input_text", "text": "there"}]},
    {"role": "assistant", "content": [{"type": "output_text", "text": "Hello", "annotations": []}]},
    {"role": "user", "content": "Again"}])");
  const Reply r = Post("/v1/responses", Body({{"input", input}, {"instructions", "You are gyre."}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(LastPrompt(),
            "[gMASK]<sop><|system|>You are gyre.<|system|>Be brief.<|user|>Hi\nthere<|assistant|>Hello<|user|>Again"
            "<|assistant|>");
  EXPECT_EQ(r.json()["instructions"], "You are gyre.");
}

TEST_F(ResponsesTest, FunctionCallItemsRenderThroughTheGlmTemplate) {
  StartSaying("It is sunny.");
  const Json input = Json::parse(R"([
    {"role": "user", "content": "Weather in Paris?"},
    {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Need it."}]},
    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
     "arguments": "{\"city\": \"Paris\"}", "status": "completed"},
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}])");
  const Reply r = Post("/v1/responses", Body({{"input", input}, {"tools", Tools()}, {"max_output_tokens", 50}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const Json& msgs = last_context_["messages"];
  ASSERT_EQ(msgs.size(), 3u) << msgs.dump();
  EXPECT_EQ(msgs[1]["role"], "assistant");
  EXPECT_EQ(msgs[1]["reasoning_content"], "Need it.");
  EXPECT_EQ(msgs[1]["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(msgs[1]["tool_calls"][0]["function"]["arguments"], (Json{{"city", "Paris"}}));
  EXPECT_EQ(msgs[2], (Json{{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}));
  const std::string prompt = LastPrompt();
  EXPECT_NE(prompt.find("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"),
            std::string::npos) << prompt;
  EXPECT_NE(prompt.find("<tool_response>sunny</tool_response>"), std::string::npos) << prompt;
}

TEST(ResponsesInput, ItemsBecomeChatMessages) {
  // An assistant message and the calls after it are one turn; reasoning before a user message
  // is an assistant turn of its own; output parts may be given as parts.
  const Json input = Json::parse(R"([
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": "Let me look."},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": ""},
    {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{\"a\": 1}"},
    {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "r1"}]},
    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thought"}]},
    {"role": "user", "content": "next"}])");
  auto m = ResponsesInputToMessages(input, nullptr);
  ASSERT_TRUE(m.ok()) << m.error().ToString();
  ASSERT_EQ(m->size(), 5u) << m->dump();
  EXPECT_EQ((*m)[1]["content"], "Let me look.");
  ASSERT_EQ((*m)[1]["tool_calls"].size(), 2u);
  EXPECT_EQ((*m)[1]["tool_calls"][0]["function"]["arguments"], Json::object());
  EXPECT_EQ((*m)[1]["tool_calls"][1]["function"]["arguments"], (Json{{"a", 1}}));
  EXPECT_EQ((*m)[2]["content"], "r1");
  EXPECT_EQ((*m)[3], (Json{{"role", "assistant"}, {"content", ""}, {"reasoning_content", "thought"}}));
  EXPECT_EQ((*m)[4]["role"], "user");
}

TEST(ResponsesInput, BadItemsAreRefusedByName) {
  const std::pair<const char*, const char*> cases[] = {
      {R"([{"role": "tool", "content": "x"}])", "input[0].role"},
      {R"([{"type": "web_search_call", "id": "w"}])", "input[0].type"},
      {R"([{"type": "item_reference", "id": "msg_1"}])", "input[0].type"},
      {R"([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}])", "input[0].content[0].type"},
      {R"([{"role": "user", "content": [{"type": "input_text"}]}])", "input[0].content[0].text"},
      {R"([{"role": "user"}])", "input[0].content"},
      {R"([{"role": "user", "content": "x", "name": "bob"}])", "input[0].name"},
      {R"([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}])", "input[0].arguments"},
      {R"([{"type": "function_call", "name": "f", "arguments": "{}"}])", "input[0].call_id"},
      {R"([{"type": "function_call_output", "call_id": "c"}])", "input[0].output"},
      {R"([{"type": "reasoning", "encrypted_content": "xyz"}])", "input[0].encrypted_content"},
      {R"([])", "input"},
      {R"(5)", "input"},
  };
  for (const auto& [text, param] : cases) {
    auto m = ResponsesInputToMessages(Json::parse(text), nullptr);
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_EQ(ApiError::FromStatus(m.error()).param, param) << text << ": " << m.error().message();
  }
}

// ---- every field ------------------------------------------------------------------------------

TEST_F(ResponsesTest, EveryFieldIsHonouredOrRefused) {
  Start();
  struct Probe {
    std::string field;
    Json extra;
    bool accepted;  // 200, else a 400 naming the field
  };
  std::vector<Probe> probes;
  auto ok = [&](std::string f, Json extra) { probes.push_back({std::move(f), std::move(extra), true}); };
  auto no = [&](std::string f, Json extra) { probes.push_back({std::move(f), std::move(extra), false}); };
  // Honoured (what each changes is checked in the tests above; here: accepted, and bad values refused).
  ok("model", {{"model", "tiny"}});
  no("model", {{"model", 5}});
  ok("input", {{"input", "Yo"}});
  no("input", {{"input", Json::object()}});
  ok("instructions", {{"instructions", "x"}});
  no("instructions", {{"instructions", 5}});
  ok("max_output_tokens", {{"max_output_tokens", 3}});
  no("max_output_tokens", {{"max_output_tokens", 0}});
  ok("temperature", {{"temperature", 0}});
  no("temperature", {{"temperature", 3}});
  ok("top_p", {{"top_p", 0.5}});
  no("top_p", {{"top_p", 0}});
  ok("stream", {{"stream", false}});
  no("stream", {{"stream", "yes"}});
  ok("tools", {{"tools", Tools()}});
  no("tools", {{"tools", Json::parse(R"([{"type": "web_search"}])")}});
  no("tools", {{"tools", Json::parse(R"([{"type": "function", "name": "f", "strict": true}])")}});
  no("tools", {{"tools", Json::parse(R"([{"type": "function", "function": {"name": "f"}}])")}});
  ok("tool_choice", {{"tools", Tools()}, {"tool_choice", "none"}});
  ok("tool_choice", {{"tools", Tools()}, {"tool_choice", "auto"}});
  no("tool_choice", {{"tools", Tools()}, {"tool_choice", "required"}});
  no("tool_choice", {{"tools", Tools()}, {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}}});
  no("tool_choice", {{"tool_choice", {{"type", "web_search_preview"}}}});
  ok("reasoning", {{"reasoning", {{"effort", "none"}}}});
  no("reasoning", {{"reasoning", {{"effort", "high"}}}});
  no("reasoning", {{"reasoning", {{"summary", "auto"}}}});
  ok("metadata", {{"metadata", {{"k", "v"}}}});
  no("metadata", {{"metadata", {{"k", 1}}}});
  ok("user", {{"user", "u"}});
  no("user", {{"user", 1}});
  // Default only / unused / refused.
  ok("store", {{"store", false}});
  no("store", {{"store", true}});
  no("previous_response_id", {{"previous_response_id", "resp_1"}});
  no("conversation", {{"conversation", "conv_1"}});
  ok("background", {{"background", false}});
  no("background", {{"background", true}});
  ok("stream_options", {{"stream", true}, {"stream_options", {{"include_obfuscation", false}}}});
  no("stream_options", {{"stream", true}, {"stream_options", {{"include_obfuscation", true}}}});
  ok("parallel_tool_calls", {{"parallel_tool_calls", true}});
  no("parallel_tool_calls", {{"parallel_tool_calls", false}});
  ok("include", {{"include", Json::array()}});
  no("include", {{"include", {"reasoning.encrypted_content"}}});
  ok("text", {{"text", {{"format", {{"type", "text"}}}}}});
  no("text", {{"text", {{"format", {{"type", "json_object"}}}}}});
  ok("truncation", {{"truncation", "disabled"}});
  no("truncation", {{"truncation", "auto"}});
  ok("top_logprobs", {{"top_logprobs", 0}});
  no("top_logprobs", {{"top_logprobs", 2}});
  ok("service_tier", {{"service_tier", "auto"}});
  no("service_tier", {{"service_tier", "flex"}});
  ok("safety_identifier", {{"safety_identifier", "s"}});
  no("safety_identifier", {{"safety_identifier", 1}});
  ok("prompt_cache_key", {{"prompt_cache_key", "k"}});
  no("prompt_cache_key", {{"prompt_cache_key", 1}});
  ok("prompt_cache_retention", {{"prompt_cache_retention", "24h"}});
  no("prompt_cache_retention", {{"prompt_cache_retention", 1}});
  ok("prompt_cache_options", {{"prompt_cache_options", {{"mode", "explicit"}}}});
  no("prompt_cache_options", {{"prompt_cache_options", "x"}});
  no("prompt", {{"prompt", {{"id", "pmpt_1"}}}});
  no("context_management", {{"context_management", Json::array({{{"type", "compaction"}}})}});
  no("moderation", {{"moderation", {{"model", "omni-moderation-latest"}}}});
  // Not fields of this endpoint: refused by name, null is unset.
  no("messages", {{"messages", Json::array()}});
  no("max_tokens", {{"max_tokens", 3}});
  no("frobnicate", {{"frobnicate", 1}});
  ok("frobnicate", {{"frobnicate", nullptr}});

  // Coverage: every kResponses row has an accepted and a refused probe (refused rows: a refused one).
  for (const RequestField& f : RequestFields()) {
    if (!FindRequestField(f.name, Endpoint::kResponses) || FindRequestField(f.name, Endpoint::kResponses) != &f) {
      continue;
    }
    bool a = false, r = false;
    for (const Probe& p : probes) {
      if (p.field != f.name) continue;
      (p.accepted ? a : r) = true;
    }
    EXPECT_TRUE(r) << f.name << ": no refused probe";
    if (f.use != FieldUse::kRefused) EXPECT_TRUE(a) << f.name << ": no accepted probe";
  }

  for (const Probe& p : probes) {
    SCOPED_TRACE(p.field + ": " + p.extra.dump());
    const size_t before = engine_->submitted().size();
    Json body = Body();
    for (const auto& [k, v] : p.extra.items()) body[k] = v;
    const Reply r = Post("/v1/responses", body);
    if (p.accepted) {
      EXPECT_EQ(r.status, 200) << r.body;
      continue;
    }
    ASSERT_EQ(r.status, 400) << r.body;
    const std::string param = r.json()["error"]["param"].is_string() ? r.json()["error"]["param"].get<std::string>() : "";
    EXPECT_TRUE(param == p.field || param.rfind(p.field + ".", 0) == 0 || param.rfind(p.field + "[", 0) == 0)
        << "param '" << param << "': " << r.body;
    EXPECT_EQ(engine_->submitted().size(), before) << "a refused request reached the engine";
  }
}

TEST_F(ResponsesTest, StoredResponsesDoNotExist) {
  Start();
  const Reply r = Do("GET", "/v1/responses/resp_abc");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(ErrorMessage(r).find("keeps no responses"), std::string::npos);
  const Reply m = Post("/v1/responses", Body({{"messages", Json::array()}}));
  EXPECT_NE(ErrorMessage(m).find("is a field of /v1/chat/completions"), std::string::npos) << m.body;
}

}  // namespace
}  // namespace gyre::serve::testing
