// gyre_vision_bench: the vision tower on the GPU (issue 17's benchmark; docs/vision.md "CUDA
// tower"). A random tower of GLM-5.3's vision shapes (depth 24, width 1024, 16 heads of 64, MLP
// 4096, merger 10240; out_hidden_size 4096 as a real checkpoint sets it) on one image of 336×336
// (grid 24×24: 576 patches, 144 LLM tokens) and one at the largest budget (8000 LLM tokens: grid
// 160×200, 32,000 patches), with fp32 and with bf16 weights. Per case: device ms per image
// (events around the forward), images/s, the FLOPs of the forward and their rate, and that rate
// as a % of the GEMM ceilings measured in the same run (cuBLASLt 8192³: bf16 with fp32
// accumulation, and fp32). Writes JSON (--out FILE, default stdout).
//
//   gyre_vision_bench [--out FILE] [--commit SHA] [--reps N] [--skip-largest]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_buffer.h"
#include "runtime/cuda_vision.h"
#include "runtime/random_vision_for_tests.h"

namespace gyre {
namespace {

VisionConfig Glm53Vision() {
  VisionConfig c;  // the defaults are GLM-5.3's tower (docs/model-glm5-next.md §1.2) ...
  c.out_hidden_size = 4096;  // ... with the merger's width set to the text model's, as a checkpoint must
  return c;
}

// FLOPs of one forward over one image of n patches (multiply-add = 2).
double TowerFlops(const VisionConfig& c, double n) {
  const double D = c.hidden_size, I = c.intermediate_size, O = c.out_hidden_size, PI = c.projection_intermediate_size;
  const double m = n / 4;
  const double block = 2 * n * D * (3 * D + D + 3 * I) + 4 * n * n * D;  // linears + QKᵀ and PV
  return 2 * n * c.patch_elems() * D + c.depth * block + 2 * m * 4 * D * O + 2 * m * O * O + 3 * 2 * m * O * PI;
}
double AttentionFlops(const VisionConfig& c, double n) { return c.depth * 4 * n * n * c.hidden_size; }

// TFLOP/s of y = x·wᵀ, 8192³, through cuBLASLt (median of 5 after a warm-up).
Result<double> GemmCeiling(cuda::GemmDType t) {
  const int64_t n = 8192;
  const size_t in = static_cast<size_t>(n * n) * cuda::GemmInBytes(t), out = static_cast<size_t>(n * n) * 4;
  GYRE_ASSIGN_OR_RETURN(auto gemm, cuda::GemmLt::Create());
  GYRE_ASSIGN_OR_RETURN(cuda::DeviceBuffer x, cuda::DeviceBuffer::Create(in));
  GYRE_ASSIGN_OR_RETURN(cuda::DeviceBuffer w, cuda::DeviceBuffer::Create(in));
  GYRE_ASSIGN_OR_RETURN(cuda::DeviceBuffer y, cuda::DeviceBuffer::Create(out));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemset(x.get(), 0x11, in));  // small finite values in both formats
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemset(w.get(), 0x11, in));
  GYRE_ASSIGN_OR_RETURN(cuda::Stream s, cuda::Stream::Create());
  GYRE_ASSIGN_OR_RETURN(cuda::Event e0, cuda::Event::Create());
  GYRE_ASSIGN_OR_RETURN(cuda::Event e1, cuda::Event::Create());
  std::vector<float> ms;
  for (int i = 0; i < 6; ++i) {
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e0.get(), s.get()));
    GYRE_RETURN_IF_ERROR(gemm->Run(t, x.get(), w.get(), y.get(), n, n, n, s.get()));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e1.get(), s.get()));
    GYRE_RETURN_IF_ERROR(s.Synchronize());
    float v = 0;
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&v, e0.get(), e1.get()));
    if (i > 0) ms.push_back(v);
  }
  std::sort(ms.begin(), ms.end());
  return 2.0 * n * n * n / (ms[ms.size() / 2] * 1e-3) / 1e12;
}

