// The device timeline: CUPTI activity records of what ran on the GPU, on the trace's clock.
//
// StartDeviceTrace loads CUPTI (dlopen, so a gyre binary without it on the machine still runs and
// tracing off costs nothing: no CUPTI call is made until a trace is started), registers the span
// recorder's clock as CUPTI's timestamp source, and enables the activity kinds below. GPU
// timestamps are converted by CUPTI onto that clock, so device records and CPU spans share one time
// axis without an offset of our own. StopDeviceTrace flushes and returns the records.
//
// Recorded: kernels (concurrent-kernel records, with the CUDA graph id for kernels of a graph
// launch), memcpy, peer-to-peer memcpy, memset, and the runtime and driver API calls that launched
// them (correlation ids link the two). Kernels whose name starts with "nccl" are collectives.
// The launching span of an API call is the innermost CPU span open on its thread at that moment.
// NVTX ranges are not recorded separately: every CPU span is also an NVTX range in the CUDA build,
// so the spans on the trace are those ranges.
//
// Library search order: $GYRE_CUPTI_LIB, libcupti.so.13, libcupti.so, then the CUDA toolkit's lib
// and extras/CUPTI/lib64 folders, then torch's pip wheel folders under /usr/local/lib and /usr/lib.
//
// Thread safety: Start/Stop from one thread at a time; records arrive on CUPTI's worker thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/trace.h"

namespace gyre::feedback {

struct DeviceEvent {
  std::string name;          // kernel name (demangled, without parameters) or "memcpy HtoD" / "memset"
  std::string cat;           // kernel | collective | memcpy | memset
  int device = 0;
  uint32_t stream = 0;
  int64_t start_ns = 0, end_ns = 0;  // trace clock (trace::NowNs)
  uint32_t correlation = 0;
  uint32_t graph = 0;        // CUDA graph id, 0 when not launched from a graph
  int64_t bytes = -1;        // copies and memsets
  std::string detail;        // "grid=(x,y,z) block=(x,y,z)" for kernels
};

struct ApiEvent {
  std::string name;          // cudaLaunchKernel, cuLaunchKernelEx, cudaMemcpyAsync, cudaGraphLaunch, ...
  int64_t start_ns = 0, end_ns = 0;
  int64_t os_tid = 0;        // the calling thread's OS id
  uint32_t correlation = 0;
};

struct DeviceTrace {
  std::vector<DeviceEvent> device;  // sorted by start
  std::vector<ApiEvent> api;        // only calls that correlate to a device record
  int64_t dropped = 0;              // records CUPTI dropped (buffer full) or beyond 2M records
  uint32_t cupti_version = 0;
  std::string library;              // the libcupti that was loaded
};

// Errors: Unimplemented (CPU build), NotFound (no libcupti), Unavailable (CUPTI refused, e.g. a
// profiler such as nsys already owns it, or a trace is already active).
Status StartDeviceTrace();
// Errors: Unavailable when no trace is active.
Result<DeviceTrace> StopDeviceTrace();
bool DeviceTraceActive();

// "void gyre::ops::Foo<float, 4>(float const*, int)" -> "gyre::ops::Foo<float, 4>": the demangled
// name without its parameter list and return type. Mangled names are demangled first.
std::string ShortKernelName(const char* name);

// Small trace tid of each API call's thread (trace::ThreadOsIds), or 10000 + os_tid % 100000
// for threads that never recorded a span.
uint32_t TraceTidForOsTid(const std::vector<std::pair<int64_t, uint32_t>>& os_ids, int64_t os_tid);

}  // namespace gyre::feedback
