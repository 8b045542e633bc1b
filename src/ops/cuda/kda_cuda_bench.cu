// gyre_cuda_bench: self-check and microbenchmarks of the CUDA KDA kernels and cuBLASLt GEMM, with
// the ceilings measured in the same run (style.md §2.8; scripts/gpu_check.sh runs it).
//
//   gyre_cuda_bench [--out DIR] [--commit HASH] [--quick] [--no-decode] [--prefill-t 4096,16384,...]
//                   [--chunk-checks-only] [--w8a8-only]
//
// Sections: helpers (random fill, timing, JSON); fp64 reference; self-check; ceilings; decode;
// prefill; main. Writes DIR/gpu_kda_bench.json and prints a short table last. Exit code 1 if any
// self-check fails (the benchmarks still run and are reported). --chunk-checks-only runs just the
// small chunked checks vs fp64 (for compute-sanitizer). --w8a8-only runs the W8A8 GEMM section
// instead (w8a8_bench.cuh: DIR/gpu_w8a8_bench.json).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/bench_common.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/kda_cuda.h"
#include "ops/cuda/kda_cuda_config.h"
#include "ops/cuda/w8a8_bench.cuh"

namespace gyre::cuda {
namespace {

using namespace bench;  // Fill, FillBf16, Median, TimeUs, Json, Array

// ---- helpers -------------------------------------------------------------------------------------


std::vector<float> HostUniform(int64_t n, uint64_t& state, float lo, float hi) {
  std::vector<float> v(n);
  for (auto& x : v) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    x = lo + (hi - lo) * static_cast<float>((state >> 40) * (1.0 / 16777216.0));
  }
  return v;
}

Result<DeviceBuffer> ToDevice(const std::vector<float>& v) {
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(v.size() * sizeof(float)));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  return Result<DeviceBuffer>(std::move(b));
}
Result<DeviceBuffer> ToDeviceI(const std::vector<int32_t>& v) {
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(v.size() * sizeof(int32_t)));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  return Result<DeviceBuffer>(std::move(b));
}
Result<std::vector<float>> ToHost(const DeviceBuffer& b, int64_t n) {
  std::vector<float> v(n);
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy(v.data(), b.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}


// ---- fp64 reference (docs/model-kda-kimi-linear.md §1.3) ----------------------------------------

// One sequence: q, k, v, g [T, H, K], beta [T, H]; state [H, K, K] double in/out; o [T, H, K].
void RefKda(const float* q, const float* k, const float* v, const float* g, const float* beta, int T, int H, int K,
            double* state, double* o) {
  std::vector<double> qn(K), kn(K), u(K);
  const double scale = 1.0 / std::sqrt(double(K));
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      const int64_t base = (int64_t(t) * H + h) * K;
      double qq = 0, kk = 0;
      for (int d = 0; d < K; ++d) qq += double(q[base + d]) * q[base + d], kk += double(k[base + d]) * k[base + d];
      for (int d = 0; d < K; ++d) qn[d] = q[base + d] * scale / std::sqrt(qq + 1e-6), kn[d] = k[base + d] / std::sqrt(kk + 1e-6);
      double* S = state + int64_t(h) * K * K;
      std::fill(u.begin(), u.end(), 0.0);
      for (int d = 0; d < K; ++d) {
        const double e = std::exp(double(g[base + d]));
        for (int x = 0; x < K; ++x) S[d * K + x] *= e, u[x] += S[d * K + x] * kn[d];
      }
      const double b = beta[int64_t(t) * H + h];
      for (int x = 0; x < K; ++x) u[x] = b * (v[base + x] - u[x]);
      for (int x = 0; x < K; ++x) o[base + x] = 0;
      for (int d = 0; d < K; ++d)
        for (int x = 0; x < K; ++x) S[d * K + x] += kn[d] * u[x], o[base + x] += S[d * K + x] * qn[d];
    }
}

struct Cmp {
  double rel_l2 = 0;
  int64_t num_nan = 0;
};
Cmp Compare(const float* a, const double* b, int64_t n) {
  double num = 0, den = 0;
  Cmp c;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(a[i])) ++c.num_nan;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  c.rel_l2 = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
  if (c.num_nan) c.rel_l2 = INFINITY;
  return c;
}

// ---- self-check ----------------------------------------------------------------------------------

struct CheckRow {
  std::string name;
  double rel_l2_o, rel_l2_state;
  int64_t num_nan;
  double tol;
  bool pass() const { return num_nan == 0 && rel_l2_o <= tol && rel_l2_state <= tol; }
  std::string ToJson() const {
    Json j;
    j.Str("check", name).Num("rel_l2_o", rel_l2_o).Num("rel_l2_state", rel_l2_state).Num("num_nan", double(num_nan));
    j.Num("tolerance", tol).Bool("pass", pass());
    return j.Obj();
  }
};

