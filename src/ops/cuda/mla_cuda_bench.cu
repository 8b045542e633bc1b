// gyre_mla_cuda_bench: sparse MLA decode and prefill with the DSA indexer on the GPU (mla_cuda.h),
// timed per phase for three kernel variants in one run, with a self-check of every timed
// configuration and the copy ceiling measured in the same run (style.md §2.8).
//
//   gyre_mla_cuda_bench [--out DIR] [--commit HASH] [--quick] [--sanitize]
//
// Shapes (glm5_next defaults): H = 64, nope = v = 256, rope = 0, kv_lora R = 512, indexer Hi = 32,
// di = 128, pool m = 16, topk K = 2048; kv_b in bf16, fp32 cache and activations; 64-token pages
// under a shuffled block table. One decode step per batch row at position ctx − 1 (so each step
// completes a pool), or a prefill of every position of one sequence:
//   pool     the cache writes of c, k_I, γ + IndexerPoolKeys
//   select   IndexerSelect (scores over ctx/m pools, top 128, expand)
//   attn     MlaAttention over the selected tokens (absorb, split-key attention, combine, absorb)
// Variants (mla_kernels.h):
//   before   the first kernels: 3 CacheWrite + first pool kernel, first score/select, kLegacy
//   fp32     CacheWriteMulti + pool kernel 2, sliced select (kSliced, forced: the default kAuto
//            picks it only for <= 4 tokens), kFp32 (exact fp32 attention)
//   after    as fp32, attention kAuto = the bf16 tensor-core path (kv_b is bf16)
// Self-check per variant: pooled keys vs ops::PoolKey (1e-6), selections vs ops::IndexerSelect
// (exact), attention of before/fp32 vs ops::MlaAttention (fp32, 1e-5), of after vs an fp64 reference
// of the exact math (1e-2) and an fp64 reference with the bf16 path's roundings (4e-3); docs/cuda.md
// justifies the tolerances. Each timed step starts with a cold L2 (a 256 MiB memset between steps,
// outside the timing). --sanitize: small cases, self-check only (for compute-sanitizer).
// Sections: helpers; ceilings; case setup; fp64 references; self-check; timing; report; main.
// Writes DIR/mla_decode.json after every case. Exit 1 if a self-check fails, 2 on an error.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/matrix.h"
#include "ops/attention.h"
#include "ops/cuda/bench_common.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/mla_cuda.h"
#include "ops/cuda/mla_kernels.h"

namespace gyre::cuda {
namespace {

using namespace bench;  // CopyGbps, Fill, FillBf16, Median, Json, Array

// ---- helpers -------------------------------------------------------------------------------------

constexpr int64_t kH = 64, kNope = 256, kV = 256, kR = 512, kHi = 32, kDi = 128, kM = 16, kTopk = 2048;
constexpr int64_t kPage = 64;

// dst[r] = src row rows[r] (width floats).
__global__ void gather_rows(const float* src, int64_t width, const int64_t* rows, float* dst) {
  const float* s = src + rows[blockIdx.x] * width;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) dst[blockIdx.x * width + c] = s[c];
}

template <typename T>
Result<DeviceBuffer> ToDevice(const std::vector<T>& v) {
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(std::max<size_t>(16, v.size() * sizeof(T))));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return Result<DeviceBuffer>(std::move(b));
}
template <typename T>
Result<std::vector<T>> ToHost(const void* p, int64_t n) {
  std::vector<T> v(n);
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

double RelL2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}


// ---- ceilings ------------------------------------------------------------------------------------

// ---- case setup ----------------------------------------------------------------------------------

// One decode (or prefill) problem: B sequences of ctx cached tokens; the step's tokens are
// (tok_seq, tok_pos) pairs. Owns every device buffer.
struct Case {
  int64_t ctx = 0, batch = 0, num_tokens = 0;
  std::vector<int32_t> table, tok_seq, tok_pos;  // host copies
  int64_t max_pages = 0;
  DeviceBuffer d_table, d_seq, d_pos;
  DeviceBuffer latent, idx_k, gamma, pool_keys;           // caches [rows, width]
  DeviceBuffer new_latent, new_k, new_gamma;              // [T, width]
  DeviceBuffer q, q_idx, w, ape, kv_b, out, sel, cnt;     // step inputs and outputs
  DeviceBuffer idx_ws, mla_ws, flush;
  PagedBatch b;
  IndexerDims id{kHi, kDi, kM, kTopk, true};
  MlaDims md{kH, kNope, 0, kV, kR, 1.0f / 16.0f};

  int64_t Row(int seq, int64_t pos) const {
    return int64_t(table[seq * max_pages + pos / kPage]) * kPage + pos % kPage;
  }
};

