// Host-memory entry points of the MLA / DSA kernels for the op registry (mla_host.h).
#include "ops/cuda/mla_host.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/mla_cuda.h"
#include "ops/cuda/mla_kernels.h"

namespace gyre::cuda {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int64_t kPageTokens = 4;
constexpr int kSeq = 1;  // the checked sequence is batch row 1 of 2

template <typename T>
Result<DeviceBuffer> UploadVec(const std::vector<T>& v, cudaStream_t s) {
  return Upload(v.data(), v.size() * sizeof(T), s);
}

template <typename T>
Result<std::vector<T>> Download(const DeviceBuffer& b, int64_t n, cudaStream_t s) {
  std::vector<T> v(n);
  if (n > 0) GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost, s));
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  return v;
}

// A paged cache for 2 batch rows of `ctx` tokens each: 4-token pages, a shuffled block table and
// three spare pages that no row owns.
struct Paging {
  int64_t max_pages = 1, num_pages = 1;
  std::vector<int32_t> table;  // [2, max_pages]
  int64_t rows() const { return num_pages * kPageTokens; }
  int64_t Row(int seq, int64_t pos) const { return int64_t(table[seq * max_pages + pos / kPageTokens]) * kPageTokens + pos % kPageTokens; }
};

Paging MakePaging(int64_t ctx) {
  Paging p;
  p.max_pages = std::max<int64_t>(1, (ctx + kPageTokens - 1) / kPageTokens);
  p.num_pages = 2 * p.max_pages + 3;
  std::vector<int32_t> perm(p.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(20261202));
  p.table.assign(perm.begin(), perm.begin() + 2 * p.max_pages);
  return p;
}

// The device side of one check: paging tables and a batch description.
struct DeviceBatch {
  DeviceBuffer table, seq, pos;
  PagedBatch b;
};

Result<DeviceBatch> MakeBatch(const Paging& pg, const std::vector<int32_t>& tok_seq, const std::vector<int32_t>& tok_pos,
                              int64_t max_context, cudaStream_t s, int64_t shift = 0) {
  DeviceBatch d;
  GYRE_ASSIGN_OR_RETURN(d.table, UploadVec(pg.table, s));
  GYRE_ASSIGN_OR_RETURN(d.seq, UploadVec(tok_seq, s));
  GYRE_ASSIGN_OR_RETURN(d.pos, UploadVec(tok_pos, s));
  d.b.tok_seq = d.seq.get<int32_t>();
  d.b.tok_pos = d.pos.get<int32_t>();
  d.b.block_table = d.table.get<int32_t>();
  d.b.num_tokens = static_cast<int64_t>(tok_seq.size());
  d.b.num_seqs = 2;
  d.b.max_pages = pg.max_pages;
  d.b.page_tokens = kPageTokens;
  d.b.max_context = max_context;
  d.b.pos_shift = shift;
  return Result<DeviceBatch>(std::move(d));
}

// Writes host rows [n, width] to positions `pos` of batch row kSeq in the device cache (row width
// `width`), through the CacheWrite kernel, and waits.
Status WriteRows(const float* rows, int64_t width, const std::vector<int32_t>& pos, const Paging& pg, float* cache,
                 cudaStream_t s, int64_t shift = 0) {
  if (pos.empty()) return Status::Ok();
  const int64_t n = static_cast<int64_t>(pos.size());
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer src, Upload(rows, sizeof(float) * n * width, s));
  GYRE_ASSIGN_OR_RETURN(DeviceBatch db, MakeBatch(pg, std::vector<int32_t>(n, kSeq), pos,
                                                  pg.max_pages * kPageTokens - shift, s, shift));
  GYRE_RETURN_IF_ERROR(CacheWrite(src.get<float>(), width, width, db.b, cache, s));
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  return Status::Ok();
}