// Varlen batch: sequence lengths `lens`, slots permuted; chunked or recurrent kernel; vs fp64.
Result<CheckRow> CheckKda(bool chunked, const std::vector<int>& lens, int H, int K, KdaRecurrentConfig cfg,
                          uint64_t seed, cudaStream_t s, float g_min = -5.0f) {
  const int N = static_cast<int>(lens.size());
  int64_t T = 0;
  std::vector<int64_t> cu{0};
  for (int l : lens) cu.push_back(T += l);
  const int64_t num_slots = N + 2;
  uint64_t rs = seed;
  auto q = HostUniform(T * H * K, rs, -1, 1), k = HostUniform(T * H * K, rs, -1, 1), v = HostUniform(T * H * K, rs, -1, 1);
  auto g = HostUniform(T * H * K, rs, g_min, 0), beta = HostUniform(T * H, rs, 0, 1);
  auto pool = HostUniform(num_slots * H * K * K, rs, -0.5f, 0.5f);
  std::vector<int32_t> slots(N);
  for (int i = 0; i < N; ++i) slots[i] = static_cast<int32_t>(num_slots - 1 - i);  // reversed; slots 0, 1 untouched
  // Reference.
  std::vector<double> ref_pool(pool.begin(), pool.end()), ref_o(T * H * K);
  for (int i = 0; i < N; ++i) {
    const int64_t off = cu[i] * H * K;
    RefKda(q.data() + off, k.data() + off, v.data() + off, g.data() + off, beta.data() + cu[i] * H, lens[i], H, K,
           ref_pool.data() + int64_t(slots[i]) * H * K * K, ref_o.data() + off);
  }
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dq, ToDevice(q));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dk, ToDevice(k));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dv, ToDevice(v));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dg, ToDevice(g));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer db, ToDevice(beta));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dpool, ToDevice(pool));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dout, DeviceBuffer::Create(std::max<int64_t>(1, T * H * K) * sizeof(float)));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemset(dout.get(), 0xFF, dout.bytes()));
  if (chunked) {
    KdaChunkParams p;
    p.q = dq.get<float>(), p.k = dk.get<float>(), p.v = dv.get<float>(), p.g = dg.get<float>();
    p.beta = db.get<float>(), p.state = dpool.get<float>(), p.o = dout.get<float>();
    p.cu_seqlens = cu;
    p.slots = slots;
    p.num_heads = H, p.head_dim = K, p.num_slots = num_slots;
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer ws, DeviceBuffer::Create(KdaChunkWorkspaceBytes(cu, H, K)));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemset(ws.get(), 0xFF, ws.bytes()));
    GYRE_RETURN_IF_ERROR(KdaChunk(p, ws.get(), ws.bytes(), s));
    GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  } else {
    // Recurrent kernel: one launch per sequence (T tokens each, state on chip).
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer dslots, ToDeviceI(slots));
    for (int i = 0; i < N; ++i) {
      if (lens[i] == 0) continue;
      const int64_t off = cu[i] * H * K;
      KdaRecurrentParams p;
      p.q = dq.get<float>() + off, p.k = dk.get<float>() + off, p.v = dv.get<float>() + off, p.g = dg.get<float>() + off;
      p.beta = db.get<float>() + cu[i] * H, p.slots = dslots.get<int32_t>() + i, p.state = dpool.get<float>();
      p.o = dout.get<float>() + off;
      p.num_seqs = 1, p.num_tokens = lens[i], p.num_heads = H, p.head_dim = K, p.num_slots = num_slots;
      GYRE_RETURN_IF_ERROR(KdaRecurrent(p, s, cfg));
    }
    GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  }
  GYRE_ASSIGN_OR_RETURN(auto o, ToHost(dout, T * H * K));
  GYRE_ASSIGN_OR_RETURN(auto st, ToHost(dpool, num_slots * H * K * K));
  const Cmp co = Compare(o.data(), ref_o.data(), T * H * K), cs = Compare(st.data(), ref_pool.data(), st.size());
  std::string name = std::string(chunked ? "kda.chunk" : "kda.recurrent") + " lens=";
  for (size_t i = 0; i < lens.size(); ++i) name += (i ? "," : "") + std::to_string(lens[i]);
  name += " H=" + std::to_string(H) + " K=" + std::to_string(K);
  if (!chunked && cfg.block_v) name += " cfg=" + std::to_string(cfg.block_v) + "x" + std::to_string(cfg.num_threads);
  if (g_min != -5.0f) {
    char buf[48];
    std::snprintf(buf, sizeof buf, " g in [%g, 0]", g_min);
    name += buf;
  }
  return CheckRow{name, co.rel_l2, cs.rel_l2, co.num_nan + cs.num_nan, 1e-4};
}