int Main(int argc, char** argv) {
  std::string out_path, commit = "unknown";
  int reps = 5;
  bool largest = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) out_path = argv[++i];
    else if (a == "--commit" && i + 1 < argc) commit = argv[++i];
    else if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--skip-largest") largest = false;
    else {
      std::fprintf(stderr, "usage: gyre_vision_bench [--out FILE] [--commit SHA] [--reps N] [--skip-largest]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "gyre_vision_bench: no CUDA device\n");
    return 1;
  }
  nlohmann::json j;
  j["benchmark"] = "vision_tower_gpu";
  j["commit"] = commit;
  j["device"] = prop.name;
  const VisionConfig c = Glm53Vision();
  j["config"] = {{"depth", c.depth},          {"hidden_size", c.hidden_size},
                 {"num_heads", c.num_heads},  {"intermediate_size", c.intermediate_size},
                 {"out_hidden_size", c.out_hidden_size}, {"projection_intermediate_size", c.projection_intermediate_size},
                 {"weights", "random (runtime/random_vision_for_tests.h, seed 5)"}, {"reps", reps}};
  auto bf16_ceiling = GemmCeiling(cuda::GemmDType::kBf16F32);
  auto f32_ceiling = GemmCeiling(cuda::GemmDType::kF32);
  if (!bf16_ceiling.ok() || !f32_ceiling.ok()) {
    std::fprintf(stderr, "gyre_vision_bench: ceiling: %s %s\n", bf16_ceiling.status().ToString().c_str(),
                 f32_ceiling.status().ToString().c_str());
    return 1;
  }
  j["ceilings_tflops"] = {{"gemm_bf16_f32acc_8192", *bf16_ceiling}, {"gemm_fp32_8192", *f32_ceiling}};
  const VisionWeights w = RandomVisionWeights(c, 5, 0.0f, 0.01f);  // (norms 1, biases small)
  struct Case {
    const char* name;
    ImageGrid grid;
    int reps;
  };
  std::vector<Case> cases = {{"336x336", {1, 24, 24}, reps}};
  if (largest) cases.push_back({"largest_budget_8000_tokens", {1, 160, 200}, 2});
  for (bool bf16 : {false, true}) {
    CudaVisionOptions o;
    o.bf16_weights = bf16;
    auto tower = CudaVisionTower::FromHost(c, w, o);
    if (!tower.ok()) {
      std::fprintf(stderr, "gyre_vision_bench: %s\n", tower.status().ToString().c_str());
      return 1;
    }
    for (const Case& k : cases) {
      const int64_t n = k.grid.t * k.grid.h * k.grid.w;
      std::vector<float> pv(static_cast<size_t>(n * c.patch_elems()));
      std::mt19937 rng(3);
      std::uniform_real_distribution<float> px(-1.8f, 2.1f);
      for (float& x : pv) x = px(rng);
      std::vector<float> rows;
      std::vector<double> dev_ms, wall_ms;
      for (int r = 0; r <= k.reps; ++r) {  // the first is a warm-up (plans, workspace growth)
        const auto t0 = std::chrono::steady_clock::now();
        Status st = (*tower)->Forward(pv, std::span<const ImageGrid>(&k.grid, 1), &rows);
        const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (!st.ok()) {
          std::fprintf(stderr, "gyre_vision_bench: %s: %s\n", k.name, st.ToString().c_str());
          return 1;
        }
        if (r > 0) {
          dev_ms.push_back((*tower)->stats().last_ms);
          wall_ms.push_back(wall);
        }
      }
      std::sort(dev_ms.begin(), dev_ms.end());
      std::sort(wall_ms.begin(), wall_ms.end());
      const double ms = dev_ms[dev_ms.size() / 2], flops = TowerFlops(c, static_cast<double>(n));
      const double tflops = flops / (ms * 1e-3) / 1e12;
      bool finite = true;
      for (float v : rows) finite = finite && std::isfinite(v);
      j["cases"].push_back({{"image", k.name},
                            {"weights", bf16 ? "bf16" : "fp32"},
                            {"grid", {k.grid.t, k.grid.h, k.grid.w}},
                            {"patches", n},
                            {"llm_tokens", n / 4},
                            {"device_ms_median", ms},
                            {"wall_ms_median", wall_ms[wall_ms.size() / 2]},
                            {"images_per_s", 1e3 / ms},
                            {"gflop", flops / 1e9},
                            {"attention_share_of_flops", AttentionFlops(c, static_cast<double>(n)) / flops},
                            {"tflops", tflops},
                            {"pct_of_bf16_gemm_ceiling", 100 * tflops / *bf16_ceiling},
                            {"pct_of_fp32_gemm_ceiling", 100 * tflops / *f32_ceiling},
                            {"outputs_finite", finite}});
      std::fprintf(stderr, "%-28s %s: %.3f ms/image, %.1f TFLOP/s (%.1f%% of bf16 GEMM)\n", k.name,
                   bf16 ? "bf16" : "fp32", ms, tflops, 100 * tflops / *bf16_ceiling);
    }
  }
  const std::string text = j.dump(2);
  if (out_path.empty()) {
    std::printf("%s\n", text.c_str());
  } else {
    std::ofstream(out_path) << text << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace gyre

int main(int argc, char** argv) { return gyre::Main(argc, argv); }