std::vector<int32_t> Iota(int64_t n, int32_t first = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

double RelL2(const std::vector<float>& x, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    if (!std::isfinite(x[k])) return INFINITY;
    num += (double(x[k]) - ref[k]) * (double(x[k]) - ref[k]);
    den += double(ref[k]) * ref[k];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

// bf16 bits of x, round-to-nearest-even (finite inputs).
uint16_t ToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace

// ---- mla.attention -------------------------------------------------------------------------------

Status MlaAttentionOnDevice(const MlaHostArgs& a, float* out) {
  if (a.s < 1 || a.t < a.s || a.heads < 1) return Status::InvalidArgument("mla host: need 1 <= s <= t and heads >= 1");
  GYRE_ASSIGN_OR_RETURN(Stream st, Stream::Create());
  const cudaStream_t s = st.get();
  const int64_t H = a.heads, L = a.kv_lora, qd = a.nope + a.rope, n = a.s + 1, vd = a.v;
  if (a.pos_shift < 0) return Status::InvalidArgument("mla host: negative pos_shift");
  const int64_t sh = a.pos_shift;
  const Paging pg = MakePaging(a.t + sh);
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer latent, Poisoned(sizeof(float) * pg.rows() * L, s));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer krot, Poisoned(sizeof(float) * pg.rows() * std::max<int64_t>(a.rope, 1), s));
  GYRE_RETURN_IF_ERROR(WriteRows(a.latent, L, Iota(a.t), pg, latent.get<float>(), s, sh));
  if (a.rope > 0) GYRE_RETURN_IF_ERROR(WriteRows(a.krot, a.rope, Iota(a.t), pg, krot.get<float>(), s, sh));

  // Token 0 is padding with NaN queries and a plausible-looking selection; tokens 1..s are real.
  std::vector<float> q(n * H * qd, kNaN);
  std::copy(a.q, a.q + a.s * H * qd, q.begin() + H * qd);
  std::vector<int32_t> tok_seq(n, kSeq), tok_pos(n);
  tok_seq[0] = -1;
  tok_pos[0] = static_cast<int32_t>(a.t - 1);
  for (int64_t i = 0; i < a.s; ++i) tok_pos[i + 1] = static_cast<int32_t>(a.t - a.s + i);
  int64_t cap = 1;
  std::vector<int32_t> sel, cnt;
  if (a.sel_offsets) {
    for (int64_t i = 0; i < a.s; ++i) cap = std::max(cap, a.sel_offsets[i + 1] - a.sel_offsets[i]);
    sel.assign(n * cap, -1);
    cnt.assign(n, 0);
    for (int64_t j = 0; j < cap; ++j) sel[j] = static_cast<int32_t>(std::min<int64_t>(j, a.t - 1));
    cnt[0] = static_cast<int32_t>(std::min(cap, a.t));
    for (int64_t i = 0; i < a.s; ++i) {
      cnt[i + 1] = static_cast<int32_t>(a.sel_offsets[i + 1] - a.sel_offsets[i]);
      std::copy(a.sel_indices + a.sel_offsets[i], a.sel_indices + a.sel_offsets[i + 1], sel.begin() + (i + 1) * cap);
    }
  }
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dq, UploadVec(q, s));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dsel, UploadVec(sel, s));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dcnt, UploadVec(cnt, s));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dkvb, Upload(a.kv_b, sizeof(float) * H * (a.nope + vd) * L, s));
  GYRE_ASSIGN_OR_RETURN(DeviceBatch db, MakeBatch(pg, tok_seq, tok_pos, a.t, s, sh));
  const MlaDims d{H, a.nope, a.rope, vd, L, a.scale};
  // One run with fresh NaN-poisoned workspace and output; checks the padding token's zero output.
  auto run_on = [&](const void* lat, const void* rot, KvDtype kv, const DMat& kvb,
                    const internal::MlaOptions& o) -> Result<std::vector<float>> {
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer ws, Poisoned(MlaWorkspaceBytes(d, n, a.t), s));
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer dout, Poisoned(sizeof(float) * n * H * vd, s));
    GYRE_RETURN_IF_ERROR(internal::MlaAttentionKvWith(
        dq.get<float>(), lat, a.rope > 0 ? rot : nullptr, kv, kvb, d, db.b,
        a.sel_offsets ? dsel.get<int32_t>() : nullptr, a.sel_offsets ? dcnt.get<int32_t>() : nullptr, cap,
        dout.get<float>(), ws.get(), ws.bytes(), o, s));
    GYRE_ASSIGN_OR_RETURN(std::vector<float> y, Download<float>(dout, n * H * vd, s));
    for (int64_t x = 0; x < H * vd; ++x)
      if (y[x] != 0.0f) return Status::Internal("mla host: the padding token's output is not zero");
    return y;
  };
  auto run = [&](const DMat& kvb, const internal::MlaOptions& o) {
    return run_on(latent.get(), krot.get(), KvDtype::kF32, kvb, o);
  };
  const DMat kvb{dkvb.get(), H * (a.nope + vd), L, false};
  GYRE_ASSIGN_OR_RETURN(std::vector<float> o, run(kvb, {}));
  // Cross-checks of the other kernels (mla_kernels.h "variants"), Internal when one disagrees:
  // the first version with fp32 weights (same function, other summation order) ...
  GYRE_ASSIGN_OR_RETURN(std::vector<float> legacy, run(kvb, {internal::MlaKernels::kLegacy}));
  if (const double e = RelL2(legacy, o); !(e <= 1e-5))
    return Status::Internal("mla host: legacy kernels differ from the default by rel-L2 " + std::to_string(e));
  // ... and the bf16 path with kv_b rounded to bf16, against the exact fp32 path on the same weights,
  // with the skinny and the tensor-core head GEMMs (bf16 operand rounding: rel-L2 ~1e-3).
  std::vector<uint16_t> kvb16(H * (a.nope + vd) * L);
  for (size_t x = 0; x < kvb16.size(); ++x) kvb16[x] = ToBf16(a.kv_b[x]);
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dkvb16, UploadVec(kvb16, s));
  const DMat kvb_bf16{dkvb16.get(), H * (a.nope + vd), L, true};
  GYRE_ASSIGN_OR_RETURN(std::vector<float> exact, run(kvb_bf16, {internal::MlaKernels::kFp32}));
  for (const int skinny : {internal::kSkMaxTokens, 0}) {
    GYRE_ASSIGN_OR_RETURN(std::vector<float> tc, run(kvb_bf16, {internal::MlaKernels::kAuto, skinny}));
    if (const double e = RelL2(tc, exact); !(e <= 1e-2))
      return Status::Internal("mla host: bf16 tensor-core path (skinny_max_tokens " + std::to_string(skinny) +
                              ") differs from the fp32 path by rel-L2 " + std::to_string(e));
  }
  // KV cache dtypes (quant/kv_cache.h): the rows written by CacheWriteKv must be KvEncodeRow's bytes,
  // and attention over them must equal, bit for bit, attention over an fp32 cache holding the decoded
  // values (KvDecodeRow), on the fp32 path and on the bf16 tensor-core path.
  for (const KvDtype kv : {KvDtype::kBf16, KvDtype::kFp8, KvDtype::kInt8}) {
    const std::string name = std::string("mla host: kv cache ") + KvDtypeName(kv) + ": ";
    auto part = [&](const float* rows, int64_t width, DeviceBuffer* quant, DeviceBuffer* decoded) -> Status {
      const int64_t rb = KvRowBytes(kv, width);
      GYRE_ASSIGN_OR_RETURN(*quant, Poisoned(static_cast<size_t>(pg.rows() * rb), s));
      GYRE_ASSIGN_OR_RETURN(DeviceBuffer src, Upload(rows, sizeof(float) * a.t * width, s));
      GYRE_ASSIGN_OR_RETURN(DeviceBatch wb, MakeBatch(pg, std::vector<int32_t>(a.t, kSeq), Iota(a.t), a.t, s, sh));
      GYRE_RETURN_IF_ERROR(CacheWriteKv(src.get<float>(), width, width, wb.b, quant->get(), kv, s));
      GYRE_ASSIGN_OR_RETURN(std::vector<uint8_t> got, Download<uint8_t>(*quant, pg.rows() * rb, s));
      std::vector<uint8_t> want(rb);
      std::vector<float> dec(a.t * width);
      for (int64_t p = 0; p < a.t; ++p) {
        KvEncodeRow(kv, std::span<const float>(rows + p * width, width), want.data());
        if (std::memcmp(want.data(), got.data() + pg.Row(kSeq, p + sh) * rb, rb) != 0)
          return Status::Internal(name + "CacheWriteKv's row of position " + std::to_string(p) + " (width " +
                                  std::to_string(width) + ") differs from KvEncodeRow's bytes");
        KvDecodeRow(kv, want.data(), std::span<float>(dec.data() + p * width, width));
      }
      GYRE_ASSIGN_OR_RETURN(*decoded, Poisoned(sizeof(float) * pg.rows() * width, s));
      return WriteRows(dec.data(), width, Iota(a.t), pg, decoded->get<float>(), s, sh);
    };
    DeviceBuffer qlat, dlat, qrot, drot;
    GYRE_RETURN_IF_ERROR(part(a.latent, L, &qlat, &dlat));
    if (a.rope > 0) GYRE_RETURN_IF_ERROR(part(a.krot, a.rope, &qrot, &drot));
    for (const DMat* w : {&kvb, &kvb_bf16}) {
      GYRE_ASSIGN_OR_RETURN(std::vector<float> on_q, run_on(qlat.get(), qrot.get(), kv, *w, {}));
      GYRE_ASSIGN_OR_RETURN(std::vector<float> on_d, run_on(dlat.get(), drot.get(), KvDtype::kF32, *w, {}));
      if (std::memcmp(on_q.data(), on_d.data(), on_q.size() * sizeof(float)) != 0)
        return Status::Internal(name + "attention over the quantized rows differs from attention over their decoded "
                                "fp32 values (" + (w->bf16 ? "bf16 tensor-core path" : "fp32 path") +
                                "), rel-L2 " + std::to_string(RelL2(on_q, on_d)));
    }
  }
  std::copy(o.begin() + H * vd, o.end(), out);
  return Status::Ok();
}