// Batched decode step (T = 1, B sequences, one padding row with slot −1) vs fp64.
Result<CheckRow> CheckDecodeBatch(int B, int H, int K, KdaRecurrentConfig cfg, uint64_t seed, cudaStream_t s) {
  uint64_t rs = seed;
  const int64_t num_slots = 2 * B + 1;
  auto q = HostUniform(int64_t(B) * H * K, rs, -1, 1), k = HostUniform(int64_t(B) * H * K, rs, -1, 1);
  auto v = HostUniform(int64_t(B) * H * K, rs, -1, 1), g = HostUniform(int64_t(B) * H * K, rs, -1, 0);
  auto beta = HostUniform(int64_t(B) * H, rs, 0, 1), pool = HostUniform(num_slots * H * K * K, rs, -0.5f, 0.5f);
  std::vector<int32_t> slots(B);
  for (int i = 0; i < B; ++i) slots[i] = 2 * B - 2 * i;  // reversed, every other slot
  slots[B / 2] = -1;                                     // padding row
  std::vector<double> ref_pool(pool.begin(), pool.end()), ref_o(int64_t(B) * H * K, 0.0);
  for (int b = 0; b < B; ++b) {
    if (slots[b] < 0) continue;
    const int64_t off = int64_t(b) * H * K;
    RefKda(q.data() + off, k.data() + off, v.data() + off, g.data() + off, beta.data() + int64_t(b) * H, 1, H, K,
           ref_pool.data() + int64_t(slots[b]) * H * K * K, ref_o.data() + off);
  }
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dq, ToDevice(q));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dk, ToDevice(k));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dv, ToDevice(v));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dg, ToDevice(g));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer db, ToDevice(beta));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dpool, ToDevice(pool));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dslots, ToDeviceI(slots));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dout, DeviceBuffer::Create(int64_t(B) * H * K * sizeof(float)));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemset(dout.get(), 0xFF, dout.bytes()));
  KdaRecurrentParams p;
  p.q = dq.get<float>(), p.k = dk.get<float>(), p.v = dv.get<float>(), p.g = dg.get<float>(), p.beta = db.get<float>();
  p.slots = dslots.get<int32_t>(), p.state = dpool.get<float>(), p.o = dout.get<float>();
  p.num_seqs = B, p.num_tokens = 1, p.num_heads = H, p.head_dim = K, p.num_slots = num_slots;
  GYRE_RETURN_IF_ERROR(KdaRecurrent(p, s, cfg));
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  GYRE_ASSIGN_OR_RETURN(auto o, ToHost(dout, int64_t(B) * H * K));
  GYRE_ASSIGN_OR_RETURN(auto st, ToHost(dpool, num_slots * H * K * K));
  const Cmp co = Compare(o.data(), ref_o.data(), o.size()), cs = Compare(st.data(), ref_pool.data(), st.size());
  std::string name = "kda.recurrent decode B=" + std::to_string(B) + " (1 padding row) H=" + std::to_string(H) +
                     " K=" + std::to_string(K) + " cfg=" + std::to_string(cfg.block_v) + "x" + std::to_string(cfg.num_threads);
  return CheckRow{name, co.rel_l2, cs.rel_l2, co.num_nan + cs.num_nan, 1e-4};
}

