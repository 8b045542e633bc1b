#include "core/trace.h"

#include <algorithm>
#include <memory>
#include <mutex>

namespace gyre::trace {

std::atomic<bool> g_enabled{false};

namespace {
const auto kEpoch = std::chrono::steady_clock::now();

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<std::vector<Span>>> buffers;  // shared: a thread may exit before Collect
  std::atomic<uint32_t> next_tid{0};
};
Registry& Reg() {
  static Registry* r = new Registry();  // never destroyed: threads may record during exit
  return *r;
}
struct ThreadBuf {
  std::shared_ptr<std::vector<Span>> buf;
  uint32_t tid;
  ThreadBuf() : buf(std::make_shared<std::vector<Span>>()), tid(Reg().next_tid.fetch_add(1)) {
    std::lock_guard<std::mutex> l(Reg().mu);
    Reg().buffers.push_back(buf);
  }
};
ThreadBuf& Local() {
  thread_local ThreadBuf tb;
  return tb;
}
}  // namespace

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - kEpoch).count();
}

void Enable(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

uint32_t ThreadId() { return Local().tid; }

void Record(Span s) { Local().buf->push_back(std::move(s)); }

std::vector<Span> Collect() {
  std::vector<Span> all;
  std::lock_guard<std::mutex> l(Reg().mu);
  for (const auto& b : Reg().buffers) all.insert(all.end(), b->begin(), b->end());
  std::stable_sort(all.begin(), all.end(), [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
  return all;
}

void Clear() {
  std::lock_guard<std::mutex> l(Reg().mu);
  for (const auto& b : Reg().buffers) b->clear();
}

}  // namespace gyre::trace
