// Span recording: the only part of the feedback layer that other layers call.
//
// A span is a named, timed interval on one thread with a category ("step", "layer", "op",
// "sched", "transfer", ...) and optional attributes (request id, layer, op shape, tokens, bytes).
// Spans go to per-thread buffers (no lock on the hot path after a thread's first span) and share
// one clock (steady_clock, ns since the recorder's epoch). When recording is off, GYRE_SPAN costs
// one relaxed atomic load and a branch.
//
// Thread safety: recording may happen on any thread; Enable, Collect and Clear may be called from
// any thread while others record (each thread's buffer has its own, normally uncontended, lock),
// so a running server can open and close a trace window.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#ifdef GYRE_WITH_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace gyre::trace {

struct Attrs {
  int64_t request = -1;
  int64_t layer = -1;
  int64_t tokens = -1;
  int64_t bytes = -1;
  int64_t flops = -1;
  std::string detail;  // e.g. shape "T=80 H=4 K=16"
};

struct Span {
  const char* name;  // static string
  const char* cat;   // static string
  int64_t start_ns = 0, dur_ns = 0;  // dur_ns < 0: instant event
  uint32_t tid = 0;
  Attrs attrs;
};

extern std::atomic<bool> g_enabled;
inline bool Enabled() { return g_enabled.load(std::memory_order_relaxed); }

int64_t NowNs();  // ns since the recorder's epoch
void Enable(bool on);
void Record(Span s);                       // appends to the calling thread's buffer
std::vector<Span> Collect();               // all buffered spans, sorted by start time
void Clear();
uint32_t ThreadId();                       // small stable id of the calling thread
// steady_clock time of the recorder's epoch, in ns since steady_clock's own epoch: NowNs() ==
// steady_clock::now() - EpochSteadyNs(). The device tracer hands CUPTI this clock.
int64_t EpochSteadyNs();
// (OS thread id, small id) of every thread that has recorded a span: CUPTI names threads by OS id.
std::vector<std::pair<int64_t, uint32_t>> ThreadOsIds();

// RAII span; records on destruction when recording was on at construction.
class Scoped {
 public:
  Scoped(const char* name, const char* cat) : name_(name), cat_(cat), on_(Enabled()) {
    if (on_) {
      start_ = NowNs();
#ifdef GYRE_WITH_NVTX
      nvtxRangePushA(name);  // CUDA build: the same spans appear as NVTX ranges in nsys
#endif
    }
  }
  Scoped(const char* name, const char* cat, Attrs a) : Scoped(name, cat) {
    if (on_) attrs_ = std::move(a);
  }
  ~Scoped() {
    if (on_) {
#ifdef GYRE_WITH_NVTX
      nvtxRangePop();
#endif
      Record({name_, cat_, start_, NowNs() - start_, ThreadId(), std::move(attrs_)});
    }
  }
  Scoped(const Scoped&) = delete;
  Scoped& operator=(const Scoped&) = delete;
  bool on() const { return on_; }
  Attrs& attrs() { return attrs_; }

 private:
  const char* name_;
  const char* cat_;
  bool on_;
  int64_t start_ = 0;
  Attrs attrs_;
};

}  // namespace gyre::trace

#define GYRE_TRACE_CONCAT2(a, b) a##b
#define GYRE_TRACE_CONCAT(a, b) GYRE_TRACE_CONCAT2(a, b)
// GYRE_SPAN("kda.chunk", "op") or GYRE_SPAN("kda.chunk", "op", attrs)
#define GYRE_SPAN(...) ::gyre::trace::Scoped GYRE_TRACE_CONCAT(_gyre_span_, __LINE__)(__VA_ARGS__)