// tokens: one per sequence at ctx − 1 (decode), or all positions 0..ctx−1 of one sequence (prefill).
Status SetUp(Case& c, int64_t ctx, int64_t batch, bool prefill, cudaStream_t s) {
  c.ctx = ctx, c.batch = batch;
  c.max_pages = ctx / kPage;
  const int64_t pages = batch * c.max_pages, rows = pages * kPage;
  std::vector<int32_t> perm(pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  c.table = perm;
  if (prefill) {
    c.num_tokens = ctx;
    c.tok_seq.assign(ctx, 0);
    c.tok_pos.resize(ctx);
    std::iota(c.tok_pos.begin(), c.tok_pos.end(), 0);
  } else {
    c.num_tokens = batch;
    c.tok_seq.resize(batch);
    std::iota(c.tok_seq.begin(), c.tok_seq.end(), 0);
    c.tok_pos.assign(batch, static_cast<int32_t>(ctx - 1));
  }
  const int64_t T = c.num_tokens;
  GYRE_ASSIGN_OR_RETURN(c.d_table, ToDevice(c.table));
  GYRE_ASSIGN_OR_RETURN(c.d_seq, ToDevice(c.tok_seq));
  GYRE_ASSIGN_OR_RETURN(c.d_pos, ToDevice(c.tok_pos));
  c.b.tok_seq = c.d_seq.get<int32_t>();
  c.b.tok_pos = c.d_pos.get<int32_t>();
  c.b.block_table = c.d_table.get<int32_t>();
  c.b.num_tokens = T, c.b.num_seqs = batch, c.b.max_pages = c.max_pages, c.b.page_tokens = kPage, c.b.max_context = ctx;
  auto alloc = [](DeviceBuffer& d, size_t bytes) -> Status {
    GYRE_ASSIGN_OR_RETURN(d, DeviceBuffer::Create(bytes));
    return Status::Ok();
  };
  GYRE_RETURN_IF_ERROR(alloc(c.latent, 4 * rows * kR));
  GYRE_RETURN_IF_ERROR(alloc(c.idx_k, 4 * rows * kDi));
  GYRE_RETURN_IF_ERROR(alloc(c.gamma, 4 * rows * kDi));
  GYRE_RETURN_IF_ERROR(alloc(c.pool_keys, 4 * rows * kDi));
  GYRE_RETURN_IF_ERROR(alloc(c.new_latent, 4 * T * kR));
  GYRE_RETURN_IF_ERROR(alloc(c.new_k, 4 * T * kDi));
  GYRE_RETURN_IF_ERROR(alloc(c.new_gamma, 4 * T * kDi));
  GYRE_RETURN_IF_ERROR(alloc(c.q, 4 * T * kH * kNope));
  GYRE_RETURN_IF_ERROR(alloc(c.q_idx, 4 * T * kHi * kDi));
  GYRE_RETURN_IF_ERROR(alloc(c.w, 4 * T * kHi));
  GYRE_RETURN_IF_ERROR(alloc(c.ape, 4 * kM * kDi));
  GYRE_RETURN_IF_ERROR(alloc(c.kv_b, 2 * kH * (kNope + kV) * kR));
  GYRE_RETURN_IF_ERROR(alloc(c.out, 4 * T * kH * kV));
  GYRE_RETURN_IF_ERROR(alloc(c.sel, 4 * T * IndexerSelCap(c.id)));
  GYRE_RETURN_IF_ERROR(alloc(c.cnt, 4 * T));
  GYRE_RETURN_IF_ERROR(alloc(c.idx_ws, std::max<size_t>(16, IndexerWorkspaceBytes(c.id, T, ctx))));
  GYRE_RETURN_IF_ERROR(alloc(c.mla_ws, std::max<size_t>(16, MlaWorkspaceBytes(c.md, T, ctx))));
  GYRE_RETURN_IF_ERROR(alloc(c.flush, size_t(256) << 20));
  GYRE_RETURN_IF_ERROR(Fill(c.latent.get<float>(), rows * kR, 11, -1, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(c.idx_k.get<float>(), rows * kDi, 12, -1, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(c.gamma.get<float>(), rows * kDi, 13, -2, 2, s));
  GYRE_RETURN_IF_ERROR(Fill(c.pool_keys.get<float>(), rows * kDi, 14, -1, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(c.new_latent.get<float>(), T * kR, 15, -1, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(c.new_k.get<float>(), T * kDi, 16, -1, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(c.new_gamma.get<float>(), T * kDi, 17, -2, 2, s));
  GYRE_RETURN_IF_ERROR(Fill(c.q.get<float>(), T * kH * kNope, 18, -1, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(c.q_idx.get<float>(), T * kHi * kDi, 19, -1, 1, s));
  GYRE_RETURN_IF_ERROR(Fill(c.w.get<float>(), T * kHi, 20, -0.2f, 0.2f, s));
  GYRE_RETURN_IF_ERROR(Fill(c.ape.get<float>(), kM * kDi, 21, -0.5f, 0.5f, s));
  GYRE_RETURN_IF_ERROR(FillBf16(c.kv_b.get(), kH * (kNope + kV) * kR, 22, -0.05f, 0.05f, s));
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  return Status::Ok();
}

// The kernels of one timed variant (file comment).
struct Variant {
  const char* name;
  bool legacy_pool, legacy_select;
  internal::MlaKernels attn;
  bool bf16_attention() const { return attn == internal::MlaKernels::kAuto; }
};
const Variant kVariants[] = {{"before", true, true, internal::MlaKernels::kLegacy},
                             {"fp32", false, false, internal::MlaKernels::kFp32},
                             {"after", false, false, internal::MlaKernels::kAuto}};

// One step; marks[0..2] (optional) are recorded after the pool, select and attention phases.
Status Step(Case& c, const Variant& v, cudaStream_t s, cudaEvent_t* marks) {
  if (v.legacy_pool) {
    GYRE_RETURN_IF_ERROR(CacheWrite(c.new_latent.get<float>(), kR, kR, c.b, c.latent.get<float>(), s));
    GYRE_RETURN_IF_ERROR(CacheWrite(c.new_k.get<float>(), kDi, kDi, c.b, c.idx_k.get<float>(), s));
    GYRE_RETURN_IF_ERROR(CacheWrite(c.new_gamma.get<float>(), kDi, kDi, c.b, c.gamma.get<float>(), s));
  } else {
    const internal::CacheWriteItem items[3] = {{c.new_latent.get<float>(), kR, kR, c.latent.get<float>()},
                                               {c.new_k.get<float>(), kDi, kDi, c.idx_k.get<float>()},
                                               {c.new_gamma.get<float>(), kDi, kDi, c.gamma.get<float>()}};
    GYRE_RETURN_IF_ERROR(internal::CacheWriteMulti(items, 3, c.b, s));
  }
  GYRE_RETURN_IF_ERROR(internal::IndexerPoolKeysWith(c.idx_k.get<float>(), c.gamma.get<float>(), c.ape.get<float>(), kM,
                                                     kDi, c.b, c.pool_keys.get<float>(), v.legacy_pool, s));
  if (marks) GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(marks[0], s));
  internal::IndexerOptions io;
  io.kernels = v.legacy_select ? internal::IndexerKernels::kLegacy : internal::IndexerKernels::kSliced;
  GYRE_RETURN_IF_ERROR(internal::IndexerSelectWith(c.q_idx.get<float>(), c.w.get<float>(), c.pool_keys.get<float>(),
                                                   c.id, c.b, c.sel.get<int32_t>(), c.cnt.get<int32_t>(), c.idx_ws.get(),
                                                   c.idx_ws.bytes(), io, s));
  if (marks) GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(marks[1], s));
  const DMat kvb{c.kv_b.get(), kH * (kNope + kV), kR, true};
  internal::MlaOptions mo;
  mo.kernels = v.attn;
  GYRE_RETURN_IF_ERROR(internal::MlaAttentionWith(c.q.get<float>(), c.latent.get<float>(), nullptr, kvb, c.md, c.b,
                                                  c.sel.get<int32_t>(), c.cnt.get<int32_t>(), IndexerSelCap(c.id),
                                                  c.out.get<float>(), c.mla_ws.get(), c.mla_ws.bytes(), mo, s));
  if (marks) GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(marks[2], s));
  return Status::Ok();
}

// ---- fp64 references of the bf16 path -------------------------------------------------------------

float Bf16Round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  float y;
  std::memcpy(&y, &u, 4);
  return y;
}

// Absorbed MLA of one query over n keys in fp64: q [H·nope], lat [n, R], kvb [H·(nope + v), R]
// (bf16 values widened). emulate: round to bf16 where the bf16 path does (q_nope, q_lat, the cache
// rows, p, o_lat); p is rounded relative to the final row max here, relative to the running (or the
// split's) max on the GPU, the one intended difference.
std::vector<double> RefMla64(const std::vector<float>& q, const std::vector<float>& lat, int64_t n,
                             const std::vector<float>& kvb, bool emulate) {
  const int64_t blk = kNope + kV;
  const double scale = 1.0 / 16.0;
  auto rd = [&](double x) { return emulate ? double(Bf16Round(static_cast<float>(x))) : x; };
  std::vector<double> c(n * kR), out(kH * kV), ql(kR), s(n), o(kR);
  for (int64_t x = 0; x < n * kR; ++x) c[x] = rd(lat[x]);
  for (int64_t h = 0; h < kH; ++h) {
    std::fill(ql.begin(), ql.end(), 0.0);
    for (int64_t k = 0; k < kNope; ++k) {
      const double qk = rd(q[h * kNope + k]);
      const float* w = kvb.data() + (h * blk + k) * kR;
      for (int64_t r = 0; r < kR; ++r) ql[r] += qk * w[r];
    }
    for (int64_t r = 0; r < kR; ++r) ql[r] = rd(ql[r]);
    double mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t r = 0; r < kR; ++r) acc += ql[r] * c[j * kR + r];
      s[j] = acc * scale;
      mx = std::max(mx, s[j]);
    }
    double l = 0;
    std::fill(o.begin(), o.end(), 0.0);
    for (int64_t j = 0; j < n; ++j) {
      const double p = std::exp(s[j] - mx);
      l += p;
      const double pr = rd(p);
      for (int64_t r = 0; r < kR; ++r) o[r] += pr * c[j * kR + r];
    }
    for (int64_t r = 0; r < kR; ++r) o[r] = rd(o[r] / l);
    for (int64_t x = 0; x < kV; ++x) {
      const float* w = kvb.data() + (h * blk + kNope + x) * kR;
      double acc = 0;
      for (int64_t r = 0; r < kR; ++r) acc += o[r] * w[r];
      out[h * kV + x] = acc;
    }
  }
  return out;
}

// ---- self-check vs the CPU ops -------------------------------------------------------------------

struct CheckRow {
  std::string name;
  double metric = 0, tol = 0;
  bool pass() const { return metric <= tol; }
  std::string ToJson() const {
    Json j;
    j.Str("check", name).Num("metric", metric).Num("tolerance", tol).Bool("pass", pass());
    return j.Obj();
  }
};

Result<std::vector<float>> Gather(const DeviceBuffer& cache, int64_t width, const std::vector<int64_t>& rows,
                                  cudaStream_t s) {
  if (rows.empty()) return std::vector<float>{};
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer d_rows, ToDevice(rows));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dst, DeviceBuffer::Create(4 * rows.size() * width));
  gather_rows<<<static_cast<unsigned>(rows.size()), 128, 0, s>>>(cache.get<float>(), width, d_rows.get<int64_t>(),
                                                               dst.get<float>());
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  return ToHost<float>(dst.get(), int64_t(rows.size()) * width);
}

