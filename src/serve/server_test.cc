// End-to-end tests of the HTTP server over loopback with a FakeEngine (no model); the client and
// the fixture are in server_test_fixture.h. Sections: routes and errors; generation (non-stream,
// SSE framing, usage, logprobs, stop); cancellation and slow clients; shutdown. Each request
// field's own check is in request_fields_test.cc.
#include "serve/server.h"

#include "serve/server_test_fixture.h"

namespace gyre::serve {
namespace {

using testing::Client;
using testing::FakeEngine;
using testing::FakeEngineOptions;
using testing::Reply;
using testing::ServerTest;
using testing::WaitFor;

// ---- routes and errors ------------------------------------------------------------------------

TEST_F(ServerTest, HealthModelsVersion) {
  Start();
  EXPECT_EQ(Do("GET", "/health").status, 200);
  const Reply m = Do("GET", "/v1/models");
  ASSERT_EQ(m.status, 200);
  const Json j = m.json();
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["id"], "tiny");
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_EQ(j["data"][0]["max_model_len"], 4096);
  EXPECT_EQ(Do("GET", "/v1/models/tiny").status, 200);
  EXPECT_EQ(Do("GET", "/v1/models/other").status, 404);
  EXPECT_EQ(Do("GET", "/version").status, 200);
}

// Regression: a 120 KB body of 60,000 nested arrays crashed the server (stack overflow in the
// recursive destruction of the parsed value), unauthenticated. Now a 400, and the server lives on.
TEST_F(ServerTest, DeeplyNestedBodyIsA400AndTheServerSurvives) {
  Start();
  const std::string deep = std::string(60000, '[') + std::string(60000, ']');
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    const Reply r = Do("POST", path, deep, {"Content-Type: application/json"});
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(ErrorMessage(r).find("nests deeper than"), std::string::npos) << r.body;
  }
  const std::string deep_field = "{\"model\": \"tiny\", \"messages\": " + std::string(5000, '[') + std::string(5000, ']') + "}";
  EXPECT_EQ(Do("POST", "/v1/chat/completions", deep_field, {"Content-Type: application/json"}).status, 400);
  EXPECT_EQ(Do("GET", "/health").status, 200);
}

// Regression: idle connections that never finish their headers held descriptors for 120 s and,
// in numbers, exhausted them. Now they are closed after header_timeout_ms, connections beyond
// max_connections are refused at accept, and the server keeps answering.
TEST_F(ServerTest, IdleConnectionsAreCappedAndTimedOut) {
  ServerOptions so;
  so.http.header_timeout_ms = 300;
  so.http.max_connections = 8;
  Start({}, so);
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 8; ++i) {
    idle.push_back(std::make_unique<Client>(port_));
    ASSERT_TRUE(idle.back()->ok());
    idle.back()->SendRaw("GET /health HTTP/1.1\r\nHost: x\r\n");  // headers never finished
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  {
    Client over(port_);  // the ninth: closed at accept
    ASSERT_TRUE(over.ok());
    over.SendRaw("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_NE(over.Read().status, 200);
  }
  // The idle ones are closed by the server after the header deadline; then /health answers.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  for (auto& c : idle) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(c->Read(3000).status, 0);  // end of stream (not a response, not a read timeout)
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1500));
  }
  EXPECT_EQ(Do("GET", "/health").status, 200);
}

