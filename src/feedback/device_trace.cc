#include "feedback/device_trace.h"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#ifdef GYRE_CUDA
#include <cupti.h>
#include <dlfcn.h>

#include <chrono>
#include <filesystem>
#endif

namespace gyre::feedback {

std::string ShortKernelName(const char* name) {
  if (name == nullptr) return "?";
  std::string s = name;
  if (s.rfind("_Z", 0) == 0) {
    int rc = 0;
    std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &rc), std::free);
    if (rc == 0 && d) s = d.get();
  }
  // Cut the parameter list: the '(' that matches a final ')'.
  if (!s.empty() && s.back() == ')') {
    int depth = 0;
    for (size_t i = s.size(); i-- > 0;) {
      if (s[i] == ')') ++depth;
      if (s[i] == '(' && --depth == 0) {
        if (i > 0) s.resize(i);
        break;
      }
    }
  }
  // Drop a leading return type ("void "): the last space outside <...> and (...).
  int depth = 0;
  size_t space = std::string::npos;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '<' || c == '(') ++depth;
    if ((c == '>' || c == ')') && depth > 0) --depth;
    if (c == ' ' && depth == 0) space = i;
  }
  if (space != std::string::npos) s = s.substr(space + 1);
  return s;
}

uint32_t TraceTidForOsTid(const std::vector<std::pair<int64_t, uint32_t>>& os_ids, int64_t os_tid) {
  // The last registration wins: the OS may reuse the id of a thread that exited.
  for (auto it = os_ids.rbegin(); it != os_ids.rend(); ++it)
    if (it->first == os_tid) return it->second;
  return 10000 + static_cast<uint32_t>(os_tid % 100000);
}

#ifndef GYRE_CUDA

Status StartDeviceTrace() { return Status::Unimplemented("device tracing needs the CUDA build (cmake --preset cuda)"); }
Result<DeviceTrace> StopDeviceTrace() { return Status::Unavailable("no device trace is active"); }
bool DeviceTraceActive() { return false; }

#else

namespace {

// The CUPTI entry points gyre uses, resolved from the loaded library.
struct Cupti {
  void* handle = nullptr;
  std::string path;
  decltype(&cuptiActivityEnable) Enable = nullptr;
  decltype(&cuptiActivityDisable) Disable = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) RegisterCallbacks = nullptr;
  decltype(&cuptiActivityRegisterTimestampCallback) RegisterTimestamp = nullptr;
  decltype(&cuptiActivityFlushAll) FlushAll = nullptr;
  decltype(&cuptiActivityGetNextRecord) GetNextRecord = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) GetNumDropped = nullptr;
  decltype(&cuptiSetThreadIdType) SetThreadIdType = nullptr;
  decltype(&cuptiGetCallbackName) GetCallbackName = nullptr;
  decltype(&cuptiGetResultString) GetResultString = nullptr;
  decltype(&cuptiGetVersion) GetVersion = nullptr;
};

std::vector<std::string> CuptiCandidates() {
  std::vector<std::string> c;
  if (const char* e = std::getenv("GYRE_CUPTI_LIB"); e && *e) c.push_back(e);
  c.push_back("libcupti.so.13");
  c.push_back("libcupti.so");
  for (const char* dir : {"/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/local/cuda/extras/CUPTI/lib64",
                          "/usr/local/cuda-13.0/lib64", "/usr/local/cuda-13.0/lib",
                          "/usr/local/cuda-13.0/extras/CUPTI/lib64"})
    c.push_back(std::string(dir) + "/libcupti.so");
  // torch's wheels ship CUPTI as nvidia/cuda_cupti/lib/libcupti.so.N (or nvidia/cu13/lib).
  std::error_code ec;
  for (const char* root : {"/usr/local/lib", "/usr/lib", "/opt/conda/lib"}) {
    for (auto it = std::filesystem::directory_iterator(root, ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec)) {
      const auto name = it->path().filename().string();
      if (name.rfind("python3", 0) != 0) continue;
      for (const char* sub : {"dist-packages", "site-packages"}) {
        for (const char* lib : {"nvidia/cuda_cupti/lib", "nvidia/cu13/lib"}) {
          const auto d = it->path() / sub / lib;
          for (auto f = std::filesystem::directory_iterator(d, ec); !ec && f != std::filesystem::directory_iterator();
               f.increment(ec))
            if (f->path().filename().string().rfind("libcupti.so", 0) == 0) c.push_back(f->path().string());
          ec.clear();
        }
      }
    }
    ec.clear();
  }
  return c;
}

