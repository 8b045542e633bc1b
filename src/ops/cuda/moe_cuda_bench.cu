// gyre_moe_cuda_bench: self-check and microbenchmarks of the MoE kernels (moe_cuda.h), with the
// ceilings measured in the same run (style.md §2.8).
//
//   gyre_moe_cuda_bench [--out DIR] [--commit HASH] [--quick] [--check-only] [--no-wgmma]
//
// Sections: helpers (fill, timing, JSON); self-check (routing vs ops::Route, experts vs an fp64
// host reference for every kernel kind, tensor-core kinds vs the SIMT kernel at the real shape);
// ceilings (device copy, cuBLASLt bf16 GEMM); routing; decode; prefill; main. Default shapes: E =
// 288, D = 4096, I = 2048, top-8, bf16 weights, random router logits. Writes DIR/moe.json after
// every section and prints a short table last. Exit code 1 if any self-check fails.
// --check-only runs the small self-checks alone (for compute-sanitizer); --no-wgmma leaves the
// wgmma kernels out. Decode batches with P = n·k <= kMoeSmallPairs also time the heuristic kernel
// on the old path ("+legacy": four sort/cast launches, separate combine, no PDL).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/bench_common.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/moe_cuda.h"
#include "ops/cuda/moe_kernels.h"
#include "ops/moe.h"

namespace gyre::cuda {
namespace {

using namespace bench;  // Fill, FillBf16, Median, TimeUs, Json, Array

using internal::MoeGemmKind;
using internal::MoeGemmKindName;

// ---- helpers -------------------------------------------------------------------------------------


struct HostRng {
  uint64_t state;
  float Uniform(float lo, float hi) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * static_cast<float>((state >> 40) * (1.0 / 16777216.0));
  }
  float Normal(float scale) {  // sum of 4 uniforms, variance matched
    float s = 0;
    for (int i = 0; i < 4; ++i) s += Uniform(-1, 1);
    return s * scale * 0.8660254f;
  }
  std::vector<float> Normals(int64_t n, float scale) {
    std::vector<float> v(n);
    for (auto& x : v) x = Normal(scale);
    return v;
  }
};

float RoundBf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

template <typename T>
Result<DeviceBuffer> ToDevice(const std::vector<T>& v) {
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(v.size() * sizeof(T)));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return Result<DeviceBuffer>(std::move(b));
}
template <typename T>
Result<std::vector<T>> ToHost(const void* p, int64_t n) {
  std::vector<T> v(n);
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}


double RelL2(const std::vector<float>& a, const std::vector<double>& b, int64_t* nan_count) {
  double num = 0, den = 0;
  *nan_count = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) ++*nan_count;
    const double d = a[i] - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  return *nan_count ? INFINITY : std::sqrt(num / std::max(den, 1e-300));
}

// ---- self-check ----------------------------------------------------------------------------------

struct CheckRow {
  std::string name;
  double err = 0, tol = 0;  // rel-L2 (experts) or mismatching ids (route)
  int64_t num_nan = 0;
  std::string note;
  bool pass() const { return num_nan == 0 && err <= tol; }
  std::string ToJson() const {
    Json j;
    j.Str("name", name).Num("err", err).Num("tol", tol).Num("num_nan", double(num_nan)).Str("note", note);
    j.Bool("pass", pass());
    return j.Obj();
  }
};

// GPU routing vs ops::Route on the host: ids must match exactly, weights to 1e-6 relative.
Result<CheckRow> CheckRoute(int64_t n, int64_t E, int64_t K, int64_t G, int64_t TG, uint64_t seed, cudaStream_t s) {
  HostRng rng{seed};
  std::vector<float> logits = rng.Normals(n * E, 2.0f), bias = rng.Normals(E, 0.05f);
  std::vector<int32_t> want_idx(n * K);
  std::vector<float> want_w(n * K);
  ops::Route(logits.data(), n, bias, {E, K, G, TG, true, 2.5f}, want_idx.data(), want_w.data());
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dl, ToDevice(logits));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer db, ToDevice(bias));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer di, DeviceBuffer::Create(n * K * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dw, DeviceBuffer::Create(n * K * 4));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(di.get(), 0xFF, n * K * 4, s));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dw.get(), 0xFF, n * K * 4, s));
  GYRE_RETURN_IF_ERROR(MoeRoute(dl.get<float>(), n, db.get<float>(), {E, K, G, TG, true, 2.5f}, di.get<int32_t>(),
                                dw.get<float>(), s));
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  GYRE_ASSIGN_OR_RETURN(auto idx, ToHost<int32_t>(di.get(), n * K));
  GYRE_ASSIGN_OR_RETURN(auto w, ToHost<float>(dw.get(), n * K));
  CheckRow row{"route n=" + std::to_string(n) + " E=" + std::to_string(E) + " k=" + std::to_string(K) +
                   " groups=" + std::to_string(G) + "/" + std::to_string(TG),
               0, 0, 0, ""};
  // NOTE: the GPU's expf and glibc's may differ by an ulp, so two choices within a few ulp can swap
  // (the CPU backend has the same exposure against the fp64 reference). A token whose mismatching
  // ids all have choices within 1e-6 of the expected ones counts as a near-tie, not an error.
  double max_rel = 0;
  int64_t near_ties = 0;
  for (int64_t t = 0; t < n; ++t) {
    bool differs = false, tie = true;
    for (int64_t j = 0; j < K; ++j) {
      const int64_t i = t * K + j;
      if (!std::isfinite(w[i])) ++row.num_nan;
      if (idx[i] == want_idx[i]) continue;
      differs = true;
      if (idx[i] < 0 || idx[i] >= E) {
        tie = false;
        continue;
      }
      const float cg = 1.0f / (1.0f + std::exp(-logits[t * E + idx[i]])) + bias[idx[i]];
      const float cw = 1.0f / (1.0f + std::exp(-logits[t * E + want_idx[i]])) + bias[want_idx[i]];
      tie = tie && std::fabs(cg - cw) <= 1e-6f * std::max(1.0f, std::fabs(cw));
    }
    if (differs) {
      if (tie) {
        ++near_ties;
      } else {
        row.err += 1;
      }
      continue;
    }
    for (int64_t j = 0; j < K; ++j) {
      const int64_t i = t * K + j;
      max_rel = std::max(max_rel, std::fabs(double(w[i]) - want_w[i]) / std::max(1e-30, std::fabs(double(want_w[i]))));
    }
  }
  row.note = "err = tokens with mismatching ids out of " + std::to_string(n) + "; near-tie swaps " +
             std::to_string(near_ties) + "; max weight rel diff " + std::to_string(max_rel);
  if (max_rel > 1e-6) row.err += 1e9;
  return row;
}