// Token `i` of the last step: its pooled key (if it completed a pool), selection and output,
// recomputed by ops::PoolKey / ops::IndexerSelect / ops::MlaAttention from the GPU's own inputs.
// The attention check uses the GPU's selection; kv_b is the bf16 matrix widened to fp32.
Status CheckToken(Case& c, int64_t i, const std::vector<float>& kvb_f32, const Variant& v, const std::string& tag,
                  cudaStream_t s, std::vector<CheckRow>* out) {
  const int seq = c.tok_seq[i];
  const int64_t pos = c.tok_pos[i], P = (pos + 1) / kM;
  // Pooled key of the pool this token completed.
  if ((pos + 1) % kM == 0) {
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < kM; ++r) rows.push_back(c.Row(seq, pos + 1 - kM + r));
    GYRE_ASSIGN_OR_RETURN(auto k, Gather(c.idx_k, kDi, rows, s));
    GYRE_ASSIGN_OR_RETURN(auto g, Gather(c.gamma, kDi, rows, s));
    GYRE_ASSIGN_OR_RETURN(auto gpu, Gather(c.pool_keys, kDi, {c.Row(seq, pos) / PoolKeyDiv(kPage, kM)}, s));
    GYRE_ASSIGN_OR_RETURN(auto ape, ToHost<float>(c.ape.get(), kM * kDi));
    std::vector<float> cpu(kDi);
    ops::PoolKey(k.data(), g.data(), ape.data(), kM, kDi, cpu.data(), Numerics{});
    out->push_back({tag + " pool_key rel-L2", RelL2(gpu, cpu), 1e-6});
  }
  // Selection: exact.
  GYRE_ASSIGN_OR_RETURN(auto cnt, ToHost<int32_t>(c.cnt.get<int32_t>() + i, 1));
  const int64_t cap = IndexerSelCap(c.id);
  GYRE_ASSIGN_OR_RETURN(auto gsel, ToHost<int32_t>(c.sel.get<int32_t>() + i * cap, std::max(cnt[0], 1)));
  gsel.resize(std::max(cnt[0], 0));
  std::vector<int64_t> prow(P);
  // (one pooled-key row per pool: the row of its last token over PoolKeyDiv, mla_cuda.h)
  for (int64_t p = 0; p < P; ++p) prow[p] = c.Row(seq, p * kM + kM - 1) / PoolKeyDiv(kPage, kM);
  GYRE_ASSIGN_OR_RETURN(auto pk, Gather(c.pool_keys, kDi, prow, s));
  GYRE_ASSIGN_OR_RETURN(auto qi, ToHost<float>(c.q_idx.get<float>() + i * kHi * kDi, kHi * kDi));
  GYRE_ASSIGN_OR_RETURN(auto wi, ToHost<float>(c.w.get<float>() + i * kHi, kHi));
  ops::Selection cs;
  ops::IndexerSelect(qi.data(), wi.data(), 1, pos, pk.data(), P, {kHi, kDi, kM, kTopk, true}, &cs);
  const std::vector<int32_t> want(cs.indices.begin(), cs.indices.end());
  int64_t mismatches = std::abs(int64_t(want.size()) - int64_t(gsel.size()));
  for (size_t j = 0; j < std::min(want.size(), gsel.size()); ++j) mismatches += want[j] != gsel[j];
  out->push_back({tag + " select mismatches (of " + std::to_string(want.size()) + ")", double(mismatches), 0});
  // Attention over the GPU's selection, rows compacted.
  std::vector<int64_t> krow;
  for (int32_t j : gsel) krow.push_back(c.Row(seq, j));
  GYRE_ASSIGN_OR_RETURN(auto lat, Gather(c.latent, kR, krow, s));
  GYRE_ASSIGN_OR_RETURN(auto qh, ToHost<float>(c.q.get<float>() + i * kH * kNope, kH * kNope));
  GYRE_ASSIGN_OR_RETURN(auto gpu_out, ToHost<float>(c.out.get<float>() + i * kH * kV, kH * kV));
  ops::Selection as;
  as.causal = false;
  as.offsets = {0, int64_t(gsel.size())};
  as.indices.resize(gsel.size());
  std::iota(as.indices.begin(), as.indices.end(), 0);
  if (v.bf16_attention()) {
    const int64_t n = static_cast<int64_t>(gsel.size());
    for (const bool emulate : {false, true}) {
      const std::vector<double> ref = RefMla64(qh, lat, n, kvb_f32, emulate);
      out->push_back({tag + (emulate ? " attention rel-L2 vs fp64 with bf16 roundings" : " attention rel-L2 vs fp64"),
                      RelL2(gpu_out, std::vector<float>(ref.begin(), ref.end())), emulate ? 4e-3 : 1e-2});
    }
    return Status::Ok();
  }
  const Matrix kvb{kvb_f32, kH * (kNope + kV), kR};
  std::vector<float> cpu_out(kH * kV);
  const ops::RowView lv{lat.data(), nullptr, 1, kR, 0}, kr{lat.data(), nullptr, 1, 0, 0};
  ops::MlaAttention(qh.data(), 1, int64_t(gsel.size()) - 1, lv, kr, kvb, {kH, kNope, 0, kV, kR, 1.0f / 16.0f}, as,
                    cpu_out.data(), Numerics{});
  out->push_back({tag + " attention rel-L2", RelL2(gpu_out, cpu_out), 1e-5});
  return Status::Ok();
}

