#include "parallel/rank_sync.h"

namespace gyre::parallel {

Status RankSync::Broken() {
  std::lock_guard<std::mutex> lock(mu);
  return broken;
}

Status RankSync::Fail(Status s) {
  std::lock_guard<std::mutex> lock(mu);
  return FailLocked(std::move(s));
}

Status RankSync::FailLocked(Status s) {
  if (broken.ok()) broken = std::move(s);
  cv.notify_all();
  return broken;
}

Status RankSync::TimedOutLocked(int rank, const std::string& what) {
  return FailLocked(Status(StatusCode::kDeadlineExceeded, "rank " + std::to_string(rank) + " waited " +
                                                              std::to_string(timeout_.count()) + " ms " + what));
}

Status RankSync::Barrier(int rank, const char* op) {
  std::unique_lock<std::mutex> lock(mu);
  if (!broken.ok()) return broken;
  const uint64_t gen = generation_;
  if (++arrived_ == n_) {
    arrived_ = 0;
    ++generation_;
    cv.notify_all();
    return Status();
  }
  const bool done = cv.wait_for(lock, timeout_, [&] { return generation_ != gen || !broken.ok(); });
  if (generation_ != gen) return Status();
  if (!done) return TimedOutLocked(rank, std::string("for the other ranks in '") + op + "'");
  return broken;
}

}  // namespace gyre::parallel