// Experts inputs on the host (bf16-representable weights when bf16), routed by ops::Route; a
// `hot` expert takes most tokens (several m-tiles); the last slot of the last token is padding.
struct ExpertsCase {
  int64_t n, E, K, D, I;
  bool bf16, hot;
  std::vector<float> x, w, gate_up, down;
  std::vector<int32_t> idx;
};

ExpertsCase MakeCase(int64_t n, int64_t E, int64_t K, int64_t D, int64_t I, bool bf16, bool hot, uint64_t seed) {
  HostRng rng{seed};
  ExpertsCase c{n, E, K, D, I, bf16, hot, rng.Normals(n * D, 3.0f), {}, rng.Normals(E * 2 * I * D, 1.0f / std::sqrt(float(D))),
                rng.Normals(E * D * I, 1.0f / std::sqrt(float(I))), {}};
  if (bf16) {
    for (auto& v : c.gate_up) v = RoundBf16(v);
    for (auto& v : c.down) v = RoundBf16(v);
  }
  std::vector<float> logits = rng.Normals(n * E, 2.0f), bias(E, 0.0f);
  if (hot) bias[3] = 10.0f;
  c.idx.resize(n * K);
  c.w.resize(n * K);
  ops::Route(logits.data(), n, bias, {E, K, 1, 1, true, 2.5f}, c.idx.data(), c.w.data());
  if (n > 1) c.idx[n * K - 1] = -1;
  return c;
}

// fp64 reference; bf16 cases round x and the SwiGLU output to bf16 as the GPU operands are.
std::vector<double> ReferenceExperts(const ExpertsCase& c, float limit) {
  std::vector<double> out(c.n * c.D, 0.0), a(c.I);
  for (int64_t t = 0; t < c.n; ++t)
    for (int64_t j = 0; j < c.K; ++j) {
      const int64_t e = c.idx[t * c.K + j];
      if (e < 0 || e >= c.E) continue;
      const float* gu = &c.gate_up[e * 2 * c.I * c.D];
      const float* dn = &c.down[e * c.D * c.I];
      for (int64_t i = 0; i < c.I; ++i) {
        double g = 0, u = 0;
        for (int64_t k = 0; k < c.D; ++k) {
          const double xv = c.bf16 ? RoundBf16(c.x[t * c.D + k]) : c.x[t * c.D + k];
          g += xv * gu[i * c.D + k];
          u += xv * gu[(c.I + i) * c.D + k];
        }
        if (limit > 0) {
          g = std::min(g, double(limit));
          u = std::clamp(u, -double(limit), double(limit));
        }
        const double v = g / (1.0 + std::exp(-g)) * u;
        a[i] = c.bf16 ? RoundBf16(static_cast<float>(v)) : v;
      }
      for (int64_t d = 0; d < c.D; ++d) {
        double y = 0;
        for (int64_t i = 0; i < c.I; ++i) y += a[i] * dn[d * c.I + i];
        out[t * c.D + d] += c.w[t * c.K + j] * y;
      }
    }
  return out;
}

// Device copies of a case (weights as bf16 or fp32) and a NaN-poisoned output and workspace.
struct DeviceCase {
  DeviceBuffer x, idx, w, gate_up, down, out, ws;
  MoeExpertWeights ew;
};

