// JSON Schema → regex: known schemas accept valid texts and refuse invalid ones; random schemas'
// sampled matches (random walks through the automaton) always parse and validate; unsupported
// keywords are refused by name.
#include "structured/json_schema.h"

#include <gtest/gtest.h>

#include <random>

#include "structured/regex.h"
#include "structured/schema_check_for_tests.h"

namespace gyre::structured {
namespace {

using Json = nlohmann::json;

ByteDfa Compile(const Json& schema) {
  auto re = JsonSchemaRegex(schema);
  EXPECT_TRUE(re.ok()) << schema.dump() << ": " << re.status().ToString();
  if (!re.ok()) return {};
  auto dfa = CompileRegex(*re);
  EXPECT_TRUE(dfa.ok()) << schema.dump() << ": " << dfa.status().ToString();
  return dfa.ok() ? *dfa : ByteDfa();
}

TEST(JsonSchema, ObjectWithRequiredAndOptional) {
  const Json s = Json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 5}, "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
    "required": ["name"], "additionalProperties": false})");
  const ByteDfa d = Compile(s);
  for (const char* ok : {R"({"name":"x"})", R"({"age":3,"name":"bob"})", R"({"age":-10, "name":"","tags":["a", "b"]})",
                         R"({"name":"\u00e9\n","tags":[]})"})
    EXPECT_TRUE(d.Matches(ok)) << ok;
  for (const char* bad : {R"({})", R"({"age":3})", R"({"name":"toolong"})", R"({"name":"x","tags":["c"]})",
                          R"({"name":"x","extra":1})", R"({"name":"x","tags":["a","a","a"]})", R"({"age":01,"name":"x"})"})
    EXPECT_FALSE(d.Matches(bad)) << bad;
}

TEST(JsonSchema, ScalarsAndCombinators) {
  const ByteDfa num = Compile({{"type", "number"}});
  for (const char* ok : {"0", "-1.5", "3e10", "2.25E-3"}) EXPECT_TRUE(num.Matches(ok)) << ok;
  for (const char* bad : {"01", "1.", ".5", "+1", "NaN"}) EXPECT_FALSE(num.Matches(bad)) << bad;
  const ByteDfa any = Compile(Json::parse(R"({"anyOf": [{"type": "null"}, {"const": {"a": [1, "two"]}}]})"));
  EXPECT_TRUE(any.Matches("null"));
  EXPECT_TRUE(any.Matches(R"({"a":[1,"two"]})"));
  EXPECT_FALSE(any.Matches(R"({"a":[1,"three"]})"));
  const ByteDfa multi = Compile(Json::parse(R"({"type": ["boolean", "string"], "maxLength": 1})"));
  EXPECT_TRUE(multi.Matches("true"));
  EXPECT_TRUE(multi.Matches("\"a\""));
  EXPECT_FALSE(multi.Matches("\"ab\""));
}

TEST(JsonSchema, FreeJsonObject) {
  auto d = CompileRegex(JsonObjectRegex());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  for (const char* ok : {"{}", R"({"a":[1,{"b":null}], "c":"d"})", R"({"x":{"y":[true,false]}})"})
    EXPECT_TRUE(d->Matches(ok)) << ok;
  for (const char* bad : {"[]", "{", R"({"a":})", R"({a:1})", R"({"a":[1,]})"}) EXPECT_FALSE(d->Matches(bad)) << bad;
}

TEST(JsonSchema, RefusesUnsupportedKeywordsByName) {
  for (const char* kw : {"pattern", "format", "minimum", "$ref", "oneOf", "allOf", "not", "patternProperties",
                         "prefixItems", "uniqueItems"}) {
    Json s = {{"type", "string"}};
    s[kw] = 1;
    auto r = JsonSchemaRegex(Json{{"type", "object"}, {"properties", {{"p", s}}}});
    ASSERT_FALSE(r.ok()) << kw;
    EXPECT_NE(r.status().message().find(std::string("'") + kw + "'"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("/properties/p"), std::string::npos) << r.status().message();
  }
  EXPECT_FALSE(JsonSchemaRegex(Json{{"type", "string"}, {"minItems", 1}}).ok());
  EXPECT_FALSE(JsonSchemaRegex(Json{{"type", "object"}, {"properties", {{"a", {{"type", "null"}}}}}, {"required", {"b"}}}).ok());
  EXPECT_FALSE(JsonSchemaRegex(Json{{"type", "object"}, {"additionalProperties", {{"type", "string"}}}}).ok());
  EXPECT_FALSE(JsonSchemaRegex(Json{{"type", "date"}}).ok());
  EXPECT_FALSE(JsonSchemaRegex(false).ok());
}

// Random walks through the automaton of random schemas: whatever text reaches an accepting state
// parses as JSON and validates.
TEST(JsonSchema, RandomSchemasRandomWalksValidate) {
  std::mt19937_64 rng(77);
  int accepted = 0;
  for (int t = 0; t < 150; ++t) {
    const Json schema = testing::RandomSchema(rng);
    const ByteDfa d = Compile(schema);
    ASSERT_GT(d.num_states(), 0);
    for (int w = 0; w < 20; ++w) {
      int32_t st = d.start();
      std::string text;
      for (int step = 0; step < 400; ++step) {
        if (d.Accepting(st) && (!d.HasExit(st) || rng() % 4 == 0)) break;
        std::vector<int> bytes;
        for (int b = 0; b < 256; ++b)
          if (d.Next(st, static_cast<uint8_t>(b)) != ByteDfa::kDead) bytes.push_back(b);
        ASSERT_FALSE(bytes.empty()) << "a live state without an exit must accept";
        const int b = bytes[rng() % bytes.size()];
        text += static_cast<char>(b);
        st = d.Next(st, static_cast<uint8_t>(b));
      }
      if (!d.Accepting(st)) continue;
      ++accepted;
      const Json v = Json::parse(text, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << schema.dump() << " → " << text;
      EXPECT_TRUE(testing::Validates(v, schema)) << schema.dump() << " → " << text;
    }
  }
  EXPECT_GT(accepted, 1000);
}

}  // namespace
}  // namespace gyre::structured
