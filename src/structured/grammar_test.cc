// Grammar masks on the bundled tokenizer: the trie walk equals a brute-force check of every token;
// and the property test: the engine over a random-weight model with constraints drawn at random
// (JSON schemas, regexes, choices) and random seeds always ends with text that matches, parses
// and validates.
#include "structured/grammar.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <random>

#include "engine/engine.h"
#include "runtime/random_model_for_tests.h"
#include "structured/json_schema.h"
#include "structured/regex.h"
#include "structured/schema_check_for_tests.h"
#include "tokenizer/tokenizer.h"

namespace gyre::structured {
namespace {

using Json = nlohmann::json;

const std::vector<int32_t> kEos = {4080, 4084, 4086};  // glm5_mini's

std::unique_ptr<Tokenizer> MiniTokenizer() {
  auto t = Tokenizer::FromFile(std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/glm5_mini/tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : nullptr;
}

bool Bit(std::span<const uint32_t> w, int32_t id) { return (w[id >> 5] >> (id & 31)) & 1u; }

TEST(TokenTrie, MaskEqualsBruteForceOnTheBundledTokenizer) {
  auto tok = MiniTokenizer();
  ASSERT_TRUE(tok);
  auto trie = TokenTrie::FromTokenizer(*tok, 4096, kEos);
  std::mt19937_64 rng(5);
  for (const char* re : {"[a-z ]+", R"(\{"a": (true|false)\})", "(the|then|there) [0-9]{1,3}", ".*", "x"}) {
    auto dfa = CompileRegex(re);
    ASSERT_TRUE(dfa.ok());
    // States reached by random walks.
    for (int w = 0; w < 10; ++w) {
      int32_t st = dfa->start();
      for (int k = static_cast<int>(rng() % 6); k > 0 && dfa->HasExit(st); --k) {
        std::vector<int> bytes;
        for (int b = 0; b < 256; ++b)
          if (dfa->Next(st, static_cast<uint8_t>(b)) != ByteDfa::kDead) bytes.push_back(b);
        st = dfa->Next(st, static_cast<uint8_t>(bytes[rng() % bytes.size()]));
      }
      std::vector<uint32_t> words(trie->mask_words());
      trie->Mask(*dfa, st, words);
      int allowed = 0;
      for (int32_t id = 0; id < 4096; ++id) {
        bool want;
        if (trie->IsEos(id)) {
          want = dfa->Accepting(st);
        } else {
          const std::string b = tok->IsSpecial(id) ? "" : tok->TokenBytes(id);
          want = !b.empty() && dfa->Walk(st, reinterpret_cast<const uint8_t*>(b.data()), b.size()) != ByteDfa::kDead;
        }
        EXPECT_EQ(Bit(words, id), want) << re << " token " << id;
        allowed += want;
      }
      EXPECT_GT(allowed, 0);
    }
  }
}

TEST(Grammar, ConstraintAcceptsOnlyMaskedTokensAndEosAtTheEnd) {
  auto tok = MiniTokenizer();
  ASSERT_TRUE(tok);
  auto trie = TokenTrie::FromTokenizer(*tok, 4096, kEos);
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kChoice;
  spec.choices = {"yes", "no"};
  auto g = Grammar::Compile(spec, trie);
  ASSERT_TRUE(g.ok());
  GrammarConstraint c(*g);
  std::vector<uint32_t> w(trie->mask_words());
  ASSERT_TRUE(c.FillMask(w));
  EXPECT_FALSE(Bit(w, kEos[0]));
  EXPECT_FALSE(c.Accept(kEos[0]).ok());
  auto ids = tok->Encode("no", false);
  ASSERT_TRUE(ids.ok());
  for (int32_t id : *ids) {
    ASSERT_TRUE(c.FillMask(w));
    EXPECT_TRUE(Bit(w, id));
    ASSERT_TRUE(c.Accept(id).ok());
  }
  EXPECT_TRUE(c.Complete());  // "no" accepts and nothing may follow
  ASSERT_TRUE(c.FillMask(w));
  for (int32_t e : kEos) EXPECT_TRUE(Bit(w, e));
  auto other = tok->Encode("x", false);
  EXPECT_FALSE(c.Accept((*other)[0]).ok());
}

// ---- property test -------------------------------------------------------------------------------

const char* kConfig = R"({
  "model_type": "glm5_next", "vocab_size": 4096, "hidden_size": 32, "intermediate_size": 48,
  "moe_intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
  "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "v_head_dim": 8, "qk_rope_head_dim": 0,
  "index_n_heads": 4, "index_head_dim": 8, "index_topk": 16, "index_kpool": 4,
  "linear_num_heads": 2, "linear_head_dim": 8, "n_routed_experts": 8, "num_experts_per_tok": 2,
  "eos_token_id": [4080, 4084, 4086]})";

class Collect : public RequestSink {
 public:
  void OnToken(const TokenEvent& ev) override {
    std::lock_guard<std::mutex> l(mu);
    ids.push_back(ev.id);
  }
  void OnFinish(FinishReason r, const Status& s, const Usage&) override {
    std::lock_guard<std::mutex> l(mu);
    reason = r;
    status = s;
    done = true;
    cv.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(120), [&] { return done; }));
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> ids;
  FinishReason reason = FinishReason::kError;
  Status status;
  bool done = false;
};