Result<DeviceCase> Upload(const ExpertsCase& c, cudaStream_t s) {
  DeviceCase d;
  GYRE_ASSIGN_OR_RETURN(d.x, ToDevice(c.x));
  GYRE_ASSIGN_OR_RETURN(d.idx, ToDevice(c.idx));
  GYRE_ASSIGN_OR_RETURN(d.w, ToDevice(c.w));
  if (c.bf16) {
    std::vector<__nv_bfloat16> gu(c.gate_up.size()), dn(c.down.size());
    for (size_t i = 0; i < gu.size(); ++i) gu[i] = __float2bfloat16_rn(c.gate_up[i]);
    for (size_t i = 0; i < dn.size(); ++i) dn[i] = __float2bfloat16_rn(c.down[i]);
    GYRE_ASSIGN_OR_RETURN(d.gate_up, ToDevice(gu));
    GYRE_ASSIGN_OR_RETURN(d.down, ToDevice(dn));
  } else {
    GYRE_ASSIGN_OR_RETURN(d.gate_up, ToDevice(c.gate_up));
    GYRE_ASSIGN_OR_RETURN(d.down, ToDevice(c.down));
  }
  d.ew = MoeExpertWeights{d.gate_up.get(), d.down.get(), c.bf16, c.E, c.D, c.I};
  GYRE_ASSIGN_OR_RETURN(d.out, DeviceBuffer::Create(c.n * c.D * 4));
  GYRE_ASSIGN_OR_RETURN(d.ws, DeviceBuffer::Create(MoeExpertsWorkspaceBytes(d.ew, c.n, c.K)));
  return Result<DeviceCase>(std::move(d));
}

Result<std::vector<float>> RunCase(DeviceCase& d, const ExpertsCase& c, MoeGemmKind kind, float limit,
                                   cudaStream_t s, const internal::MoeExpertsOptions& opt = {}) {
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d.out.get(), 0xFF, d.out.bytes(), s));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d.ws.get(), 0xFF, d.ws.bytes(), s));
  internal::MoeExpertsCall call{d.x.get<float>(), c.n, d.idx.get<int32_t>(), d.w.get<float>(), c.K, d.ew, limit,
                                d.out.get<float>(), d.ws.get(), d.ws.bytes()};
  GYRE_RETURN_IF_ERROR(internal::MoeExpertsWith(call, kind, nullptr, s, opt));
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  return ToHost<float>(d.out.get(), c.n * c.D);
}

const MoeGemmKind kTensorKinds[] = {MoeGemmKind::kMma16x128,     MoeGemmKind::kMma64x256,
                                    MoeGemmKind::kMma128x256,    MoeGemmKind::kWgmma64x256,
                                    MoeGemmKind::kWgmma128x256,  MoeGemmKind::kWgmmaWs64x256,
                                    MoeGemmKind::kWgmmaWs128x256};

// --no-wgmma: leave the wgmma kernels out (a fallback run if they fault and take the context down).
bool g_no_wgmma = false;
bool Skipped(MoeGemmKind k) {
  return g_no_wgmma && (k == MoeGemmKind::kWgmma64x256 || k == MoeGemmKind::kWgmma128x256 || internal::MoeGemmIsWs(k));
}

// Every kind that runs the case vs the fp64 reference.
Status CheckExperts(const ExpertsCase& c, float limit, std::vector<CheckRow>* rows, cudaStream_t s) {
  const std::vector<double> ref = ReferenceExperts(c, limit);
  GYRE_ASSIGN_OR_RETURN(DeviceCase d, Upload(c, s));
  std::vector<MoeGemmKind> kinds = {MoeGemmKind::kAuto, MoeGemmKind::kSimt};
  if (c.bf16) kinds.insert(kinds.end(), std::begin(kTensorKinds), std::end(kTensorKinds));
  for (MoeGemmKind k : kinds) {
    if (!internal::MoeGemmFits(k, c.bf16, c.D, c.I) && k != MoeGemmKind::kAuto) continue;
    const MoeGemmKind actual = k == MoeGemmKind::kAuto ? internal::PickMoeGemm(d.ew, c.n, c.K) : k;
    if (Skipped(actual)) continue;
    CheckRow row{std::string("experts ") + MoeGemmKindName(k) + (k == MoeGemmKind::kAuto ? "(" + std::string(MoeGemmKindName(actual)) + ")" : "") +
                     " n=" + std::to_string(c.n) + " E=" + std::to_string(c.E) + " k=" + std::to_string(c.K) +
                     " D=" + std::to_string(c.D) + " I=" + std::to_string(c.I) + (c.bf16 ? " bf16" : " fp32") +
                     (c.hot ? " hot" : ""),
                 0, c.bf16 ? 1e-3 : 1e-5, 0, "vs fp64 reference"};
    auto got = RunCase(d, c, k, limit, s);
    if (!got.ok()) {
      row.err = INFINITY;
      row.note = got.status().ToString();
    } else {
      row.err = RelL2(*got, ref, &row.num_nan);
    }
    rows->push_back(row);
    // Small batches run the one-kernel sort (and, HMMA, the fused combine + PDL): also check the
    // old path with the same kind.
    if (c.n * c.K <= internal::kMoeSmallPairs && (k == MoeGemmKind::kAuto || k == MoeGemmKind::kMma16x128)) {
      CheckRow legacy = row;
      legacy.name += " +legacy";
      legacy.err = 0;
      legacy.num_nan = 0;
      legacy.note = "old path (chunked sort, separate combine)";
      internal::MoeExpertsOptions opt;
      opt.small_path = false;
      auto got_legacy = RunCase(d, c, k, limit, s, opt);
      if (!got_legacy.ok()) {
        legacy.err = INFINITY;
        legacy.note = got_legacy.status().ToString();
      } else {
        legacy.err = RelL2(*got_legacy, ref, &legacy.num_nan);
      }
      rows->push_back(legacy);
    }
  }
  return Status::Ok();
}