// Large shape: chunked vs recurrent kernel on the same inputs (GPU vs GPU; both checked vs fp64 above).
Result<CheckRow> CheckChunkVsRecurrent(int T, int H, int K, cudaStream_t s) {
  const int64_t n = int64_t(T) * H * K, ns = int64_t(H) * K * K;
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer q, DeviceBuffer::Create(n * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer k, DeviceBuffer::Create(n * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer v, DeviceBuffer::Create(n * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer g, DeviceBuffer::Create(n * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(int64_t(T) * H * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer s1, DeviceBuffer::Create(ns * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer s2, DeviceBuffer::Create(ns * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer o1, DeviceBuffer::Create(n * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer o2, DeviceBuffer::Create(n * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer slot, DeviceBuffer::Create(4));
  GYRE_RETURN_IF_ERROR(Fill(q.get<float>(), n, 11, -1, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(k.get<float>(), n, 12, -1, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(v.get<float>(), n, 13, -1, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(g.get<float>(), n, 14, -0.5f, 0, s));
  GYRE_RETURN_IF_ERROR(Fill(b.get<float>(), int64_t(T) * H, 15, 0, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(s1.get<float>(), ns, 16, -0.5f, 0.5f, s));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s2.get(), s1.get(), ns * 4, cudaMemcpyDeviceToDevice, s));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(slot.get(), 0, 4, s));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(o1.get(), 0xFF, n * 4, s));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(o2.get(), 0xFF, n * 4, s));
  KdaChunkParams pc;
  pc.q = q.get<float>(), pc.k = k.get<float>(), pc.v = v.get<float>(), pc.g = g.get<float>(), pc.beta = b.get<float>();
  pc.state = s1.get<float>(), pc.o = o1.get<float>(), pc.cu_seqlens = {0, T}, pc.slots = {0};
  pc.num_heads = H, pc.head_dim = K, pc.num_slots = 1;
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer ws, DeviceBuffer::Create(KdaChunkWorkspaceBytes(pc.cu_seqlens, H, K)));
  GYRE_RETURN_IF_ERROR(KdaChunk(pc, ws.get(), ws.bytes(), s));
  KdaRecurrentParams pr;
  pr.q = pc.q, pr.k = pc.k, pr.v = pc.v, pr.g = pc.g, pr.beta = pc.beta, pr.slots = slot.get<int32_t>();
  pr.state = s2.get<float>(), pr.o = o2.get<float>();
  pr.num_seqs = 1, pr.num_tokens = T, pr.num_heads = H, pr.head_dim = K, pr.num_slots = 1;
  GYRE_RETURN_IF_ERROR(KdaRecurrent(pr, s));
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  GYRE_ASSIGN_OR_RETURN(auto ho1, ToHost(o1, n));
  GYRE_ASSIGN_OR_RETURN(auto ho2, ToHost(o2, n));
  GYRE_ASSIGN_OR_RETURN(auto hs1, ToHost(s1, ns));
  GYRE_ASSIGN_OR_RETURN(auto hs2, ToHost(s2, ns));
  std::vector<double> r2(ho2.begin(), ho2.end()), rs2(hs2.begin(), hs2.end());
  const Cmp co = Compare(ho1.data(), r2.data(), n), cs = Compare(hs1.data(), rs2.data(), ns);
  int64_t nan2 = 0;
  for (float x : ho2) nan2 += std::isnan(x);
  return CheckRow{"kda.chunk vs kda.recurrent (GPU vs GPU) T=" + std::to_string(T) + " H=" + std::to_string(H) +
                      " K=" + std::to_string(K),
                  co.rel_l2, cs.rel_l2, co.num_nan + cs.num_nan + nan2, 1e-4};
}

// ---- ceilings ------------------------------------------------------------------------------------

struct Ceilings {
  double copy_gbps = 0;       // device-to-device copy, bytes read + written
  double bf16_tflops = 0;     // cuBLASLt bf16 8192³, random data
  double fp32_tflops = 0;     // cuBLASLt fp32 (no TF32) 4096³
};

Result<Ceilings> MeasureCeilings(GemmLt& gemm, cudaStream_t s, bool quick) {
  Ceilings c;
  GYRE_ASSIGN_OR_RETURN(c.copy_gbps, CopyGbps(s, quick));
  GYRE_ASSIGN_OR_RETURN(c.bf16_tflops, Bf16GemmTflops(gemm, s, quick));
  {
    const int64_t n = 4096;
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::Create(n * n * 4));
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer w, DeviceBuffer::Create(n * n * 4));
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::Create(n * n * 4));
    GYRE_RETURN_IF_ERROR(Fill(x.get<float>(), n * n, 4, -1, 1, s));
    GYRE_RETURN_IF_ERROR(Fill(w.get<float>(), n * n, 5, -1, 1, s));
    auto mm = [&](int) { return gemm.Run(GemmDType::kF32, x.get(), w.get(), y.get(), n, n, n, s); };
    for (int i = 0; i < 2; ++i) GYRE_RETURN_IF_ERROR(mm(0));
    GYRE_ASSIGN_OR_RETURN(double us, TimeUs(mm, quick ? 3 : 5, 1, s));
    c.fp32_tflops = 2.0 * n * n * n / (us * 1e-6) / 1e12;
  }
  return c;
}

// ---- decode --------------------------------------------------------------------------------------

struct DecodeRow {
  int batch;
  KdaRecurrentConfig cfg;
  bool heuristic;
  double us, us_graph, gbps, pct_copy;
  int num_sets;
};

// B sequences × H heads, K = V = 128, fp32 state. Rotates over `sets` disjoint input/slot sets so
// that the state traffic of successive steps does not sit in L2 (≥ 512 MiB per rotation).
Result<std::vector<DecodeRow>> BenchDecode(int B, int H, int K, const std::vector<KdaRecurrentConfig>& cfgs,
                                           double copy_gbps, cudaStream_t s, bool quick) {
  const int64_t state_bytes_step = int64_t(B) * H * K * K * 4;
  const int sets = static_cast<int>(std::max<int64_t>(2, ((int64_t(512) << 20) + state_bytes_step - 1) / state_bytes_step));
  const int64_t seqs = int64_t(sets) * B, act = seqs * H * K;
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer q, DeviceBuffer::Create(act * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer k, DeviceBuffer::Create(act * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer v, DeviceBuffer::Create(act * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer g, DeviceBuffer::Create(act * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer beta, DeviceBuffer::Create(seqs * H * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer o, DeviceBuffer::Create(act * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer pool, DeviceBuffer::Create(seqs * H * K * K * 4));
  std::vector<int32_t> slot_ids(seqs);
  for (int64_t i = 0; i < seqs; ++i) slot_ids[i] = static_cast<int32_t>((i * 7919) % seqs);  // a permutation
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer slots, ToDeviceI(slot_ids));
  GYRE_RETURN_IF_ERROR(Fill(q.get<float>(), act, 21, -1, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(k.get<float>(), act, 22, -1, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(v.get<float>(), act, 23, -1, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(g.get<float>(), act, 24, -0.2f, 0, s));
  GYRE_RETURN_IF_ERROR(Fill(beta.get<float>(), seqs * H, 25, 0, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(pool.get<float>(), seqs * H * K * K, 26, -0.5f, 0.5f, s));
  auto params = [&](int set) {
    KdaRecurrentParams p;
    const int64_t off = int64_t(set) * B * H * K;
    p.q = q.get<float>() + off, p.k = k.get<float>() + off, p.v = v.get<float>() + off, p.g = g.get<float>() + off;
    p.beta = beta.get<float>() + int64_t(set) * B * H, p.slots = slots.get<int32_t>() + int64_t(set) * B;
    p.state = pool.get<float>(), p.o = o.get<float>() + off;
    p.num_seqs = B, p.num_tokens = 1, p.num_heads = H, p.head_dim = K, p.num_slots = seqs;
    return p;
  };
  const double bytes = 2.0 * state_bytes_step;
  const int inner = std::max(sets, quick ? 8 : 32), reps = quick ? 5 : 15;
  std::vector<DecodeRow> rows;
  for (const auto& cfg : cfgs) {
    auto step = [&](int i) { return KdaRecurrent(params(i % sets), s, cfg); };
    for (int i = 0; i < sets; ++i) GYRE_RETURN_IF_ERROR(step(i));  // warm-up
    GYRE_ASSIGN_OR_RETURN(double us, TimeUs(step, reps, inner, s));
    // The same steps captured in one CUDA graph (`sets` launches), timed per step.
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    GYRE_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    Status cap = Status::Ok();
    for (int i = 0; i < sets && cap.ok(); ++i) (void)(cap = step(i));
    GYRE_CUDA_RETURN_IF_ERROR(cudaStreamEndCapture(s, &graph));
    GYRE_RETURN_IF_ERROR(cap);
    GYRE_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&exec, graph, 0));
    auto replay = [&](int) -> Status {
      GYRE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, s));
      return Status::Ok();
    };
    GYRE_RETURN_IF_ERROR(replay(0));
    auto us_graph = TimeUs(replay, reps, std::max(1, inner / sets), s);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    GYRE_RETURN_IF_ERROR(us_graph.status());
    const double ug = *us_graph / sets;
    const double best = std::min(us, ug);
    const double gbps = bytes / (best * 1e-6) / 1e9;
    rows.push_back({B, cfg, false, us, ug, gbps, 100.0 * gbps / copy_gbps, sets});
  }
  return rows;
}

// ---- prefill -------------------------------------------------------------------------------------

struct PrefillRow {
  int T, H, K;
  double ms, ms_intra, ms_scan, tokens_per_s;
  double gflop, gbytes;  // work model (below) per call
};

// Work model of the chunked form per call (batch 1, C = 64, K = V): useful fp32 FLOPs (an FMA is
// 2; the tensor cores execute 3× these for 3xTF32, not counted) and the DRAM bytes the two-kernel
// design must move (inputs and o once, the per-chunk intermediates written once and read once,
// the state read and written).
struct PrefillModel {
  double flop, bytes;
};
PrefillModel ModelPrefill(int T, int H, int K) {
  const double C = 64, nc = (T + 63) / 64, ch = nc * H, k = K;
  const double lower = C * (C + 1) / 2;                 // elements on and below the diagonal
  const double intra = 2 * lower * k * 2                // L and Aqk
                       + C * C * C / 6 * 2              // (I + L)⁻¹
                       + 2 * lower * k * 2;             // W and U (T lower-triangular)
  const double scan = C * k * k * 2 * 2                 // W·S and (Q̃⊙e^G)·S
                      + lower * k * 2                   // Aqk·Ṽ
                      + k * k * C * 2;                  // (K̂⊙e^{G_C−G})ᵀ·Ṽ
  const double io = 4.0 * (5.0 * T * H * k + T * H);    // q, k, v, g, o; β
  const double inter = 4.0 * ch * (4 * C * k + 10 * 256 + k);  // W, U, kg, qg, Aqk (10 blocks), e^{G_C}
  const double state = 2 * 4.0 * H * k * k;
  return {ch * (intra + scan), io + 2 * inter + state};
}

Result<PrefillRow> BenchPrefill(int T, int H, int K, cudaStream_t s, bool quick) {
  const int64_t n = int64_t(T) * H * K;
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer q, DeviceBuffer::Create(n * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer k, DeviceBuffer::Create(n * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer v, DeviceBuffer::Create(n * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer g, DeviceBuffer::Create(n * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(int64_t(T) * H * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer st, DeviceBuffer::Create(int64_t(H) * K * K * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer o, DeviceBuffer::Create(n * 4));
  GYRE_RETURN_IF_ERROR(Fill(q.get<float>(), n, 31, -1, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(k.get<float>(), n, 32, -1, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(v.get<float>(), n, 33, -1, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(g.get<float>(), n, 34, -0.5f, 0, s));
  GYRE_RETURN_IF_ERROR(Fill(b.get<float>(), int64_t(T) * H, 35, 0, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(st.get<float>(), int64_t(H) * K * K, 36, -0.5f, 0.5f, s));
  KdaChunkParams p;
  p.q = q.get<float>(), p.k = k.get<float>(), p.v = v.get<float>(), p.g = g.get<float>(), p.beta = b.get<float>();
  p.state = st.get<float>(), p.o = o.get<float>(), p.cu_seqlens = {0, T}, p.slots = {0};
  p.num_heads = H, p.head_dim = K, p.num_slots = 1;
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer ws, DeviceBuffer::Create(KdaChunkWorkspaceBytes(p.cu_seqlens, H, K)));
  GYRE_ASSIGN_OR_RETURN(Event e0, Event::Create());
  GYRE_ASSIGN_OR_RETURN(Event e1, Event::Create());
  GYRE_ASSIGN_OR_RETURN(Event e2, Event::Create());
  GYRE_ASSIGN_OR_RETURN(Event e3, Event::Create());
  p.phase_events[0] = e1.get();
  p.phase_events[1] = e2.get();
  std::vector<double> tot, intra, scan;
  for (int r = 0; r < (quick ? 3 : 7); ++r) {
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e0.get(), s));
    GYRE_RETURN_IF_ERROR(KdaChunk(p, ws.get(), ws.bytes(), s));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e3.get(), s));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e3.get()));
    float a = 0, bb = 0, c = 0;
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&a, e0.get(), e3.get()));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&bb, e0.get(), e1.get()));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&c, e1.get(), e2.get()));
    if (r == 0) continue;  // warm-up
    tot.push_back(a), intra.push_back(bb), scan.push_back(c);
  }
  const double ms = Median(tot);
  const PrefillModel m = ModelPrefill(T, H, K);
  return PrefillRow{T, H, K, ms, Median(intra), Median(scan), T / (ms * 1e-3), m.flop / 1e9, m.bytes / 1e9};
}

// ---- main ----------------------------------------------------------------------------------------

// Everything measured so far; written to DIR/gpu_kda_bench.json after every section, so a failure
// late in the run (a kernel fault kills the context) still leaves the earlier numbers.
struct Report {
  std::string path, commit, device_json = "null", error;
  bool quick = false;
  Ceilings ceil;
  std::vector<CheckRow> checks;
  std::vector<DecodeRow> decode;
  std::vector<PrefillRow> prefill;
  int H = 64, K = 128;

  bool AllPass() const {
    bool ok = !checks.empty();
    for (const auto& c : checks) ok = ok && c.pass();
    return ok;
  }
  void Write() const {
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    Json cj;
    cj.Num("copy_gbps", ceil.copy_gbps).Num("bf16_gemm_8192_tflops", ceil.bf16_tflops);
    cj.Num("fp32_gemm_4096_tflops", ceil.fp32_tflops);
    std::vector<std::string> cs, ds, ps;
    for (const auto& c : checks) cs.push_back(c.ToJson());
    for (const auto& d : decode) {
      Json j;
      j.Num("batch", d.batch).Num("heads", H).Num("head_dim", K).Num("block_v", d.cfg.block_v);
      j.Num("num_threads", d.cfg.num_threads).Bool("heuristic", d.heuristic).Num("us_per_step", d.us);
      j.Num("us_per_step_graph", d.us_graph).Num("state_gbps", d.gbps).Num("pct_of_copy", d.pct_copy);
      j.Num("state_bytes_per_step", 2.0 * d.batch * H * K * K * 4).Num("rotation_sets", d.num_sets);
      ds.push_back(j.Obj());
    }
    for (const auto& p : prefill) {
      Json j;
      j.Num("T", p.T).Num("heads", p.H).Num("head_dim", p.K).Num("ms", p.ms).Num("ms_intra", p.ms_intra);
      j.Num("ms_scan", p.ms_scan).Num("tokens_per_s", p.tokens_per_s).Num("model_gflop", p.gflop);
      j.Num("model_gbytes", p.gbytes).Num("tflops", p.gflop / p.ms).Num("gbps", p.gbytes / (p.ms * 1e-3));
      j.Num("pct_of_copy", 100.0 * p.gbytes / (p.ms * 1e-3) / ceil.copy_gbps);
      ps.push_back(j.Obj());
    }
    Json root;
    root.Str("date_utc", date).Str("commit", commit).Bool("quick", quick).Raw("device", device_json);
    root.Str("config", "H=64 K=V=128 fp32 state and activations; decode rotates input/slot sets (>=512 MiB) so "
                       "state traffic misses L2; graph = the same launches captured in one CUDA graph; "
                       "state_gbps/pct_of_copy use the faster of stream and graph; prefill: batch 1, "
                       "ms_intra = intra-chunk kernel, ms_scan = fused state scan + output kernel, "
                       "model_gflop/model_gbytes = useful fp32 FLOPs and compulsory DRAM bytes (ModelPrefill)");
    root.Raw("ceilings", cj.Obj()).Bool("self_check_pass", AllPass()).Raw("self_check", Array(cs));
    root.Raw("decode", Array(ds)).Raw("prefill", Array(ps)).Str("error", error);
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      std::fputs((root.Obj() + "\n").c_str(), f);
      std::fclose(f);
    }
  }
  void PrintTables() const {
    std::printf("\ndecode (H=64, K=V=128, fp32 state): us/step stream | graph, state GB/s, %% of copy %.0f GB/s\n",
                ceil.copy_gbps);
    for (const auto& d : decode)
      std::printf("  B=%-4d cfg %2dx%-3d%s %8.2f | %8.2f us  %6.0f GB/s  %5.1f%%\n", d.batch, d.cfg.block_v,
                  d.cfg.num_threads, d.heuristic ? "(h)" : "   ", d.us, d.us_graph, d.gbps, d.pct_copy);
    std::printf("prefill (B=1, H=64, K=V=128):\n");
    for (const auto& p : prefill)
      std::printf("  T=%-6d %8.3f ms (intra %.3f, scan %.3f)  %.2fM tokens/s  %.1f TFLOP/s  %.0f GB/s (%.0f%% of copy)\n",
                  p.T, p.ms, p.ms_intra, p.ms_scan, p.tokens_per_s / 1e6, p.gflop / p.ms,
                  p.gbytes / (p.ms * 1e-3), 100.0 * p.gbytes / (p.ms * 1e-3) / ceil.copy_gbps);
    std::printf("self-check: %s (%zu checks); wrote %s\n", AllPass() ? "all pass" : "FAILURES", checks.size(),
                path.c_str());
  }
};

struct Options {
  bool quick = false;
  bool decode = true;              // decode checks and benchmark
  bool chunk_checks_only = false;  // only the small chunked checks (for compute-sanitizer)
  std::vector<int> prefill_t = {4096, 16384, 65536};
};

// Order: ceilings, decode checks + bench, chunk checks + prefill bench (a fault in the chunk
// kernels leaves the decode numbers).
Status Run(Report& rep, const Options& opt) {
  const bool quick = opt.quick;
  GYRE_CUDA_RETURN_IF_ERROR(cudaSetDevice(0));
  cudaDeviceProp prop{};
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0, mem_clock_khz = 0, sm_clock_khz = 0;
  GYRE_CUDA_RETURN_IF_ERROR(cudaDriverGetVersion(&driver));
  GYRE_CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&runtime));
  (void)cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, 0);
  (void)cudaDeviceGetAttribute(&sm_clock_khz, cudaDevAttrClockRate, 0);
  Json dev;
  dev.Str("name", prop.name).Num("sms", prop.multiProcessorCount).Num("l2_mib", prop.l2CacheSize >> 20);
  dev.Num("memory_gib", prop.totalGlobalMem / double(1 << 30)).Num("driver_version", driver);
  dev.Num("runtime_version", runtime).Num("sm_clock_mhz_max", sm_clock_khz / 1000.0);
  dev.Num("mem_clock_mhz", mem_clock_khz / 1000.0);
  rep.device_json = dev.Obj();
  GYRE_ASSIGN_OR_RETURN(Stream stream, Stream::Create());
  const cudaStream_t s = stream.get();
  std::printf("device: %s, %d SMs, L2 %d MiB, driver %d, runtime %d\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, driver, runtime);
  auto add = [&](Result<CheckRow> r) -> Status {
    GYRE_RETURN_IF_ERROR(r.status());
    std::printf("  %s %-72s o %.2e state %.2e nan %lld\n", r->pass() ? "ok  " : "FAIL", r->name.c_str(), r->rel_l2_o,
                r->rel_l2_state, static_cast<long long>(r->num_nan));
    rep.checks.push_back(*r);
    return Status::Ok();
  };

  if (opt.chunk_checks_only) {
    std::printf("self-check (chunked, small shapes) vs fp64 reference:\n");
    for (int K : {128, 64, 32, 16})
      GYRE_RETURN_IF_ERROR(add(CheckKda(true, {1, 64, 65, 0, 130}, 2, K, {}, 200 + K, s)));
    GYRE_RETURN_IF_ERROR(add(CheckKda(true, {130, 64, 1}, 2, 128, {}, 210, s, -40.0f)));
    GYRE_RETURN_IF_ERROR(add(CheckKda(true, {130, 1}, 40, 128, {}, 220, s)));  // 64-column scan tiles
    return Status::Ok();
  }

  // ---- ceilings ----
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<GemmLt> gemm, GemmLt::Create());
  GYRE_ASSIGN_OR_RETURN(rep.ceil, MeasureCeilings(*gemm, s, quick));
  std::printf("ceilings: copy %.0f GB/s (read+write), bf16 GEMM 8192^3 %.0f TFLOP/s, fp32 GEMM 4096^3 %.1f TFLOP/s\n",
              rep.ceil.copy_gbps, rep.ceil.bf16_tflops, rep.ceil.fp32_tflops);
  rep.Write();

  // ---- decode: check vs fp64, then time ----
  std::printf("self-check (recurrent) vs fp64 reference:\n");
  for (int K : {128, 64, 16}) GYRE_RETURN_IF_ERROR(add(CheckKda(false, {1, 5, 3}, 3, K, {}, 100 + K, s)));
  const std::vector<KdaRecurrentConfig> cfgs128 = {{16, 64},  {16, 128}, {32, 128},  {32, 256},
                                                   {64, 128}, {64, 256}, {128, 256}, {128, 512}};
  for (auto cfg : cfgs128) GYRE_RETURN_IF_ERROR(add(CheckKda(false, {3}, 2, 128, cfg, 7, s)));
  if (opt.decode)
    for (auto cfg : cfgs128) GYRE_RETURN_IF_ERROR(add(CheckDecodeBatch(17, 4, 128, cfg, 8, s)));
  rep.Write();
  for (int B : {1, 16, 64, 256, 512}) {
    if (!opt.decode) break;
    GYRE_ASSIGN_OR_RETURN(auto rows, BenchDecode(B, rep.H, rep.K, cfgs128, rep.ceil.copy_gbps, s, quick));
    GYRE_ASSIGN_OR_RETURN(auto heur, BenchDecode(B, rep.H, rep.K, {KdaRecurrentConfig{}}, rep.ceil.copy_gbps, s, true));
    heur[0].heuristic = true;
    heur[0].cfg = PickKdaRecurrentConfig(B, rep.H, 128, prop.multiProcessorCount);
    rows.push_back(heur[0]);
    rep.decode.insert(rep.decode.end(), rows.begin(), rows.end());
    rep.Write();
  }

  // ---- prefill: check vs fp64 and vs the recurrent kernel, then time ----
  std::printf("self-check (chunked) vs fp64 reference:\n");
  for (int K : {128, 64, 32, 16})
    GYRE_RETURN_IF_ERROR(add(CheckKda(true, {1, 64, 65, 0, 200, 130}, 3, K, {}, 200 + K, s)));
  GYRE_RETURN_IF_ERROR(add(CheckKda(true, {1024}, 4, 128, {}, 300, s)));
  GYRE_RETURN_IF_ERROR(add(CheckKda(true, {130, 64, 1}, 2, 128, {}, 310, s, -40.0f)));  // underflowing decays
  GYRE_RETURN_IF_ERROR(add(CheckKda(true, {1000}, 2, 128, {}, 320, s, -0.05f)));        // long memory
  GYRE_RETURN_IF_ERROR(add(CheckKda(true, {200, 77}, 40, 128, {}, 325, s)));  // 64-column scan tiles
  if (!quick) GYRE_RETURN_IF_ERROR(add(CheckKda(true, {4096}, 8, 128, {}, 330, s)));  // the bench length
  GYRE_RETURN_IF_ERROR(add(CheckChunkVsRecurrent(quick ? 1024 : 4096, 64, 128, s)));
  rep.Write();
  for (int T : opt.prefill_t) {
    GYRE_ASSIGN_OR_RETURN(auto r, BenchPrefill(T, rep.H, rep.K, s, quick));
    rep.prefill.push_back(r);
    rep.Write();
  }
  return Status::Ok();
}

}  // namespace
}  // namespace gyre::cuda