// ---- dsa.pool_key --------------------------------------------------------------------------------

Status PoolKeyOnDevice(const float* k, const float* gamma, const float* ape, int64_t m, int64_t d, float* out) {
  if (m < 1 || d < 1) return Status::InvalidArgument("pool_key host: need m >= 1 and d >= 1");
  GYRE_ASSIGN_OR_RETURN(Stream st, Stream::Create());
  const cudaStream_t s = st.get();
  const Paging pg = MakePaging(m);
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer kc, Poisoned(sizeof(float) * pg.rows() * d, s));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer gc, Poisoned(sizeof(float) * pg.rows() * d, s));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer pk, Poisoned(sizeof(float) * pg.rows() * d, s));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer pk_legacy, Poisoned(sizeof(float) * pg.rows() * d, s));
  {  // k_I and γ in one CacheWriteMulti launch
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer dk, Upload(k, sizeof(float) * m * d, s));
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer dg, Upload(gamma, sizeof(float) * m * d, s));
    GYRE_ASSIGN_OR_RETURN(DeviceBatch wb, MakeBatch(pg, std::vector<int32_t>(m, kSeq), Iota(m), pg.max_pages * kPageTokens, s));
    const internal::CacheWriteItem items[2] = {{dk.get<float>(), d, d, kc.get<float>()},
                                               {dg.get<float>(), d, d, gc.get<float>()}};
    GYRE_RETURN_IF_ERROR(internal::CacheWriteMulti(items, 2, wb.b, s));
    GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  }
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer da, Upload(ape, sizeof(float) * m * d, s));
  // A prefill step over the pool's m tokens, behind a padding token that would complete a pool.
  std::vector<int32_t> tok_seq(m + 1, kSeq), tok_pos(m + 1);
  tok_seq[0] = -1;
  tok_pos[0] = static_cast<int32_t>(m - 1);
  for (int64_t r = 0; r < m; ++r) tok_pos[r + 1] = static_cast<int32_t>(r);
  GYRE_ASSIGN_OR_RETURN(DeviceBatch db, MakeBatch(pg, tok_seq, tok_pos, m, s));
  GYRE_RETURN_IF_ERROR(IndexerPoolKeys(kc.get<float>(), gc.get<float>(), da.get<float>(), m, d, db.b, pk.get<float>(), s));
  GYRE_RETURN_IF_ERROR(internal::IndexerPoolKeysWith(kc.get<float>(), gc.get<float>(), da.get<float>(), m, d, db.b,
                                                     pk_legacy.get<float>(), true, s));
  GYRE_ASSIGN_OR_RETURN(std::vector<float> all, Download<float>(pk, pg.rows() * d, s));
  GYRE_ASSIGN_OR_RETURN(std::vector<float> all_legacy, Download<float>(pk_legacy, pg.rows() * d, s));
  if (std::memcmp(all.data(), all_legacy.data(), sizeof(float) * all.size()) != 0)
    return Status::Internal("pool_key host: the shared-memory and the first kernel differ");
  const int64_t want = pg.Row(kSeq, m - 1) / PoolKeyDiv(kPageTokens, m);  // one row per pool when m | page
  for (int64_t r = 0; r < pg.rows(); ++r) {
    bool written = false;
    for (int64_t c = 0; c < d; ++c) written |= !std::isnan(all[r * d + c]);
    if (written != (r == want))
      return Status::Internal("pool_key host: pooled-key row " + std::to_string(r) +
                              (written ? " written, but only row " + std::to_string(want) + " should be"
                                       : " (the pool's last token) not written"));
  }
  std::copy(all.begin() + want * d, all.begin() + (want + 1) * d, out);
  return Status::Ok();
}