// ---- ceilings ------------------------------------------------------------------------------------

struct Ceilings {
  double copy_gbps = 0;    // device-to-device copy, bytes read + written
  double bf16_tflops = 0;  // cuBLASLt bf16 8192³
};

Result<Ceilings> MeasureCeilings(GemmLt& gemm, cudaStream_t s, bool quick) {
  Ceilings c;
  GYRE_ASSIGN_OR_RETURN(c.copy_gbps, CopyGbps(s, quick));
  GYRE_ASSIGN_OR_RETURN(c.bf16_tflops, Bf16GemmTflops(gemm, s, quick));
  return c;
}

// ---- the default model shape on the device ---------------------------------------------------------

struct Model {
  int64_t E = 288, D = 4096, I = 2048, K = 8;
  DeviceBuffer gate_up, down;
  MoeExpertWeights ew;
};

Result<std::unique_ptr<Model>> MakeModel(cudaStream_t s) {
  auto m = std::make_unique<Model>();
  GYRE_ASSIGN_OR_RETURN(m->gate_up, DeviceBuffer::Create(m->E * 2 * m->I * m->D * 2));
  GYRE_ASSIGN_OR_RETURN(m->down, DeviceBuffer::Create(m->E * m->D * m->I * 2));
  const float sg = 1.0f / std::sqrt(float(m->D)), sd = 1.0f / std::sqrt(float(m->I));
  GYRE_RETURN_IF_ERROR(FillBf16(m->gate_up.get(), m->E * 2 * m->I * m->D, 11, -1.7f * sg, 1.7f * sg, s));
  GYRE_RETURN_IF_ERROR(FillBf16(m->down.get(), m->E * m->D * m->I, 12, -1.7f * sd, 1.7f * sd, s));
  m->ew = MoeExpertWeights{m->gate_up.get(), m->down.get(), true, m->E, m->D, m->I};
  return Result<std::unique_ptr<Model>>(std::move(m));
}

// `sets` routings of n tokens (random logits through MoeRoute) and x, on the device.
struct Batch {
  int64_t n = 0;
  int sets = 0;
  DeviceBuffer x, logits, idx, w, out, ws;
  std::vector<int64_t> distinct;  // experts hit per set
};

Result<Batch> MakeBatch(const Model& m, int64_t n, int sets, cudaStream_t s) {
  Batch b;
  b.n = n;
  b.sets = sets;
  GYRE_ASSIGN_OR_RETURN(b.x, DeviceBuffer::Create(sets * n * m.D * 4));
  GYRE_ASSIGN_OR_RETURN(b.logits, DeviceBuffer::Create(sets * n * m.E * 4));
  GYRE_ASSIGN_OR_RETURN(b.idx, DeviceBuffer::Create(sets * n * m.K * 4));
  GYRE_ASSIGN_OR_RETURN(b.w, DeviceBuffer::Create(sets * n * m.K * 4));
  GYRE_ASSIGN_OR_RETURN(b.out, DeviceBuffer::Create(n * m.D * 4));
  GYRE_ASSIGN_OR_RETURN(b.ws, DeviceBuffer::Create(MoeExpertsWorkspaceBytes(m.ew, n, m.K)));
  GYRE_RETURN_IF_ERROR(Fill(b.x.get<float>(), sets * n * m.D, 21 + n, -2, 2, s));
  GYRE_RETURN_IF_ERROR(Fill(b.logits.get<float>(), sets * n * m.E, 22 + n, -4, 4, s));
  GYRE_RETURN_IF_ERROR(MoeRoute(b.logits.get<float>(), sets * n, nullptr, {m.E, m.K, 1, 1, true, 2.5f},
                                b.idx.get<int32_t>(), b.w.get<float>(), s));
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  GYRE_ASSIGN_OR_RETURN(auto idx, ToHost<int32_t>(b.idx.get(), sets * n * m.K));
  for (int k = 0; k < sets; ++k) {
    std::set<int32_t> hit(idx.begin() + k * n * m.K, idx.begin() + (k + 1) * n * m.K);
    b.distinct.push_back(static_cast<int64_t>(hit.size()));
  }
  return Result<Batch>(std::move(b));
}

Status RunBatch(const Model& m, Batch& b, int set, MoeGemmKind kind, const cudaEvent_t* ev, cudaStream_t s,
                const internal::MoeExpertsOptions& opt = {}) {
  internal::MoeExpertsCall c{b.x.get<float>() + set * b.n * m.D, b.n, b.idx.get<int32_t>() + set * b.n * m.K,
                             b.w.get<float>() + set * b.n * m.K, m.K, m.ew, 10.0f, b.out.get<float>(), b.ws.get(),
                             b.ws.bytes()};
  return internal::MoeExpertsWith(c, kind, ev, s, opt);
}

