// WorkPool: a few threads that run the CPU-heavy part of a request (JSON parsing, the chat
// template, tokenization) off the HTTP I/O threads, behind a bounded queue.
//
// The HTTP threads only move bytes; a 15 MB body parsed and tokenized there would stall every
// connection on that thread (/health included). With the pool, at most `num_threads` bodies are
// being prepared and at most `max_queued` wait, so the memory held by preparation is bounded too.
//
// Every accepted task runs exactly once: with `cancelled` false on a worker, or with `cancelled`
// true when Stop() finds it still queued (so it can answer its client instead of working).
//
// Thread safety: TrySubmit and num_queued from any thread; Stop from the owning thread (also
// called by the destructor). Tasks must not call Stop.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gyre::serve {

class WorkPool {
 public:
  using Task = std::function<void(bool cancelled)>;

  // REQUIRES: num_threads >= 1, max_queued >= 0.
  WorkPool(int num_threads, int64_t max_queued);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Queues `task`. Returns false (and drops it unrun) when `max_queued` tasks already wait or
  // the pool is stopped.
  bool TrySubmit(Task task);
  // Waits for the running tasks, runs the queued ones with cancelled = true, joins. Idempotent.
  void Stop();
  // Tasks waiting for a worker (not those running).
  int64_t num_queued() const;

 private:
  void Loop();

  // Constant after construction.
  const int64_t max_queued_;

  // Guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;

  // Owning thread only.
  std::vector<std::thread> threads_;
};

}  // namespace gyre::serve