// ---- timing --------------------------------------------------------------------------------------

struct Timing {
  double pool = 0, select = 0, attn = 0, graph = 0;
};

Result<Timing> TimeSteps(Case& c, const Variant& v, int reps, cudaStream_t s) {
  GYRE_ASSIGN_OR_RETURN(Event e0, Event::Create());
  GYRE_ASSIGN_OR_RETURN(Event e1, Event::Create());
  GYRE_ASSIGN_OR_RETURN(Event e2, Event::Create());
  GYRE_ASSIGN_OR_RETURN(Event e3, Event::Create());
  cudaEvent_t marks[3] = {e1.get(), e2.get(), e3.get()};
  std::vector<double> tp, ts, ta, tg;
  for (int r = 0; r < reps; ++r) {
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(c.flush.get(), r & 0xff, c.flush.bytes(), s));  // cold L2
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e0.get(), s));
    GYRE_RETURN_IF_ERROR(Step(c, v, s, marks));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e3.get()));
    float a = 0, b = 0, d = 0;
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&a, e0.get(), e1.get()));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&b, e1.get(), e2.get()));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&d, e2.get(), e3.get()));
    tp.push_back(1e3 * a), ts.push_back(1e3 * b), ta.push_back(1e3 * d);
  }
  // The whole step as one CUDA graph.
  struct GraphGuard {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ~GraphGuard() {
      if (exec) (void)cudaGraphExecDestroy(exec);
      if (graph) (void)cudaGraphDestroy(graph);
    }
  } g;
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  const Status cap = Step(c, v, s, nullptr);
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamEndCapture(s, &g.graph));
  GYRE_RETURN_IF_ERROR(cap);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&g.exec, g.graph, 0));
  for (int r = 0; r < reps; ++r) {
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(c.flush.get(), r & 0xff, c.flush.bytes(), s));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e0.get(), s));
    GYRE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(g.exec, s));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e1.get(), s));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e1.get()));
    float a = 0;
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&a, e0.get(), e1.get()));
    tg.push_back(1e3 * a);
  }
  return Timing{Median(tp), Median(ts), Median(ta), Median(tg)};
}