// Tensor-core kinds vs the SIMT kernel at the model shape (same bf16 operands; GPU vs GPU).
Status CheckModelShape(const Model& m, int64_t n, std::vector<CheckRow>* rows, cudaStream_t s) {
  GYRE_ASSIGN_OR_RETURN(Batch b, MakeBatch(m, n, 1, s));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(b.out.get(), 0xFF, b.out.bytes(), s));
  GYRE_RETURN_IF_ERROR(RunBatch(m, b, 0, MoeGemmKind::kSimt, nullptr, s));
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  GYRE_ASSIGN_OR_RETURN(auto simt, ToHost<float>(b.out.get(), n * m.D));
  const std::vector<double> ref(simt.begin(), simt.end());
  for (MoeGemmKind k : kTensorKinds) {
    if (Skipped(k)) continue;
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(b.out.get(), 0xFF, b.out.bytes(), s));
    CheckRow row{std::string("experts ") + MoeGemmKindName(k) + " n=" + std::to_string(n) + " model shape", 0, 1e-3,
                 0, "vs the SIMT kernel on the device"};
    Status st = RunBatch(m, b, 0, k, nullptr, s);
    if (st.ok()) (void)(st = ToStatus(cudaStreamSynchronize(s), "sync", __FILE__, __LINE__));
    if (!st.ok()) {
      row.err = INFINITY;
      row.note = st.ToString();
    } else {
      GYRE_ASSIGN_OR_RETURN(auto got, ToHost<float>(b.out.get(), n * m.D));
      row.err = RelL2(got, ref, &row.num_nan);
    }
    rows->push_back(row);
  }
  // The heuristic path captured in a CUDA graph (PDL edges on small batches), replayed twice.
  {
    CheckRow row{"experts auto n=" + std::to_string(n) + " model shape, graph replay", 0, 1e-3, 0,
                 "vs the SIMT kernel on the device"};
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    Status st = ToStatus(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture", __FILE__, __LINE__);
    if (st.ok()) {
      const Status run = RunBatch(m, b, 0, MoeGemmKind::kAuto, nullptr, s);
      (void)(st = ToStatus(cudaStreamEndCapture(s, &graph), "end capture", __FILE__, __LINE__));
      if (!run.ok()) (void)(st = run);
    }
    if (st.ok()) (void)(st = ToStatus(cudaGraphInstantiate(&exec, graph, 0), "instantiate", __FILE__, __LINE__));
    for (int rep = 0; rep < 2 && st.ok(); ++rep) {
      (void)(st = ToStatus(cudaMemsetAsync(b.out.get(), 0xFF, b.out.bytes(), s), "poison", __FILE__, __LINE__));
      if (st.ok()) (void)(st = ToStatus(cudaGraphLaunch(exec, s), "replay", __FILE__, __LINE__));
      if (st.ok()) (void)(st = ToStatus(cudaStreamSynchronize(s), "sync", __FILE__, __LINE__));
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (!st.ok()) {
      row.err = INFINITY;
      row.note = st.ToString();
      (void)cudaGetLastError();
    } else {
      GYRE_ASSIGN_OR_RETURN(auto got, ToHost<float>(b.out.get(), n * m.D));
      row.err = RelL2(got, ref, &row.num_nan);
    }
    rows->push_back(row);
  }
  return Status::Ok();
}

// ---- routing, decode, prefill --------------------------------------------------------------------

struct RouteRow {
  int64_t n;
  double us;
};

struct ExpertsRow {
  int64_t n;
  std::string kind;
  bool heuristic;
  double us, us_graph;
  double weight_bytes;  // distinct experts × 3·D·I·2, mean over the rotation sets
  double gbps, pct_copy, tflops, pct_gemm;
  double us_sort, us_gate_up, us_down, us_combine;
  std::string note;
};

Result<std::vector<RouteRow>> BenchRoute(const Model& m, cudaStream_t s, bool quick) {
  std::vector<RouteRow> rows;
  for (int64_t n : {int64_t(1), int64_t(16), int64_t(64), int64_t(256), int64_t(4096), int64_t(16384)}) {
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer logits, DeviceBuffer::Create(n * m.E * 4));
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer bias, DeviceBuffer::Create(m.E * 4));
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer idx, DeviceBuffer::Create(n * m.K * 4));
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer w, DeviceBuffer::Create(n * m.K * 4));
    GYRE_RETURN_IF_ERROR(Fill(logits.get<float>(), n * m.E, 31, -4, 4, s));
    GYRE_RETURN_IF_ERROR(Fill(bias.get<float>(), m.E, 32, -0.1f, 0.1f, s));
    auto run = [&](int) {
      return MoeRoute(logits.get<float>(), n, bias.get<float>(), {m.E, m.K, 1, 1, true, 2.5f}, idx.get<int32_t>(),
                      w.get<float>(), s);
    };
    GYRE_RETURN_IF_ERROR(run(0));
    GYRE_ASSIGN_OR_RETURN(double us, TimeUs(run, quick ? 5 : 15, 20, s));
    rows.push_back({n, us});
  }
  return rows;
}

// Captures `calls` calls of step(i) in one CUDA graph and times its replay; µs per call.
template <typename F>
Result<double> TimeGraph(F&& step, int calls, int reps, cudaStream_t s) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  Status cap = Status::Ok();
  for (int i = 0; i < calls && cap.ok(); ++i) (void)(cap = step(i));
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  GYRE_RETURN_IF_ERROR(cap);
  GYRE_CUDA_RETURN_IF_ERROR(end);
  Status st = ToStatus(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate", __FILE__, __LINE__);
  auto replay = [&](int) -> Status {
    GYRE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, s));
    return Status::Ok();
  };
  if (st.ok()) (void)(st = replay(0));
  Result<double> us = st.ok() ? TimeUs(replay, reps, 2, s) : Result<double>(st);
  if (exec) cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  GYRE_RETURN_IF_ERROR(us.status());
  return *us / calls;
}

