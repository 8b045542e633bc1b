// The logit-processing fields and n over HTTP, on the real engine and a random-weight glm5_tiny
// model (its tokenizer): logit_bias forces a token even when sampling, min_tokens keeps an EOS
// out until it is reached, the penalties change greedy text, and n choices are the requests with
// seeds seed + i; bad values are 400s naming the field.
#include <gtest/gtest.h>

#include "serve/engine_server_for_tests.h"

namespace gyre::serve::testing {
namespace {

class SamplingFieldsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions eo;
    eo.max_num_seqs = 4;
    eo.enable_prefix_caching = true;  // n choices share the prompt's full blocks (page_tokens 16)
    es_.Start(5, eo);
  }
  void TearDown() override { es_.Stop(); }
  // POST /v1/completions with `extra` over a 40-token prompt of ids, logprobs on (so the ids come
  // back as tokens) and temperature 0 unless `extra` says otherwise.
  Json Complete(const Json& extra, int* status = nullptr) {
    Json body = {{"model", "tiny"}, {"prompt", Prompt()}, {"max_tokens", 8}, {"temperature", 0}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    const Reply r = es_.Post("/v1/completions", body.dump());
    if (status) *status = r.status;
    return r.json();
  }
  static std::vector<int32_t> Prompt() {
    std::vector<int32_t> ids;
    for (int i = 0; i < 40; ++i) ids.push_back(100 + (i * 37) % 500);
    return ids;
  }
  std::string Text(const std::vector<int32_t>& ids) const { return *es_.tok->Decode(ids); }

  EngineServer es_;
};

TEST_F(SamplingFieldsTest, LogitBiasForcesATokenEvenWhenSampling) {
  const int32_t forced = 345;
  const Json j = Complete({{"logit_bias", {{std::to_string(forced), 100}}}, {"temperature", 1.0}, {"seed", 3}});
  ASSERT_TRUE(j.contains("choices")) << j.dump();
  EXPECT_EQ(j["choices"][0]["text"], Text(std::vector<int32_t>(8, forced)));
  // Repeated ids add up ("345" and "0345" are one token): +100 − 100 leaves the greedy text.
  const Json plain = Complete({});
  const Json cancelled = Complete({{"logit_bias", {{std::to_string(forced), 100}, {"0" + std::to_string(forced), -100}}}});
  EXPECT_EQ(cancelled["choices"][0]["text"], plain["choices"][0]["text"]);
}

TEST_F(SamplingFieldsTest, MinTokensKeepsEosOutUntilReached) {
  const int32_t eos = es_.model->config().eos_token_ids.at(0);
  const Json bias = {{std::to_string(eos), 100}};
  const Json early = Complete({{"logit_bias", bias}});
  EXPECT_EQ(early["usage"]["completion_tokens"], 1);
  EXPECT_EQ(early["choices"][0]["finish_reason"], "stop");
  const Json held = Complete({{"logit_bias", bias}, {"min_tokens", 5}});
  EXPECT_EQ(held["usage"]["completion_tokens"], 6);  // five tokens, then the EOS
  EXPECT_EQ(held["choices"][0]["finish_reason"], "stop");
}

TEST_F(SamplingFieldsTest, MinTokensHoldsMultiTokenStopStringsBack) {
  // vLLM: stop strings are checked from the min_tokens-th output token on. (A stop string that is
  // one token is a stop id to the engine and masked before min_tokens, like EOS.) Every token is
  // forced to 345, and the stop string is the text of two of them.
  const int32_t forced = 345;
  const std::string stop = Text({forced, forced});
  ASSERT_FALSE(Text({forced}).empty());
  const Json bias = {{std::to_string(forced), 100}};
  const Json early = Complete({{"logit_bias", bias}, {"stop", stop}});
  EXPECT_EQ(early["usage"]["completion_tokens"], 2) << early.dump();
  EXPECT_EQ(early["choices"][0]["text"], "");
  EXPECT_EQ(early["choices"][0]["finish_reason"], "stop");
  // Tokens 1 and 2 complete the stop before min_tokens; token 3 completes another occurrence.
  const Json held = Complete({{"logit_bias", bias}, {"stop", stop}, {"min_tokens", 3}});
  EXPECT_EQ(held["usage"]["completion_tokens"], 3) << held.dump();
  EXPECT_EQ(held["choices"][0]["text"], Text({forced}));
  EXPECT_EQ(held["choices"][0]["finish_reason"], "stop");
}

TEST_F(SamplingFieldsTest, PenaltiesChangeGreedyText) {
  const Json plain = Complete({{"max_tokens", 16}});
  const Json penalised =
      Complete({{"max_tokens", 16}, {"repetition_penalty", 2.0}, {"frequency_penalty", 2}, {"presence_penalty", 2}});
  ASSERT_TRUE(penalised.contains("choices")) << penalised.dump();
  EXPECT_NE(penalised["choices"][0]["text"], plain["choices"][0]["text"]);
  // The same request again gives the same text (the counts start afresh per request).
  const Json again =
      Complete({{"max_tokens", 16}, {"repetition_penalty", 2.0}, {"frequency_penalty", 2}, {"presence_penalty", 2}});
  EXPECT_EQ(again["choices"][0]["text"], penalised["choices"][0]["text"]);
}

TEST_F(SamplingFieldsTest, NChoicesAreTheRequestsSeededSeedPlusI) {
  const Json sampled = {{"temperature", 1.0}, {"max_tokens", 12}, {"ignore_eos", true}, {"presence_penalty", 0.5}};
  Json many = sampled;
  many["n"] = 3;
  many["seed"] = 11;
  const Json j = Complete(many);
  ASSERT_EQ(j["choices"].size(), 3u) << j.dump();
  // Choices 1 and 2 start after choice 0 has cached the prompt's two full blocks: both hit them.
  EXPECT_GE(es_.engine->Stats().prefix_cache_hit_tokens, 2 * 32);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 40);
  EXPECT_EQ(j["usage"]["completion_tokens"], 36);
  for (int i = 0; i < 3; ++i) {
    Json one = sampled;
    one["seed"] = 11 + i;
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], Complete(one)["choices"][0]["text"]) << "choice " << i;
  }
  EXPECT_NE(j["choices"][0]["text"], j["choices"][1]["text"]);
}

TEST_F(SamplingFieldsTest, BadValuesAre400NamingTheField) {
  const std::vector<std::pair<Json, std::string>> cases = {
      {{{"n", 0}}, "n"},
      {{{"n", 129}}, "n"},
      {{{"logit_bias", {{"abc", 1}}}}, "logit_bias"},
      {{{"logit_bias", {{"5", 1e9}}}}, "logit_bias"},
      {{{"logit_bias", {{"99999999", 1}}}}, "logit_bias"},
      {{{"presence_penalty", 2.5}}, "presence_penalty"},
      {{{"frequency_penalty", -2.5}}, "frequency_penalty"},
      {{{"repetition_penalty", 0}}, "repetition_penalty"},
      {{{"min_tokens", 9}}, "min_tokens"},  // above max_tokens 8
  };
  for (const auto& [extra, field] : cases) {
    int status = 0;
    const Json j = Complete(extra, &status);
    EXPECT_EQ(status, 400) << extra.dump();
    EXPECT_EQ(j["error"]["param"], field) << j.dump();
  }
}

}  // namespace
}  // namespace gyre::serve::testing