// ---- report --------------------------------------------------------------------------------------

struct Row {
  std::string variant, kind;
  int64_t ctx, batch, tokens, sel_tokens;
  Timing t;
  double bytes_pool, bytes_select, bytes_attn, attn_flop;
};

struct Report {
  std::string path, commit, device_json = "null", error;
  bool quick = false, sanitize = false;
  // Decode cases (--contexts, --batches); a custom list skips the prefill case.
  std::vector<int64_t> contexts = {8192, 65536, 262144}, batches = {1, 32};
  bool custom = false;
  double copy_gbps = 0;
  std::vector<CheckRow> checks;
  std::vector<Row> rows;

  bool AllPass() const {
    bool ok = !checks.empty();
    for (const auto& c : checks) ok = ok && c.pass();
    return ok;
  }
  std::string RowJson(const Row& r) const {
    Json j;
    const auto gbps = [](double bytes, double us) { return us > 0 ? bytes / (us * 1e-6) / 1e9 : 0.0; };
    j.Str("variant", r.variant).Str("kind", r.kind).Num("ctx", r.ctx).Num("batch", r.batch).Num("tokens", r.tokens);
    j.Num("pools_per_token", double(r.ctx / kM)).Num("selected_tokens_per_token", r.sel_tokens);
    j.Num("us_pool", r.t.pool).Num("us_select", r.t.select).Num("us_attention", r.t.attn);
    j.Num("us_step_sum", r.t.pool + r.t.select + r.t.attn).Num("us_step_graph", r.t.graph);
    j.Num("bytes_pool", r.bytes_pool).Num("bytes_select", r.bytes_select).Num("bytes_attention", r.bytes_attn);
    const double gp = gbps(r.bytes_pool, r.t.pool), gs = gbps(r.bytes_select, r.t.select),
                 ga = gbps(r.bytes_attn, r.t.attn);
    const double gt = gbps(r.bytes_pool + r.bytes_select + r.bytes_attn, r.t.graph);
    j.Num("gbps_pool", gp).Num("gbps_select", gs).Num("gbps_attention", ga).Num("gbps_step_graph", gt);
    j.Num("pct_copy_pool", 100 * gp / copy_gbps).Num("pct_copy_select", 100 * gs / copy_gbps);
    j.Num("pct_copy_attention", 100 * ga / copy_gbps).Num("pct_copy_step_graph", 100 * gt / copy_gbps);
    j.Num("attention_flop", r.attn_flop).Num("attention_tflops", r.t.attn > 0 ? r.attn_flop / (r.t.attn * 1e-6) / 1e12 : 0);
    return j.Obj();
  }
  void Write() const {
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    std::vector<std::string> cs, rs;
    for (const auto& c : checks) cs.push_back(c.ToJson());
    for (const auto& r : rows) rs.push_back(RowJson(r));
    Json root;
    root.Str("date_utc", date).Str("commit", commit).Bool("quick", quick).Bool("sanitize", sanitize);
    root.Raw("device", device_json);
    root.Str("config",
             "H=64 nope=v=256 rope=0 kv_lora=512 indexer Hi=32 di=128 m=16 topk=2048; kv_b bf16, fp32 cache and "
             "activations; 64-token pages, shuffled block table; decode: one token per sequence at position ctx-1; "
             "L2 flushed (256 MiB memset) before every timed step; medians; pool = cache writes of c, k_I, gamma + "
             "IndexerPoolKeys, select = IndexerSelect, attention = MlaAttention; variants: before = first kernels "
             "(3 CacheWrite + pool kernel 1, score/select 1, kLegacy fp32 FFMA), fp32 = CacheWriteMulti + pool "
             "kernel 2, sliced select, kFp32 (exact fp32), after = as fp32 with kAuto (bf16 tensor-core attention); "
             "bytes = compulsory HBM traffic (cache rows read, pooled keys, kv_b, scores/keys and workspace round "
             "trips)");
    root.Num("copy_gbps", copy_gbps).Bool("self_check_pass", AllPass()).Raw("self_check", Array(cs));
    root.Raw("runs", Array(rs)).Str("error", error);
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      std::fputs((root.Obj() + "\n").c_str(), f);
      std::fclose(f);
    }
  }
  void Print() const {
    std::printf("\n%-7s %-8s %7s %5s %9s %9s %9s %9s %9s  %%copy(attn)  TFLOP/s(attn)\n", "variant", "kind", "ctx",
                "B", "pool us", "select us", "attn us", "sum us", "graph us");
    for (const auto& r : rows) {
      const double ga = r.t.attn > 0 ? r.bytes_attn / (r.t.attn * 1e-6) / 1e9 : 0;
      std::printf("%-7s %-8s %7lld %5lld %9.1f %9.1f %9.1f %9.1f %9.1f  %10.1f%%  %8.2f\n", r.variant.c_str(),
                  r.kind.c_str(), static_cast<long long>(r.ctx), static_cast<long long>(r.batch), r.t.pool,
                  r.t.select, r.t.attn, r.t.pool + r.t.select + r.t.attn, r.t.graph, 100 * ga / copy_gbps,
                  r.t.attn > 0 ? r.attn_flop / (r.t.attn * 1e-6) / 1e12 : 0.0);
    }
    std::printf("self-check: %s (%zu checks); wrote %s\n", AllPass() ? "all pass" : "FAILURES", checks.size(),
                path.c_str());
  }
};

