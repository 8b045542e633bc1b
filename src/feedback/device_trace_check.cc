#include "feedback/device_trace_check.h"

#ifndef GYRE_CUDA

namespace gyre::feedback {
Result<nlohmann::json> CheckDeviceTrace(const std::string&, int) {
  return Status::Unimplemented("gyre verify trace needs the CUDA build (cmake --preset cuda)");
}
}  // namespace gyre::feedback

#else

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/trace.h"
#include "feedback/analyze.h"
#include "feedback/device_trace.h"
#include "feedback/device_trace_check_kernels.h"
#include "feedback/trace_export.h"
#include "ops/cuda/cuda_check.h"

namespace gyre::feedback {

namespace {

constexpr int64_t kCopyBytes = int64_t(32) << 20;
constexpr int64_t kFloats = int64_t(1) << 20;

struct Checks {
  nlohmann::json list = nlohmann::json::array();
  bool pass = true;
  void Add(const std::string& name, bool ok, const std::string& detail) {
    list.push_back({{"name", name}, {"pass", ok}, {"detail", detail}});
    pass = pass && ok;
  }
};

struct Buffers {
  cudaStream_t compute = nullptr, copy = nullptr, capture = nullptr;
  float* x = nullptr;
  void* dst = nullptr;
  void* host = nullptr;
  unsigned long long* measured = nullptr;
  cudaGraphExec_t graph = nullptr;
  ~Buffers() {
    if (graph) (void)cudaGraphExecDestroy(graph);
    for (cudaStream_t s : {compute, copy, capture})
      if (s) (void)cudaStreamDestroy(s);
    for (void* p : {static_cast<void*>(x), dst, static_cast<void*>(measured)})
      if (p) (void)cudaFree(p);
    if (host) (void)cudaFreeHost(host);
  }
};

Status Setup(Buffers& b) {
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&b.compute, cudaStreamNonBlocking));
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&b.copy, cudaStreamNonBlocking));
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&b.capture, cudaStreamNonBlocking));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMalloc(&b.x, kFloats * sizeof(float)));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMalloc(&b.dst, kCopyBytes));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMalloc(&b.measured, sizeof(unsigned long long)));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMallocHost(&b.host, kCopyBytes));
  std::memset(b.host, 0x5a, kCopyBytes);
  // The graph: fill, scale, scale, captured on its own stream (nothing runs at capture).
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(b.capture, cudaStreamCaptureModeThreadLocal));
  const cudaError_t k1 = tracecheck::Fill(b.x, kFloats, 1.0f, b.capture);
  const cudaError_t k2 = tracecheck::Scale(b.x, kFloats, 2.0f, b.capture);
  const cudaError_t k3 = tracecheck::Scale(b.x, kFloats, 0.5f, b.capture);
  cudaGraph_t g = nullptr;
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamEndCapture(b.capture, &g));
  GYRE_CUDA_RETURN_IF_ERROR(k1);
  GYRE_CUDA_RETURN_IF_ERROR(k2);
  GYRE_CUDA_RETURN_IF_ERROR(k3);
  const cudaError_t inst = cudaGraphInstantiate(&b.graph, g, 0);
  (void)cudaGraphDestroy(g);
  GYRE_CUDA_RETURN_IF_ERROR(inst);
  // Warm up every kernel and the copy path outside the traces (module loading, first-launch costs).
  GYRE_CUDA_RETURN_IF_ERROR(tracecheck::Spin(1000, b.measured, b.compute));
  GYRE_CUDA_RETURN_IF_ERROR(tracecheck::Empty(b.compute));
  GYRE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(b.graph, b.compute));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.dst, b.host, kCopyBytes, cudaMemcpyHostToDevice, b.copy));
  GYRE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return Status::Ok();
}