std::string RandomPattern(std::mt19937_64& rng) {
  const std::vector<std::string> parts = {"[a-z]{1,4}", "\\d{2}", "(cat|dog|bird)", "-", "[A-F0-9]{0,3}", " ",
                                          "(x|yz)?", "é", "\\.", "[^,;]{1,2}"};
  std::string p;
  for (int n = 1 + static_cast<int>(rng() % 4); n > 0; --n) p += parts[rng() % parts.size()];
  return p;
}

TEST(Grammar, PropertyRandomConstraintsAlwaysEndValid) {
  auto tok = MiniTokenizer();
  ASSERT_TRUE(tok);
  auto model = RandomModel(kConfig, 31);
  ASSERT_TRUE(model);
  auto trie = TokenTrie::FromTokenizer(*tok, 4096, kEos);
  EngineOptions eo;
  eo.max_num_seqs = 8;
  auto engine = Engine::Create(*model, eo);
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->Start().ok());
  std::mt19937_64 rng(2026);
  struct Job {
    ConstraintSpec spec;
    std::shared_ptr<Collect> sink;
  };
  std::vector<Job> jobs;
  for (int i = 0; i < 96; ++i) {
    ConstraintSpec spec;
    const int kind = i % 4;
    if (kind == 0 || kind == 1) {
      spec.kind = ConstraintSpec::Kind::kJsonSchema;
      spec.schema = testing::RandomSchema(rng);
    } else if (kind == 2) {
      spec.kind = ConstraintSpec::Kind::kRegex;
      spec.regex = RandomPattern(rng);
    } else {
      spec.kind = ConstraintSpec::Kind::kChoice;
      spec.choices = {"alpha", "beta gamma", "{\"x\": 1}", "é"};
    }
    auto g = Grammar::Compile(spec, trie);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    RequestParams p;
    p.prompt = {static_cast<int32_t>(rng() % 4000), static_cast<int32_t>(rng() % 4000), 17};
    p.max_tokens = 200;
    p.sampling.temperature = (i % 5 == 0) ? 0.0f : 1.0f;
    p.sampling.top_k = (i % 7 == 0) ? 5 : 0;
    p.sampling.seed = rng();
    p.constraint = std::make_shared<GrammarConstraint>(*g);
    jobs.push_back({spec, std::make_shared<Collect>()});
    ASSERT_TRUE((*engine)->Submit(p, jobs.back().sink).ok());
  }
  int finished = 0;
  for (Job& j : jobs) {
    j.sink->Wait();
    ASSERT_NE(j.sink->reason, FinishReason::kError) << j.sink->status.ToString();
    std::vector<int32_t> ids = j.sink->ids;
    if (!ids.empty() && trie->IsEos(ids.back())) ids.pop_back();
    auto text = tok->Decode(ids);
    ASSERT_TRUE(text.ok());
    auto re = SpecRegex(j.spec);
    auto dfa = CompileRegex(*re);
    ASSERT_TRUE(dfa.ok());
    const int32_t st = dfa->Walk(dfa->start(), reinterpret_cast<const uint8_t*>(text->data()), text->size());
    ASSERT_NE(st, ByteDfa::kDead) << "not even a prefix: " << *text;
    if (j.sink->reason != FinishReason::kStop) continue;  // max_tokens: a valid prefix
    ++finished;
    EXPECT_TRUE(dfa->Accepting(st)) << *text;
    if (j.spec.kind == ConstraintSpec::Kind::kJsonSchema) {
      const Json v = Json::parse(*text, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << j.spec.schema.dump() << " → " << *text;
      EXPECT_TRUE(testing::Validates(v, j.spec.schema)) << j.spec.schema.dump() << " → " << *text;
    } else if (j.spec.kind == ConstraintSpec::Kind::kChoice) {
      EXPECT_NE(std::find(j.spec.choices.begin(), j.spec.choices.end(), *text), j.spec.choices.end()) << *text;
    }
  }
  EXPECT_GT(finished, 60);  // most random constraints finish within max_tokens
  (*engine)->Stop();
}

}  // namespace
}  // namespace gyre::structured
