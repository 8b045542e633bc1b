#include "feedback/ceilings.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

namespace gyre::feedback {

namespace {
double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

nlohmann::json Ceilings::Json() const {
  return {{"mem_bw_gbs", mem_bw_gbs}, {"gemm_gflops", gemm_gflops}, {"method", method}};
}

Result<Ceilings> Ceilings::FromJson(const nlohmann::json& j) {
  Ceilings c;
  try {
    const auto& o = j.contains("ceilings") ? j["ceilings"] : j;
    c.mem_bw_gbs = o.at("mem_bw_gbs").get<double>();
    c.gemm_gflops = o.at("gemm_gflops").get<double>();
    c.method = o.value("method", "");
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string("ceilings JSON needs mem_bw_gbs and gemm_gflops: ") + e.what());
  }
  if (c.mem_bw_gbs <= 0 || c.gemm_gflops <= 0) return Status::InvalidArgument("ceilings must be positive");
  return c;
}

Ceilings MeasureCeilings(int64_t buffer_mb, int64_t gemm_n) {
  Ceilings c;
  // Bandwidth: best of 5 copies of a buffer far larger than the last-level cache, split over the
  // hardware threads (memcpy per thread on disjoint halves).
  const size_t bytes = static_cast<size_t>(buffer_mb) << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  const unsigned nt = std::max(1u, std::thread::hardware_concurrency());
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> th;
    for (unsigned t = 0; t < nt; ++t) {
      th.emplace_back([&, t] {
        const size_t lo = bytes * t / nt, hi = bytes * (t + 1) / nt;
        std::memcpy(b.data() + lo, a.data() + lo, hi - lo);
      });
    }
    for (auto& x : th) x.join();
    best = std::min(best, Seconds(t0, std::chrono::steady_clock::now()));
  }
  c.mem_bw_gbs = 2.0 * static_cast<double>(bytes) / best / 1e9;
  // GEMM: best of 3 sgemm n^3.
  const int n = static_cast<int>(gemm_n);
  std::vector<float> x(n * n, 0.5f), y(n * n, 0.25f), z(n * n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, x.data(), n, y.data(), n, 0.0f, z.data(), n);
  best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, x.data(), n, y.data(), n, 0.0f, z.data(), n);
    best = std::min(best, Seconds(t0, std::chrono::steady_clock::now()));
  }
  c.gemm_gflops = 2.0 * n * static_cast<double>(n) * n / best / 1e9;
  c.method = "memcpy " + std::to_string(buffer_mb) + " MiB x" + std::to_string(nt) +
             " threads (read+write bytes), best of 5; OpenBLAS sgemm " + std::to_string(n) + "^3, best of 3";
  return c;
}

nlohmann::json MachineInfo() {
  std::string model = "unknown";
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return {{"cpu", model}, {"hardware_threads", std::thread::hardware_concurrency()}, {"hostname", host}};
}

std::string GitCommit() {
  std::string out;
#ifdef GYRE_SOURCE_DIR_STR
  const std::string cmd = std::string("git -C '") + GYRE_SOURCE_DIR_STR + "' rev-parse --short HEAD 2>/dev/null";
#else
  const std::string cmd = "git rev-parse --short HEAD 2>/dev/null";
#endif
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[64] = {0};
    if (fgets(buf, sizeof buf, p)) out = buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out.empty() ? "unknown" : out;
}

}  // namespace gyre::feedback