// Records a workload under a device trace, writes it to `path`, reads it back.
template <typename F>
Result<std::vector<TraceEvent>> Traced(const std::string& path, const std::string& phase, F&& work,
                                       DeviceTrace* raw = nullptr) {
  trace::Clear();
  trace::Enable(true);
  GYRE_RETURN_IF_ERROR(StartDeviceTrace());
  const Status st = work();
  auto dev = StopDeviceTrace();
  trace::Enable(false);
  GYRE_RETURN_IF_ERROR(st);
  if (!dev.ok()) return dev.status();
  GYRE_RETURN_IF_ERROR(WriteChromeTrace(path, trace::Collect(), {{"command", "verify trace"}, {"phase", phase}}, &*dev));
  if (raw) *raw = *dev;
  return ReadChromeTrace(path);
}

const TraceEvent* Find(const std::vector<TraceEvent>& ev, const std::string& suffix, bool device = true) {
  for (const auto& e : ev)
    if (e.device() == device && e.dur_us >= 0 && e.name.size() >= suffix.size() &&
        e.name.compare(e.name.size() - suffix.size(), suffix.size(), suffix) == 0 && !e.args.contains("graph"))
      return &e;
  return nullptr;
}

std::string Str(const nlohmann::json& args, const char* key) {
  return args.contains(key) && args[key].is_string() ? args[key].get<std::string>() : std::string();
}