// Times MoeExperts for each kind (and the heuristic, also replayed as a CUDA graph), rotating over
// the batch's routing sets.
Result<std::vector<ExpertsRow>> BenchExperts(const Model& m, int64_t n, int sets, const std::vector<MoeGemmKind>& kinds,
                                             const Ceilings& ceil, cudaStream_t s, bool quick) {
  GYRE_ASSIGN_OR_RETURN(Batch b, MakeBatch(m, n, sets, s));
  double distinct = 0;
  for (int64_t d : b.distinct) distinct += double(d) / b.distinct.size();
  const double weight_bytes = distinct * 3.0 * m.D * m.I * 2;
  const double flops = 6.0 * n * m.K * m.D * m.I;
  const MoeGemmKind picked = internal::PickMoeGemm(m.ew, n, m.K);
  std::vector<ExpertsRow> rows;
  GYRE_ASSIGN_OR_RETURN(Event e0, Event::Create());
  GYRE_ASSIGN_OR_RETURN(Event e1, Event::Create());
  GYRE_ASSIGN_OR_RETURN(Event e2, Event::Create());
  GYRE_ASSIGN_OR_RETURN(Event e3, Event::Create());
  GYRE_ASSIGN_OR_RETURN(Event e4, Event::Create());
  const int reps = quick ? 3 : (n >= 4096 ? 5 : 11);
  const int inner = n >= 4096 ? 1 : std::max(sets, 8);
  // Each kind on the default path; the heuristic kind of a small batch also on the old path.
  std::vector<std::pair<MoeGemmKind, bool>> variants;  // (kind, legacy)
  for (MoeGemmKind kind : kinds) {
    variants.push_back({kind, false});
    if (kind == picked && n * m.K <= internal::kMoeSmallPairs) variants.push_back({kind, true});
  }
  for (auto [kind, legacy] : variants) {
    if (!internal::MoeGemmFits(kind, true, m.D, m.I) || Skipped(kind)) continue;
    internal::MoeExpertsOptions opt;
    opt.small_path = !legacy;
    ExpertsRow row{n,   std::string(MoeGemmKindName(kind)) + (legacy ? "+legacy" : ""), kind == picked && !legacy, 0, NAN,
                   weight_bytes, 0, 0, 0, 0, NAN, NAN, NAN, NAN, ""};
    auto step = [&](int i) { return RunBatch(m, b, i % sets, kind, nullptr, s, opt); };
    GYRE_RETURN_IF_ERROR(step(0));
    GYRE_ASSIGN_OR_RETURN(row.us, TimeUs(step, reps, inner, s));
    // Phase split: events after the sort, gate_up and down (median of `reps` calls).
    std::vector<double> t_sort, t_gu, t_dn, t_cb;
    const cudaEvent_t ev[3] = {e1.get(), e2.get(), e3.get()};
    for (int r = 0; r < reps; ++r) {
      GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e0.get(), s));
      GYRE_RETURN_IF_ERROR(RunBatch(m, b, r % sets, kind, ev, s, opt));
      GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e4.get(), s));
      GYRE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e4.get()));
      float a = 0, bb = 0, c = 0, d = 0;
      GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&a, e0.get(), e1.get()));
      GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&bb, e1.get(), e2.get()));
      GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&c, e2.get(), e3.get()));
      GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&d, e3.get(), e4.get()));
      t_sort.push_back(1000 * a), t_gu.push_back(1000 * bb), t_dn.push_back(1000 * c), t_cb.push_back(1000 * d);
    }
    row.us_sort = Median(t_sort), row.us_gate_up = Median(t_gu), row.us_down = Median(t_dn);
    row.us_combine = Median(t_cb);
    if (kind == picked && n < 4096) {  // the same calls captured in one CUDA graph (one call per set)
      Result<double> ug = TimeGraph(step, sets, reps, s);
      if (ug.ok()) {
        row.us_graph = *ug;
      } else {
        row.note = "graph: " + ug.status().ToString();  // reported, not fatal
        (void)cudaGetLastError();
      }
    }
    const double best = std::isfinite(row.us_graph) ? std::min(row.us, row.us_graph) : row.us;
    row.gbps = weight_bytes / (best * 1e-6) / 1e9;
    row.pct_copy = 100.0 * row.gbps / ceil.copy_gbps;
    row.tflops = flops / (best * 1e-6) / 1e12;
    row.pct_gemm = 100.0 * row.tflops / ceil.bf16_tflops;
    rows.push_back(row);
  }
  return rows;
}

// ---- main ----------------------------------------------------------------------------------------

struct Report {
  std::string path, commit, device_json = "null", error;
  bool quick = false, check_only = false;
  Ceilings ceil;
  std::vector<CheckRow> checks;
  std::vector<RouteRow> route;
  std::vector<ExpertsRow> decode, prefill;

