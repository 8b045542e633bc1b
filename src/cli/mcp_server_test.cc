// The MCP server's protocol handling and argument checking without the SDK (tests/mcp has the
// official client end to end): tools are run as children, here /bin/sh scripts.
#include "cli/mcp_server.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <thread>

namespace gyre::cli {
namespace {

struct Captured {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<nlohmann::json> msgs;
  std::function<void(const std::string&)> Writer() {
    return [this](const std::string& s) {
      std::lock_guard<std::mutex> l(mu);
      EXPECT_EQ(s.back(), '\n');
      EXPECT_EQ(s.find('\n'), s.size() - 1) << "one message per line";
      msgs.push_back(nlohmann::json::parse(s));
      cv.notify_all();
    };
  }
  nlohmann::json WaitFor(const nlohmann::json& id, double seconds = 10) {
    std::unique_lock<std::mutex> l(mu);
    nlohmann::json found;
    cv.wait_for(l, std::chrono::duration<double>(seconds), [&] {
      for (const auto& m : msgs)
        if (m.contains("id") && m["id"] == id) {
          found = m;
          return true;
        }
      return false;
    });
    return found;
  }
};

McpTool ShTool(const std::string& name, const std::string& script, std::vector<McpArg> args = {}) {
  return {name, name, "test tool", {"-c", script, "sh"}, std::move(args)};
}

TEST(McpTool, ArgvFromArgumentsAndTheirErrors) {
  McpTool t{"t", "t", "d", {"verify", "ops", "--json"},
            {{"op", "string", "", "--op", false, {}, false}, {"seed", "integer", "", "--seed", false, {}, false},
             {"tol", "number", "", "--tol", false, {}, false}, {"prose", "boolean", "", "--prose", false, {}, false},
             {"plan", "string", "", "--plan", false, {"tp=2", "ep=2"}, false}, {"file", "string", "", "", true, {}, false}}};
  auto a = t.Argv({{"op", "rmsnorm"}, {"seed", 7}, {"prose", true}, {"plan", "ep=2"}, {"file", "g.json"}, {"tol", 0.5}});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, (std::vector<std::string>{"verify", "ops", "--json", "--op", "rmsnorm", "--seed", "7", "--tol", "0.5",
                                          "--prose", "--plan", "ep=2", "g.json"}));
  auto msg = [&](const nlohmann::json& j) { auto r = t.Argv(j); return r.ok() ? std::string("ok") : r.status().message(); };
  EXPECT_NE(msg({{"op", "x"}}).find("missing required argument 'file'"), std::string::npos);
  EXPECT_NE(msg({{"file", "f"}, {"seed", "7"}}).find("'seed' must be an integer"), std::string::npos);
  EXPECT_NE(msg({{"file", "f"}, {"plan", "tp=3"}}).find("one of the listed values"), std::string::npos);
  EXPECT_NE(msg({{"file", "f"}, {"bogus", 1}}).find("unknown argument 'bogus'"), std::string::npos);
  EXPECT_NE(msg({{"file", "--help"}}).find("must not start with '-'"), std::string::npos);
  EXPECT_NE(msg({{"file", "f"}, {"prose", 1}}).find("true or false"), std::string::npos);
  EXPECT_NE(msg(nlohmann::json::array()).find("must be an object"), std::string::npos);
  const auto schema = t.InputSchema();
  EXPECT_EQ(schema["required"], nlohmann::json::array({"file"}));
  EXPECT_EQ(schema["properties"]["plan"]["enum"], nlohmann::json::array({"tp=2", "ep=2"}));
}

TEST(McpServer, HandshakeListsAndProtocolErrors) {
  Captured c;
  McpServer s({ShTool("echo_json", "echo '{\"ok\": true}'")}, "/bin/sh", c.Writer());
  s.HandleLine(R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})");
  EXPECT_EQ(c.WaitFor(1)["result"]["protocolVersion"], "2025-06-18");  // a version we speak is kept
  s.HandleLine(R"({"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"1999-01-01"}})");
  EXPECT_EQ(c.WaitFor(2)["result"]["protocolVersion"], "2025-11-25");  // otherwise our latest
  s.HandleLine(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
  s.HandleLine(R"({"jsonrpc":"2.0","id":"l","method":"tools/list"})");
  EXPECT_EQ(c.WaitFor("l")["result"]["tools"][0]["name"], "echo_json");
  s.HandleLine("{not json");
  s.HandleLine(R"([{"jsonrpc":"2.0","id":9,"method":"ping"}])");  // batches are not part of the protocol
  s.HandleLine(R"({"jsonrpc":"2.0","id":3,"method":"frobnicate"})");
  s.HandleLine(R"({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"nope"}})");
  s.HandleLine(R"({"jsonrpc":"2.0","id":5,"method":"ping"})");
  s.HandleLine(std::string(10000, '[') + std::string(10000, ']'));
  EXPECT_EQ(c.WaitFor(3)["error"]["code"], -32601);
  EXPECT_EQ(c.WaitFor(4)["error"]["code"], -32602);
  EXPECT_TRUE(c.WaitFor(5)["result"].is_object());
  int parse_errors = 0, invalid = 0;
  for (const auto& m : c.msgs) {
    if (!m.contains("error")) continue;
    parse_errors += m["error"]["code"] == -32700;
    invalid += m["error"]["code"] == -32600;
  }
  EXPECT_EQ(parse_errors, 2);
  EXPECT_EQ(invalid, 1);
}