Result<Cupti*> LoadCupti() {
  static Cupti* loaded = nullptr;
  if (loaded) return loaded;
  std::string tried;
  for (const auto& p : CuptiCandidates()) {
    void* h = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      tried += " " + p;
      continue;
    }
    auto* c = new Cupti();
    c->handle = h;
    c->path = p;
    bool ok = true;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn) ok = false;
    };
    sym(c->Enable, "cuptiActivityEnable");
    sym(c->Disable, "cuptiActivityDisable");
    sym(c->RegisterCallbacks, "cuptiActivityRegisterCallbacks");
    sym(c->RegisterTimestamp, "cuptiActivityRegisterTimestampCallback");
    sym(c->FlushAll, "cuptiActivityFlushAll");
    sym(c->GetNextRecord, "cuptiActivityGetNextRecord");
    sym(c->GetNumDropped, "cuptiActivityGetNumDroppedRecords");
    sym(c->SetThreadIdType, "cuptiSetThreadIdType");
    sym(c->GetCallbackName, "cuptiGetCallbackName");
    sym(c->GetResultString, "cuptiGetResultString");
    sym(c->GetVersion, "cuptiGetVersion");
    if (!ok) {
      tried += " " + p + "(missing symbols)";
      dlclose(h);
      delete c;
      continue;
    }
    loaded = c;
    return loaded;
  }
  return Status::NotFound("CUPTI not found (set GYRE_CUPTI_LIB to libcupti.so); tried:" + tried);
}

// Records under construction: CUPTI's buffer-completed callback runs on its own thread.
struct Collector {
  std::mutex mu;
  std::vector<DeviceEvent> device;
  std::vector<ApiEvent> api;
  int64_t dropped = 0;
  bool active = false;
  bool callbacks_registered = false;
};
Collector& Col() {
  static Collector* c = new Collector();  // never destroyed: CUPTI may call back during exit
  return *c;
}
Cupti* g_cupti = nullptr;

constexpr size_t kBufferBytes = 8u << 20;
// About 250 MB of records at most; later ones are counted in DeviceTrace::dropped.
constexpr size_t kMaxRecords = 2'000'000;

uint64_t CUPTIAPI TraceClock() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}
int64_t ToTrace(uint64_t t) { return static_cast<int64_t>(t) - trace::EpochSteadyNs(); }

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

const char* CopyKindName(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy PtoP";
    default: return "memcpy";
  }
}

// Kernel, copy and memset records share the fields that place them on the timeline.
template <typename R>
DeviceEvent Placed(const R& r, std::string name, const char* cat) {
  DeviceEvent e;
  e.name = std::move(name);
  e.cat = cat;
  e.device = static_cast<int>(r.deviceId);
  e.stream = r.streamId;
  e.start_ns = ToTrace(r.start);
  e.end_ns = ToTrace(r.end);
  e.correlation = r.correlationId;
  e.graph = r.graphId;
  return e;
}
template <typename R>
DeviceEvent TransferEvent(const R& r, std::string name, const char* cat) {
  DeviceEvent e = Placed(r, std::move(name), cat);
  e.bytes = static_cast<int64_t>(r.bytes);
  return e;
}

void CUPTIAPI BufferCompleted(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size, size_t valid) {
  Cupti& c = *g_cupti;
  std::vector<DeviceEvent> dev;
  std::vector<ApiEvent> api;
  CUpti_Activity* rec = nullptr;
  while (valid > 0 && c.GetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto& k = *reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        std::string name = ShortKernelName(k.name);
        const char* cat = name.rfind("nccl", 0) == 0 ? "collective" : "kernel";
        DeviceEvent e = Placed(k, std::move(name), cat);
        e.detail = "grid=(" + std::to_string(k.gridX) + "," + std::to_string(k.gridY) + "," + std::to_string(k.gridZ) +
                   ") block=(" + std::to_string(k.blockX) + "," + std::to_string(k.blockY) + "," +
                   std::to_string(k.blockZ) + ")";
        dev.push_back(std::move(e));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto& m = *reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        dev.push_back(TransferEvent(m, CopyKindName(m.copyKind), "memcpy"));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY2: {
        const auto& m = *reinterpret_cast<const CUpti_ActivityMemcpyPtoP4*>(rec);
        dev.push_back(TransferEvent(m, "memcpy PtoP", "memcpy"));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto& m = *reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        dev.push_back(TransferEvent(m, "memset", "memset"));
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        const auto& a = *reinterpret_cast<const CUpti_ActivityAPI*>(rec);
        ApiEvent e;
        const char* name = nullptr;
        const auto domain = rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
        if (c.GetCallbackName(domain, a.cbid, &name) != CUPTI_SUCCESS || name == nullptr) name = "cuda_api";
        e.name = name;
        // Runtime callback names carry a version suffix: cudaLaunchKernel_v7000.
        if (const auto v = e.name.find("_v"); v != std::string::npos && v + 2 < e.name.size() &&
                                              std::isdigit(static_cast<unsigned char>(e.name[v + 2])))
          e.name.resize(v);
        e.start_ns = ToTrace(a.start);
        e.end_ns = ToTrace(a.end);
        e.os_tid = a.threadId;
        e.correlation = a.correlationId;
        api.push_back(std::move(e));
        break;
      }
      default:
        break;
    }
  }
  size_t dropped = 0;
  if (c.GetNumDropped(ctx, stream, &dropped) != CUPTI_SUCCESS) dropped = 0;
  std::free(buffer);
  std::lock_guard<std::mutex> l(Col().mu);
  Collector& col = Col();
  col.dropped += static_cast<int64_t>(dropped);
  // Bounded: a whole-run trace of a long-lived server must not grow without limit.
  for (auto& e : dev) {
    if (col.device.size() < kMaxRecords) {
      col.device.push_back(std::move(e));
    } else {
      ++col.dropped;
    }
  }
  for (auto& e : api)
    if (col.api.size() < kMaxRecords) col.api.push_back(std::move(e));
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMCPY2,           CUPTI_ACTIVITY_KIND_MEMSET,
                                         CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER};

