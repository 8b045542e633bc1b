#include "core/trace.h"

#include <algorithm>
#include <memory>
#include <mutex>

#include <unistd.h>

namespace gyre::trace {

std::atomic<bool> g_enabled{false};

namespace {
const auto kEpoch = std::chrono::steady_clock::now();

// One buffer per thread. Its mutex is uncontended except while Collect or Clear runs, so a server
// can start and stop a trace window while its threads record.
struct Buffer {
  std::mutex mu;
  std::vector<Span> spans;
};
struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<Buffer>> buffers;  // shared: a thread may exit before Collect
  std::vector<std::pair<int64_t, uint32_t>> os_ids;         // (gettid, small id) per buffer
  std::atomic<uint32_t> next_tid{0};
};
Registry& Reg() {
  static Registry* r = new Registry();  // never destroyed: threads may record during exit
  return *r;
}
struct ThreadBuf {
  std::shared_ptr<Buffer> buf;
  uint32_t tid;
  ThreadBuf() : buf(std::make_shared<Buffer>()), tid(Reg().next_tid.fetch_add(1)) {
    std::lock_guard<std::mutex> l(Reg().mu);
    Reg().buffers.push_back(buf);
    Reg().os_ids.emplace_back(static_cast<int64_t>(gettid()), tid);
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

int64_t EpochSteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(kEpoch.time_since_epoch()).count();
}

std::vector<std::pair<int64_t, uint32_t>> ThreadOsIds() {
  std::lock_guard<std::mutex> l(Reg().mu);
  return Reg().os_ids;
}

void Enable(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

uint32_t ThreadId() { return Local().tid; }

void Record(Span s) {
  Buffer& b = *Local().buf;
  std::lock_guard<std::mutex> l(b.mu);
  b.spans.push_back(std::move(s));
}

std::vector<Span> Collect() {
  std::vector<Span> all;
  std::lock_guard<std::mutex> l(Reg().mu);
  for (const auto& b : Reg().buffers) {
    std::lock_guard<std::mutex> lb(b->mu);
    all.insert(all.end(), b->spans.begin(), b->spans.end());
  }
  std::stable_sort(all.begin(), all.end(), [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
  return all;
}

void Clear() {
  std::lock_guard<std::mutex> l(Reg().mu);
  for (const auto& b : Reg().buffers) {
    std::lock_guard<std::mutex> lb(b->mu);
    b->spans.clear();
  }
}

}  // namespace gyre::trace
