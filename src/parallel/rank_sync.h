// RankSync: what the rank threads of one in-process group share on the host: a reusable barrier
// with a timeout, and the group's sticky failure. InProcessGroup and SharedDeviceGroup use it.
//
// Thread safety: every member is safe to call from any rank thread. `mu` and `cv` are public so
// that a group can wait on its own conditions (SharedDeviceGroup's Send/Recv mailboxes) under
// the same lock; `broken` is guarded by `mu`.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/status.h"

namespace gyre::parallel {

class RankSync {
 public:
  RankSync(int n, std::chrono::milliseconds timeout) : n_(n), timeout_(timeout) {}

  int n() const { return n_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // The first failure (OK while none).
  Status Broken();
  // Records `s` as the failure unless there is one already, wakes every waiter, and returns the
  // group's failure.
  Status Fail(Status s);
  // Fail for a caller that holds mu.
  Status FailLocked(Status s);
  // Like Fail with DeadlineExceeded "rank R waited T ms <what>". REQUIRES: the caller holds mu.
  Status TimedOutLocked(int rank, const std::string& what);
  // Returns when all n ranks have arrived (OK), the group is broken (its failure), or the
  // timeout passes (DeadlineExceeded naming `op`, and the group is broken).
  Status Barrier(int rank, const char* op);

  std::mutex mu;
  std::condition_variable cv;
  Status broken;  // guarded by mu

 private:
  const int n_;
  const std::chrono::milliseconds timeout_;
  int arrived_ = 0;          // guarded by mu
  uint64_t generation_ = 0;  // guarded by mu
};

}  // namespace gyre::parallel
