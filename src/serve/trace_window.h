// A bounded trace of a running server, on demand: `POST /debug/trace {"seconds": S}` starts the
// recording (CPU spans, and the device timeline on the GPU backend), waits S seconds on its own
// thread (never an HTTP or engine thread), stops it, and answers with where the trace was written.
//
// The recording itself is the caller's (serve_command.cc wires feedback::StartTrace and
// StopAndWriteTrace): the serve layer does not depend on the feedback layer.
//
// Thread safety: Begin may be called from any thread; one window at a time (a second is refused
// while one runs). Stop ends a running window early (its trace is still written) and joins.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gyre::serve {

struct TraceHooks {
  std::function<Status()> start;                  // begin recording; an error refuses the window
  std::function<Result<nlohmann::ordered_json>()> stop;   // stop, write; returns what to answer
  double max_seconds = 60;
};

class TraceWindow {
 public:
  explicit TraceWindow(TraceHooks hooks) : hooks_(std::move(hooks)) {}
  ~TraceWindow() { Stop(); }
  TraceWindow(const TraceWindow&) = delete;
  TraceWindow& operator=(const TraceWindow&) = delete;

  // Errors: InvalidArgument (seconds outside (0, max_seconds]), Unavailable (a window is running,
  // or the server is stopping), whatever hooks.start returns. On success `done` is called once, on
  // the window's thread, with the result of hooks.stop.
  Status Begin(double seconds, std::function<void(Result<nlohmann::ordered_json>)> done);
  void Stop();
  bool running() const;

 private:
  TraceHooks hooks_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool running_ = false, stopping_ = false;
  std::thread thread_;
};

// Parses a /debug/trace request body ("" or {"seconds": number}); InvalidArgument names the field.
Result<double> ParseTraceRequest(const std::string& body, double default_seconds = 5);

}  // namespace gyre::serve
