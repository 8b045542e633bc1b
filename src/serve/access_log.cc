#include "serve/access_log.h"

#include <cmath>
#include <cstdio>
#include <ctime>

#include <nlohmann/json.hpp>

namespace gyre::serve {

Result<LogLevel> ParseLogLevel(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning" || name == "warn") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  return Status::InvalidArgument("--log-level '" + std::string(name) + "' is not one of debug, info, warning, error");
}

Result<LogFormat> ParseLogFormat(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return Status::InvalidArgument("--log-format '" + std::string(name) + "' is not one of text, json");
}

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
  }
  return "?";
}

namespace {

// RFC 3339 UTC with milliseconds: 2026-12-03T14:03:55.123Z.
std::string Timestamp(int64_t unix_ms) {
  const std::time_t secs = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(unix_ms % 1000));
  return buf;
}

// Visible ASCII except '%' and '"' stays; every other byte becomes %XX (so a value never breaks
// the line or the key=value split).
std::string Plain(std::string_view v) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : v) {
    if (c > 0x20 && c < 0x7f && c != '%' && c != '"') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out.empty() ? "-" : out;
}

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c);
  return out;
}

int64_t NowUnixMs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

std::string Millis(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", ms);
  return buf;
}

}  // namespace

std::string FormatAccessLine(const AccessEntry& e, LogFormat format, int64_t unix_ms) {
  if (format == LogFormat::kJson) {
    nlohmann::ordered_json j = {{"time", Timestamp(unix_ms)},
                                {"level", "info"},
                                {"event", "access"},
                                {"id", e.id},
                                {"method", e.method},
                                {"path", e.path},
                                {"status", e.status},
                                {"aborted", e.aborted},
                                {"prompt_tokens", e.prompt_tokens},
                                {"completion_tokens", e.completion_tokens},
                                {"latency_ms", std::round(e.latency_ms * 10) / 10}};
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
  std::string line = Timestamp(unix_ms) + " INFO access id=" + Plain(e.id) + " method=" + Plain(e.method) +
                     " path=" + Plain(e.path) + " status=" + std::to_string(e.status) +
                     " prompt_tokens=" + std::to_string(e.prompt_tokens) +
                     " completion_tokens=" + std::to_string(e.completion_tokens) + " latency_ms=" + Millis(e.latency_ms);
  if (e.aborted) line += " aborted=true";
  return line;
}

Log::Log(LogLevel level, LogFormat format, bool access_enabled, std::function<void(std::string_view)> write)
    : level_(level), format_(format), access_enabled_(access_enabled), write_(std::move(write)) {}

void Log::Access(const AccessEntry& e) const {
  if (!AccessEnabled()) return;
  Emit(FormatAccessLine(e, format_, NowUnixMs()));
}

void Log::Message(LogLevel level, std::string_view text) const {
  if (level < level_) return;
  std::string line;
  if (format_ == LogFormat::kJson) {
    line = nlohmann::ordered_json{{"time", Timestamp(NowUnixMs())}, {"level", LogLevelName(level)}, {"message", text}}
               .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  } else {
    line = Timestamp(NowUnixMs()) + " " + Upper(LogLevelName(level)) + " " + std::string(text);
  }
  Emit(std::move(line));
}

void Log::Emit(std::string line) const {
  line += '\n';
  if (write_) {
    write_(line);
  } else {
    std::fwrite(line.data(), 1, line.size(), stderr);  // one call: lines from threads do not interleave
  }
}

void RequestRecord::SetId(std::string id) {
  std::lock_guard<std::mutex> l(mu_);
  id_ = std::move(id);
}

void RequestRecord::SetTokens(int64_t prompt, int64_t completion) {
  std::lock_guard<std::mutex> l(mu_);
  prompt_ = prompt;
  completion_ = completion;
}

std::string RequestRecord::id() const {
  std::lock_guard<std::mutex> l(mu_);
  return id_;
}

std::pair<int64_t, int64_t> RequestRecord::tokens() const {
  std::lock_guard<std::mutex> l(mu_);
  return {prompt_, completion_};
}

}  // namespace gyre::serve
