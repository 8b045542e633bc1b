#include "serve/trace_window.h"

#include <chrono>

#include "core/json_depth.h"

namespace gyre::serve {

Status TraceWindow::Begin(double seconds, std::function<void(Result<nlohmann::ordered_json>)> done) {
  if (!(seconds > 0 && seconds <= hooks_.max_seconds)) {
    return Status::InvalidArgument("seconds must be in (0, " + std::to_string(static_cast<int>(hooks_.max_seconds)) +
                                   "]");
  }
  std::unique_lock<std::mutex> l(mu_);
  if (stopping_) return Status::Unavailable("the server is shutting down");
  if (running_) return Status::Unavailable("a trace window is already being recorded; retry when it ends");
  GYRE_RETURN_IF_ERROR(hooks_.start());
  running_ = true;
  if (thread_.joinable()) thread_.join();  // the previous window's thread has finished its work
  thread_ = std::thread([this, seconds, done = std::move(done)] {
    {
      std::unique_lock<std::mutex> w(mu_);
      cv_.wait_for(w, std::chrono::duration<double>(seconds), [this] { return stopping_; });
    }
    Result<nlohmann::ordered_json> r = hooks_.stop();
    {
      std::lock_guard<std::mutex> w(mu_);
      running_ = false;
    }
    done(std::move(r));
  });
  return Status::Ok();
}

void TraceWindow::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool TraceWindow::running() const {
  std::lock_guard<std::mutex> l(mu_);
  return running_;
}

Result<double> ParseTraceRequest(const std::string& body, double default_seconds) {
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) return default_seconds;
  GYRE_RETURN_IF_ERROR(CheckJsonDepth(body, "the request body"));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception&) {
    return Status::InvalidArgument("the request body is not valid JSON");
  }
  if (!j.is_object()) return Status::InvalidArgument("the request body must be a JSON object");
  double seconds = default_seconds;
  for (const auto& [k, v] : j.items()) {
    if (k != "seconds") return Status::InvalidArgument("unknown field '" + k + "' (only 'seconds' is accepted)");
    if (!v.is_number()) return Status::InvalidArgument("'seconds' must be a number");
    seconds = v.get<double>();
  }
  return seconds;
}

}  // namespace gyre::serve
