// The W8A8 section of gyre_cuda_bench (`gyre_cuda_bench --w8a8-only --out DIR`): the FP8
// block-scaled and INT8 GEMMs of ops/cuda/quant_cuda.h at the default glm5_next shapes, at decode
// (M = 1, 4, 16, 64) and prefill (M = 4096) rows, against the bf16 cuBLASLt GEMM of the same shape,
// and the routed MoE experts (W8A8 grouped vs the bf16 MoeExperts), with the copy bandwidth and
// the bf16 GEMM ceiling measured in the same run. A self-check first compares each GEMM at a
// bench-sized shape with a plain fp32 kernel on the dequantized operands. Writes
// DIR/gpu_w8a8_bench.json. CUDA source: included by kda_cuda_bench.cu only.
#pragma once

#include <cuda_fp8.h>

#include <cstdio>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "ops/cuda/bench_common.h"
#include "ops/cuda/moe_cuda.h"
#include "ops/cuda/quant_cuda.h"

namespace gyre::cuda::w8a8bench {

using namespace bench;

// Random codes: fp8 bytes with the exponent capped (|v| <= 15, never NaN), int8 in [-127, 127];
// scales uniform in [lo, hi).
__global__ void FillCodesKernel(uint8_t* p, int64_t n, uint64_t seed, bool fp8) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t h = Hash(seed * 0x9E3779B97F4A7C15ULL + i);
    p[i] = fp8 ? static_cast<uint8_t>(h & 0xD7u) : static_cast<uint8_t>(static_cast<int8_t>(int(h % 255u) - 127));
  }
}
inline Status FillCodes(void* p, int64_t n, uint64_t seed, bool fp8, cudaStream_t s) {
  FillCodesKernel<<<2048, 256, 0, s>>>(static_cast<uint8_t*>(p), n, seed, fp8);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

__device__ __forceinline__ float Dec(uint8_t b, bool fp8) {
  if (!fp8) return static_cast<float>(static_cast<int8_t>(b));
  __nv_fp8_e4m3 v;
  v.__x = b;
  return static_cast<float>(v);
}

// y[m, n] = Σ_g sa·sw·Σ_{k∈g} a·w (fp8) or sa·sw·Σ_k a·w (int8), one thread per output, fp32.
__global__ void RefGemmKernel(const uint8_t* a, const float* sa, const uint8_t* w, const float* sw, int64_t M,
                              int64_t N, int64_t K, bool fp8, float* y) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= M * N) return;
  const int64_t m = i / N, n = i % N, ng = (K + 127) / 128;
  float acc = 0;
  for (int64_t g = 0; g < (fp8 ? ng : 1); ++g) {
    const int64_t k0 = fp8 ? g * 128 : 0, k1 = fp8 ? min(K, k0 + 128) : K;
    float part = 0;
    for (int64_t k = k0; k < k1; ++k) part += Dec(a[m * K + k], fp8) * Dec(w[n * K + k], fp8);
    acc += fp8 ? part * sa[m * ng + g] * sw[n * ng + g] : part * sa[m] * sw[n];
  }
  y[i] = acc;
}

struct Shape {
  const char* name;
  int64_t n, k;
};

struct Row {
  std::string what;  // dense shape name or "moe"
  int64_t m = 0, n = 0, k = 0;
  double us_fp8 = 0, us_fp8_gemm = 0, us_int8 = 0, us_int8_gemm = 0, us_bf16 = 0;
};

