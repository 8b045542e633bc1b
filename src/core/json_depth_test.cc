#include "core/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace gyre {
namespace {

TEST(JsonDepth, AcceptsOrdinaryAndRejectsDeepNesting) {
  EXPECT_TRUE(CheckJsonDepth(R"({"a": [1, {"b": [2, 3]}], "c": "[[[[[[["})", "x").ok());
  const std::string at_limit = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(CheckJsonDepth(at_limit, "x").ok());
  const std::string deep = std::string(60000, '[') + std::string(60000, ']');
  Status s = CheckJsonDepth(deep, "the request body");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("the request body"), std::string::npos);
  EXPECT_NE(s.message().find("128"), std::string::npos);
  // Brackets inside strings (with escaped quotes) do not count.
  const std::string in_string = "{\"k\": \"\\\"" + std::string(500, '[') + "\"}";
  EXPECT_TRUE(CheckJsonDepth(in_string, "x").ok());
  // Objects count like arrays.
  std::string objs;
  for (int i = 0; i < 200; ++i) objs += "{\"a\":";
  EXPECT_FALSE(CheckJsonDepth(objs, "x").ok());
}

}  // namespace
}  // namespace gyre
