// The access log: the exact text and JSON lines, the level and flag that silence it, and one line
// per request from a running server with the response id, status, token counts and aborts.
#include "serve/access_log.h"

#include "serve/server_test_fixture.h"

namespace gyre::serve {
namespace {

using testing::Client;
using testing::Reply;
using testing::ServerTest;
using testing::WaitFor;

constexpr int64_t kUnixMs = 1796306635123;  // 2026-12-03T14:03:55.123Z

AccessEntry Entry() {
  AccessEntry e;
  e.id = "chatcmpl-abc";
  e.method = "POST";
  e.path = "/v1/chat/completions";
  e.status = 200;
  e.prompt_tokens = 5;
  e.completion_tokens = 7;
  e.latency_ms = 12.345;
  return e;
}

TEST(AccessLog, TextLine) {
  EXPECT_EQ(FormatAccessLine(Entry(), LogFormat::kText, kUnixMs),
            "2026-12-03T14:03:55.123Z INFO access id=chatcmpl-abc method=POST path=/v1/chat/completions "
            "status=200 prompt_tokens=5 completion_tokens=7 latency_ms=12.3");
  AccessEntry odd = Entry();
  odd.path = "/a b\n\"%";
  odd.status = 0;
  odd.aborted = true;
  odd.id = "";
  const std::string line = FormatAccessLine(odd, LogFormat::kText, kUnixMs);
  EXPECT_NE(line.find(" id=- "), std::string::npos) << line;
  EXPECT_NE(line.find(" path=/a%20b%0A%22%25 status=0 "), std::string::npos) << line;
  EXPECT_EQ(line.substr(line.size() - 13), " aborted=true") << line;
}

TEST(AccessLog, JsonLine) {
  const std::string line = FormatAccessLine(Entry(), LogFormat::kJson, kUnixMs);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const Json j = Json::parse(line);
  EXPECT_EQ(j, (Json{{"time", "2026-12-03T14:03:55.123Z"},
                     {"level", "info"},
                     {"event", "access"},
                     {"id", "chatcmpl-abc"},
                     {"method", "POST"},
                     {"path", "/v1/chat/completions"},
                     {"status", 200},
                     {"aborted", false},
                     {"prompt_tokens", 5},
                     {"completion_tokens", 7},
                     {"latency_ms", 12.3}}));
}

TEST(AccessLog, LevelsFormatsAndTheSwitch) {
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("info"), LogLevel::kInfo);
  EXPECT_EQ(*ParseLogLevel("warning"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  EXPECT_NE(ParseLogLevel("verbose").status().message().find("debug, info, warning, error"), std::string::npos);
  EXPECT_FALSE(ParseLogLevel("INFO").ok());
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_FALSE(ParseLogFormat("xml").ok());

  std::vector<std::string> lines;
  auto capture = [&](std::string_view l) { lines.emplace_back(l); };
  Log(LogLevel::kDebug, LogFormat::kText, true, capture).Access(Entry());
  Log(LogLevel::kInfo, LogFormat::kText, true, capture).Access(Entry());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].back(), '\n');
  Log(LogLevel::kWarning, LogFormat::kText, true, capture).Access(Entry());  // access lines are info
  Log(LogLevel::kInfo, LogFormat::kText, false, capture).Access(Entry());    // --disable-log-requests
  EXPECT_EQ(lines.size(), 2u);
  const Log warn(LogLevel::kWarning, LogFormat::kJson, true, capture);
  warn.Message(LogLevel::kInfo, "dropped");
  warn.Message(LogLevel::kWarning, "kept");
  ASSERT_EQ(lines.size(), 3u);
  const Json j = Json::parse(lines[2]);
  EXPECT_EQ(j["level"], "warning");
  EXPECT_EQ(j["message"], "kept");
}

// A Log that keeps its lines (parsed JSON), for the server tests.
struct Captured {
  std::mutex mu;
  std::vector<Json> lines;
  std::shared_ptr<const Log> MakeLog() {
    return std::make_shared<const Log>(LogLevel::kInfo, LogFormat::kJson, true, [this](std::string_view l) {
      std::lock_guard<std::mutex> g(mu);
      lines.push_back(Json::parse(l));
    });
  }
  size_t size() {
    std::lock_guard<std::mutex> g(mu);
    return lines.size();
  }
  Json at(size_t i) {
    std::lock_guard<std::mutex> g(mu);
    return lines.at(i);
  }
};

TEST_F(ServerTest, AccessLogHasOneLinePerRequest) {
  Captured log;
  ServerOptions so;
  so.log = log.MakeLog();
  Start({}, so);
  const auto prompt_tokens = static_cast<int64_t>(tok_->Encode("[gMASK]<sop><|user|>Hi<|assistant|>")->size());

  const Reply chat = Post("/v1/chat/completions", Chat());
  ASSERT_EQ(chat.status, 200);
  ASSERT_TRUE(WaitFor([&] { return log.size() == 1; }));
  Json l = log.at(0);
  EXPECT_EQ(l["id"], chat.json()["id"]);
  EXPECT_EQ(l["method"], "POST");
  EXPECT_EQ(l["path"], "/v1/chat/completions");
  EXPECT_EQ(l["status"], 200);
  EXPECT_EQ(l["aborted"], false);
  EXPECT_EQ(l["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(l["completion_tokens"], 5);
  EXPECT_GE(l["latency_ms"].get<double>(), 0);

  const Reply stream = Post("/v1/completions", Completion({{"stream", true}, {"max_tokens", 3}}));
  ASSERT_EQ(stream.status, 200);
  ASSERT_TRUE(WaitFor([&] { return log.size() == 2; }));
  l = log.at(1);
  EXPECT_EQ(l["id"], Json::parse(stream.events().front())["id"]);
  EXPECT_EQ(l["status"], 200);
  EXPECT_EQ(l["completion_tokens"], 3);

  EXPECT_EQ(Post("/v1/chat/completions", Chat({{"temperature", 9}})).status, 400);
  EXPECT_EQ(Do("GET", "/health?probe=1").status, 200);
  EXPECT_EQ(Do("GET", "/nope").status, 404);
  ASSERT_TRUE(WaitFor([&] { return log.size() == 5; }));
  EXPECT_EQ(log.at(2)["status"], 400);
  EXPECT_EQ(log.at(2)["completion_tokens"], 0);
  EXPECT_EQ(log.at(2)["id"].get<std::string>().rfind("req-", 0), 0u);  // no response id: the server's
  EXPECT_EQ(log.at(3)["path"], "/health");  // without the query
  EXPECT_EQ(log.at(3)["status"], 200);
  EXPECT_EQ(log.at(4)["status"], 404);
  EXPECT_NE(log.at(3)["id"], log.at(4)["id"]);
}

TEST_F(ServerTest, AccessLogRecordsAnAbortedStream) {
  Captured log;
  ServerOptions so;
  so.log = log.MakeLog();
  Start({}, so);
  engine_->SetPaused(true);
  {
    Client c(port_);
    c.Send("POST", "/v1/chat/completions", Chat({{"stream", true}, {"max_tokens", 1000}}).dump());
    ASSERT_TRUE(WaitFor([&] { return engine_->num_active() == 1; }));
  }  // the client leaves
  ASSERT_TRUE(WaitFor([&] { return log.size() == 1; }));
  const Json l = log.at(0);
  EXPECT_EQ(l["aborted"], true);
  EXPECT_EQ(l["status"], 200);  // the stream had started
  EXPECT_EQ(l["completion_tokens"], 0);
  EXPECT_GT(l["prompt_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(l["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
}

// The HTTP layer's own answers (malformed HTTP 400, 413, 431) never reach the handler; they are
// logged, counted and carry CORS headers all the same.
TEST_F(ServerTest, HttpLayerErrorsAreLoggedCountedAndCarryCors) {
  Captured log;
  ServerOptions so;
  so.log = log.MakeLog();
  so.cors.allowed_origins = {"https://app.example"};
  so.http.max_body_bytes = 100;
  so.http.max_header_bytes = 1024;
  Start({}, so);
  const std::string origin = "Origin: https://app.example\r\n";
  struct Case {
    std::string raw;
    int status;
    std::string method, path;
  };
  const Case cases[] = {
      {"GET /v1/models HTTP/1.1\r\nHost: t\r\n" + origin + "this is no header\r\n\r\n", 400, "GET", "/v1/models"},
      {"POST /v1/completions?x=1 HTTP/1.1\r\nHost: t\r\n" + origin + "Content-Length: 1000\r\n\r\n" +
           std::string(1000, 'x'),
       413, "POST", "/v1/completions"},
      {"GET /health HTTP/1.1\r\n" + origin + "X-Big: " + std::string(4000, 'a') + "\r\n\r\n", 431, "GET", "/health"},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.status);
    Client client(port_);
    client.SendRaw(c.raw);
    const Reply r = client.Read();
    ASSERT_EQ(r.status, c.status) << r.body;
    ASSERT_EQ(r.headers.count("access-control-allow-origin"), 1u);
    EXPECT_EQ(r.headers.at("access-control-allow-origin"), "https://app.example");
    ASSERT_TRUE(WaitFor([&] { return log.size() == i + 1; }));
    const Json l = log.at(i);
    EXPECT_EQ(l["status"], c.status);
    EXPECT_EQ(l["method"], c.method);
    EXPECT_EQ(l["path"], c.path);
    EXPECT_EQ(l["id"].get<std::string>().rfind("req-", 0), 0u);
    EXPECT_GE(l["latency_ms"].get<double>(), 0);
  }
  // Another origin gets no CORS header.
  Client other(port_);
  other.SendRaw("GET /health HTTP/1.1\r\nOrigin: https://evil.example\r\nX-Big: " + std::string(4000, 'a') + "\r\n\r\n");
  const Reply r = other.Read();
  EXPECT_EQ(r.status, 431);
  EXPECT_EQ(r.headers.count("access-control-allow-origin"), 0u);
  const std::string metrics = Do("GET", "/metrics").body;
  for (const char* status : {"400", "413"}) {
    EXPECT_NE(metrics.find(std::string("gyre_request_rejected_total{model_name=\"tiny\",status=\"") + status + "\"} 1"),
              std::string::npos)
        << status << "\n" << metrics;
  }
  EXPECT_NE(metrics.find("gyre_request_rejected_total{model_name=\"tiny\",status=\"431\"} 2"), std::string::npos)
      << metrics;
}

}  // namespace
}  // namespace gyre::serve