void CheckStructure(const std::vector<TraceEvent>& ev, const DeviceTrace& raw, uint64_t spin_measured_ns, Checks& c) {
  const TraceEvent* fill = Find(ev, "FillKernel");
  const TraceEvent* scale = Find(ev, "ScaleKernel");
  const TraceEvent* spin = Find(ev, "SpinKernel");
  const TraceEvent* memset = Find(ev, "memset");
  const TraceEvent* copy = Find(ev, "memcpy HtoD");
  std::string missing;
  for (const auto& [name, e] : std::initializer_list<std::pair<const char*, const TraceEvent*>>{
           {"FillKernel", fill}, {"ScaleKernel", scale}, {"SpinKernel", spin}, {"memset", memset}, {"memcpy HtoD", copy}})
    if (!e) missing += std::string(" ") + name;
  c.Add("records.present", missing.empty(),
        missing.empty() ? std::to_string(raw.device.size()) + " device records, " + std::to_string(raw.api.size()) +
                              " API calls, " + std::to_string(raw.dropped) + " dropped"
                        : "missing:" + missing);
  if (!missing.empty()) return;

  const bool same = fill->tid == scale->tid && scale->tid == spin->tid && spin->tid == memset->tid;
  c.Add("records.streams", same && copy->tid != fill->tid && fill->pid == copy->pid,
        "compute stream " + std::to_string(fill->tid) + " (fill, scale, memset, spin), copy stream " +
            std::to_string(copy->tid));
  const bool order = fill->ts_us + fill->dur_us <= scale->ts_us && scale->ts_us + scale->dur_us <= memset->ts_us &&
                     memset->ts_us + memset->dur_us <= spin->ts_us;
  c.Add("records.order", order, "fill < scale < memset < spin, none overlapping, on the compute stream");

  // Launch correlation and nesting: each record names the API call and the span it was launched in.
  std::string bad;
  const std::map<const TraceEvent*, std::string> expect = {{fill, "trace_check.fill"}, {scale, "trace_check.scale"},
                                                           {memset, "trace_check.memset"}, {spin, "trace_check.spin"},
                                                           {copy, "trace_check.copy"}};
  for (const auto& [e, span] : expect)
    if (Str(e->args, "span") != span || Str(e->args, "api").empty())
      bad += " " + e->name + "<-" + Str(e->args, "span") + "/" + Str(e->args, "api");
  c.Add("records.launch_spans", bad.empty(), bad.empty() ? "every record under the span open at its launch" : "wrong:" + bad);

  // The graph: three kernels, one graph id, one cudaGraphLaunch correlation, the launch span.
  std::vector<const TraceEvent*> graph;
  for (const auto& e : ev)
    if (e.device() && e.args.contains("graph")) graph.push_back(&e);
  bool graph_ok = graph.size() == 3;
  for (const TraceEvent* e : graph)
    graph_ok = graph_ok && e->args["graph"] == graph[0]->args["graph"] &&
               e->args["correlation"] == graph[0]->args["correlation"] &&
               Str(e->args, "api").find("GraphLaunch") != std::string::npos &&
               Str(e->args, "span") == "trace_check.graph_launch";
  c.Add("records.graph", graph_ok,
        std::to_string(graph.size()) + " kernels with a graph id" +
            (graph.empty() ? "" : ", api " + Str(graph[0]->args, "api") + ", span " + Str(graph[0]->args, "span")));

  // Every device record correlated to an API call on the CPU tracks.
  int64_t uncorrelated = 0;
  for (const auto& e : ev)
    if (e.device() && Str(e.args, "api").empty()) ++uncorrelated;
  c.Add("records.api", uncorrelated == 0, std::to_string(uncorrelated) + " device records without their API call");

  // Clocks: a record never starts before its API call began; the spin ends before the sync returns.
  std::map<int64_t, double> api_start;
  for (const auto& e : ev)
    if (!e.device() && e.cat == "cuda_api" && e.args.contains("correlation"))
      api_start[e.args["correlation"].get<int64_t>()] = e.ts_us;
  double worst = 1e300;
  for (const auto& e : ev) {
    if (!e.device() || !e.args.contains("correlation")) continue;
    const auto a = api_start.find(e.args["correlation"].get<int64_t>());
    if (a != api_start.end()) worst = std::min(worst, e.ts_us - a->second);
  }
  const TraceEvent* sync = Find(ev, "trace_check.sync", /*device=*/false);
  const double spin_end = spin->ts_us + spin->dur_us;
  const bool sync_ok = sync && spin_end <= sync->ts_us + sync->dur_us + 20.0;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "smallest (record start - API call start) %.2f us (must be > -20); spin ends %.2f us before the "
                "synchronize returns",
                worst, sync ? sync->ts_us + sync->dur_us - spin_end : -1.0);
  c.Add("clock", worst > -20.0 && sync_ok, buf);

  const double measured_us = static_cast<double>(spin_measured_ns) / 1000.0;
  std::snprintf(buf, sizeof buf, "recorded %.1f us, %%globaltimer %.1f us", spin->dur_us, measured_us);
  c.Add("spin_duration", std::abs(spin->dur_us - measured_us) <= 0.05 * measured_us + 20.0, buf);

  const AnalyzeReport rep = Analyze(ev, std::nullopt, std::nullopt);
  bool analyze_ok = rep.devices.size() == 1 && rep.devices[0].busy_us > 0;
  const KernelTime* spin_row = nullptr;
  for (const auto& k : rep.kernels)
    if (k.name == spin->name) spin_row = &k;
  analyze_ok = analyze_ok && spin_row && spin_row->count == 1 && rep.kernels.front().name == spin->name;
  std::snprintf(buf, sizeof buf, "analyze: %zu device(s), top record %s, busy %.1f us", rep.devices.size(),
                rep.kernels.empty() ? "-" : rep.kernels.front().name.c_str(),
                rep.devices.empty() ? 0.0 : rep.devices[0].busy_us);
  c.Add("analyze", analyze_ok, buf);
}

}  // namespace

