// CORS: the list flags' two forms, preflights answered (or refused) before authentication, CORS
// headers on every response to an allowed origin and on none to another, and nothing at all when
// no origin is configured.
#include "serve/cors.h"

#include "serve/server_test_fixture.h"

namespace gyre::serve {
namespace {

using testing::Reply;
using testing::ServerTest;

TEST(CorsList, JsonOrCommaSeparated) {
  EXPECT_EQ(*ParseCorsList(R"(["https://a.example", "http://b.example:8080"])", "--allowed-origins"),
            (std::vector<std::string>{"https://a.example", "http://b.example:8080"}));
  EXPECT_EQ(*ParseCorsList(" https://a.example , http://b.example:8080 ", "--allowed-origins"),
            (std::vector<std::string>{"https://a.example", "http://b.example:8080"}));
  EXPECT_EQ(*ParseCorsList("*", "--allowed-origins"), (std::vector<std::string>{"*"}));
  EXPECT_TRUE(ParseCorsList("", "--allowed-origins")->empty());
  EXPECT_TRUE(ParseCorsList("[]", "--allowed-origins")->empty());
  for (const char* bad : {"[\"a\", 3]", "[\"a\"", "a,,b", "a,", "[\"\"]"}) {
    auto r = ParseCorsList(bad, "--allowed-origins");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--allowed-origins"), std::string::npos) << r.status().message();
  }
}

class CorsServerTest : public ServerTest {
 protected:
  void StartWithCors(CorsOptions cors) {
    ServerOptions so;
    so.api_key = "sekret";
    so.cors = std::move(cors);
    Start({}, so);
  }
  Reply Preflight(const std::string& origin, const std::string& method, const std::string& headers = "") {
    std::vector<std::string> h = {"Origin: " + origin, "Access-Control-Request-Method: " + method};
    if (!headers.empty()) h.push_back("Access-Control-Request-Headers: " + headers);
    return Do("OPTIONS", "/v1/chat/completions", "", h);
  }
  static constexpr const char* kApp = "https://app.example";
};

TEST_F(CorsServerTest, PreflightFromAnAllowedOriginIs204WithoutTheKey) {
  StartWithCors({.allowed_origins = {kApp}});
  const Reply r = Preflight(kApp, "POST", "Authorization, Content-Type");
  ASSERT_EQ(r.status, 204) << r.body;
  EXPECT_EQ(r.headers.at("access-control-allow-origin"), kApp);
  EXPECT_EQ(r.headers.at("vary"), "Origin");
  EXPECT_NE(r.headers.at("access-control-allow-methods").find("POST"), std::string::npos);
  EXPECT_EQ(r.headers.at("access-control-allow-headers"), "authorization, content-type");
  EXPECT_EQ(r.headers.at("access-control-max-age"), "600");
  EXPECT_TRUE(r.body.empty());
}

TEST_F(CorsServerTest, DisallowedOriginGetsNoCorsHeaders) {
  StartWithCors({.allowed_origins = {kApp}});
  const Reply pre = Preflight("https://evil.example", "POST");
  EXPECT_EQ(pre.status, 400);
  EXPECT_NE(ErrorMessage(pre).find("origin 'https://evil.example' is not allowed"), std::string::npos);
  EXPECT_EQ(pre.headers.count("access-control-allow-origin"), 0u);
  const Reply get = Do("GET", "/v1/models", "", {"Origin: https://evil.example", "Authorization: Bearer sekret"});
  EXPECT_EQ(get.status, 200);
  EXPECT_EQ(get.headers.count("access-control-allow-origin"), 0u);
}

TEST_F(CorsServerTest, ResponsesToAnAllowedOriginCarryTheHeaders) {
  StartWithCors({.allowed_origins = {"https://other.example", kApp}});
  const std::vector<std::string> h = {std::string("Origin: ") + kApp, "Authorization: Bearer sekret"};
  const Reply full = Post("/v1/chat/completions", Chat(), h);
  ASSERT_EQ(full.status, 200) << full.body;
  EXPECT_EQ(full.headers.at("access-control-allow-origin"), kApp);
  const Reply stream = Post("/v1/chat/completions", Chat({{"stream", true}}), h);
  ASSERT_EQ(stream.status, 200);
  EXPECT_EQ(stream.headers.at("access-control-allow-origin"), kApp);
  EXPECT_EQ(stream.headers.at("vary"), "Origin");
  // An error is readable by the page too (so it can show why).
  const Reply unauthorized = Post("/v1/chat/completions", Chat(), {std::string("Origin: ") + kApp});
  EXPECT_EQ(unauthorized.status, 401);
  EXPECT_EQ(unauthorized.headers.at("access-control-allow-origin"), kApp);
  // No Origin (not a browser): no CORS headers.
  EXPECT_EQ(Post("/v1/chat/completions", Chat(), {"Authorization: Bearer sekret"}).headers.count(
                "access-control-allow-origin"),
            0u);
}

TEST_F(CorsServerTest, MethodsAndHeadersAreChecked) {
  StartWithCors({.allowed_origins = {"*"}, .allowed_methods = {"GET"}, .allowed_headers = {"Authorization"}});
  const Reply post = Preflight(kApp, "POST");
  EXPECT_EQ(post.status, 400);
  EXPECT_NE(ErrorMessage(post).find("method 'POST'"), std::string::npos);
  const Reply custom = Preflight(kApp, "GET", "x-custom");
  EXPECT_EQ(custom.status, 400);
  EXPECT_NE(ErrorMessage(custom).find("header 'x-custom'"), std::string::npos);
  const Reply ok = Preflight(kApp, "GET", "authorization, content-type");  // content-type is safelisted
  ASSERT_EQ(ok.status, 204) << ok.body;
  EXPECT_EQ(ok.headers.at("access-control-allow-origin"), "*");  // any origin: no Vary needed
  EXPECT_EQ(ok.headers.count("vary"), 0u);
  EXPECT_EQ(ok.headers.at("access-control-allow-methods"), "GET");
  EXPECT_EQ(ok.headers.at("access-control-allow-headers"), "Authorization");
}

TEST_F(ServerTest, WithoutAllowedOriginsThereIsNoCors) {
  Start();
  const Reply pre = Do("OPTIONS", "/v1/chat/completions", "",
                       {"Origin: https://app.example", "Access-Control-Request-Method: POST"});
  EXPECT_EQ(pre.status, 405);
  EXPECT_EQ(pre.headers.count("access-control-allow-origin"), 0u);
  const Reply get = Do("GET", "/v1/models", "", {"Origin: https://app.example"});
  EXPECT_EQ(get.status, 200);
  EXPECT_EQ(get.headers.count("access-control-allow-origin"), 0u);
}

}  // namespace
}  // namespace gyre::serve