// Regression: bodies were parsed, rendered and tokenized on the HTTP threads, so two big bodies
// stalled /health (1.8 s for two 15 MB bodies) and any number of them could be held in memory.
// Now preparation runs on a bounded pool: /health answers while a request per HTTP thread is
// still being prepared, and beyond the queue bound a request gets 429 at once.
TEST_F(ServerTest, HealthAnswersWhileBodiesAreBeingPrepared) {
  ServerOptions so;
  so.num_prepare_threads = 2;
  so.max_queued_prepares = 1;
  slow_render_ms_ = 800;
  Start({}, so);
  const std::string slow = Chat({{"messages", Json::array({{{"role", "user"}, {"content", "slow"}}})}}).dump();
  std::vector<std::unique_ptr<Client>> busy;
  for (int i = 0; i < 3; ++i) {  // two being prepared (as many as HTTP threads), then one queued
    busy.push_back(std::make_unique<Client>(port_));
    busy.back()->Send("POST", "/v1/chat/completions", slow);
    if (i < 2) ASSERT_TRUE(WaitFor([&] { return slow_renders_.load() == i + 1; }));
  }
  ASSERT_TRUE(WaitFor([&] { return server_->num_queued_prepares() == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(Do("GET", "/health").status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(300));
  Client over(port_);
  over.Send("POST", "/v1/chat/completions", slow);
  const Reply r = over.Read();
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_EQ(r.headers.count("retry-after"), 1u);
  for (auto& c : busy) EXPECT_EQ(c->Read().status, 200);
}

TEST(TokenizerVsModel, LargerTokenizerAndOutOfVocabularyEosAreRefused) {
  auto tok = Tokenizer::FromFile(std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/glm5_tiny/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  ModelConfig c;
  c.vocab_size = 1024;
  c.eos_token_ids = {1014};
  EXPECT_TRUE(CheckTokenizerMatchesModel(**tok, c).ok());
  c.vocab_size = 97;
  c.eos_token_ids = {96};
  Status s = CheckTokenizerMatchesModel(**tok, c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("97"), std::string::npos) << s.message();
  c.vocab_size = 4096;
  c.eos_token_ids = {4096};
  EXPECT_EQ(CheckTokenizerMatchesModel(**tok, c).code(), StatusCode::kInvalidArgument);
}

TEST_F(ServerTest, BannerNamesBudgets) {
  Start();
  const std::string b = server_->Banner();
  EXPECT_NE(b.find("http://127.0.0.1:" + std::to_string(port_)), std::string::npos) << b;
  EXPECT_NE(b.find("'tiny'"), std::string::npos) << b;
  EXPECT_NE(b.find("100 pages x 16 tokens"), std::string::npos) << b;
  EXPECT_NE(b.find("16 slots"), std::string::npos) << b;
}

TEST_F(ServerTest, UnknownRouteAndWrongMethod) {
  Start();
  const Reply r = Do("GET", "/nope");
  EXPECT_EQ(r.status, 404);
  ErrorMessage(r);
  const Reply m = Do("GET", "/v1/chat/completions");
  EXPECT_EQ(m.status, 405);
  EXPECT_EQ(m.headers.at("allow"), "POST");
  ErrorMessage(m);
  EXPECT_EQ(Do("POST", "/v1/models", "{}").status, 405);
}

TEST_F(ServerTest, MalformedJsonAndBadFields) {
  Start();
  const Reply r = Do("POST", "/v1/chat/completions", "{\"messages\": [");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(ErrorMessage(r).find("JSON"), std::string::npos);
  const Reply t = Post("/v1/chat/completions", Chat({{"temperature", 5}}));
  EXPECT_EQ(t.status, 400);
  EXPECT_NE(ErrorMessage(t).find("temperature"), std::string::npos);
  EXPECT_EQ(t.json()["error"]["param"], "temperature");
  const Reply n = Post("/v1/completions", Completion({{"n", 0}}));
  EXPECT_EQ(n.status, 400);
  EXPECT_EQ(n.json()["error"]["param"], "n");
  const Reply ids = Post("/v1/completions", Completion({{"prompt", {1, 99999}}}));
  EXPECT_EQ(ids.status, 400);
  EXPECT_TRUE(engine_->submitted().empty());
}

TEST_F(ServerTest, UnknownModelIs404) {
  Start();
  const Reply r = Post("/v1/chat/completions", Chat({{"model", "gpt-4"}}));
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(ErrorMessage(r).find("gpt-4"), std::string::npos);
  EXPECT_EQ(r.json()["error"]["code"], "model_not_found");
}

TEST_F(ServerTest, ContextTooLongNamesTheNumbers) {
  FakeEngineOptions eo;
  eo.max_model_len = 64;
  Start(eo);
  std::string long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt += "Hello world ";
  const auto n = static_cast<int64_t>(tok_->Encode(long_prompt)->size());
  const Reply r = Post("/v1/completions", Completion({{"prompt", long_prompt}, {"max_tokens", 10}}));
  EXPECT_EQ(r.status, 400);
  const std::string msg = ErrorMessage(r);
  EXPECT_NE(msg.find("maximum context length is 64 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("you requested " + std::to_string(n + 10) + " tokens (" + std::to_string(n) +
                     " in the prompt, 10 in the completion)"),
            std::string::npos)
      << msg;
  EXPECT_EQ(r.json()["error"]["code"], "context_length_exceeded");
  const Reply c = Post("/v1/chat/completions", Chat({{"max_tokens", 100}}));
  EXPECT_EQ(c.status, 400);
  EXPECT_NE(ErrorMessage(c).find("in the messages, 100 in the completion"), std::string::npos);
}

TEST_F(ServerTest, ApiKey) {
  ServerOptions so;
  so.api_key = "sekret";
  Start({}, so);
  const Reply none = Post("/v1/chat/completions", Chat());
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.json()["error"]["code"], "invalid_api_key");
  EXPECT_EQ(Post("/v1/chat/completions", Chat(), {"Authorization: Bearer wrong"}).status, 401);
  EXPECT_EQ(Do("GET", "/v1/models", "", {"Authorization: Bearer sekretX"}).status, 401);
  EXPECT_EQ(Post("/v1/chat/completions", Chat(), {"Authorization: Bearer sekret"}).status, 200);
  EXPECT_EQ(Do("GET", "/v1/models", "", {"Authorization: Bearer sekret"}).status, 200);
  EXPECT_EQ(Do("GET", "/health").status, 200);  // not under /v1
}

TEST_F(ServerTest, QueueFullIs429WithRetryAfter) {
  FakeEngineOptions eo;
  eo.max_in_flight = 1;
  Start(eo);
  engine_->SetPaused(true);
  Client first(port_);
  first.Send("POST", "/v1/completions", Completion().dump());
  ASSERT_TRUE(WaitFor([&] { return engine_->num_active() == 1; }));
  const Reply r = Post("/v1/completions", Completion());
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.headers.at("retry-after"), "1");
  ErrorMessage(r);
  engine_->SetPaused(false);
  EXPECT_EQ(first.Read().status, 200);
}

TEST_F(ServerTest, EngineStoppedIs503) {
  FakeEngineOptions eo;
  eo.submit_error = Status::Unavailable("the engine is not running");
  Start(eo);
  const Reply r = Post("/v1/completions", Completion());
  EXPECT_EQ(r.status, 503);
  ErrorMessage(r);
}

TEST_F(ServerTest, BodyTooLargeIs413) {
  ServerOptions so;
  so.http.max_body_bytes = 1024;
  Start({}, so);
  const Reply r = Post("/v1/completions", Completion({{"prompt", std::string(5000, 'a')}}));
  EXPECT_EQ(r.status, 413);
  ErrorMessage(r);
}

TEST_F(ServerTest, MalformedHttpIs400) {
  Start();
  Client c(port_);
  c.SendRaw("THIS IS NOT HTTP\r\n\r\n");
  const Reply r = c.Read();
  EXPECT_EQ(r.status, 400);
}

TEST_F(ServerTest, KeepAliveServesSeveralRequests) {
  Start();
  Client c(port_);
  for (int i = 0; i < 3; ++i) {
    c.Send("GET", "/health");
    EXPECT_EQ(c.Read().status, 200);
    c.Send("POST", "/v1/completions", Completion({{"stream", i == 1}}).dump());
    EXPECT_EQ(c.Read().status, 200);
  }
}

// ---- generation -------------------------------------------------------------------------------

TEST_F(ServerTest, ChatNonStream) {
  Start();
  const Reply r = Post("/v1/chat/completions", Chat({{"max_tokens", 4}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  const auto script = *tok_->Encode("Hello world, this is a test.");
  const std::string want = *tok_->Decode(std::vector<int32_t>(script.begin(), script.begin() + 4));
  EXPECT_EQ(j["choices"][0]["message"]["content"], want);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  const int64_t prompt = static_cast<int64_t>(tok_->Encode("[gMASK]<sop><|user|>Hi<|assistant|>")->size());
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  EXPECT_EQ(j["usage"]["total_tokens"], prompt + 4);
  ASSERT_EQ(engine_->submitted().size(), 1u);
  EXPECT_EQ(engine_->submitted()[0].max_tokens, 4);
}

TEST_F(ServerTest, ChatTemplateContext) {
  Start();
  const Json tools = Json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}}}}});
  const Reply r = Post("/v1/chat/completions",
                       Chat({{"tools", tools}, {"chat_template_kwargs", {{"enable_thinking", false}}}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(last_context_["tools"], tools);
  EXPECT_EQ(last_context_["enable_thinking"], false);
  EXPECT_EQ(last_context_["add_generation_prompt"], true);
  EXPECT_EQ(last_context_["eos_token"], "<|endoftext|>");
}

TEST_F(ServerTest, SamplingParamsReachTheEngine) {
  Start();
  const Reply r = Post("/v1/completions", Completion({{"temperature", 0.7}, {"top_p", 0.9}, {"top_k", 20},
                                                      {"min_p", 0.1}, {"seed", 42}, {"ignore_eos", true},
                                                      {"stop", "<|user|>"}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const RequestParams p = engine_->submitted().at(0);
  EXPECT_FLOAT_EQ(p.sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(p.sampling.top_p, 0.9f);
  EXPECT_EQ(p.sampling.top_k, 20);
  EXPECT_FLOAT_EQ(p.sampling.min_p, 0.1f);
  EXPECT_EQ(p.sampling.seed, 42u);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.stop_ids, std::vector<int32_t>{1018});  // a single-token stop also stops in the engine
  EXPECT_EQ(p.prompt, *tok_->Encode("Hello"));
}

TEST_F(ServerTest, DefaultMaxTokens) {
  FakeEngineOptions eo;
  eo.max_model_len = 100;
  Start(eo);
  ASSERT_EQ(Post("/v1/completions", Completion({{"max_tokens", nullptr}})).status, 200);
  EXPECT_EQ(engine_->submitted().at(0).max_tokens, 16);  // OpenAI's completions default
  Json chat = Chat();
  chat.erase("max_tokens");
  ASSERT_EQ(Post("/v1/chat/completions", chat).status, 200);
  const RequestParams p = engine_->submitted().at(1);
  EXPECT_EQ(p.max_tokens, 100 - static_cast<int64_t>(p.prompt.size()));  // the rest of the context
}

TEST_F(ServerTest, ChatStreamFraming) {
  Start();
  const Reply r = Post("/v1/chat/completions", Chat({{"stream", true}, {"max_tokens", 3}}));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.at("content-type"), "text/event-stream");
  EXPECT_EQ(r.headers.at("transfer-encoding"), "chunked");
  // Every event is "data: ...\n\n"; nothing else in the body.
  size_t consumed = 0;
  for (const auto& e : r.events()) consumed += e.size() + 8;
  EXPECT_EQ(consumed, r.body.size()) << r.body;
  const auto ev = r.events();
  ASSERT_GE(ev.size(), 4u) << r.body;
  EXPECT_EQ(ev.back(), "[DONE]");
  const Json first = Json::parse(ev[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  std::string id = first["id"];
  for (size_t i = 1; i + 2 < ev.size(); ++i) {
    const Json c = Json::parse(ev[i]);
    EXPECT_EQ(c["id"], id);
    EXPECT_FALSE(c["choices"][0]["delta"].contains("role"));
    EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
    text += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  const Json last = Json::parse(ev[ev.size() - 2]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_FALSE(last.contains("usage"));
  const auto script = *tok_->Encode("Hello world, this is a test.");
  EXPECT_EQ(text, *tok_->Decode(std::vector<int32_t>(script.begin(), script.begin() + 3)));
}

TEST_F(ServerTest, StreamIncludeUsage) {
  Start();
  const Reply r = Post("/v1/completions", Completion({{"stream", true}, {"max_tokens", 3},
                                                      {"stream_options", {{"include_usage", true}}}}));
  ASSERT_EQ(r.status, 200);
  const auto ev = r.events();
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev.back(), "[DONE]");
  const Json usage = Json::parse(ev[ev.size() - 2]);
  EXPECT_EQ(usage["object"], "text_completion");
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
  EXPECT_EQ(usage["usage"]["prompt_tokens"], static_cast<int64_t>(tok_->Encode("Hello")->size()));
  const Json fin = Json::parse(ev[ev.size() - 3]);
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(fin.contains("usage") && fin["usage"].is_null());
  for (size_t i = 0; i + 2 < ev.size(); ++i) EXPECT_TRUE(Json::parse(ev[i])["usage"].is_null());
}

TEST_F(ServerTest, StopStringAcrossTokensEndsTheRequest) {
  FakeEngineOptions eo;
  eo.tick_ms = 5;
  Start(eo);
  for (bool stream : {false, true}) {
    const Reply r = Post("/v1/completions", Completion({{"stream", stream}, {"max_tokens", 50}, {"stop", {"is a", "zzz"}}}));
    ASSERT_EQ(r.status, 200);
    std::string text, finish;
    if (stream) {
      for (const auto& e : r.events()) {
        if (e == "[DONE]") continue;
        const Json c = Json::parse(e);
        text += c["choices"][0]["text"].get<std::string>();
        if (c["choices"][0]["finish_reason"].is_string()) finish = c["choices"][0]["finish_reason"];
      }
    } else {
      text = r.json()["choices"][0]["text"];
      finish = r.json()["choices"][0]["finish_reason"];
      EXPECT_LT(r.json()["usage"]["completion_tokens"].get<int>(), 50);
    }
    EXPECT_EQ(text, "Hello world, this ");
    EXPECT_EQ(finish, "stop");
  }
  // The engine was told to stop generating.
  EXPECT_TRUE(WaitFor([&] { return engine_->cancelled().size() == 2 && engine_->num_active() == 0; }));
}

TEST_F(ServerTest, EosFinishesWithStopAndIsNotInTheText) {
  Start({}, {}, "Hi<|endoftext|>");
  const Reply r = Post("/v1/chat/completions", Chat({{"max_tokens", 20}}));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.json()["choices"][0]["message"]["content"], "Hi");
  EXPECT_EQ(r.json()["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r.json()["usage"]["completion_tokens"], static_cast<int64_t>(tok_->Encode("Hi<|endoftext|>")->size()));
}

TEST_F(ServerTest, ChatLogprobs) {
  Start();
  const Reply r = Post("/v1/chat/completions", Chat({{"logprobs", true}, {"top_logprobs", 2}, {"max_tokens", 3}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const Json lp = r.json()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 3u);
  for (const auto& e : lp) {
    EXPECT_TRUE(e["token"].is_string());
    EXPECT_TRUE(e["logprob"].is_number());
    EXPECT_TRUE(e["bytes"].is_array());
    EXPECT_EQ(e["top_logprobs"].size(), 2u);
  }
  EXPECT_EQ(engine_->submitted().at(0).top_logprobs, 2);
  // Streamed: every content chunk carries its tokens' logprobs.
  const Reply s = Post("/v1/chat/completions", Chat({{"stream", true}, {"logprobs", true}, {"max_tokens", 3}}));
  int n = 0;
  for (const auto& e : s.events()) {
    if (e == "[DONE]") continue;
    const Json c = Json::parse(e);
    if (c["choices"][0]["logprobs"].is_object()) n += static_cast<int>(c["choices"][0]["logprobs"]["content"].size());
  }
  EXPECT_EQ(n, 3);
}

TEST_F(ServerTest, CompletionLegacyLogprobs) {
  Start();
  const Reply r = Post("/v1/completions", Completion({{"logprobs", 1}, {"max_tokens", 3}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const Json lp = r.json()["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].size(), 3u);
  EXPECT_EQ(lp["token_logprobs"].size(), 3u);
  EXPECT_EQ(lp["top_logprobs"].size(), 3u);
  EXPECT_EQ(lp["text_offset"].size(), 3u);
  EXPECT_EQ(lp["text_offset"][0], 0);
}

TEST_F(ServerTest, ConcurrentRequests) {
  Start();
  std::vector<std::thread> ts;
  std::vector<int> status(8);
  std::vector<std::string> texts(8);
  for (int i = 0; i < 8; ++i) {
    ts.emplace_back([&, i] {
      const Reply r = Post("/v1/completions", Completion({{"stream", i % 2 == 0}, {"max_tokens", 6}}));
      status[i] = r.status;
      if (i % 2 == 1) texts[i] = r.json()["choices"][0]["text"];
    });
  }
  for (auto& t : ts) t.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(status[i], 200) << i;
  for (int i = 3; i < 8; i += 2) EXPECT_EQ(texts[i], texts[1]);
  EXPECT_EQ(engine_->submitted().size(), 8u);
}

// ---- cancellation and slow clients ------------------------------------------------------------

TEST_F(ServerTest, ClientDisconnectMidStreamCancels) {
  Start();
  engine_->SetPaused(true);
  Client c(port_);
  c.Send("POST", "/v1/chat/completions", Chat({{"stream", true}, {"max_tokens", 1000}}).dump());
  ASSERT_TRUE(WaitFor([&] { return engine_->num_active() == 1; }));
  engine_->SetPaused(false);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  c.Close();
  EXPECT_TRUE(WaitFor([&] { return engine_->cancelled().size() == 1 && engine_->num_active() == 0; }));
  EXPECT_TRUE(WaitFor([&] { return server_->metrics().Render(engine_->Stats()).find("finished_reason=\"abort\"} 1") !=
                                   std::string::npos; }));
}

TEST_F(ServerTest, ClientDisconnectWhileQueuedCancels) {
  Start();
  engine_->SetPaused(true);  // no token ever comes: only the socket watch can notice
  for (bool stream : {false, true}) {
    Client c(port_);
    c.Send("POST", "/v1/completions", Completion({{"stream", stream}}).dump());
    ASSERT_TRUE(WaitFor([&] { return engine_->num_active() == 1; }));
    c.Close();
    EXPECT_TRUE(WaitFor([&] { return engine_->num_active() == 0; })) << stream;
  }
  EXPECT_EQ(engine_->cancelled().size(), 2u);
}

TEST_F(ServerTest, SlowClientIsDroppedAndCancelled) {
  FakeEngineOptions eo;
  eo.tick_ms = 1;
  eo.max_model_len = 1 << 24;
  ServerOptions so;
  so.http.max_buffered_bytes = 8 * 1024;
  Start(eo, so);
  Client c(port_, /*rcvbuf=*/2048);
  c.Send("POST", "/v1/completions",
         Completion({{"stream", true}, {"max_tokens", 1000000}, {"ignore_eos", true}, {"logprobs", 5}}).dump());
  // Never read: the server's socket buffer fills, then its per-stream buffer, then it gives up.
  EXPECT_TRUE(WaitFor([&] { return engine_->cancelled().size() == 1; }, 20000));
  EXPECT_TRUE(WaitFor([&] { return engine_->num_active() == 0; }));
  EXPECT_TRUE(c.ClosedByPeer(5000));
}

// ---- shutdown ---------------------------------------------------------------------------------

TEST_F(ServerTest, StopEndsOpenStreamsWithAbort) {
  Start();
  engine_->SetPaused(true);
  Client c(port_);
  c.Send("POST", "/v1/chat/completions", Chat({{"stream", true}}).dump());
  ASSERT_TRUE(WaitFor([&] { return engine_->num_active() == 1; }));
  std::thread stopper([&] { server_->Stop(2000); });
  const Reply r = c.Read();
  stopper.join();
  ASSERT_EQ(r.status, 200);
  const auto ev = r.events();
  ASSERT_GE(ev.size(), 3u) << r.body;
  EXPECT_EQ(ev.back(), "[DONE]");
  EXPECT_EQ(Json::parse(ev[ev.size() - 2])["choices"][0]["finish_reason"], "abort");
  Client after(port_);
  EXPECT_FALSE(after.ok() && (after.Send("GET", "/health"), after.Read().status == 200));
}

}  // namespace
}  // namespace gyre::serve