Result<nlohmann::json> CheckDeviceTrace(const std::string& out_dir, int launches) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Status::Unavailable("cannot create " + out_dir + ": " + ec.message());
  Buffers b;
  GYRE_RETURN_IF_ERROR(Setup(b));
  Checks c;
  nlohmann::json traces = nlohmann::json::array();
  const bool was = trace::Enabled();

  // 1. Structure.
  DeviceTrace raw;
  const std::string p1 = out_dir + "/trace_structure.json";
  auto ev = Traced(
      p1, "structure",
      [&]() -> Status {
        {
          GYRE_SPAN("trace_check.fill", "op");
          GYRE_CUDA_RETURN_IF_ERROR(tracecheck::Fill(b.x, kFloats, 3.0f, b.compute));
        }
        {
          GYRE_SPAN("trace_check.scale", "op");
          GYRE_CUDA_RETURN_IF_ERROR(tracecheck::Scale(b.x, kFloats, 0.5f, b.compute));
        }
        {
          GYRE_SPAN("trace_check.memset", "op");
          GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(b.x, 0, kFloats * sizeof(float), b.compute));
        }
        {
          GYRE_SPAN("trace_check.copy", "transfer");
          GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.dst, b.host, kCopyBytes, cudaMemcpyHostToDevice, b.copy));
        }
        {
          GYRE_SPAN("trace_check.spin", "op");
          GYRE_CUDA_RETURN_IF_ERROR(tracecheck::Spin(2'000'000, b.measured, b.compute));
        }
        {
          GYRE_SPAN("trace_check.graph_launch", "op");
          GYRE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(b.graph, b.compute));
        }
        GYRE_SPAN("trace_check.sync", "sched");
        GYRE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
        return Status::Ok();
      },
      &raw);
  if (!ev.ok()) return ev.status();
  traces.push_back(p1);
  unsigned long long spin_ns = 0;
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy(&spin_ns, b.measured, sizeof spin_ns, cudaMemcpyDeviceToHost));
  CheckStructure(*ev, raw, spin_ns, c);

  // 2 and 3. The copy behind a 5 ms spin, on the same stream and on another one.
  nlohmann::json overlap = nlohmann::json::object();
  for (const bool async : {false, true}) {
    const std::string phase = async ? "async" : "serialized";
    const std::string p = out_dir + "/trace_" + phase + ".json";
    auto e = Traced(p, phase, [&]() -> Status {
      GYRE_CUDA_RETURN_IF_ERROR(tracecheck::Spin(5'000'000, b.measured, b.compute));
      GYRE_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(b.dst, b.host, kCopyBytes, cudaMemcpyHostToDevice, async ? b.copy : b.compute));
      GYRE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
      return Status::Ok();
    });
    if (!e.ok()) return e.status();
    traces.push_back(p);
    const AnalyzeReport rep = Analyze(*e, std::nullopt, std::make_pair(std::string("memcpy"), std::string("kernel")));
    const double ratio = rep.overlap ? rep.overlap->ratio : -1;
    char buf[200];
    std::snprintf(buf, sizeof buf, "copy %.1f us, overlapped %.1f us: %.1f%% (%s)", rep.overlap->a_us,
                  rep.overlap->overlap_us, 100 * ratio, async ? "must be > 90%" : "must be < 5%");
    c.Add("overlap." + phase, rep.overlap->a_us > 0 && (async ? ratio > 0.9 : ratio < 0.05), buf);
    overlap[phase] = {{"copy_us", rep.overlap->a_us}, {"overlap_us", rep.overlap->overlap_us}, {"ratio", ratio}};
  }

  // 4. Launch cost with the trace off and on (a measurement, not a check).
  auto time_launches = [&]() -> Result<double> {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < launches; ++i) GYRE_CUDA_RETURN_IF_ERROR(tracecheck::Empty(b.compute));
    GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(b.compute));
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / launches;
  };
  auto off = time_launches();
  if (!off.ok()) return off.status();
  GYRE_RETURN_IF_ERROR(StartDeviceTrace());
  auto on = time_launches();
  auto dev = StopDeviceTrace();
  if (!on.ok()) return on.status();
  if (!dev.ok()) return dev.status();
  nlohmann::json overhead = {{"launches", launches},
                             {"us_per_launch_off", *off},
                             {"us_per_launch_on", *on},
                             {"added_us_per_launch", *on - *off},
                             {"records", dev->device.size()}};
  trace::Enable(was);
  return nlohmann::json{{"pass", c.pass},     {"checks", c.list},   {"overlap", overlap},
                        {"overhead", overhead}, {"traces", traces}, {"cupti", raw.library},
                        {"cupti_version", raw.cupti_version}};
}

}  // namespace gyre::feedback

#endif  // GYRE_CUDA
