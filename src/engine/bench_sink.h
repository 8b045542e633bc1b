// A RequestSink for benchmark programs (gyre_specdec_bench, gyre_specdec_cuda_bench): records the
// streamed ids and how the request ended, and waits for the end. No gtest (test_collector.h is
// the tests' equivalent, with logprobs and a deadline).
#pragma once

#include <condition_variable>
#include <mutex>
#include <vector>

#include "engine/engine.h"

namespace gyre {

class BenchSink : public RequestSink {
 public:
  void OnToken(const TokenEvent& ev) override {
    std::lock_guard<std::mutex> l(mu);
    ids.push_back(ev.id);
  }
  void OnFinish(FinishReason, const Status& s, const Usage& u) override {
    std::lock_guard<std::mutex> l(mu);
    status = s;
    usage = u;
    done = true;
    cv.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return done; });
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> ids;
  Status status;
  Usage usage;
  bool done = false;
};

}  // namespace gyre