// ---- dsa.select ----------------------------------------------------------------------------------

Status IndexerSelectOnDevice(const IndexerHostArgs& a, std::vector<std::vector<int32_t>>* rows) {
  if (a.s < 1 || a.pos0 < 0 || a.kpool < 1 || a.heads < 1 || a.head_dim < 1)
    return Status::InvalidArgument("select host: bad shape");
  GYRE_ASSIGN_OR_RETURN(Stream st, Stream::Create());
  const cudaStream_t s = st.get();
  const int64_t t = a.pos0 + a.s, m = a.kpool, di = a.head_dim, Hi = a.heads, n = a.s + 1;
  const int64_t pools = std::min(a.num_pools, t / m);
  const Paging pg = MakePaging(t);
  // Pool p's key at the row of its last token, divided by m when m divides the page (mla_cuda.h).
  std::vector<float> img(pg.rows() * di, kNaN);
  for (int64_t p = 0; p < pools; ++p) {
    const int64_t r = pg.Row(kSeq, p * m + m - 1) / PoolKeyDiv(kPageTokens, m);
    std::copy(a.pool_keys + p * di, a.pool_keys + (p + 1) * di, img.begin() + r * di);
  }
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer pk, UploadVec(img, s));

  std::vector<float> q(n * Hi * di, kNaN), w(n * Hi, kNaN);
  std::copy(a.q_idx, a.q_idx + a.s * Hi * di, q.begin() + Hi * di);
  std::copy(a.w, a.w + a.s * Hi, w.begin() + Hi);
  std::vector<int32_t> tok_seq(n, kSeq), tok_pos(n);
  tok_seq[0] = -1;
  tok_pos[0] = static_cast<int32_t>(t - 1);
  for (int64_t i = 0; i < a.s; ++i) tok_pos[i + 1] = static_cast<int32_t>(a.pos0 + i);
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dq, UploadVec(q, s));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dw, UploadVec(w, s));
  GYRE_ASSIGN_OR_RETURN(DeviceBatch db, MakeBatch(pg, tok_seq, tok_pos, t, s));
  const IndexerDims d{Hi, di, m, a.topk, a.tail};
  const int64_t cap = IndexerSelCap(d);

  // The default, then variants that must give the same lists: the sliced select staged in shared
  // memory and through global memory; tiny slices (several candidate lists merged by the last
  // block), staged and not; the first version, staged and not.
  using internal::IndexerKernels;
  const internal::IndexerOptions passes[] = {{},
                                             {internal::kIdxSelectSmemKeys, 0, IndexerKernels::kSliced},
                                             {0, 0, IndexerKernels::kSliced},
                                             {internal::kIdxSelectSmemKeys, 3, IndexerKernels::kSliced},
                                             {0, 5, IndexerKernels::kSliced},
                                             {internal::kIdxSelectSmemKeys, 0, IndexerKernels::kLegacy},
                                             {0, 0, IndexerKernels::kLegacy}};
  constexpr int kPasses = sizeof(passes) / sizeof(passes[0]);
  std::vector<int32_t> lists[kPasses], counts[kPasses];
  for (int pass = 0; pass < kPasses; ++pass) {
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer ws, Poisoned(internal::IndexerWorkspaceBytesWith(d, n, t, passes[pass]), s));
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer dsel, Poisoned(sizeof(int32_t) * n * std::max<int64_t>(cap, 1), s));
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer dcnt, Poisoned(sizeof(int32_t) * n, s));
    GYRE_RETURN_IF_ERROR(internal::IndexerSelectWith(dq.get<float>(), dw.get<float>(), pk.get<float>(), d, db.b,
                                                     dsel.get<int32_t>(), dcnt.get<int32_t>(), ws.get(), ws.bytes(),
                                                     passes[pass], s));
    GYRE_ASSIGN_OR_RETURN(lists[pass], Download<int32_t>(dsel, n * cap, s));
    GYRE_ASSIGN_OR_RETURN(counts[pass], Download<int32_t>(dcnt, n, s));
    if (counts[pass][0] != 0) return Status::Internal("select host: the padding token selected keys");
  }
  rows->assign(a.s, {});
  for (int64_t i = 0; i < a.s; ++i) {
    const int64_t c = counts[0][i + 1], pos = a.pos0 + i;
    const int32_t* row = lists[0].data() + (i + 1) * cap;
    for (int pass = 1; pass < kPasses; ++pass) {
      if (c < 0 || c > cap || c != counts[pass][i + 1])
        return Status::Internal("select host: query " + std::to_string(i) + " count " + std::to_string(c) + " vs " +
                                std::to_string(counts[pass][i + 1]) + " (variant " + std::to_string(pass) + "), cap " +
                                std::to_string(cap));
      if (!std::equal(row, row + c, lists[pass].data() + (i + 1) * cap))
        return Status::Internal("select host: variant " + std::to_string(pass) + " differs at query " + std::to_string(i));
    }
    for (int64_t j = 0; j < c; ++j)
      if (row[j] < 0 || row[j] > pos || (j > 0 && row[j] <= row[j - 1]))
        return Status::Internal("select host: query " + std::to_string(i) + " list not ascending within [0, pos]");
    (*rows)[i].assign(row, row + c);
  }
  return Status::Ok();
}

}  // namespace gyre::cuda
