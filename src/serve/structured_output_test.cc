// Structured output over HTTP: a server over the real engine and a random-weight glm5_tiny model
// (its tokenizer); every request that ends with "stop" returns text that parses and validates
// (completions and chat, streamed and not), choices return one of the choices, and unsupported
// schemas are refused with a 400 naming the field.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "serve/engine_server_for_tests.h"
#include "structured/schema_check_for_tests.h"

namespace gyre::serve::testing {
namespace {

class StructuredOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions eo;
    eo.max_num_seqs = 4;
    es_.Start(4, eo, [](const Json& ctx) -> Result<std::string> {
      std::string s;
      for (const auto& m : ctx["messages"]) s += "<|" + m["role"].get<std::string>() + "|>" + m["content"].get<std::string>();
      return s + "<|assistant|>";
    });
  }
  void TearDown() override { es_.Stop(); }
  Reply Post(const std::string& path, const Json& body) { return es_.Post(path, body.dump()); }
  // The generated text of a response (SSE or not).
  static std::string Text(const Reply& r, std::string* finish) {
    std::string t;
    if (r.headers.count("content-type") && r.headers.at("content-type") == "text/event-stream") {
      for (const std::string& e : r.events()) {
        if (e == "[DONE]") continue;
        const Json c = Json::parse(e);
        if (c["choices"].empty()) continue;
        const Json& ch = c["choices"][0];
        if (ch.contains("text")) t += ch["text"].get<std::string>();
        if (ch.contains("delta") && ch["delta"].contains("content") && ch["delta"]["content"].is_string())
          t += ch["delta"]["content"].get<std::string>();
        if (ch.contains("finish_reason") && ch["finish_reason"].is_string()) *finish = ch["finish_reason"];
      }
      return t;
    }
    const Json j = r.json();
    const Json& ch = j["choices"][0];
    *finish = ch["finish_reason"];
    return ch.contains("text") ? ch["text"].get<std::string>() : ch["message"]["content"].get<std::string>();
  }

  EngineServer es_;
};

TEST_F(StructuredOutputTest, SchemasOverHttpAlwaysValidate) {
  std::mt19937_64 rng(11);
  int stopped = 0;
  for (int i = 0; i < 24; ++i) {
    const Json schema = structured::testing::RandomSchema(rng);
    const bool chat = i % 2 == 1, stream = i % 3 == 0;
    Json body = {{"model", "tiny"}, {"max_tokens", 300}, {"temperature", 1.0}, {"seed", i}, {"stream", stream}};
    if (chat) {
      body["messages"] = Json::array({{{"role", "user"}, {"content", "Give me JSON"}}});
      body["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"strict", true}, {"schema", schema}}}};
    } else {
      body["prompt"] = "JSON:";
      body["guided_json"] = schema;
    }
    const Reply r = Post(chat ? "/v1/chat/completions" : "/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    std::string finish;
    const std::string text = Text(r, &finish);
    if (finish != "stop") continue;
    ++stopped;
    const Json v = Json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << schema.dump() << " → " << text;
    EXPECT_TRUE(structured::testing::Validates(v, schema)) << schema.dump() << " → " << text;
  }
  EXPECT_GT(stopped, 12);
}

TEST_F(StructuredOutputTest, ChoiceRegexAndJsonObject) {
  const std::vector<std::string> choices = {"red", "green", "blue sky"};
  for (int seed = 0; seed < 6; ++seed) {
    Json body = {{"model", "tiny"}, {"prompt", "Colour:"}, {"max_tokens", 20}, {"seed", seed}, {"guided_choice", choices}};
    std::string finish;
    const std::string text = Text(Post("/v1/completions", body), &finish);
    EXPECT_EQ(finish, "stop");
    EXPECT_NE(std::find(choices.begin(), choices.end(), text), choices.end()) << text;
  }
  Json body = {{"model", "tiny"}, {"prompt", "Code:"}, {"max_tokens", 30}, {"seed", 3},
               {"structured_outputs", {{"regex", "[A-F]{3}-[0-9]{2}"}}}};
  std::string finish;
  const std::string code = Text(Post("/v1/completions", body), &finish);
  EXPECT_EQ(finish, "stop");
  ASSERT_EQ(code.size(), 6u) << code;
  EXPECT_EQ(code[3], '-');
  body = {{"model", "tiny"}, {"messages", Json::array({{{"role", "user"}, {"content", "x"}}})}, {"max_tokens", 400},
          {"temperature", 0.0}, {"response_format", {{"type", "json_object"}}}};
  const std::string obj = Text(Post("/v1/chat/completions", body), &finish);
  ASSERT_FALSE(obj.empty());
  EXPECT_EQ(obj[0], '{');
  if (finish == "stop") EXPECT_TRUE(Json::parse(obj, nullptr, false).is_object()) << obj;
}

TEST_F(StructuredOutputTest, UnsupportedSchemaIs400NamingTheField) {
  Json body = {{"model", "tiny"},
               {"messages", Json::array({{{"role", "user"}, {"content", "x"}}})},
               {"response_format",
                {{"type", "json_schema"},
                 {"json_schema", {{"name", "s"}, {"schema", {{"type", "string"}, {"pattern", "^a$"}}}}}}}};
  const Reply r = Post("/v1/chat/completions", body);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["param"], "response_format") << r.body;
  EXPECT_NE(r.body.find("pattern"), std::string::npos) << r.body;
  body = {{"model", "tiny"}, {"prompt", "x"}, {"guided_regex", "(a)\\1"}};
  const Reply r2 = Post("/v1/completions", body);
  EXPECT_EQ(r2.status, 400);
  EXPECT_EQ(r2.json()["error"]["param"], "guided_regex") << r2.body;
}

}  // namespace
}  // namespace gyre::serve::testing
