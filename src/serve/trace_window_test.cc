// POST /debug/trace: the trace window's own rules, its request parser, and the route in the server
// (auth, method, validation, one window at a time, an answer naming the written trace).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <future>
#include <string>

#include "serve/server_test_fixture.h"
#include "serve/trace_window.h"

namespace gyre::serve::testing {
namespace {

struct Counting {
  std::atomic<int> starts{0}, stops{0};
  TraceHooks Hooks(Status start_status = Status::Ok()) {
    TraceHooks h;
    h.start = [this, start_status] {
      if (start_status.ok()) ++starts;
      return start_status;
    };
    h.stop = [this]() -> Result<nlohmann::ordered_json> {
      ++stops;
      return nlohmann::ordered_json{{"path", "/tmp/w.json"}, {"events", 3}};
    };
    h.max_seconds = 60;
    return h;
  }
};

TEST(TraceWindow, BoundsOneAtATimeAndEarlyStop) {
  Counting c;
  TraceWindow w(c.Hooks());
  auto ignore = [](Result<nlohmann::ordered_json>) {};
  EXPECT_EQ(w.Begin(0, ignore).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.Begin(-1, ignore).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.Begin(61, ignore).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.Begin(std::nan(""), ignore).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.starts, 0);
  std::promise<Result<nlohmann::ordered_json>> first;
  ASSERT_TRUE(w.Begin(30, [&](Result<nlohmann::ordered_json> r) { first.set_value(std::move(r)); }).ok());
  EXPECT_TRUE(w.running());
  EXPECT_EQ(w.Begin(1, ignore).code(), StatusCode::kUnavailable);  // one window at a time
  w.Stop();  // ends the 30 s window now; its trace is still written
  auto r = first.get_future().get();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)["events"], 3);
  EXPECT_EQ(c.starts, 1);
  EXPECT_EQ(c.stops, 1);
  EXPECT_FALSE(w.running());
  EXPECT_EQ(w.Begin(1, ignore).code(), StatusCode::kUnavailable);  // stopped for good
}

TEST(TraceWindow, ShortWindowsRunBackToBack) {
  Counting c;
  TraceWindow w(c.Hooks());
  for (int i = 0; i < 3; ++i) {
    std::promise<void> done;
    ASSERT_TRUE(w.Begin(0.01, [&](Result<nlohmann::ordered_json>) { done.set_value(); }).ok()) << i;
    done.get_future().wait();
    EXPECT_FALSE(w.running());  // `done` runs after the window is marked finished
  }
  EXPECT_EQ(c.stops, 3);
}

TEST(TraceWindow, StartErrorRefusesTheWindow) {
  Counting c;
  TraceWindow w(c.Hooks(Status::Unavailable("CUPTI is owned by nsys")));
  EXPECT_EQ(w.Begin(1, [](Result<nlohmann::ordered_json>) {}).code(), StatusCode::kUnavailable);
  EXPECT_FALSE(w.running());
  EXPECT_EQ(c.stops, 0);
}

TEST(TraceWindow, ParseRequest) {
  EXPECT_DOUBLE_EQ(*ParseTraceRequest(""), 5);
  EXPECT_DOUBLE_EQ(*ParseTraceRequest("  \n"), 5);
  EXPECT_DOUBLE_EQ(*ParseTraceRequest("{}"), 5);
  EXPECT_DOUBLE_EQ(*ParseTraceRequest(R"({"seconds": 2.5})"), 2.5);
  EXPECT_FALSE(ParseTraceRequest(R"({"seconds": "2"})").ok());
  EXPECT_FALSE(ParseTraceRequest(R"({"steps": 2})").ok());
  EXPECT_FALSE(ParseTraceRequest("[1]").ok());
  EXPECT_FALSE(ParseTraceRequest("{").ok());
  EXPECT_FALSE(ParseTraceRequest(std::string(100000, '[')).ok());
}

TEST_F(ServerTest, DebugTraceIsOffWithoutHooks) {
  Start();
  const Reply r = Do("POST", "/debug/trace", "{}");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("--trace-dir"), std::string::npos) << r.body;
}

TEST_F(ServerTest, DebugTraceWindow) {
  Counting c;
  trace_hooks_ = c.Hooks();
  ServerOptions so;
  so.api_key = "sekret";
  Start({}, so);
  const std::vector<std::string> auth = {"Authorization: Bearer sekret"};
  EXPECT_EQ(Do("POST", "/debug/trace", R"({"seconds": 0.05})").status, 401);
  EXPECT_EQ(Do("GET", "/debug/trace", "", auth).status, 405);
  const Reply bad = Do("POST", "/debug/trace", R"({"seconds": 0})", auth);
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.json()["error"]["param"], "seconds");
  EXPECT_EQ(Do("POST", "/debug/trace", R"({"seconds": 1e9})", auth).status, 400);
  EXPECT_EQ(c.starts, 0);
  const Reply ok = Do("POST", "/debug/trace", R"({"seconds": 0.05})", auth);
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.json()["path"], "/tmp/w.json");
  EXPECT_EQ(c.stops, 1);
  // A second window while one records is a 409; the first still answers.
  auto first = std::async(std::launch::async, [&] { return Do("POST", "/debug/trace", R"({"seconds": 1.5})", auth); });
  while (c.starts < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const Reply busy = Do("POST", "/debug/trace", R"({"seconds": 0.05})", auth);
  EXPECT_EQ(busy.status, 409) << busy.body;
  EXPECT_EQ(first.get().status, 200);
  EXPECT_EQ(c.stops, 2);
  EXPECT_EQ(Do("GET", "/health").status, 200);
}

}  // namespace
}  // namespace gyre::serve::testing
