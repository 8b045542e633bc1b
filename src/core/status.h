// Status and Result<T>: gyre's error values (style.md §2.4).
//
// Status is cheap when OK (no allocation) and carries a closed set of codes. Result<T> holds a
// value or a non-OK Status and follows the std::expected interface (has_value, value, error,
// operator*, operator->), so it can be swapped for std::expected when we move to C++23.
// gyre code does not throw; failures that depend on data are returned as a Status.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <variant>

namespace gyre {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kResourceExhausted,
  kUnavailable,
  kDeadlineExceeded,
  kCancelled,
  kDataLoss,
  kInternal,
  kUnimplemented,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  const std::string& message() const;
  // "InvalidArgument: message", or "OK".
  std::string ToString() const;
  // Returns a copy whose message is `context + ": " + message()`; OK stays OK.
  Status WithContext(const std::string& context) const;

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;  // null when OK; shared so copies are cheap
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) {
      std::fprintf(stderr, "gyre: Result constructed from an OK Status\n");
      std::abort();
    }
  }

  bool has_value() const { return v_.index() == 0; }
  bool ok() const { return has_value(); }
  explicit operator bool() const { return has_value(); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  // The error; OK when has_value().
  Status status() const { return has_value() ? Status() : std::get<Status>(v_); }
  const Status& error() const { return std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace gyre

#define GYRE_CONCAT_INNER(a, b) a##b
#define GYRE_CONCAT(a, b) GYRE_CONCAT_INNER(a, b)

#define GYRE_RETURN_IF_ERROR(expr)          \
  do {                                      \
    ::gyre::Status _gyre_s = (expr);        \
    if (!_gyre_s.ok()) return _gyre_s;      \
  } while (0)

#define GYRE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.has_value()) return tmp.error();        \
  lhs = std::move(tmp).value()

#define GYRE_ASSIGN_OR_RETURN(lhs, expr) \
  GYRE_ASSIGN_OR_RETURN_IMPL(GYRE_CONCAT(_gyre_r_, __LINE__), lhs, expr)

// Invariant checks (programmer errors only): always on, abort with a message.
#define GYRE_CHECK(cond)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: GYRE_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)
