// The device timeline without a GPU: kernel names, the launching-span lookup, the Chrome export of
// a synthetic device trace read back, and `gyre analyze` on device tracks (gaps, overlap, kernels).
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>

#include "core/trace.h"
#include "feedback/analyze.h"
#include "feedback/device_trace.h"
#include "feedback/trace_export.h"

namespace gyre::feedback {
namespace {

TEST(DeviceTrace, ShortKernelNames) {
  EXPECT_EQ(ShortKernelName("_ZN4gyre8feedback10tracecheck10FillKernelEPflf"), "gyre::feedback::tracecheck::FillKernel");
  EXPECT_EQ(ShortKernelName("void foo<float, 4>(float const*, int)"), "foo<float, 4>");
  EXPECT_EQ(ShortKernelName("(anonymous namespace)::K(int)"), "(anonymous namespace)::K");
  EXPECT_EQ(ShortKernelName("void cutlass::Kernel<cutlass::gemm::Params<(int)128> >(Params)"),
            "cutlass::Kernel<cutlass::gemm::Params<(int)128> >");
  EXPECT_EQ(ShortKernelName("sm90_xmma_gemm_bf16bf16_bf16f32"), "sm90_xmma_gemm_bf16bf16_bf16f32");
  EXPECT_EQ(ShortKernelName(nullptr), "?");
}

TEST(DeviceTrace, DisplayNames) {
  EXPECT_EQ(DisplayKernelName("gyre::cuda::internal::(anonymous namespace)::KdaChunk<64>", 44), "internal::KdaChunk<64>");
  EXPECT_EQ(DisplayKernelName("a::b<c::d, e::f>", 44), "a::b<c::d, e::f>");
  EXPECT_EQ(DisplayKernelName("memcpy HtoD", 44), "memcpy HtoD");
  EXPECT_EQ(DisplayKernelName("x::y::averyveryverylongkernelname", 10), "y::aver...");
}

TEST(DeviceTrace, EnclosingSpanIsTheInnermost) {
  const std::vector<trace::Span> spans = {{"outer", "step", 0, 100, 3, {}},  {"inner", "op", 10, 10, 3, {}},
                                          {"sibling", "op", 30, 10, 3, {}},  {"other", "op", 0, 500, 4, {}},
                                          {"instant", "sched", 35, -1, 3, {}}};
  const SpanIndex idx(spans);
  ASSERT_NE(idx.Enclosing(3, 35, 36), nullptr);
  EXPECT_STREQ(idx.Enclosing(3, 35, 36)->name, "sibling");
  EXPECT_STREQ(idx.Enclosing(3, 12, 15)->name, "inner");
  EXPECT_STREQ(idx.Enclosing(3, 50, 60)->name, "outer");
  EXPECT_STREQ(idx.Enclosing(3, 0, 100)->name, "outer");
  EXPECT_EQ(idx.Enclosing(3, 95, 105), nullptr);  // outlives every span
  EXPECT_EQ(idx.Enclosing(3, 200, 210), nullptr);
  EXPECT_EQ(idx.Enclosing(9, 10, 11), nullptr);    // no such track
  EXPECT_STREQ(idx.Enclosing(4, 10, 11)->name, "other");
}

TEST(DeviceTrace, TidForOsTid) {
  const std::vector<std::pair<int64_t, uint32_t>> ids = {{500, 0}, {600, 1}, {500, 7}};
  EXPECT_EQ(TraceTidForOsTid(ids, 600), 1u);
  EXPECT_EQ(TraceTidForOsTid(ids, 500), 7u);  // reused OS id: the newest thread
  EXPECT_EQ(TraceTidForOsTid(ids, 123), 10123u);
}

// A synthetic device trace of this thread: two launches inside a span, a copy on another stream.
TEST(DeviceTrace, ChromeExportReadsBackWithLaunchSpans) {
  trace::Clear();
  const uint32_t me = trace::ThreadId();  // registers this thread's OS id
  const int64_t os = gettid();
  std::vector<trace::Span> spans = {{"step", "step", 1'000, 100'000, me, {}}, {"kda.chunk", "op", 2'000, 10'000, me, {}}};
  DeviceTrace d;
  d.api = {{"cudaLaunchKernel", 3'000, 4'000, os, 11}, {"cudaMemcpyAsync", 20'000, 21'000, os, 12},
           {"cudaGraphLaunch", 30'000, 31'000, os + 1, 13}};  // another thread: no span there
  d.device = {{"KdaChunk", "kernel", 0, 7, 5'000, 50'000, 11, 0, -1, "grid=(1,1,1) block=(32,1,1)"},
              {"memcpy HtoD", "memcpy", 0, 9, 22'000, 60'000, 12, 0, 1 << 20, ""},
              {"G1", "kernel", 0, 7, 50'000, 55'000, 13, 4, -1, ""},
              {"G2", "kernel", 0, 7, 55'000, 58'000, 13, 4, -1, ""},
              {"ncclAllReduce_f32", "collective", 1, 3, 10'000, 20'000, 99, 0, -1, ""}};
  const std::string path = ::testing::TempDir() + "/gyre_device_trace.json";
  ASSERT_TRUE(WriteChromeTrace(path, spans, {{"command", "test"}}, &d).ok());
  auto ev = ReadChromeTrace(path);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  std::map<std::string, const TraceEvent*> by;
  for (const auto& e : *ev) by[e.name] = &e;
  ASSERT_TRUE(by.count("KdaChunk") && by.count("memcpy HtoD") && by.count("G1") && by.count("cudaLaunchKernel"));
  const TraceEvent& k = *by["KdaChunk"];
  EXPECT_EQ(k.pid, 100);
  EXPECT_EQ(k.tid, 7u);
  EXPECT_TRUE(k.device());
  EXPECT_DOUBLE_EQ(k.ts_us, 5.0);
  EXPECT_DOUBLE_EQ(k.dur_us, 45.0);
  EXPECT_EQ(k.args["span"], "kda.chunk");
  EXPECT_EQ(k.args["api"], "cudaLaunchKernel");
  EXPECT_EQ(k.args["correlation"], 11);
  EXPECT_EQ(by["memcpy HtoD"]->args["span"], "step");  // launched outside kda.chunk, inside step
  EXPECT_EQ(by["memcpy HtoD"]->args["bytes"], 1 << 20);
  EXPECT_EQ(by["memcpy HtoD"]->tid, 9u);
  EXPECT_EQ(by["G1"]->args["graph"], 4);
  EXPECT_FALSE(by["G1"]->args.contains("span"));  // its API call ran on a thread with no spans
  EXPECT_EQ(by["ncclAllReduce_f32"]->pid, 101);
  const TraceEvent& api = *by["cudaLaunchKernel"];
  EXPECT_FALSE(api.device());
  EXPECT_EQ(api.tid, me);
  EXPECT_EQ(api.cat, "cuda_api");
  // Flow arrows: one per launch (the graph's second kernel gets none), names for the GPU tracks.
  std::ifstream f(path);
  const auto j = nlohmann::json::parse(f);
  int starts = 0, finishes = 0, gpu_names = 0;
  for (const auto& e : j["traceEvents"]) {
    starts += e["ph"] == "s";
    finishes += e["ph"] == "f";
    gpu_names += e["ph"] == "M" && e["name"] == "process_name" && e["pid"].get<int>() >= 100;
  }
  EXPECT_EQ(starts, 3);
  EXPECT_EQ(finishes, 3);
  EXPECT_EQ(gpu_names, 2);
  EXPECT_EQ(j["metadata"]["device_trace"]["records"], 5);
}

TraceEvent Dev(const char* name, const char* cat, uint32_t stream, double ts, double dur, const char* span = nullptr) {
  TraceEvent e{name, cat, ts, dur, stream, nlohmann::json::object(), 100};
  if (span) e.args["span"] = span;
  return e;
}

TEST(DeviceTrace, AnalyzeGapsOverlapAndKernels) {
  std::vector<TraceEvent> ev = {
      // CPU: a step with one op; a host span that covers the device's idle gap.
      {"step", "step", 0, 400, 0, nlohmann::json::object()},
      {"moe.experts", "op", 0, 90, 0, {{"flops", 2e6}, {"bytes", 1e6}}},
      {"host.work", "sched", 95, 110, 1, nlohmann::json::object()},
      // GPU 0: kernels [0,100) and [200,300) on stream 7, a copy [50,150) on stream 9, a short gap.
      Dev("Expert", "kernel", 7, 0, 100, "moe.experts"),
      Dev("memcpy HtoD", "memcpy", 9, 50, 100),
      Dev("Expert", "kernel", 7, 200, 100, "moe.experts"),
      Dev("Tail", "kernel", 7, 305, 5),
  };
  const auto r = Analyze(ev, Ceilings{1000.0, 1000.0, "test"}, std::make_pair(std::string("memcpy"), std::string("kernel")));
  ASSERT_EQ(r.devices.size(), 1u);
  const DeviceTimeline& d = r.devices[0];
  EXPECT_EQ(d.records, 4);
  EXPECT_EQ(d.streams, 2);
  EXPECT_DOUBLE_EQ(d.window_us, 310);
  EXPECT_DOUBLE_EQ(d.busy_us, 255);  // [0,150) + [200,300) + [305,310)
  EXPECT_DOUBLE_EQ(d.idle_us, 55);
  EXPECT_EQ(d.num_gaps, 1);          // the 5 us gap is under the 10 us threshold
  EXPECT_DOUBLE_EQ(d.largest_gap_us, 50);
  ASSERT_EQ(d.top_gaps.size(), 1u);
  EXPECT_DOUBLE_EQ(d.top_gaps[0].start_us, 150);
  ASSERT_GE(d.top_gaps[0].cpu.size(), 2u);
  EXPECT_EQ(d.top_gaps[0].cpu[0], "host.work");  // 50 us of overlap, as step has: the shorter span first
  // Overlap: half of the copy ran under a kernel.
  ASSERT_TRUE(r.overlap);
  EXPECT_DOUBLE_EQ(r.overlap->a_us, 100);
  EXPECT_DOUBLE_EQ(r.overlap->overlap_us, 50);
  EXPECT_DOUBLE_EQ(r.overlap->ratio, 0.5);
  // Kernels by total time; shares of the busy time.
  ASSERT_EQ(r.kernels.size(), 3u);
  EXPECT_EQ(r.kernels[0].name, "Expert");
  EXPECT_EQ(r.kernels[0].count, 2);
  EXPECT_DOUBLE_EQ(r.kernels[0].share, 200.0 / 255.0);
  // The op's time for roofline is its kernels' 200 us, not its 90 us on the CPU.
  const OpTime* moe = nullptr;
  for (const auto& o : r.ops)
    if (o.name == "moe.experts") moe = &o;
  ASSERT_NE(moe, nullptr);
  EXPECT_DOUBLE_EQ(moe->gpu_us, 200);
  EXPECT_EQ(moe->launched, 2);
  EXPECT_NEAR(moe->roofline_pct, 100.0 * (2e6 / 1e12) / 200e-6, 1e-9);
  // Device records are not CPU ops.
  for (const auto& o : r.ops) EXPECT_NE(o.name, "Expert");
  // Selectors.
  EXPECT_EQ(SelectEvents(ev, "stream:7").size(), 3u);
  EXPECT_EQ(SelectEvents(ev, "stream:9").size(), 1u);
  EXPECT_EQ(SelectEvents(ev, "device").size(), 4u);
  EXPECT_EQ(SelectEvents(ev, "cpu").size(), 3u);
  EXPECT_EQ(SelectEvents(ev, "stream:x").size(), 0u);
  EXPECT_EQ(SelectEvents(ev, "name:Expert").size(), 2u);
  EXPECT_EQ(SelectEvents(ev, "name:moe.experts").size(), 1u);  // the CPU op, not its kernels' span arg
  EXPECT_EQ(SelectEvents(ev, "name:").size(), 0u);
  EXPECT_DOUBLE_EQ(MeasureOverlap(ev, "name:host.work", "kernel").overlap_us, 10);  // [95,100) and [200,205)
  const auto r2 = Analyze(ev, std::nullopt, std::make_pair(std::string("stream:9"), std::string("stream:7")));
  EXPECT_DOUBLE_EQ(r2.overlap->ratio, 0.5);
  const auto js = r.Json();
  EXPECT_EQ(js["devices"][0]["num_gaps"], 1);
  EXPECT_EQ(js["kernels"][0]["name"], "Expert");
}

TEST(DeviceTrace, SerializedCopyIsZeroOverlap) {
  // The copy after the kernel on one stream: nothing overlaps.
  std::vector<TraceEvent> ev = {Dev("Spin", "kernel", 7, 0, 5000), Dev("memcpy HtoD", "memcpy", 7, 5000, 700)};
  const auto r = Analyze(ev, std::nullopt, std::make_pair(std::string("memcpy"), std::string("kernel")));
  EXPECT_DOUBLE_EQ(r.overlap->ratio, 0.0);
  EXPECT_DOUBLE_EQ(r.overlap->exposed_a_us, 700);
}

#ifndef GYRE_CUDA
TEST(DeviceTrace, CpuBuildSaysUnimplemented) {
  const Status st = StartDeviceTrace();
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_FALSE(DeviceTraceActive());
  EXPECT_FALSE(StopDeviceTrace().ok());
}
#endif

}  // namespace
}  // namespace gyre::feedback