// Compulsory bytes and attention FLOPs of one step of `c` (sel_tokens from the GPU's counts).
void Account(const Case& c, const std::vector<int32_t>& counts, Row* r) {
  const double T = double(c.num_tokens);
  double sel_total = 0, pools_total = 0, pooled = 0;
  for (int64_t i = 0; i < c.num_tokens; ++i) {
    sel_total += counts[i];
    pools_total += (c.tok_pos[i] + 1) / kM;
    pooled += (c.tok_pos[i] + 1) % kM == 0;
  }
  r->tokens = c.num_tokens;
  r->sel_tokens = static_cast<int64_t>(sel_total / T);
  r->bytes_pool = T * (kR + 2 * kDi) * 4.0 * 2 + pooled * (2 * kM * kDi + kDi) * 4.0 + kM * kDi * 4.0;
  r->bytes_select = pools_total * (kDi * 4.0 + 4 * 2) + T * (kHi * kDi + kHi) * 4.0 + sel_total * 4;
  r->bytes_attn = sel_total * kR * 4.0 + T * kH * (kNope + kV) * 4.0 + T * kH * kR * 4.0 * 4 +
                  double(kH) * (kNope + kV) * kR * 2;
  r->attn_flop = T * kH * (2.0 * kNope * kR + 2.0 * kV * kR) + sel_total * kH * 4.0 * kR;
}

