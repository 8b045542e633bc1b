// Test helper: a RequestSink that records what the engine streams to one request (ids,
// logprobs, number of top alternatives) and how it ended, and waits for the end.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "engine/engine.h"

namespace gyre::testing {

class Collector : public RequestSink {
 public:
  void OnToken(const TokenEvent& ev) override {
    std::lock_guard<std::mutex> l(mu);
    ids.push_back(ev.id);
    logprobs.push_back(ev.logprob);
    tops.push_back(ev.top.size());
  }
  void OnFinish(FinishReason r, const Status& s, const Usage& u) override {
    std::lock_guard<std::mutex> l(mu);
    ++num_finish;
    reason = r;
    status = s;
    usage = u;
    cv.notify_all();
  }
  // A deadline for a hung engine, not a timing assertion.
  void Wait() {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(300), [&] { return num_finish > 0; }));
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  std::vector<size_t> tops;
  int num_finish = 0;
  FinishReason reason = FinishReason::kError;
  Status status;
  Usage usage;
};

}  // namespace gyre::testing