Status CuptiStatus(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return Status::Ok();
  const char* s = nullptr;
  if (g_cupti->GetResultString(r, &s) != CUPTI_SUCCESS || s == nullptr) s = "unknown CUPTI error";
  return Status::Unavailable(std::string(what) + ": " + s + " (is another profiler, e.g. nsys, attached?)");
}

}  // namespace

Status StartDeviceTrace() {
  auto c = LoadCupti();
  if (!c.ok()) return c.status();
  g_cupti = *c;
  Collector& col = Col();
  {
    std::lock_guard<std::mutex> l(col.mu);
    if (col.active) return Status::Unavailable("a device trace is already active");
    col.device.clear();
    col.api.clear();
    col.dropped = 0;
  }
  if (!col.callbacks_registered) {
    // The clock must be registered before any activity kind is enabled.
    GYRE_RETURN_IF_ERROR(CuptiStatus(g_cupti->RegisterTimestamp(TraceClock), "cuptiActivityRegisterTimestampCallback"));
    GYRE_RETURN_IF_ERROR(CuptiStatus(g_cupti->SetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM), "cuptiSetThreadIdType"));
    GYRE_RETURN_IF_ERROR(CuptiStatus(g_cupti->RegisterCallbacks(BufferRequested, BufferCompleted),
                                     "cuptiActivityRegisterCallbacks"));
    col.callbacks_registered = true;
  }
  for (const auto k : kKinds) {
    const Status st = CuptiStatus(g_cupti->Enable(k), "cuptiActivityEnable");
    if (!st.ok()) {
      for (const auto j : kKinds) (void)g_cupti->Disable(j);
      return st;
    }
  }
  std::lock_guard<std::mutex> l(col.mu);
  col.active = true;
  return Status::Ok();
}

bool DeviceTraceActive() {
  std::lock_guard<std::mutex> l(Col().mu);
  return Col().active;
}

Result<DeviceTrace> StopDeviceTrace() {
  Collector& col = Col();
  {
    std::lock_guard<std::mutex> l(col.mu);
    if (!col.active) return Status::Unavailable("no device trace is active");
  }
  for (const auto k : kKinds) (void)g_cupti->Disable(k);
  // Forced: also the buffers of records still being filled (kernels that completed).
  const Status flushed = CuptiStatus(g_cupti->FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  DeviceTrace t;
  {
    std::lock_guard<std::mutex> l(col.mu);
    col.active = false;
    t.device = std::move(col.device);
    t.dropped = col.dropped;
    col.device.clear();
    // Keep only API calls that correlate to a device record: the rest (event queries, stream
    // syncs, driver calls inside runtime calls) would bury the launches.
    std::vector<uint32_t> corr;
    corr.reserve(t.device.size());
    for (const auto& e : t.device) corr.push_back(e.correlation);
    std::sort(corr.begin(), corr.end());
    for (auto& a : col.api)
      if (std::binary_search(corr.begin(), corr.end(), a.correlation)) t.api.push_back(std::move(a));
    col.api.clear();
  }
  GYRE_RETURN_IF_ERROR(flushed);
  std::sort(t.device.begin(), t.device.end(),
            [](const DeviceEvent& a, const DeviceEvent& b) { return a.start_ns < b.start_ns; });
  std::sort(t.api.begin(), t.api.end(), [](const ApiEvent& a, const ApiEvent& b) { return a.start_ns < b.start_ns; });
  (void)g_cupti->GetVersion(&t.cupti_version);
  t.library = g_cupti->path;
  return t;
}

#endif  // GYRE_CUDA

}  // namespace gyre::feedback