Status RunCase(Report& rep, int64_t ctx, int64_t batch, bool prefill, std::vector<int64_t> check_tokens, int reps,
               cudaStream_t s) {
  std::sort(check_tokens.begin(), check_tokens.end());
  check_tokens.erase(std::unique(check_tokens.begin(), check_tokens.end()), check_tokens.end());
  Case c;
  GYRE_RETURN_IF_ERROR(SetUp(c, ctx, batch, prefill, s));
  GYRE_ASSIGN_OR_RETURN(auto kvb_bits, ToHost<uint16_t>(c.kv_b.get(), kH * (kNope + kV) * kR));
  std::vector<float> kvb(kvb_bits.size());
  for (size_t j = 0; j < kvb.size(); ++j) {
    const uint32_t u = uint32_t(kvb_bits[j]) << 16;
    std::memcpy(&kvb[j], &u, 4);
  }
  for (const Variant& v : kVariants) {
    GYRE_RETURN_IF_ERROR(Step(c, v, s, nullptr));  // warm-up and the step the self-check reads
    GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    const std::string tag = std::string(v.name) + " " + (prefill ? "prefill" : "decode") + " ctx=" +
                            std::to_string(ctx) + " B=" + std::to_string(batch);
    for (int64_t i : check_tokens) {
      std::vector<CheckRow> rows;
      GYRE_RETURN_IF_ERROR(CheckToken(c, i, kvb, v, tag + " token " + std::to_string(i), s, &rows));
      for (const auto& r : rows)
        std::printf("  %s %-80s %.3g (tol %.0e)\n", r.pass() ? "ok  " : "FAIL", r.name.c_str(), r.metric, r.tol);
      rep.checks.insert(rep.checks.end(), rows.begin(), rows.end());
    }
    if (reps <= 0) continue;
    Row row{v.name, prefill ? "prefill" : "decode", ctx, batch, 0, 0, {}, 0, 0, 0, 0};
    GYRE_ASSIGN_OR_RETURN(auto counts, ToHost<int32_t>(c.cnt.get(), c.num_tokens));
    Account(c, counts, &row);
    GYRE_ASSIGN_OR_RETURN(row.t, TimeSteps(c, v, reps, s));
    rep.rows.push_back(row);
    rep.Write();
  }
  rep.Write();
  return Status::Ok();
}