TEST(McpServer, CallsReturnStructuredOutputErrorsAndProgress) {
  Captured c;
  McpServer s({ShTool("echo_json", "echo line one >&2; echo line two >&2; echo '{\"ok\": true}'"),
               ShTool("fail", "echo broken >&2; exit 3"), ShTool("text", "echo plain words")},
              "/bin/sh", c.Writer());
  s.HandleLine(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo_json","arguments":{},"_meta":{"progressToken":"p1"}}})");
  s.HandleLine(R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fail"}})");
  s.HandleLine(R"({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"text"}})");
  const auto r1 = c.WaitFor(1), r2 = c.WaitFor(2), r3 = c.WaitFor(3);
  EXPECT_EQ(r1["result"]["structuredContent"]["ok"], true);
  EXPECT_EQ(r1["result"]["isError"], false);
  EXPECT_EQ(r2["result"]["isError"], true);
  EXPECT_NE(r2["result"]["content"][0]["text"].get<std::string>().find("status 3\nbroken"), std::string::npos);
  EXPECT_FALSE(r3["result"].contains("structuredContent"));
  EXPECT_EQ(r3["result"]["content"][0]["text"], "plain words\n");
  int progress = 0;
  for (const auto& m : c.msgs)
    if (m.value("method", "") == "notifications/progress" && m["params"]["progressToken"] == "p1") ++progress;
  EXPECT_EQ(progress, 2);
}

TEST(McpServer, CancelledCallIsKilledAndGetsNoAnswer) {
  Captured c;
  McpServer s({ShTool("sleep", "sleep 30")}, "/bin/sh", c.Writer());
  const auto t0 = std::chrono::steady_clock::now();
  s.HandleLine(R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"sleep"}})");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  s.HandleLine(R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}})");
  s.Shutdown(/*cancel=*/false);  // waits for the call's thread: it must end long before 30 s
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_TRUE(c.WaitFor(7, 0.1).is_null());
}

TEST(McpServer, TimeoutKillsTheChild) {
  Captured c;
  McpServer s({ShTool("sleep", "sleep 30")}, "/bin/sh", c.Writer(), /*tool_timeout_s=*/0.3);
  s.HandleLine(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sleep"}})");
  const auto r = c.WaitFor(1, 20);
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(r["result"]["isError"], true);
  EXPECT_NE(r["result"]["content"][0]["text"].get<std::string>().find("timed out"), std::string::npos);
}

}  // namespace
}  // namespace gyre::cli
