#include "serve/work_pool.h"

#include "core/status.h"

namespace gyre::serve {

WorkPool::WorkPool(int num_threads, int64_t max_queued) : max_queued_(max_queued) {
  GYRE_CHECK(num_threads >= 1 && max_queued >= 0);
  threads_.reserve(static_cast<size_t>(num_threads));
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { Loop(); });
}

WorkPool::~WorkPool() { Stop(); }

bool WorkPool::TrySubmit(Task task) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_ || static_cast<int64_t>(queue_.size()) >= max_queued_) return false;
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

void WorkPool::Stop() {
  std::deque<Task> left;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    stopping_ = true;
    left.swap(queue_);
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  for (Task& t : left) t(/*cancelled=*/true);
}

int64_t WorkPool::num_queued() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int64_t>(queue_.size());
}

void WorkPool::Loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left for this worker
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task(/*cancelled=*/false);
  }
}

}  // namespace gyre::serve