inline int RunW8A8Bench(const std::string& out_dir, const std::string& commit, bool quick) {
  const std::string path = out_dir + "/gpu_w8a8_bench.json";
  std::vector<Row> rows;
  std::vector<std::string> checks;
  double copy_gbps = 0, bf16_tflops = 0, fp8_tflops = 0, int8_tflops = 0;
  std::string device = "null", error;
  bool checks_pass = true;
  auto write = [&] {
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    std::vector<std::string> rs;
    for (const Row& r : rows) {
      Json j;
      const double flop = 2.0 * r.m * r.n * r.k;
      const double wb8 = r.what == "moe" ? 0 : static_cast<double>(r.n) * r.k;
      j.Str("op", r.what).Num("m", r.m).Num("n", r.n).Num("k", r.k);
      j.Num("us_fp8", r.us_fp8).Num("us_fp8_gemm_only", r.us_fp8_gemm).Num("us_int8", r.us_int8);
      j.Num("us_int8_gemm_only", r.us_int8_gemm).Num("us_bf16", r.us_bf16);
      j.Num("speedup_fp8_vs_bf16", r.us_bf16 / r.us_fp8).Num("speedup_int8_vs_bf16", r.us_bf16 / r.us_int8);
      if (r.what != "moe") {
        j.Num("tflops_fp8_gemm", flop / (r.us_fp8_gemm * 1e6)).Num("tflops_int8_gemm", flop / (r.us_int8_gemm * 1e6));
        j.Num("tflops_bf16", flop / (r.us_bf16 * 1e6));
        j.Num("weight_gbps_fp8", wb8 / (r.us_fp8_gemm * 1e3)).Num("weight_gbps_bf16", 2 * wb8 / (r.us_bf16 * 1e3));
        j.Num("pct_copy_fp8", 100.0 * wb8 / (r.us_fp8_gemm * 1e3) / copy_gbps);
        j.Num("pct_copy_int8", 100.0 * wb8 / (r.us_int8_gemm * 1e3) / copy_gbps);
      }
      rs.push_back(j.Obj());
    }
    Json ceil;
    ceil.Num("copy_gbps", copy_gbps).Num("bf16_gemm_8192_tflops", bf16_tflops);
    ceil.Num("own_fp8_gemm_8192_tflops", fp8_tflops).Num("own_int8_gemm_8192_tflops", int8_tflops);
    Json root;
    root.Str("date_utc", date).Str("commit", commit).Bool("quick", quick).Raw("device", device);
    root.Str("config",
             "glm5_next defaults: hidden 4096, KDA 64x128, dense intermediate 12288, MoE 288 experts x 2048, top-8, "
             "shared expert 2048. us_fp8 / us_int8 = activation quantization + GEMM (what Linear runs); *_gemm_only "
             "= the GEMM on pre-quantized operands; us_bf16 = cuBLASLt bf16 x bf16 -> fp32 on a pre-cast bf16 x "
             "(the bf16 path also casts x first; not counted). pct_copy: weight bytes / time vs the copy "
             "bandwidth (read+write) of this run. moe rows: m = tokens, routed experts only (sort, gate_up, "
             "SwiGLU, down, combine), uniform random top-8 routing; the bf16 column is MoeExperts. The own_*_8192 "
             "ceilings are this kernel at 8192^3, not hardware peaks.");
    root.Raw("ceilings", ceil.Obj()).Bool("self_check_pass", checks_pass && !checks.empty());
    root.Raw("self_check", Array(checks)).Raw("rows", Array(rs)).Str("error", error);
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      std::fputs((root.Obj() + "\n").c_str(), f);
      std::fclose(f);
    }
  };

  auto run = [&]() -> Status {
    GYRE_CUDA_RETURN_IF_ERROR(cudaSetDevice(0));
    cudaDeviceProp prop{};
    GYRE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, 0));
    Json dev;
    dev.Str("name", prop.name).Num("sms", prop.multiProcessorCount).Num("l2_mib", prop.l2CacheSize >> 20);
    device = dev.Obj();
    GYRE_ASSIGN_OR_RETURN(Stream stream, Stream::Create());
    const cudaStream_t s = stream.get();
    GYRE_ASSIGN_OR_RETURN(std::unique_ptr<GemmLt> lt, GemmLt::Create());
    GYRE_ASSIGN_OR_RETURN(copy_gbps, CopyGbps(s, quick));
    GYRE_ASSIGN_OR_RETURN(bf16_tflops, Bf16GemmTflops(*lt, s, quick));
    const int reps = quick ? 3 : 7;

    // ---- self-check at bench-sized shapes vs the plain fp32 kernel ----
    for (bool fp8 : {true, false}) {
      for (int64_t M : {1, 37, 300}) {
        const int64_t N = 4096 + 64, K = 4096 + 32;  // partial tiles and a partial last group
        const W8A8 sch = fp8 ? W8A8::kFp8 : W8A8::kInt8;
        const int64_t sc = ActScaleCols(sch, K);
        GYRE_ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::Create(4 * M * K));
        GYRE_ASSIGN_OR_RETURN(DeviceBuffer qa, DeviceBuffer::Create(M * K));
        GYRE_ASSIGN_OR_RETURN(DeviceBuffer sa, DeviceBuffer::Create(4 * M * sc));
        GYRE_ASSIGN_OR_RETURN(DeviceBuffer wq, DeviceBuffer::Create(N * K));
        GYRE_ASSIGN_OR_RETURN(DeviceBuffer ws, DeviceBuffer::Create(4 * N * sc));
        GYRE_ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::Create(4 * M * N));
        GYRE_ASSIGN_OR_RETURN(DeviceBuffer yr, DeviceBuffer::Create(4 * M * N));
        GYRE_RETURN_IF_ERROR(Fill(x.get<float>(), M * K, 11 + M, -3, 3, s));
        GYRE_RETURN_IF_ERROR(FillCodes(wq.get(), N * K, 12 + M, fp8, s));
        GYRE_RETURN_IF_ERROR(Fill(ws.get<float>(), N * sc, 13 + M, 1e-3f, 2e-3f, s));
        const ActQuantArgs aq{x.get<float>(), M, K, 0, qa.get(), sa.get<float>()};
        GYRE_RETURN_IF_ERROR(QuantizeActivations(sch, aq, s));
        const QWeight w{sch, wq.get(), ws.get<float>(), N, K};
        GYRE_RETURN_IF_ERROR(GemmW8A8(qa.get(), sa.get<float>(), M, w, y.get<float>(), 0, s));
        RefGemmKernel<<<static_cast<unsigned>((M * N + 255) / 256), 256, 0, s>>>(
            qa.get<uint8_t>(), sa.get<float>(), wq.get<uint8_t>(), ws.get<float>(), M, N, K, fp8, yr.get<float>());
        GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
        std::vector<float> a(M * N), b(M * N);
        GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(a.data(), y.get(), 4 * M * N, cudaMemcpyDeviceToHost, s));
        GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.data(), yr.get(), 4 * M * N, cudaMemcpyDeviceToHost, s));
        GYRE_RETURN_IF_ERROR(stream.Synchronize());
        double num = 0, den = 0;
        for (int64_t i = 0; i < M * N; ++i) {
          num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
          den += double(b[i]) * b[i];
        }
        const double rel = std::sqrt(num / std::max(den, 1e-300));
        const double tol = fp8 ? 2e-3 : 1e-5;
        const bool pass = std::isfinite(rel) && rel <= tol;
        checks_pass &= pass;
        Json j;
        j.Str("gemm", fp8 ? "fp8" : "int8").Num("m", M).Num("n", N).Num("k", K).Num("rel_l2_vs_fp32_kernel", rel);
        j.Num("tolerance", tol).Bool("pass", pass);
        checks.push_back(j.Obj());
        std::printf("  %s %s GEMM M=%lld N=%lld K=%lld rel-L2 vs plain fp32 kernel %.2e (tol %.0e)\n",
                    pass ? "ok  " : "FAIL", fp8 ? "fp8 " : "int8", (long long)M, (long long)N, (long long)K, rel, tol);
      }
    }
    write();

    // ---- dense GEMMs ----
    auto bench_dense = [&](const Shape& sh, int64_t M) -> Result<Row> {
      Row r;
      r.what = sh.name;
      r.m = M;
      r.n = sh.n;
      r.k = sh.k;
      const int64_t N = sh.n, K = sh.k;
      GYRE_ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::Create(4 * M * K));
      GYRE_ASSIGN_OR_RETURN(DeviceBuffer xb, DeviceBuffer::Create(2 * M * K));
      GYRE_ASSIGN_OR_RETURN(DeviceBuffer qa, DeviceBuffer::Create(M * K));
      GYRE_ASSIGN_OR_RETURN(DeviceBuffer sa, DeviceBuffer::Create(4 * M * QuantGroups(K)));
      GYRE_ASSIGN_OR_RETURN(DeviceBuffer wq, DeviceBuffer::Create(N * K));
      GYRE_ASSIGN_OR_RETURN(DeviceBuffer ws, DeviceBuffer::Create(4 * N * QuantGroups(K)));
      GYRE_ASSIGN_OR_RETURN(DeviceBuffer wb, DeviceBuffer::Create(2 * N * K));
      GYRE_ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::Create(4 * M * N));
      GYRE_RETURN_IF_ERROR(Fill(x.get<float>(), M * K, 21, -3, 3, s));
      GYRE_RETURN_IF_ERROR(FillBf16(xb.get(), M * K, 22, -3, 3, s));
      GYRE_RETURN_IF_ERROR(FillBf16(wb.get(), N * K, 23, -0.02f, 0.02f, s));
      GYRE_RETURN_IF_ERROR(Fill(ws.get<float>(), N * QuantGroups(K), 24, 1e-3f, 2e-3f, s));
      for (bool fp8 : {true, false}) {
        const W8A8 sch = fp8 ? W8A8::kFp8 : W8A8::kInt8;
        GYRE_RETURN_IF_ERROR(FillCodes(wq.get(), N * K, 25, fp8, s));
        const ActQuantArgs aq{x.get<float>(), M, K, 0, qa.get(), sa.get<float>()};
        const QWeight w{sch, wq.get(), ws.get<float>(), N, K};
        auto full = [&](int) -> Status {
          GYRE_RETURN_IF_ERROR(QuantizeActivations(sch, aq, s));
          return GemmW8A8(qa.get(), sa.get<float>(), M, w, y.get<float>(), 0, s);
        };
        auto gemm = [&](int) { return GemmW8A8(qa.get(), sa.get<float>(), M, w, y.get<float>(), 0, s); };
        GYRE_RETURN_IF_ERROR(full(0));
        GYRE_ASSIGN_OR_RETURN(double t_full, TimeUs(full, reps, 3, s));
        GYRE_ASSIGN_OR_RETURN(double t_gemm, TimeUs(gemm, reps, 3, s));
        (fp8 ? r.us_fp8 : r.us_int8) = t_full;
        (fp8 ? r.us_fp8_gemm : r.us_int8_gemm) = t_gemm;
      }
      auto bf = [&](int) { return lt->Run(GemmDType::kBf16F32, xb.get(), wb.get(), y.get(), M, N, K, s); };
      GYRE_RETURN_IF_ERROR(bf(0));
      GYRE_ASSIGN_OR_RETURN(r.us_bf16, TimeUs(bf, reps, 3, s));
      std::printf("  %-14s M=%-5lld N=%-6lld K=%-6lld fp8 %9.1f us (gemm %9.1f)  int8 %9.1f (gemm %9.1f)  bf16 %9.1f\n",
                  sh.name, (long long)M, (long long)N, (long long)K, r.us_fp8, r.us_fp8_gemm, r.us_int8, r.us_int8_gemm,
                  r.us_bf16);
      return r;
    };
    // The kernel's own rate at 8192^3 (compute bound).
    {
      GYRE_ASSIGN_OR_RETURN(Row big, bench_dense(Shape{"square_8192", 8192, 8192}, 8192));
      fp8_tflops = 2.0 * 8192.0 * 8192 * 8192 / (big.us_fp8_gemm * 1e6);
      int8_tflops = 2.0 * 8192.0 * 8192 * 8192 / (big.us_int8_gemm * 1e6);
      rows.push_back(big);
      write();
    }
    const std::vector<Shape> shapes = {{"kda_qkv", 3 * 8192, 4096}, {"kda_o", 4096, 8192},
                                       {"dense_gate_up", 2 * 12288, 4096}, {"dense_down", 4096, 12288},
                                       {"shared_gate_up", 2 * 2048, 4096}, {"mla_o", 4096, 64 * 256}};
    for (const Shape& sh : shapes) {
      for (int64_t M : {1, 4, 16, 64, 4096}) {
        GYRE_ASSIGN_OR_RETURN(Row r, bench_dense(sh, M));
        rows.push_back(r);
      }
      write();
    }

    // ---- routed MoE experts ----
    const int64_t E = 288, D = 4096, I = 2048, TK = 8;
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer guq, DeviceBuffer::Create(E * 2 * I * D));
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer gus, DeviceBuffer::Create(4 * E * 2 * I * QuantGroups(D)));
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer dnq, DeviceBuffer::Create(E * D * I));
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer dns, DeviceBuffer::Create(4 * E * D * QuantGroups(I)));
    GYRE_RETURN_IF_ERROR(Fill(gus.get<float>(), E * 2 * I * QuantGroups(D), 31, 1e-3f, 2e-3f, s));
    GYRE_RETURN_IF_ERROR(Fill(dns.get<float>(), E * D * QuantGroups(I), 32, 1e-3f, 2e-3f, s));
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer gub, DeviceBuffer::Create(2 * E * 2 * I * D));
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer dnb, DeviceBuffer::Create(2 * E * D * I));
    GYRE_RETURN_IF_ERROR(FillBf16(gub.get(), E * 2 * I * D, 33, -0.02f, 0.02f, s));
    GYRE_RETURN_IF_ERROR(FillBf16(dnb.get(), E * D * I, 34, -0.02f, 0.02f, s));
    const MoeExpertWeights bw{gub.get(), dnb.get(), true, E, D, I};
    for (int64_t T : {1, 4, 16, 64, 4096}) {
      std::mt19937 g(static_cast<uint32_t>(T));
      std::vector<int32_t> idx(T * TK);
      std::vector<float> wt(T * TK, 1.0f / TK);
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t j = 0; j < TK; ++j) {
          int32_t e;
          bool dup;
          do {
            e = static_cast<int32_t>(g() % E);
            dup = false;
            for (int64_t q = 0; q < j; ++q) dup |= idx[t * TK + q] == e;
          } while (dup);
          idx[t * TK + j] = e;
        }
      }
      GYRE_ASSIGN_OR_RETURN(DeviceBuffer didx, Upload(idx.data(), 4 * idx.size(), s));
      GYRE_ASSIGN_OR_RETURN(DeviceBuffer dwt, Upload(wt.data(), 4 * wt.size(), s));
      GYRE_ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::Create(4 * T * D));
      GYRE_ASSIGN_OR_RETURN(DeviceBuffer out, DeviceBuffer::Create(4 * T * D));
      GYRE_RETURN_IF_ERROR(Fill(x.get<float>(), T * D, 35, -3, 3, s));
      Row r;
      r.what = "moe";
      r.m = T;
      r.n = D;
      r.k = I;
      for (bool fp8 : {true, false}) {
        const W8A8 sch = fp8 ? W8A8::kFp8 : W8A8::kInt8;
        GYRE_RETURN_IF_ERROR(FillCodes(guq.get(), E * 2 * I * D, 36, fp8, s));
        GYRE_RETURN_IF_ERROR(FillCodes(dnq.get(), E * D * I, 37, fp8, s));
        QMoeWeights qw;
        qw.gate_up = QWeight{sch, guq.get(), gus.get<float>(), 2 * I, D};
        qw.down = QWeight{sch, dnq.get(), dns.get<float>(), D, I};
        qw.num_experts = E;
        qw.hidden = D;
        qw.inter = I;
        GYRE_ASSIGN_OR_RETURN(DeviceBuffer ws, DeviceBuffer::Create(MoeW8A8WorkspaceBytes(qw, T, TK)));
        auto moe = [&](int) {
          return MoeExpertsW8A8(x.get<float>(), T, didx.get<int32_t>(), dwt.get<float>(), TK, qw, 10.0f,
                                out.get<float>(), ws.get(), ws.bytes(), s);
        };
        GYRE_RETURN_IF_ERROR(moe(0));
        GYRE_ASSIGN_OR_RETURN(double t, TimeUs(moe, reps, 3, s));
        (fp8 ? r.us_fp8 : r.us_int8) = t;
      }
      GYRE_ASSIGN_OR_RETURN(DeviceBuffer bws, DeviceBuffer::Create(std::max<size_t>(MoeExpertsWorkspaceBytes(bw, T, TK), 16)));
      auto moe_bf = [&](int) {
        return MoeExperts(x.get<float>(), T, didx.get<int32_t>(), dwt.get<float>(), TK, bw, 10.0f, out.get<float>(),
                          bws.get(), bws.bytes(), s);
      };
      GYRE_RETURN_IF_ERROR(moe_bf(0));
      GYRE_ASSIGN_OR_RETURN(r.us_bf16, TimeUs(moe_bf, reps, 3, s));
      std::printf("  moe tokens=%-5lld fp8 %9.1f us  int8 %9.1f  bf16 %9.1f\n", (long long)T, r.us_fp8, r.us_int8,
                  r.us_bf16);
      rows.push_back(r);
      write();
    }
    return Status::Ok();
  };
  std::printf("W8A8 (FP8 block / INT8) GEMMs vs bf16 cuBLASLt:\n");
  const Status st = run();
  if (!st.ok()) error = st.ToString();
  write();
  std::printf("ceilings: copy %.0f GB/s, bf16 GEMM 8192^3 %.0f TFLOP/s; own fp8 %.0f / int8 %.0f TFLOP/s at 8192^3\n",
              copy_gbps, bf16_tflops, fp8_tflops, int8_tflops);
  std::printf("self-check: %s; wrote %s\n", checks_pass && !checks.empty() ? "all pass" : "FAILURES", path.c_str());
  if (!st.ok()) {
    std::fprintf(stderr, "gyre_cuda_bench --w8a8-only: %s\n", st.ToString().c_str());
    return 2;
  }
  return checks_pass ? 0 : 1;
}

}  // namespace gyre::cuda::w8a8bench