  bool AllPass() const {
    bool ok = !checks.empty();
    for (const auto& c : checks) ok = ok && c.pass();
    return ok;
  }
  static std::string Rows(const std::vector<ExpertsRow>& v) {
    std::vector<std::string> out;
    for (const auto& r : v) {
      Json j;
      j.Num("tokens", double(r.n)).Str("kernel", r.kind).Bool("heuristic", r.heuristic).Num("us", r.us);
      j.Num("us_graph", r.us_graph).Num("us_sort", r.us_sort).Num("us_gate_up", r.us_gate_up);
      j.Num("us_down", r.us_down).Num("us_combine", r.us_combine).Num("expert_weight_bytes", r.weight_bytes);
      j.Num("weight_gbps", r.gbps).Num("pct_of_copy", r.pct_copy).Num("tflops", r.tflops);
      j.Num("pct_of_bf16_gemm", r.pct_gemm).Str("note", r.note);
      out.push_back(j.Obj());
    }
    return Array(out);
  }
  void Write() const {
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    Json cj;
    cj.Num("copy_gbps", ceil.copy_gbps).Num("bf16_gemm_8192_tflops", ceil.bf16_tflops);
    std::vector<std::string> cs, rs;
    for (const auto& c : checks) cs.push_back(c.ToJson());
    for (const auto& r : route) {
      Json j;
      j.Num("tokens", double(r.n)).Num("us", r.us);
      rs.push_back(j.Obj());
    }
    Json root;
    root.Str("date_utc", date).Str("commit", commit).Bool("quick", quick).Bool("check_only", check_only);
    root.Bool("no_wgmma", g_no_wgmma);
    root.Raw("device", device_json);
    root.Str("config",
             "E=288 D=4096 I=2048 top-8, bf16 weights (uniform, ~N(0,1/fan_in) scale), fp32 x and outputs, "
             "swiglu_limit 10, random router logits U(-4,4) through MoeRoute (no bias, 1 group); decode rotates 8 "
             "routing sets; expert_weight_bytes = distinct experts hit x 3*D*I*2; weight_gbps / tflops use the "
             "faster of stream and graph; tflops = 6*n*k*D*I; us_* = phase split (sort+cast, gate_up, down, combine)");
    root.Raw("ceilings", cj.Obj()).Bool("self_check_pass", AllPass()).Raw("self_check", Array(cs));
    root.Raw("routing", Array(rs)).Raw("decode", Rows(decode)).Raw("prefill", Rows(prefill)).Str("error", error);
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      std::fputs((root.Obj() + "\n").c_str(), f);
      std::fclose(f);
    }
  }
  void PrintTables() const {
    std::printf("\nrouting (E=288, top-8): ");
    for (const auto& r : route) std::printf("n=%lld %.2f us  ", static_cast<long long>(r.n), r.us);
    std::printf("\ndecode: us stream | graph, expert weights GB/s, %% of copy %.0f GB/s\n", ceil.copy_gbps);
    for (const auto& r : decode)
      std::printf("  n=%-5lld %-18s%s %9.1f | %9.1f us  %6.0f GB/s %5.1f%%  (sort %.1f gu %.1f dn %.1f cb %.1f)\n",
                  static_cast<long long>(r.n), r.kind.c_str(), r.heuristic ? "*" : " ", r.us, r.us_graph, r.gbps,
                  r.pct_copy, r.us_sort, r.us_gate_up, r.us_down, r.us_combine);
    std::printf("prefill: ms, TFLOP/s, %% of cuBLASLt bf16 %.0f TFLOP/s\n", ceil.bf16_tflops);
    for (const auto& r : prefill)
      std::printf("  n=%-5lld %-18s%s %8.3f ms  %6.1f TFLOP/s %5.1f%%  (sort %.0f gu %.0f dn %.0f cb %.0f us)\n",
                  static_cast<long long>(r.n), r.kind.c_str(), r.heuristic ? "*" : " ", r.us / 1000, r.tflops,
                  r.pct_gemm, r.us_sort, r.us_gate_up, r.us_down, r.us_combine);
    std::printf("self-check: %s (%zu checks); wrote %s\n", AllPass() ? "all pass" : "FAILURES", checks.size(),
                path.c_str());
  }
};