int main(int argc, char** argv) {
  std::string out = ".", commit = "unknown";
  gyre::cuda::Options opt;
  const char* usage =
      "usage: gyre_cuda_bench [--out DIR] [--commit HASH] [--quick] [--no-decode] [--prefill-t T1,T2,...]\n"
      "                       [--chunk-checks-only] [--w8a8-only]\n"
      "  Self-check of the KDA kernels vs fp64, ceilings (copy, cuBLASLt), decode and chunked-prefill\n"
      "  benchmarks (batch 1, H=64, K=V=128; per-phase times from events). Writes DIR/gpu_kda_bench.json.\n";
  bool w8a8_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else if (!std::strcmp(argv[i], "--w8a8-only")) w8a8_only = true;
    else if (!std::strcmp(argv[i], "--commit") && i + 1 < argc) commit = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) opt.quick = true;
    else if (!std::strcmp(argv[i], "--no-decode")) opt.decode = false;
    else if (!std::strcmp(argv[i], "--chunk-checks-only")) opt.chunk_checks_only = true;
    else if (!std::strcmp(argv[i], "--prefill-t") && i + 1 < argc) {
      opt.prefill_t.clear();
      for (const char* p = argv[++i]; *p;) {
        char* end = nullptr;
        const long t = std::strtol(p, &end, 10);
        if (end == p || t < 1 || t > (1L << 24)) {
          std::fprintf(stderr, "%s", usage);
          return 2;
        }
        opt.prefill_t.push_back(static_cast<int>(t));
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "%s", usage);
      return !std::strcmp(argv[i], "--help") ? 0 : 2;
    }
  }
  if (w8a8_only) return gyre::cuda::w8a8bench::RunW8A8Bench(out, commit, opt.quick);
  gyre::cuda::Report rep;
  rep.path = out + "/gpu_kda_bench.json";
  rep.commit = commit;
  rep.quick = opt.quick;
  const gyre::Status st = gyre::cuda::Run(rep, opt);
  if (!st.ok()) rep.error = st.ToString();
  rep.Write();
  rep.PrintTables();
  if (!st.ok()) {
    std::fprintf(stderr, "gyre_cuda_bench: %s\n", st.ToString().c_str());
    return 2;
  }
  return rep.AllPass() ? 0 : 1;
}