Status Run(Report& rep) {
  GYRE_CUDA_RETURN_IF_ERROR(cudaSetDevice(0));
  cudaDeviceProp prop{};
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  GYRE_CUDA_RETURN_IF_ERROR(cudaDriverGetVersion(&driver));
  GYRE_CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&runtime));
  Json dev;
  dev.Str("name", prop.name).Num("sms", prop.multiProcessorCount).Num("l2_mib", prop.l2CacheSize >> 20);
  dev.Num("memory_gib", prop.totalGlobalMem / double(1 << 30)).Num("driver_version", driver);
  dev.Num("runtime_version", runtime);
  rep.device_json = dev.Obj();
  std::printf("device: %s, %d SMs, driver %d, runtime %d\n", prop.name, prop.multiProcessorCount, driver, runtime);
  GYRE_ASSIGN_OR_RETURN(Stream stream, Stream::Create());
  const cudaStream_t s = stream.get();
  GYRE_ASSIGN_OR_RETURN(rep.copy_gbps, CopyGbps(s));
  std::printf("copy ceiling: %.0f GB/s (read + write)\n", rep.copy_gbps);
  rep.Write();
  if (rep.sanitize) {  // small cases, self-check only: split decode, 3 sequences, a prefill past the budget
    GYRE_RETURN_IF_ERROR(RunCase(rep, 8192, 1, false, {0}, 0, s));
    GYRE_RETURN_IF_ERROR(RunCase(rep, 4096, 3, false, {0, 2}, 0, s));
    GYRE_RETURN_IF_ERROR(RunCase(rep, 2560, 1, true, {0, 2047, 2559}, 0, s));
    return Status::Ok();
  }
  const int reps = rep.quick ? 5 : 21;
  for (int64_t ctx : rep.contexts) {
    for (int64_t batch : rep.batches) {
      std::printf("decode ctx=%lld B=%lld\n", static_cast<long long>(ctx), static_cast<long long>(batch));
      GYRE_RETURN_IF_ERROR(RunCase(rep, ctx, batch, false, {0, batch - 1}, reps, s));
    }
  }
  if (rep.custom) return Status::Ok();
  std::printf("prefill T=4096\n");
  GYRE_RETURN_IF_ERROR(RunCase(rep, 4096, 1, true, {0, 15, 2062, 2063, 4095}, rep.quick ? 2 : 5, s));
  return Status::Ok();
}

}  // namespace
}  // namespace gyre::cuda

int main(int argc, char** argv) {
  gyre::cuda::Report rep;
  std::string out = ".";
  rep.commit = "unknown";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else if (!std::strcmp(argv[i], "--commit") && i + 1 < argc) rep.commit = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) rep.quick = true;
    else if (!std::strcmp(argv[i], "--sanitize")) rep.sanitize = true;
    else if ((!std::strcmp(argv[i], "--contexts") || !std::strcmp(argv[i], "--batches")) && i + 1 < argc) {
      std::vector<int64_t>& list = !std::strcmp(argv[i], "--contexts") ? rep.contexts : rep.batches;
      list.clear();
      rep.custom = true;
      for (const char* p = argv[++i]; *p;) {
        char* end = nullptr;
        const long long v = std::strtoll(p, &end, 10);
        // contexts: whole pages of kPage tokens; batches: 1..1024
        const bool ctx = &list == &rep.contexts;
        if (end == p || v < 1 || (ctx && v % gyre::cuda::kPage != 0) || (!ctx && v > 1024) || (*end && *end != ',')) {
          std::fprintf(stderr, "gyre_mla_cuda_bench: bad list '%s' (contexts: multiples of %d; batches: 1..1024)\n",
                       argv[i], static_cast<int>(gyre::cuda::kPage));
          return 2;
        }
        list.push_back(v);
        p = *end ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr,
                   "usage: gyre_mla_cuda_bench [--out DIR] [--commit HASH] [--quick] [--sanitize] "
                   "[--contexts N,N,...] [--batches N,N,...]\n");
      return 2;
    }
  }
  rep.path = out + (rep.sanitize ? "/mla_sanitize.json" : "/mla_decode.json");
  const gyre::Status st = gyre::cuda::Run(rep);
  if (!st.ok()) rep.error = st.ToString();
  rep.Write();
  rep.Print();
  if (!st.ok()) {
    std::fprintf(stderr, "gyre_mla_cuda_bench: %s\n", st.ToString().c_str());
    return 2;
  }
  return rep.AllPass() ? 0 : 1;
}
