// `gyre mcp`: the feedback commands as Model Context Protocol tools, over stdio (JSON-RPC 2.0, one
// message per line; protocol revisions 2025-11-25, 2025-06-18, 2025-03-26, 2024-11-05).
//
// Each tool is one gyre command run as a child process of this binary (`/proc/self/exe verify ops
// --json ...`): a crash or a hang in a tool never takes the server down, a call is cancelled by
// killing its child, and every tool is exactly what the CLI does. The tool's arguments are checked
// against its input schema before anything runs (JSON-RPC -32602 naming the argument otherwise);
// the child's stdout is returned as text and, when it is JSON, as structuredContent; a non-zero
// exit is a result with isError true and the child's stderr tail. With a progress token, each
// stderr line of the child is sent as a notifications/progress message.
// Resources: every file a tool wrote (traces, result JSON) and the JSON files of bench/results are
// listed by resources/list and readable by resources/read (those only).
//
// Methods: initialize, ping, tools/list, tools/call, resources/list, resources/read,
// notifications/initialized, notifications/cancelled. Anything else: -32601.
//
// Thread safety: HandleLine from one reader thread; calls run on their own threads; `write` is
// called under the server's lock.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gyre::cli {

// One CLI option of a tool: JSON property -> flag (or a positional when `flag` is empty).
struct McpArg {
  std::string name, type, description;  // type: string | integer | number | boolean
  std::string flag;                     // "--op"; empty: positional, in declaration order
  bool required = false;
  std::vector<std::string> choices;     // enum for strings
  bool output_path = false;             // a file or folder the tool writes (listed as a resource)
};

struct McpTool {
  std::string name, title, description;
  std::vector<std::string> argv_prefix;  // e.g. {"verify", "ops", "--json"}
  std::vector<McpArg> args;
  nlohmann::json InputSchema() const;
  // argv after the program name. InvalidArgument names the argument that is wrong.
  Result<std::vector<std::string>> Argv(const nlohmann::json& arguments) const;
};

// gyre's tool table.
std::vector<McpTool> GyreMcpTools();

struct ChildResult {
  int exit_code = -1;  // -1: killed (cancelled or timed out)
  bool cancelled = false, timed_out = false;
  std::string out, err;
};
// Runs `exe argv...`, feeding each stderr line to `on_line`; kills it when `cancel` turns true or
// after `timeout_s`. Errors: Internal when it cannot be started.
Result<ChildResult> RunChild(const std::string& exe, const std::vector<std::string>& argv, double timeout_s,
                             const std::atomic<bool>& cancel, const std::function<void(const std::string&)>& on_line);

class McpServer {
 public:
  // Where the messages that answer one incoming message go (its response, its progress).
  using Sink = std::function<void(const nlohmann::json&)>;

  McpServer(std::vector<McpTool> tools, std::string exe, std::function<void(const std::string&)> write,
            double tool_timeout_s = 1800, std::string results_dir = "bench/results");
  ~McpServer();
  // stdio: one line in; every answer goes to `write` as one line.
  void HandleLine(const std::string& line);
  // Any transport: one parsed message; its answers go to `sink` (possibly from another thread,
  // after this returns). Returns false when the message needs no answer (a notification or a
  // response), true when exactly one response will reach `sink`.
  bool HandleMessage(const nlohmann::json& msg, Sink sink);
  // Waits for running calls; with `cancel`, kills them first (their requests get no answer).
  void Shutdown(bool cancel = true);

 private:
  void Reply(const Sink& sink, const nlohmann::json& id, nlohmann::json result);
  void Error(const Sink& sink, const nlohmann::json& id, int code, const std::string& message);
  void Call(const Sink& sink, const nlohmann::json& id, const nlohmann::json& params);
  nlohmann::json Resources();

  const std::vector<McpTool> tools_;
  const std::string exe_, results_dir_;
  const std::function<void(const std::string&)> write_;
  const double timeout_s_;
  std::mutex mu_, write_mu_;
  std::map<std::string, std::shared_ptr<std::atomic<bool>>> running_;  // request id (dumped) -> cancel
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;  // set as the call's thread returns
  };
  std::vector<Worker> workers_;  // finished ones are joined at the next call (a long-lived HTTP server)
  std::set<std::string> written_;  // resources written by tools
};

}  // namespace gyre::cli
