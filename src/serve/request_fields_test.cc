// Issue 10: nothing is accepted and ignored. Every field of both generation endpoints is proved
// honoured (a probe shows what it changes in the prompt, the engine's parameters or the response)
// or refused (a 400 whose param names it), end to end through the HTTP server over a FakeEngine.
//
// Sections: the names OpenAI's client and vLLM define (independent of the table in
// openai_fields.cc, so a forgotten row shows); the probe harness; the probe of every row, with a
// coverage check that fails for a row without one; behaviours that need more than a probe
// (include_stop_str_in_output streamed, echo streamed, the GLM template with tool messages and
// continue_final_message). A new field needs its row, then its probes in EveryFieldIsHonouredOrRefused.
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <sstream>

#include "serve/openai_fields.h"
#include "serve/server_test_fixture.h"

namespace gyre::serve {
namespace {

using testing::FakeEngineOptions;
using testing::Reply;
using testing::ServerTest;

// ---- the names OpenAI and vLLM define ---------------------------------------------------------

// ChatCompletionCreateParamsBase and CompletionCreateParamsBase of the openai npm client 6.49.0
// (tests/serve/package.json).
constexpr const char* kOpenAiChat[] = {
    "messages", "model", "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
    "max_completion_tokens", "max_tokens", "metadata", "modalities", "moderation", "n", "parallel_tool_calls",
    "prediction", "presence_penalty", "prompt_cache_key", "prompt_cache_options", "prompt_cache_retention",
    "reasoning_effort", "response_format", "safety_identifier", "seed", "service_tier", "stop", "store", "stream",
    "stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user", "verbosity",
    "web_search_options"};
constexpr const char* kOpenAiCompletions[] = {
    "model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n",
    "presence_penalty", "seed", "stop", "stream", "stream_options", "suffix", "temperature", "top_p", "user"};
// vLLM's ChatCompletionRequest / CompletionRequest extensions (vllm/entrypoints/openai/protocol.py).
constexpr const char* kVllmBoth[] = {
    "best_of", "use_beam_search", "top_k", "min_p", "repetition_penalty", "length_penalty", "stop_token_ids",
    "include_stop_str_in_output", "ignore_eos", "min_tokens", "skip_special_tokens",
    "spaces_between_special_tokens", "truncate_prompt_tokens", "prompt_logprobs", "allowed_token_ids",
    "add_special_tokens", "response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
    "guided_decoding_backend", "guided_whitespace_pattern", "structured_outputs", "priority", "request_id",
    "logits_processors", "return_tokens_as_token_ids", "return_token_ids", "cache_salt", "kv_transfer_params",
    "vllm_xargs", "echo"};
constexpr const char* kVllmChat[] = {
    "bad_words", "add_generation_prompt", "continue_final_message", "documents", "chat_template",
    "chat_template_kwargs", "mm_processor_kwargs", "media_io_kwargs", "structural_tag", "include_reasoning",
    "reasoning_effort", "parallel_tool_calls"};
constexpr const char* kVllmCompletions[] = {"prompt_embeds"};

TEST(RequestFields, EveryNameOpenAiOrVllmDefinesHasARow) {
  auto expect_rows = [](std::span<const char* const> names, Endpoint e) {
    for (const char* n : names) EXPECT_NE(FindRequestField(n, e), nullptr) << n << " on " << EndpointPath(e);
  };
  expect_rows(kOpenAiChat, Endpoint::kChat);
  expect_rows(kVllmBoth, Endpoint::kChat);
  expect_rows(kVllmChat, Endpoint::kChat);
  expect_rows(kOpenAiCompletions, Endpoint::kCompletions);
  expect_rows(kVllmBoth, Endpoint::kCompletions);
  expect_rows(kVllmCompletions, Endpoint::kCompletions);
}

TEST(RequestFields, RowsAreUniqueAndDocumented) {
  std::ifstream in(std::string(GYRE_SOURCE_DIR) + "/docs/serve.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  ASSERT_FALSE(doc.empty()) << "docs/serve.md";
  // A name has at most one row per endpoint (/v1/responses has rows of its own).
  std::set<std::pair<std::string_view, uint8_t>> seen;
  for (const RequestField& f : RequestFields()) {
    for (uint8_t bit : {1, 2, 4}) {
      if (f.endpoints & bit) EXPECT_TRUE(seen.insert({f.name, bit}).second) << "two rows for " << f.name;
    }
    EXPECT_FALSE(f.note.empty()) << f.name;
    EXPECT_NE(doc.find("| `" + std::string(f.name) + "` |"), std::string::npos) << f.name << " is not in docs/serve.md";
  }
}

// The parser's guards: a field read without a row aborts; a row the parser never reads is a 500,
// not an accepted-and-ignored field.
TEST(RequestFields, BodyFieldsCatchesAParserThatForgetsAField) {
  const Json body = Json::parse(R"({"temperature": 0.5, "stop": null})");
  auto f = BodyFields::Open(body, Endpoint::kCompletions);
  ASSERT_TRUE(f.ok());
  const Status forgot = f->CheckAllRead();
  EXPECT_EQ(forgot.code(), StatusCode::kInternal);
  EXPECT_NE(forgot.message().find("'temperature'"), std::string::npos) << forgot.message();
  EXPECT_NE(f->Get("temperature"), nullptr);
  EXPECT_TRUE(f->CheckAllRead().ok());  // null fields need no read
  EXPECT_DEATH(f->Get("frobnicate"), "GYRE_CHECK");
}

// ---- probe harness ----------------------------------------------------------------------------

enum class Expect { kHonoured, kAccepted, kRefused };

struct Outcome {
  Reply reply;
  Json json;
  std::optional<RequestParams> params;  // what reached the engine, if anything did
  Json context;                         // the chat template context (chat only)

  // The generated text (stream or not, either endpoint).
  std::string Text() const {
    if (reply.headers.count("content-type") && reply.headers.at("content-type") == "text/event-stream") {
      std::string t;
      for (const std::string& e : reply.events()) {
        if (e == "[DONE]") continue;
        const Json c = Json::parse(e);
        if (c["choices"].empty()) continue;
        const Json& ch = c["choices"][0];
        if (ch.contains("text")) t += ch["text"].get<std::string>();
        if (ch.contains("delta") && ch["delta"].contains("content")) t += ch["delta"]["content"].get<std::string>();
      }
      return t;
    }
    const Json& ch = json["choices"][0];
    return ch.contains("text") ? ch["text"].get<std::string>() : ch["message"]["content"].get<std::string>();
  }
  std::string Finish() const { return json["choices"][0]["finish_reason"]; }
};

struct Probe {
  std::string field;
  Endpoint endpoint;
  Json extra;  // merged into the base body (ServerTest::Chat / Completion)
  Expect expect;
  std::function<void(const Outcome&)> check = nullptr;  // kHonoured: what the field changed
};

class RequestFieldsTest : public ServerTest {
 protected:
  // The script ends with a special token, so skip_special_tokens has something to skip; [gMASK] is
  // the BOS the tokenizer config asks for, so add_special_tokens has something to add.
  static constexpr const char* kScript = "Hello world, this is a test.<|observation|>";

  void StartProbing() {
    tokenizer_config_.bos_token = "[gMASK]";
    tokenizer_config_.add_bos_token = true;
    Start({}, {}, kScript);
    script_ = *tok_->Encode(kScript);
  }
  // The text of the first `n` script tokens (special tokens kept).
  std::string Script(size_t n) const {
    return *tok_->Decode(std::vector<int32_t>(script_.begin(), script_.begin() + static_cast<long>(n)));
  }
  std::vector<int32_t> Ids(const std::string& text) const { return *tok_->Encode(text); }
  std::vector<int32_t> WithBos(std::vector<int32_t> ids) const {
    ids.insert(ids.begin(), *tok_->TokenToId("[gMASK]"));
    return ids;
  }

  Outcome Run(const Probe& p) {
    Json body = p.endpoint == Endpoint::kChat ? Chat() : Completion();
    for (const auto& [k, v] : p.extra.items()) body[k] = v;
    const size_t before = engine_->submitted().size();
    last_context_ = nullptr;
    Outcome o;
    o.reply = Post(EndpointPath(p.endpoint), body);
    o.json = o.reply.json();
    const auto submitted = engine_->submitted();
    if (submitted.size() > before) o.params = submitted.back();
    o.context = last_context_;
    return o;
  }

  void Check(const Probe& p) {
    SCOPED_TRACE(p.field + " on " + EndpointPath(p.endpoint) + ": " + p.extra.dump());
    const Outcome o = Run(p);
    switch (p.expect) {
      case Expect::kRefused: {
        ASSERT_EQ(o.reply.status, 400) << o.reply.body;
        const std::string param = o.json["error"]["param"].is_string() ? o.json["error"]["param"].get<std::string>() : "";
        const bool names_it = param == p.field || param.rfind(p.field + ".", 0) == 0 || param.rfind(p.field + "[", 0) == 0;
        EXPECT_TRUE(names_it) << "param '" << param << "': " << o.reply.body;
        EXPECT_FALSE(o.params.has_value()) << "a refused request reached the engine";
        break;
      }
      case Expect::kAccepted:
        EXPECT_EQ(o.reply.status, 200) << o.reply.body;
        break;
      case Expect::kHonoured:
        ASSERT_TRUE(p.check) << "an honoured probe needs a check";
        p.check(o);
        break;
    }
  }

  std::vector<int32_t> script_;
};

void Ok(const Outcome& o) { ASSERT_EQ(o.reply.status, 200) << o.reply.body; }

// A value for a refused field that a client would really send.
Json RefusedValue(std::string_view field) {
  static const Json kValues = Json::parse(R"({
    "reasoning_effort": "low", "verbosity": "low", "audio": {"voice": "alloy", "format": "wav"},
    "prediction": {"type": "content", "content": "x"}, "web_search_options": {}, "moderation": {},
    "functions": [{"name": "f"}], "function_call": "auto", "allowed_token_ids": [1, 2],
    "truncate_prompt_tokens": 8, "prompt_logprobs": 1, "logits_processors": ["m.P"], "chat_template": "{{ 1 }}",
    "documents": [{"title": "t", "text": "x"}], "mm_processor_kwargs": {}, "media_io_kwargs": {},
    "prompt_embeds": "AAAA",
    "guided_grammar": "root ::= \"a\"", "guided_decoding_backend": "xgrammar", "guided_whitespace_pattern": " ",
    "structural_tag": "{}", "kv_transfer_params": {},
    "vllm_xargs": {"k": 1}})");
  const std::string key(field);
  return kValues.contains(key) ? kValues[key] : Json(true);
}

// ---- every row --------------------------------------------------------------------------------

TEST_F(RequestFieldsTest, EveryFieldIsHonouredOrRefused) {
  StartProbing();
  const Endpoint C = Endpoint::kChat, P = Endpoint::kCompletions;
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "d", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  std::vector<Probe> probes;
  auto add = [&](std::string f, std::vector<Endpoint> es, Json extra, Expect e,
                 std::function<void(const Outcome&)> check = nullptr) {
    for (Endpoint ep : es) probes.push_back(Probe{f, ep, extra, e, check});
  };
  const std::vector<Endpoint> both = {C, P};
  const Expect H = Expect::kHonoured, A = Expect::kAccepted, R = Expect::kRefused;

  // Honoured: each check shows the effect.
  add("model", both, {{"model", "nope"}}, H, [](const Outcome& o) {
    EXPECT_EQ(o.reply.status, 404);
    EXPECT_EQ(o.json["error"]["param"], "model");
  });
  add("messages", {C}, {{"messages", Json::array({{{"role", "user"}, {"content", "Yo"}}})}}, H, [&](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.params->prompt, Ids("[gMASK]<sop><|user|>Yo<|assistant|>"));
  });
  add("prompt", {P}, {{"prompt", "Yo"}}, H, [&](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.params->prompt, WithBos(Ids("Yo")));
  });
  add("stream", both, {{"stream", true}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.reply.headers.at("content-type"), "text/event-stream");
    EXPECT_EQ(o.reply.events().back(), "[DONE]");
  });
  add("stream_options", both, {{"stream", true}, {"stream_options", {{"include_usage", true}}}}, H,
      [](const Outcome& o) {
        Ok(o);
        const auto ev = o.reply.events();
        EXPECT_EQ(Json::parse(ev[ev.size() - 2])["usage"]["completion_tokens"], 5);
      });
  add("stream_options", both, {{"stream", true}, {"stream_options", {{"include_obfuscation", false}}}}, A);
  add("stream_options", both, {{"stream", true}, {"stream_options", {{"include_obfuscation", true}}}}, R);
  add("stream_options", both, {{"stream", true}, {"stream_options", {{"continuous_usage_stats", true}}}}, R);
  add("stream_options", both, {{"stream_options", {{"include_usage", true}}}}, R);  // needs stream
  add("max_tokens", both, {{"max_tokens", 3}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.params->max_tokens, 3);
    EXPECT_EQ(o.json["usage"]["completion_tokens"], 3);
  });
  add("max_completion_tokens", {C}, {{"max_completion_tokens", 3}, {"max_tokens", 9}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.params->max_tokens, 3);
  });
  add("temperature", both, {{"temperature", 0.5}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_FLOAT_EQ(o.params->sampling.temperature, 0.5f);
  });
  add("temperature", both, {{"temperature", 5}}, R);
  add("top_p", both, {{"top_p", 0.5}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_FLOAT_EQ(o.params->sampling.top_p, 0.5f);
  });
  add("seed", both, {{"seed", 7}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.params->sampling.seed, 7u);
  });
  add("top_k", both, {{"top_k", 7}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.params->sampling.top_k, 7);
  });
  add("min_p", both, {{"min_p", 0.25}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_FLOAT_EQ(o.params->sampling.min_p, 0.25f);
  });
  add("stop", both, {{"stop", {"is a"}}, {"max_tokens", 50}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.Text(), "Hello world, this ");
    EXPECT_EQ(o.Finish(), "stop");
  });
  add("logprobs", {C}, {{"logprobs", true}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.json["choices"][0]["logprobs"]["content"].size(), 5u);
  });
  add("logprobs", {P}, {{"logprobs", 2}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.params->top_logprobs, 2);
    EXPECT_EQ(o.json["choices"][0]["logprobs"]["tokens"].size(), 5u);
  });
  add("top_logprobs", {C}, {{"logprobs", true}, {"top_logprobs", 2}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.params->top_logprobs, 2);
    EXPECT_EQ(o.json["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  });
  const Json prefilled = Json::array({{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Once"}}});
  add("echo", {C}, {{"echo", true}, {"messages", prefilled}}, H, [&](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.Text(), "Once" + Script(5));
  });
  add("echo", {P}, {{"echo", true}}, H, [&](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.Text(), "Hello" + Script(5));
  });
  add("echo", {P}, {{"echo", true}, {"logprobs", 1}}, R);
  add("tools", {C}, {{"tools", tools}}, H, [&](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.context["tools"], tools);
  });
  add("tools", {C}, {{"tools", Json::object()}}, R);
  add("tools", {C}, {{"tools", Json::parse(R"([{"type": "function", "function": {"name": ""}}])")}}, R);
  add("tools", {C}, {{"tools", Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": 1}}])")}}, R);
  add("tools", {C}, {{"tools", Json::parse(R"([{"type": "function", "function": {"name": "f", "strict": true}}])")}}, R);
  add("tool_choice", {C}, {{"tools", tools}, {"tool_choice", "none"}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_FALSE(o.context.contains("tools"));  // withheld: the model is not offered them
  });
  add("tool_choice", {C}, {{"tools", tools}, {"tool_choice", "auto"}}, H, [&](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.context["tools"], tools);
  });
  add("tool_choice", {C}, {{"tools", tools}, {"tool_choice", "required"}}, R);
  add("tool_choice", {C}, {{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}, R);
  add("tool_choice", {C},
      {{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}, R);
  add("tool_choice", {C}, {{"tool_choice", "auto"}}, R);  // no tools
  add("stop_token_ids", both, {{"stop_token_ids", {script_[2]}}, {"max_tokens", 50}}, H, [&](const Outcome& o) {
    Ok(o);
    EXPECT_NE(std::count(o.params->stop_ids.begin(), o.params->stop_ids.end(), script_[2]), 0);
    EXPECT_EQ(o.Text(), Script(2));  // the stop token's text is left out
    EXPECT_EQ(o.Finish(), "stop");
  });
  add("include_stop_str_in_output", both, {{"stop", "is a"}, {"include_stop_str_in_output", true}, {"max_tokens", 50}},
      H, [](const Outcome& o) {
        Ok(o);
        EXPECT_EQ(o.Text(), "Hello world, this is a");
        EXPECT_EQ(o.Finish(), "stop");
      });
  add("ignore_eos", both, {{"ignore_eos", true}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_TRUE(o.params->ignore_eos);
  });
  const Json all_tokens = static_cast<int64_t>(script_.size());
  add("skip_special_tokens", both, {{"skip_special_tokens", false}, {"max_tokens", all_tokens}}, H,
      [&](const Outcome& o) {
        Ok(o);
        EXPECT_EQ(o.Text(), std::string(kScript));  // by default "<|observation|>" adds no text
      });
  add("spaces_between_special_tokens", both,
      {{"skip_special_tokens", false}, {"spaces_between_special_tokens", false}, {"max_tokens", all_tokens}}, H,
      [&](const Outcome& o) {
        Ok(o);
        EXPECT_EQ(o.Text(), std::string(kScript));  // no space before "<|observation|>"
      });
  add("spaces_between_special_tokens", both, {{"spaces_between_special_tokens", true}}, A);  // nothing to space
  add("spaces_between_special_tokens", both, {{"skip_special_tokens", false}, {"spaces_between_special_tokens", true}}, R);
  add("add_generation_prompt", {C}, {{"add_generation_prompt", false}}, H, [&](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.params->prompt, Ids("[gMASK]<sop><|user|>Hi"));
  });
  add("continue_final_message", {C}, {{"continue_final_message", true}, {"messages", prefilled}}, H,
      [&](const Outcome& o) {
        Ok(o);
        EXPECT_EQ(o.context["add_generation_prompt"], false);
        EXPECT_EQ(o.params->prompt, Ids("[gMASK]<sop><|user|>Hi<|assistant|>Once"));
      });
  add("continue_final_message", {C}, {{"continue_final_message", true}, {"add_generation_prompt", true}}, R);
  add("add_special_tokens", {C}, {{"add_special_tokens", true}}, H, [&](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.params->prompt, WithBos(Ids("[gMASK]<sop><|user|>Hi<|assistant|>")));
  });
  add("add_special_tokens", {P}, {{"add_special_tokens", false}}, H, [&](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.params->prompt, Ids("Hello"));  // the default adds the BOS
  });
  add("chat_template_kwargs", {C}, {{"chat_template_kwargs", {{"enable_thinking", false}}}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.context["enable_thinking"], false);
  });
  add("chat_template_kwargs", {C}, {{"chat_template_kwargs", {{"tools", Json::array()}}}}, R);
  add("request_id", {C}, {{"request_id", "abc-1"}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.json["id"], "chatcmpl-abc-1");
  });
  add("request_id", {P}, {{"request_id", "abc-1"}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.json["id"], "cmpl-abc-1");
  });
  add("request_id", both, {{"request_id", "a b"}}, R);

  // n: one engine request per choice, seeds seed + i; usage counts the prompt once (the
  // streamed form is in NChoicesStreamWithTheirIndex).
  add("n", both, {{"n", 3}, {"seed", 7}}, H, [&](const Outcome& o) {
    Ok(o);
    ASSERT_EQ(o.json["choices"].size(), 3u);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(o.json["choices"][i]["index"], i);
    EXPECT_EQ(o.params->sampling.seed, 9u);
    EXPECT_EQ(o.json["usage"]["prompt_tokens"], o.params->prompt.size());
    EXPECT_EQ(o.json["usage"]["completion_tokens"], 15);
  });
  add("n", both, {{"n", 0}}, R);
  add("n", both, {{"n", 129}}, R);
  // Logit processing: the values reach the engine (their effect: engine_test.cc, ops/penalties_test.cc
  // and sampling_fields_test.cc over the real engine).
  add("frequency_penalty", both, {{"frequency_penalty", 0.5}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_FLOAT_EQ(o.params->sampling.frequency_penalty, 0.5f);
  });
  add("frequency_penalty", both, {{"frequency_penalty", 2.5}}, R);
  add("presence_penalty", both, {{"presence_penalty", -0.5}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_FLOAT_EQ(o.params->sampling.presence_penalty, -0.5f);
  });
  add("presence_penalty", both, {{"presence_penalty", -3}}, R);
  add("repetition_penalty", both, {{"repetition_penalty", 1.1}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_FLOAT_EQ(o.params->sampling.repetition_penalty, 1.1f);
  });
  add("repetition_penalty", both, {{"repetition_penalty", 0}}, R);
  add("repetition_penalty", both, {{"repetition_penalty", 2.5}}, R);
  add("min_tokens", both, {{"min_tokens", 3}}, H, [](const Outcome& o) {
    Ok(o);
    EXPECT_EQ(o.params->sampling.min_tokens, 3);
  });
  add("min_tokens", both, {{"min_tokens", -1}}, R);
  add("min_tokens", both, {{"min_tokens", 3}, {"max_tokens", 2}}, R);
  add("logit_bias", both, {{"logit_bias", {{"5", 1.5}, {"17", -100}}}}, H, [](const Outcome& o) {
    Ok(o);
    ASSERT_EQ(o.params->logit_bias.size(), 2u);
    EXPECT_EQ(o.params->logit_bias[0].id, 5);
    EXPECT_FLOAT_EQ(o.params->logit_bias[0].bias, 1.5f);
    EXPECT_EQ(o.params->logit_bias[1].id, 17);
    EXPECT_FLOAT_EQ(o.params->logit_bias[1].bias, -100.0f);
  });
  add("logit_bias", both, {{"logit_bias", {{"abc", 1}}}}, R);
  add("logit_bias", both, {{"logit_bias", {{"-5", 1}}}}, R);
  add("logit_bias", both, {{"logit_bias", {{"5", 1e9}}}}, R);  // OpenAI refuses outside [-100, 100]
  add("logit_bias", both, {{"logit_bias", {{"5", "high"}}}}, R);
  add("logit_bias", both, {{"logit_bias", {{"99999999", 1}}}}, R);  // outside the vocabulary
  add("logit_bias", both, {{"logit_bias", Json::array({5})}}, R);

  // Default only: accepted at the neutral value, refused at any other.
  auto neutral = [&](const char* f, std::vector<Endpoint> es, Json ok, Json refused) {
    add(f, es, {{f, ok}}, A);
    add(f, es, {{f, refused}}, R);
  };
  neutral("best_of", both, 1, 3);
  // Structured output: each form reaches the engine as a constraint; bad values and unsupported
  // schema keywords are refused naming the field.
  auto constrained = [&](const char* f, Json value) {
    add(f, both, {{f, value}}, H, [](const Outcome& o) {
      Ok(o);
      EXPECT_TRUE(o.params->constraint != nullptr);
    });
  };
  add("response_format", both, {{"response_format", {{"type", "text"}}}}, A);
  constrained("response_format", {{"type", "json_object"}});
  constrained("response_format", Json::parse(R"({"type": "json_schema", "json_schema": {"name": "x", "strict": true,
      "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                 "additionalProperties": false}}})"));
  add("response_format", both, {{"response_format", {{"type", "yaml"}}}}, R);
  add("response_format", both,
      {{"response_format", Json::parse(R"({"type": "json_schema", "json_schema": {"schema": {"type": "string", "format": "date"}}})")}},
      R);
  constrained("guided_json", Json::parse(R"({"type": "array", "items": {"type": "boolean"}, "maxItems": 3})"));
  add("guided_json", both, {{"guided_json", Json::parse(R"({"$ref": "#/x"})")}}, R);
  constrained("guided_regex", "[a-z]{1,8}");
  add("guided_regex", both, {{"guided_regex", "(?=x)a"}}, R);
  constrained("guided_choice", Json::array({"yes", "no"}));
  add("guided_choice", both, {{"guided_choice", Json::array()}}, R);
  constrained("structured_outputs", {{"choice", Json::array({"a", "b"})}});
  constrained("structured_outputs", {{"regex", "x+"}});
  add("structured_outputs", both, {{"structured_outputs", {{"grammar", "root ::= x"}}}}, R);
  add("guided_choice", both, {{"guided_choice", Json::array({"a"})}, {"guided_regex", "a"}}, R);
  neutral("suffix", {P}, "", "x");
  neutral("parallel_tool_calls", {C}, true, false);
  neutral("store", {C}, false, true);
  neutral("service_tier", {C}, "auto", "priority");
  neutral("modalities", {C}, Json::array({"text"}), Json::array({"text", "audio"}));
  neutral("use_beam_search", both, false, true);
  neutral("length_penalty", both, 1.0, 0.8);
  neutral("bad_words", both, Json::array(), Json::array({"x"}));
  neutral("priority", both, 0, 1);
  neutral("include_reasoning", {C}, true, false);
  neutral("return_tokens_as_token_ids", both, false, true);
  neutral("return_token_ids", both, false, true);

  // Unused: accepted (of the right type), read by nothing.
  neutral("metadata", {C}, {{"k", "v"}}, "x");
  neutral("user", both, "u-1", 5);
  neutral("safety_identifier", {C}, "s", 5);
  neutral("prompt_cache_key", {C}, "k", 5);
  neutral("prompt_cache_retention", {C}, "24h", 5);
  neutral("prompt_cache_options", {C}, {{"mode", "explicit"}}, "x");
  neutral("cache_salt", both, "salt", 5);

  // Refused: any value.
  for (const RequestField& f : RequestFields()) {
    if (f.use != FieldUse::kRefused) continue;
    for (Endpoint e : both) {
      if (FindRequestField(f.name, e) == &f) add(std::string(f.name), {e}, {{std::string(f.name), RefusedValue(f.name)}}, R);
    }
  }

  // Not fields: refused by name (null is "unset"), also a field of the other endpoint.
  add("frobnicate", both, {{"frobnicate", 1}}, R);
  add("frobnicate", both, {{"frobnicate", nullptr}}, A);
  add("suffix", {C}, {{"suffix", "x"}}, R);
  add("messages", {P}, {{"messages", Json::array()}}, R);
  add("top_logprobs", {P}, {{"top_logprobs", 2}}, R);
  add("max_completion_tokens", {P}, {{"max_completion_tokens", 3}}, R);

  // Coverage: every row has the probes its use needs, on every endpoint it belongs to.
  for (const RequestField& f : RequestFields()) {
    for (Endpoint e : both) {
      // The row itself must be of this endpoint (a name may have another row on /v1/responses).
      if (FindRequestField(f.name, e) != &f) continue;
      std::set<Expect> kinds;
      for (const Probe& p : probes) {
        if (p.field == f.name && p.endpoint == e) kinds.insert(p.expect);
      }
      SCOPED_TRACE(std::string(f.name) + " on " + EndpointPath(e) + " (" + FieldUseName(f.use) + ")");
      switch (f.use) {
        case FieldUse::kHonoured: EXPECT_TRUE(kinds.count(H)) << "no probe shows what it changes"; break;
        case FieldUse::kDefaultOnly:
        case FieldUse::kUnused:
          EXPECT_TRUE(kinds.count(A)) << "no probe of the accepted value";
          EXPECT_TRUE(kinds.count(R)) << "no probe of a refused value";
          break;
        case FieldUse::kRefused: EXPECT_TRUE(kinds.count(R)) << "no probe of the refusal"; break;
      }
    }
  }
  for (const Probe& p : probes) Check(p);
}

// ---- behaviours that need more than a probe ---------------------------------------------------

// n > 1 streamed: every chunk carries its choice's index; each choice gets its text and its own
// finish chunk; one usage chunk counts the prompt once and the completions summed.
TEST_F(RequestFieldsTest, NChoicesStreamWithTheirIndex) {
  StartProbing();
  for (Endpoint e : {Endpoint::kChat, Endpoint::kCompletions}) {
    SCOPED_TRACE(EndpointPath(e));
    const Outcome o = Run({"n", e, {{"n", 3}, {"stream", true}, {"stream_options", {{"include_usage", true}}}},
                           Expect::kAccepted});
    ASSERT_EQ(o.reply.status, 200) << o.reply.body;
    const auto events = o.reply.events();
    ASSERT_EQ(events.back(), "[DONE]");
    std::vector<std::string> text(3);
    std::vector<int> finishes(3, 0);
    int usage_chunks = 0;
    for (const std::string& ev : events) {
      if (ev == "[DONE]") continue;
      const Json c = Json::parse(ev);
      if (c["choices"].empty()) {
        ++usage_chunks;
        EXPECT_EQ(c["usage"]["prompt_tokens"], o.params->prompt.size());
        EXPECT_EQ(c["usage"]["completion_tokens"], 15);
        continue;
      }
      ASSERT_EQ(c["choices"].size(), 1u);
      const Json& ch = c["choices"][0];
      const int i = ch["index"].get<int>();
      ASSERT_TRUE(i >= 0 && i < 3) << ev;
      if (ch.contains("text")) text[i] += ch["text"].get<std::string>();
      if (ch.contains("delta") && ch["delta"].contains("content") && ch["delta"]["content"].is_string())
        text[i] += ch["delta"]["content"].get<std::string>();
      if (ch["finish_reason"].is_string()) {
        ++finishes[i];
        EXPECT_EQ(ch["finish_reason"], "length");
      }
    }
    EXPECT_EQ(usage_chunks, 1);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(text[i], Script(5)) << "choice " << i;
      EXPECT_EQ(finishes[i], 1) << "choice " << i;
    }
  }
}

TEST_F(RequestFieldsTest, IncludeStopStrInOutputStreamedAndNot) {
  StartProbing();
  for (Endpoint e : {Endpoint::kChat, Endpoint::kCompletions}) {
    for (bool stream : {false, true}) {
      for (bool include : {false, true}) {
        SCOPED_TRACE(std::string(EndpointPath(e)) + (stream ? " stream" : "") + (include ? " include" : ""));
        const Outcome s = Run({"stop", e, {{"stream", stream}, {"stop", {"zzz", "is a"}}, {"max_tokens", 50},
                                          {"include_stop_str_in_output", include}}, Expect::kAccepted});
        ASSERT_EQ(s.reply.status, 200);
        EXPECT_EQ(s.Text(), include ? "Hello world, this is a" : "Hello world, this ");
        const Outcome t = Run({"stop_token_ids", e, {{"stream", stream}, {"stop_token_ids", {script_[3]}},
                                                    {"include_stop_str_in_output", include}, {"max_tokens", 50}},
                               Expect::kAccepted});
        ASSERT_EQ(t.reply.status, 200);
        EXPECT_EQ(t.Text(), Script(include ? 4 : 3));
        // A stop string that is a special token: matched though its text is skipped.
        const Outcome u = Run({"stop", e, {{"stream", stream}, {"stop", "<|observation|>"}, {"max_tokens", 50},
                                          {"include_stop_str_in_output", include}}, Expect::kAccepted});
        ASSERT_EQ(u.reply.status, 200);
        EXPECT_EQ(u.Text(), std::string("Hello world, this is a test.") + (include ? "<|observation|>" : ""));
      }
    }
  }
}

TEST_F(RequestFieldsTest, EosTextFollowsIncludeStopStr) {
  tokenizer_config_.eos_token = "<|endoftext|>";
  Start({}, {}, "Hi<|endoftext|>");
  for (bool include : {false, true}) {
    const Reply r = Post("/v1/completions", Completion({{"skip_special_tokens", false}, {"max_tokens", 20},
                                                        {"include_stop_str_in_output", include}}));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json()["choices"][0]["text"], include ? "Hi<|endoftext|>" : "Hi");
    EXPECT_EQ(r.json()["choices"][0]["finish_reason"], "stop");
  }
}

TEST_F(RequestFieldsTest, EchoIsStreamedFirst) {
  StartProbing();
  const Json prefilled = Json::array({{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Once"}}});
  const Outcome c = Run({"echo", Endpoint::kChat, {{"stream", true}, {"echo", true}, {"messages", prefilled}},
                         Expect::kAccepted});
  ASSERT_EQ(c.reply.status, 200);
  const auto ev = c.reply.events();
  EXPECT_EQ(Json::parse(ev[1])["choices"][0]["delta"]["content"], "Once");  // after the role chunk
  EXPECT_EQ(c.Text(), "Once" + Script(5));
  const Outcome p = Run({"echo", Endpoint::kCompletions, {{"stream", true}, {"echo", true}, {"prompt", {5, 6}}},
                         Expect::kAccepted});
  ASSERT_EQ(p.reply.status, 200);
  const std::string prompt = *tok_->Decode(std::vector<int32_t>{5, 6});
  EXPECT_EQ(Json::parse(p.reply.events()[0])["choices"][0]["text"], prompt);
  EXPECT_EQ(p.Text(), prompt + Script(5));
  // Without a final assistant message there is nothing to echo.
  const Outcome n = Run({"echo", Endpoint::kChat, {{"echo", true}}, Expect::kAccepted});
  EXPECT_EQ(n.Text(), Script(5));
}

// With the bundled GLM-5 template: developer and tool messages and tool calls reach the prompt,
// and continue_final_message leaves the final assistant message open.
TEST_F(RequestFieldsTest, GlmTemplateGetsEveryRoleAndContinuesTheFinalMessage) {
  UseGlmTemplate();
  Start();
  const Json messages = Json::parse(R"([
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "assistant", "content": "It is"}])");
  const Reply r = Post("/v1/chat/completions", Chat({{"messages", messages}, {"continue_final_message", true},
                                                     {"echo", true}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string prompt = *tok_->Decode(engine_->submitted().at(0).prompt);
  EXPECT_EQ(prompt,
            "[gMASK]<sop><|system|>Be brief.<|user|>Weather in Paris?<|assistant|></think>"
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"
            "<|observation|><tool_response>sunny</tool_response><|assistant|></think>It is");
  EXPECT_EQ(r.json()["choices"][0]["message"]["content"].get<std::string>().rfind("It is", 0), 0u);
}

TEST(CutAfterFinalMessage, FollowsTransformers) {
  EXPECT_EQ(*CutAfterFinalMessage("<a>Once upon<end><b>", "Once upon"), "<a>Once upon");
  // The template trimmed the trailing space: the cut keeps it trimmed.
  EXPECT_EQ(*CutAfterFinalMessage("<a>Once upon<end>", "Once upon "), "<a>Once upon");
  // The template kept it: so does the cut.
  EXPECT_EQ(*CutAfterFinalMessage("<a>Once upon <end>", "Once upon "), "<a>Once upon ");
  // The last occurrence wins (an earlier message may hold the same text).
  EXPECT_EQ(*CutAfterFinalMessage("<u>hi<a>hi<end>", "hi"), "<u>hi<a>hi");
  auto missing = CutAfterFinalMessage("<a>ONCE<end>", "Once");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(ApiError::FromStatus(missing.error()).param, "continue_final_message");
}

}  // namespace
}  // namespace gyre::serve
