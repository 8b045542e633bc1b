// POST /tokenize and /detokenize (vLLM's shapes) over a running server: the ids are the ones the
// generation endpoints would use, detokenize inverts them, every bad input is a 400 naming the
// field, another model's name a 404, and both routes sit behind the API key.
#include "serve/tokenization.h"

#include "serve/server_test_fixture.h"

namespace gyre::serve {
namespace {

using testing::Reply;
using testing::ServerTest;

std::vector<int32_t> Ids(const Json& j) { return j.get<std::vector<int32_t>>(); }

TEST_F(ServerTest, TokenizePromptFormGivesTheCompletionIds) {
  tokenizer_config_.bos_token = "[gMASK]";
  tokenizer_config_.add_bos_token = true;
  Start();
  const std::vector<int32_t> text = *tok_->Encode("Hello world<|user|>");  // special tokens parsed
  const int32_t bos = *tok_->TokenToId("[gMASK]");

  const Reply r = Post("/tokenize", {{"model", "tiny"}, {"prompt", "Hello world<|user|>"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  std::vector<int32_t> with_bos = {bos};
  with_bos.insert(with_bos.end(), text.begin(), text.end());
  EXPECT_EQ(Ids(j["tokens"]), with_bos);  // add_special_tokens defaults to true, as in vLLM
  EXPECT_EQ(j["count"], with_bos.size());
  EXPECT_EQ(j["max_model_len"], 4096);
  EXPECT_TRUE(j["token_strs"].is_null());

  const Reply plain = Post("/tokenize", {{"prompt", "Hello world<|user|>"}, {"add_special_tokens", false}});
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(Ids(plain.json()["tokens"]), text);

  const Reply empty = Post("/tokenize", {{"prompt", ""}, {"add_special_tokens", false}});
  ASSERT_EQ(empty.status, 200) << empty.body;
  EXPECT_EQ(empty.json()["count"], 0);
  EXPECT_TRUE(engine_->submitted().empty());  // nothing reached the engine
}

TEST_F(ServerTest, TokenizeMessagesFormGivesTheChatPromptIds) {
  Start();
  const Json messages = Json::array({{{"role", "user"}, {"content", "Hi"}}});
  // The fixture's renderer: "[gMASK]<sop>" + "<|role|>content"... + "<|assistant|>" when asked.
  const Reply r = Post("/tokenize", {{"model", "tiny"}, {"messages", messages}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Ids(r.json()["tokens"]), *tok_->Encode("[gMASK]<sop><|user|>Hi<|assistant|>"));
  EXPECT_EQ(last_context_["add_generation_prompt"], true);

  const Reply no_gen = Post("/tokenize", {{"messages", messages}, {"add_generation_prompt", false}});
  ASSERT_EQ(no_gen.status, 200) << no_gen.body;
  EXPECT_EQ(Ids(no_gen.json()["tokens"]), *tok_->Encode("[gMASK]<sop><|user|>Hi"));

  const Reply kwargs = Post("/tokenize", {{"messages", messages}, {"chat_template_kwargs", {{"enable_thinking", false}}}});
  ASSERT_EQ(kwargs.status, 200) << kwargs.body;
  EXPECT_EQ(last_context_["enable_thinking"], false);

  // The same ids as the chat endpoint sends to the engine.
  ASSERT_EQ(Post("/v1/chat/completions", Chat()).status, 200);
  ASSERT_EQ(engine_->submitted().size(), 1u);
  EXPECT_EQ(engine_->submitted()[0].prompt, Ids(r.json()["tokens"]));
}

TEST_F(ServerTest, DetokenizeInvertsTokenize) {
  Start();
  const std::string text = "Hello world, this is a test.";
  const Reply t = Post("/tokenize", {{"prompt", text}, {"add_special_tokens", false}});
  ASSERT_EQ(t.status, 200) << t.body;
  const Reply d = Post("/detokenize", {{"model", "tiny"}, {"tokens", t.json()["tokens"]}});
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(d.json(), (Json{{"prompt", text}}));
  const Reply none = Post("/detokenize", {{"tokens", Json::array()}});
  ASSERT_EQ(none.status, 200) << none.body;
  EXPECT_EQ(none.json()["prompt"], "");
}

TEST_F(ServerTest, TokenizationBadInputIs400NamingTheField) {
  Start();
  const int64_t vocab = tok_->vocab_size();
  const Json messages = Json::array({{{"role", "user"}, {"content", "Hi"}}});
  struct Case {
    const char* path;
    Json body;
    const char* param;
    const char* says;
  };
  const Case cases[] = {
      {"/detokenize", {{"tokens", {5, vocab}}}, "tokens[1]", "outside the vocabulary"},
      {"/detokenize", {{"tokens", {-1}}}, "tokens[0]", "outside the vocabulary"},
      {"/detokenize", {{"tokens", {1.5}}}, "tokens[0]", "integer"},
      {"/detokenize", {{"tokens", "12"}}, "tokens", "array"},
      {"/detokenize", Json::object(), "tokens", "required"},
      {"/detokenize", {{"tokens", {1}}, {"frobnicate", 1}}, "frobnicate", "not a field of /detokenize"},
      {"/detokenize", {{"tokens", {1}}, {"model", 3}}, "model", "string"},
      {"/tokenize", {{"prompt", 5}}, "prompt", "string"},
      {"/tokenize", {{"prompt", {1, 2}}}, "prompt", "string"},
      {"/tokenize", Json::object(), "prompt", "'messages' is required"},
      {"/tokenize", {{"prompt", "x"}, {"messages", messages}}, "messages", "cannot be combined"},
      {"/tokenize", {{"prompt", "x"}, {"frobnicate", true}}, "frobnicate", "not a field of /tokenize"},
      {"/tokenize", {{"prompt", "x"}, {"add_generation_prompt", false}}, "add_generation_prompt", "messages form"},
      {"/tokenize", {{"prompt", "x"}, {"add_special_tokens", "yes"}}, "add_special_tokens", "boolean"},
      {"/tokenize", {{"prompt", "x"}, {"return_token_strs", true}}, "return_token_strs", "not supported"},
      {"/tokenize", {{"messages", messages}, {"chat_template", "{{ x }}"}}, "chat_template", "--chat-template"},
      {"/tokenize", {{"messages", messages}, {"mm_processor_kwargs", Json::object()}}, "mm_processor_kwargs", "text only"},
      {"/tokenize", {{"messages", "Hi"}}, "messages", "non-empty array"},
      {"/tokenize", {{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}, "messages[0].role", "not supported"},
      {"/tokenize", {{"messages", messages}, {"add_generation_prompt", true}, {"continue_final_message", true}},
       "continue_final_message", "add_generation_prompt"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.path) + " " + c.body.dump());
    const Reply r = Post(c.path, c.body);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(ErrorMessage(r).find(c.says), std::string::npos) << r.body;
    EXPECT_EQ(r.json()["error"]["param"], c.param) << r.body;
    EXPECT_EQ(r.json()["error"]["type"], "invalid_request_error");
  }
  const Reply bad_json = Do("POST", "/tokenize", "{\"prompt\": ");
  EXPECT_EQ(bad_json.status, 400);
  EXPECT_NE(ErrorMessage(bad_json).find("JSON"), std::string::npos);
  // null means unset, as on the generation endpoints.
  EXPECT_EQ(Post("/tokenize", {{"prompt", "x"}, {"messages", nullptr}, {"tools", nullptr}}).status, 200);

  const Reply other = Post("/detokenize", {{"model", "gpt-4"}, {"tokens", {1}}});
  EXPECT_EQ(other.status, 404);
  EXPECT_EQ(other.json()["error"]["code"], "model_not_found");
  EXPECT_EQ(other.json()["error"]["param"], "model");
  EXPECT_EQ(Post("/tokenize", {{"model", "gpt-4"}, {"prompt", "x"}}).status, 404);

  const Reply get = Do("GET", "/tokenize");
  EXPECT_EQ(get.status, 405);
  EXPECT_EQ(get.headers.at("allow"), "POST");
}

TEST_F(ServerTest, TokenizationIsBehindTheApiKey) {
  ServerOptions so;
  so.api_key = "sekret";
  Start({}, so);
  for (const char* path : {"/tokenize", "/detokenize"}) {
    const Json body = std::string(path) == "/tokenize" ? Json{{"prompt", "Hi"}} : Json{{"tokens", {1}}};
    const Reply none = Post(path, body);
    EXPECT_EQ(none.status, 401) << path;
    EXPECT_EQ(none.json()["error"]["code"], "invalid_api_key");
    EXPECT_EQ(Post(path, body, {"Authorization: Bearer wrong"}).status, 401) << path;
    EXPECT_EQ(Post(path, body, {"Authorization: Bearer sekret"}).status, 200) << path;
  }
}

}  // namespace
}  // namespace gyre::serve