Status Run(Report& rep) {
  GYRE_CUDA_RETURN_IF_ERROR(cudaSetDevice(0));
  cudaDeviceProp prop{};
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0, sm_clock_khz = 0, mem_clock_khz = 0;
  GYRE_CUDA_RETURN_IF_ERROR(cudaDriverGetVersion(&driver));
  GYRE_CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&runtime));
  (void)cudaDeviceGetAttribute(&sm_clock_khz, cudaDevAttrClockRate, 0);
  (void)cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, 0);
  Json dev;
  dev.Str("name", prop.name).Num("sms", prop.multiProcessorCount).Num("l2_mib", prop.l2CacheSize >> 20);
  dev.Num("memory_gib", prop.totalGlobalMem / double(1 << 30)).Num("driver_version", driver);
  dev.Num("runtime_version", runtime).Num("sm_clock_mhz_max", sm_clock_khz / 1000.0);
  dev.Num("mem_clock_mhz", mem_clock_khz / 1000.0);
  rep.device_json = dev.Obj();
  std::printf("device: %s, %d SMs, driver %d, runtime %d\n", prop.name, prop.multiProcessorCount, driver, runtime);
  GYRE_ASSIGN_OR_RETURN(Stream stream, Stream::Create());
  const cudaStream_t s = stream.get();
  auto print_new = [&](size_t from) {
    for (size_t i = from; i < rep.checks.size(); ++i)
      std::printf("  %s %-90s err %.3g (tol %.0e) nan %lld %s\n", rep.checks[i].pass() ? "ok  " : "FAIL",
                  rep.checks[i].name.c_str(), rep.checks[i].err, rep.checks[i].tol,
                  static_cast<long long>(rep.checks[i].num_nan), rep.checks[i].pass() ? "" : rep.checks[i].note.c_str());
  };

  // ---- self-check (small shapes) ----
  std::printf("self-check:\n");
  size_t mark = rep.checks.size();
  for (auto [n, E, K, G, TG] : {std::array<int64_t, 5>{4096, 288, 8, 1, 1}, {1000, 256, 8, 8, 4}, {3, 16, 4, 1, 1}}) {
    GYRE_ASSIGN_OR_RETURN(CheckRow r, CheckRoute(n, E, K, G, TG, 7 + n, s));
    rep.checks.push_back(r);
  }
  GYRE_RETURN_IF_ERROR(CheckExperts(MakeCase(1, 8, 2, 512, 256, true, false, 41), 10.0f, &rep.checks, s));
  GYRE_RETURN_IF_ERROR(CheckExperts(MakeCase(37, 8, 2, 512, 256, true, false, 42), 10.0f, &rep.checks, s));
  GYRE_RETURN_IF_ERROR(CheckExperts(MakeCase(300, 8, 2, 512, 256, true, true, 43), 10.0f, &rep.checks, s));
  GYRE_RETURN_IF_ERROR(CheckExperts(MakeCase(20, 8, 2, 192, 96, true, false, 44), 0.0f, &rep.checks, s));
  GYRE_RETURN_IF_ERROR(CheckExperts(MakeCase(45, 6, 3, 100, 36, false, true, 45), 10.0f, &rep.checks, s));
  print_new(mark);
  rep.Write();
  if (rep.check_only) return Status::Ok();

  // ---- ceilings ----
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<GemmLt> gemm, GemmLt::Create());
  GYRE_ASSIGN_OR_RETURN(rep.ceil, MeasureCeilings(*gemm, s, rep.quick));
  std::printf("ceilings: copy %.0f GB/s (read+write), cuBLASLt bf16 8192^3 %.0f TFLOP/s\n", rep.ceil.copy_gbps,
              rep.ceil.bf16_tflops);
  rep.Write();

  // ---- the model shape: cross-check, routing, decode, prefill ----
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, MakeModel(s));
  mark = rep.checks.size();
  GYRE_RETURN_IF_ERROR(CheckModelShape(*model, 16, &rep.checks, s));
  GYRE_RETURN_IF_ERROR(CheckModelShape(*model, 64, &rep.checks, s));
  GYRE_RETURN_IF_ERROR(CheckModelShape(*model, 700, &rep.checks, s));
  print_new(mark);
  rep.Write();
  GYRE_ASSIGN_OR_RETURN(rep.route, BenchRoute(*model, s, rep.quick));
  rep.Write();
  const std::vector<MoeGemmKind> all = {MoeGemmKind::kMma16x128,     MoeGemmKind::kMma64x256,
                                        MoeGemmKind::kMma128x256,    MoeGemmKind::kWgmma64x256,
                                        MoeGemmKind::kWgmma128x256,  MoeGemmKind::kWgmmaWs64x256,
                                        MoeGemmKind::kWgmmaWs128x256};
  for (int64_t n : {int64_t(1), int64_t(16), int64_t(64), int64_t(256)}) {
    GYRE_ASSIGN_OR_RETURN(auto rows, BenchExperts(*model, n, 8, all, rep.ceil, s, rep.quick));
    rep.decode.insert(rep.decode.end(), rows.begin(), rows.end());
    rep.Write();
  }
  for (int64_t n : {int64_t(4096), int64_t(16384)}) {
    GYRE_ASSIGN_OR_RETURN(auto rows, BenchExperts(*model, n, 1, all, rep.ceil, s, rep.quick));
    rep.prefill.insert(rep.prefill.end(), rows.begin(), rows.end());
    rep.Write();
  }
  return Status::Ok();
}

}  // namespace
}  // namespace gyre::cuda

int main(int argc, char** argv) {
  std::string out = ".", commit = "unknown";
  gyre::cuda::Report rep;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) {
      out = argv[++i];
    } else if (!std::strcmp(argv[i], "--commit") && i + 1 < argc) {
      commit = argv[++i];
    } else if (!std::strcmp(argv[i], "--quick")) {
      rep.quick = true;
    } else if (!std::strcmp(argv[i], "--check-only")) {
      rep.check_only = true;
    } else if (!std::strcmp(argv[i], "--no-wgmma")) {
      gyre::cuda::g_no_wgmma = true;
    } else {
      std::fprintf(stderr,
                   "usage: gyre_moe_cuda_bench [--out DIR] [--commit HASH] [--quick] [--check-only] [--no-wgmma]\n");
      return 2;
    }
  }
  rep.path = out + "/moe.json";
  rep.commit = commit;
  const gyre::Status st = gyre::cuda::Run(rep);
  if (!st.ok()) {
    rep.error = st.ToString();
    std::printf("error: %s\n", rep.error.c_str());
  }
  rep.Write();
  rep.PrintTables();
  return st.ok() && rep.AllPass() ? 0 : 1;
}
