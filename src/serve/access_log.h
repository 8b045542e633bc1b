// The server's log: one access line per request on stderr (or a test's writer), in text or JSON,
// and the level that filters it.
//
//   text: 2026-12-03T14:03:55.123Z INFO access id=chatcmpl-… method=POST path=/v1/chat/completions
//         status=200 prompt_tokens=5 completion_tokens=7 latency_ms=12.3
//   json: {"time":"2026-12-03T14:03:55.123Z","level":"info","event":"access","id":"chatcmpl-…",
//          "method":"POST","path":"/v1/chat/completions","status":200,"prompt_tokens":5,
//          "completion_tokens":7,"latency_ms":12.3}            (one object per line)
//
// Access lines are at level info: --log-level warning or error (or --disable-log-requests) turns
// them off. A request the client abandoned before any answer has status 0 and `aborted`.
//
// Thread safety: Log may be called from any thread (one write per line); a RequestRecord is
// thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

#include "core/status.h"

namespace gyre::serve {

enum class LogLevel { kDebug, kInfo, kWarning, kError };
enum class LogFormat { kText, kJson };

// "debug", "info", "warning" (or "warn"), "error"; InvalidArgument naming the choices otherwise.
Result<LogLevel> ParseLogLevel(std::string_view name);
// "text" or "json"; InvalidArgument otherwise.
Result<LogFormat> ParseLogFormat(std::string_view name);
const char* LogLevelName(LogLevel level);  // "debug", "info", "warning", "error"

// One finished request, as the access line reports it.
struct AccessEntry {
  std::string id;      // the response id the client saw (chatcmpl-…, cmpl-…) or the server's req-…
  std::string method;
  std::string path;    // without the query string
  int status = 0;      // 0: nothing was sent (the client left first)
  bool aborted = false;  // the exchange ended without a complete response
  int64_t prompt_tokens = 0, completion_tokens = 0;
  double latency_ms = 0;  // request read → response complete (or abort)
};

// The line for `e` (no trailing newline), stamped with `unix_ms` (milliseconds since the epoch).
// Text values that are not plain visible ASCII are percent-encoded, so a line is always one line.
std::string FormatAccessLine(const AccessEntry& e, LogFormat format, int64_t unix_ms);

class Log {
 public:
  // `write` receives whole lines with their newline; default: stderr.
  Log(LogLevel level, LogFormat format, bool access_enabled = true,
      std::function<void(std::string_view)> write = nullptr);

  bool AccessEnabled() const { return access_enabled_ && level_ <= LogLevel::kInfo; }
  // Writes the access line for `e` (nothing when access lines are off).
  void Access(const AccessEntry& e) const;
  // A message at `level` (dropped below the configured level), e.g. startup warnings.
  void Message(LogLevel level, std::string_view text) const;

 private:
  void Emit(std::string line) const;  // adds the newline; one write

  const LogLevel level_;
  const LogFormat format_;
  const bool access_enabled_;
  const std::function<void(std::string_view)> write_;
};

// What the generation path learns about a request that the access line reports.
class RequestRecord {
 public:
  explicit RequestRecord(std::string id) : id_(std::move(id)) {}
  void SetId(std::string id);
  void SetTokens(int64_t prompt, int64_t completion);
  std::string id() const;
  std::pair<int64_t, int64_t> tokens() const;  // prompt, completion

 private:
  mutable std::mutex mu_;
  std::string id_;                 // guarded by mu_
  int64_t prompt_ = 0, completion_ = 0;  // guarded by mu_
};

}  // namespace gyre::serve
