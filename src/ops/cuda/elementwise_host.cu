// Host-memory entry points of the token-wise kernels (elementwise_host.h): upload, NaN-poison the
// outputs, run on a private stream, synchronize, copy back, run the side checks.
#include "ops/cuda/elementwise_host.h"

#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/elementwise_cuda.h"

namespace gyre::cuda {
namespace {

size_t F32(int64_t n) { return sizeof(float) * static_cast<size_t>(n); }

bool SameBits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, F32(n)) == 0; }

}  // namespace

Status RmsNormOnDevice(const float* x, int64_t n, int64_t d, const float* w, float eps, float* y) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  const int64_t ldx = d + 4, ldy = d + 8;
  std::vector<float> xp(n * ldx, 0.0f);
  for (int64_t i = 0; i < n; ++i) std::memcpy(&xp[i * ldx], x + i * d, F32(d));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dx, Upload(xp.data(), F32(n * ldx), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dw, Upload(w, w ? F32(d) : 0, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dy, Poisoned(F32(n * ldy), s.get()));
  GYRE_RETURN_IF_ERROR(RmsNorm(dx.get<float>(), n, d, ldx, w ? dw.get<float>() : nullptr, eps, dy.get<float>(), ldy,
                               s.get()));
  std::vector<float> yp(n * ldy);
  GYRE_RETURN_IF_ERROR(Download(yp.data(), dy, F32(n * ldy), s));
  for (int64_t i = 0; i < n; ++i) {
    if (!AllPoison(&yp[i * ldy + d], ldy - d))
      return Status::Internal("rmsnorm: row " + std::to_string(i) + " padding was written");
    std::memcpy(y + i * d, &yp[i * ldy], F32(d));
  }
  return Status::Ok();
}

Status LayerNormOnDevice(const float* x, int64_t n, int64_t d, const float* w, const float* b, float eps, float* y) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dx, Upload(x, F32(n * d), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dw, Upload(w, F32(d), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer db, Upload(b, F32(d), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dy, Poisoned(F32(n * d), s.get()));
  GYRE_RETURN_IF_ERROR(LayerNorm(dx.get<float>(), n, d, dw.get<float>(), db.get<float>(), eps, dy.get<float>(), s.get()));
  return Download(y, dy, F32(n * d), s);
}

Status SwiGluOnDevice(const float* g, const float* u, int64_t n, int64_t width, float limit, float* a) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  std::vector<float> gu(n * 2 * width);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(&gu[i * 2 * width], g + i * width, F32(width));
    std::memcpy(&gu[i * 2 * width + width], u + i * width, F32(width));
  }
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dgu, Upload(gu.data(), F32(n * 2 * width), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer da, Poisoned(F32(n * width), s.get()));
  const float* base = dgu.get<float>();
  GYRE_RETURN_IF_ERROR(SwiGlu(base, 2 * width, base + width, 2 * width, n, width, limit, da.get<float>(), s.get()));
  return Download(a, da, F32(n * width), s);
}

Status SigmoidOnDevice(const float* x, int64_t n, float* y) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dx, Upload(x, F32(n), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dy, Poisoned(F32(n), s.get()));
  GYRE_RETURN_IF_ERROR(Sigmoid(dx.get<float>(), n, dy.get<float>(), s.get()));
  return Download(y, dy, F32(n), s);
}

Status AddInPlaceOnDevice(float* x, const float* a, int64_t n) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dx, Upload(x, F32(n), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer da, Upload(a, F32(n), s.get()));
  GYRE_RETURN_IF_ERROR(AddInPlace(dx.get<float>(), da.get<float>(), n, s.get()));
  return Download(x, dx, F32(n), s);
}

Status KdaGateOnDevice(const float* f, int64_t t, int64_t h, int64_t k, const float* dt_bias, const float* a_log,
                       bool has_lower_bound, float lower_bound, float* g) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  const int64_t total = t * h * k;
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer df, Upload(f, F32(total), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer ddt, Upload(dt_bias, F32(h * k), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dal, Upload(a_log, F32(h), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dg, Poisoned(F32(total), s.get()));
  GYRE_RETURN_IF_ERROR(KdaGate(df.get<float>(), t, h, k, ddt.get<float>(), dal.get<float>(), has_lower_bound,
                               lower_bound, dg.get<float>(), s.get()));
  return Download(g, dg, F32(total), s);
}

Status GatedRmsNormOnDevice(const float* o, const float* z, int64_t t, int64_t h, int64_t v, const float* w, float eps,
                            float* y) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  const int64_t total = t * h * v;
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer d_o, Upload(o, F32(total), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dz, Upload(z, F32(total), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dw, Upload(w, F32(v), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dy, Poisoned(F32(total), s.get()));
  GYRE_RETURN_IF_ERROR(
      GatedRmsNorm(d_o.get<float>(), dz.get<float>(), t, h, v, dw.get<float>(), eps, dy.get<float>(), s.get()));
  return Download(y, dy, F32(total), s);
}

Status CausalConv1dSiluOnDevice(const float* x, int64_t t, int64_t ch, const float* w, int64_t width, float* state,
                                float* y) {
  constexpr int64_t kPadTokens = 2, kSlots = 3;
  const int64_t hist = width - 1, tail = hist * ch, t1 = t / 2, t2 = t - t1;
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());

  // Pool: slot 1 holds the sequence's tail; slots 0 and 2 hold values that must survive untouched.
  std::vector<float> pool(kSlots * tail);
  for (int64_t i = 0; i < tail; ++i) {
    pool[i] = 7.0f + static_cast<float>(i);
    pool[tail + i] = state[i];
    pool[2 * tail + i] = -3.0f - static_cast<float>(i);
  }
  // Call 1 tokens: 2 padding rows, then x[0, t1). Call 2 tokens: x[t1, t).
  std::vector<float> x1((kPadTokens + t1) * ch, 1000.0f);
  std::memcpy(&x1[kPadTokens * ch], x, F32(t1 * ch));
  const std::vector<int32_t> cu1 = {0, kPadTokens, static_cast<int32_t>(kPadTokens + t1),
                                    static_cast<int32_t>(kPadTokens + t1)};
  const std::vector<int32_t> slots1 = {-1, 1, 2};
  const std::vector<int32_t> cu2 = {0, static_cast<int32_t>(t2)}, slots2 = {1};

  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dpool, Upload(pool.data(), F32(kSlots * tail), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dw, Upload(w, F32(ch * width), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dx1, Upload(x1.data(), F32((kPadTokens + t1) * ch), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dx2, Upload(x + t1 * ch, F32(t2 * ch), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dcu1, Upload(cu1.data(), sizeof(int32_t) * cu1.size(), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dsl1, Upload(slots1.data(), sizeof(int32_t) * slots1.size(), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dcu2, Upload(cu2.data(), sizeof(int32_t) * cu2.size(), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dsl2, Upload(slots2.data(), sizeof(int32_t) * slots2.size(), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dy1, Poisoned(F32((kPadTokens + t1) * ch), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dy2, Poisoned(F32(t2 * ch), s.get()));

  ConvParams p;
  p.x = dx1.get<float>();
  p.w = dw.get<float>();
  p.state = dpool.get<float>();
  p.y = dy1.get<float>();
  p.cu_seqlens = dcu1.get<int32_t>();
  p.slots = dsl1.get<int32_t>();
  p.num_tokens = kPadTokens + t1;
  p.num_seqs = 3;
  p.channels = ch;
  p.width = width;
  p.num_slots = kSlots;
  GYRE_RETURN_IF_ERROR(CausalConv1dSilu(p, s.get()));
  p.x = dx2.get<float>();
  p.y = dy2.get<float>();
  p.cu_seqlens = dcu2.get<int32_t>();
  p.slots = dsl2.get<int32_t>();
  p.num_tokens = t2;
  p.num_seqs = 1;
  GYRE_RETURN_IF_ERROR(CausalConv1dSilu(p, s.get()));

  std::vector<float> y1((kPadTokens + t1) * ch), pool_out(kSlots * tail);
  GYRE_RETURN_IF_ERROR(Download(y1.data(), dy1, F32((kPadTokens + t1) * ch), s));
  GYRE_RETURN_IF_ERROR(Download(y + t1 * ch, dy2, F32(t2 * ch), s));
  GYRE_RETURN_IF_ERROR(Download(pool_out.data(), dpool, F32(kSlots * tail), s));
  std::memcpy(y, &y1[kPadTokens * ch], F32(t1 * ch));

  // ---- side checks (exact) ----
  for (int64_t i = 0; i < kPadTokens * ch; ++i)
    if (y1[i] != 0.0f) return Status::Internal("kda.conv: padding sequence row not zero at " + std::to_string(i));
  if (!SameBits(&pool_out[0], &pool[0], tail) || !SameBits(&pool_out[2 * tail], &pool[2 * tail], tail))
    return Status::Internal("kda.conv: a slot not in the batch (or the empty sequence's) changed");
  std::vector<float> want(tail);
  for (int64_t j = 0; j < hist; ++j) {
    const int64_t src = t - hist + j;  // into x; < 0 reads the old tail
    for (int64_t c = 0; c < ch; ++c) want[j * ch + c] = src >= 0 ? x[src * ch + c] : state[(hist + src) * ch + c];
  }
  if (!SameBits(&pool_out[tail], want.data(), tail)) return Status::Internal("kda.conv: state tail not updated exactly");
  std::memcpy(state, &pool_out[tail], F32(tail));
  return Status::Ok();
}

Status HcPreOnDevice(const float* x, int64_t t, int64_t n, int64_t d, const float* fn, const float* base,
                     const float* scale, float norm_eps, float hc_eps, int64_t sinkhorn_iters, float* post,
                     float* comb, float* y) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  const int64_t mix = (2 + n) * n;
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dx, Upload(x, F32(t * n * d), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dfn, Upload(fn, F32(mix * n * d), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dbase, Upload(base, F32(mix), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dscale, Upload(scale, F32(3), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dpost, Poisoned(F32(t * n), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dcomb, Poisoned(F32(t * n * n), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dy, Poisoned(F32(t * d), s.get()));
  HcDims p;
  p.n = n;
  p.d = d;
  p.norm_eps = norm_eps;
  p.hc_eps = hc_eps;
  p.sinkhorn_iters = sinkhorn_iters;
  GYRE_RETURN_IF_ERROR(HcPre(dx.get<float>(), t, dfn.get<float>(), dbase.get<float>(), dscale.get<float>(), p,
                             dpost.get<float>(), dcomb.get<float>(), dy.get<float>(), s.get()));
  GYRE_RETURN_IF_ERROR(Download(post, dpost, F32(t * n), s));
  GYRE_RETURN_IF_ERROR(Download(comb, dcomb, F32(t * n * n), s));
  return Download(y, dy, F32(t * d), s);
}

Status HcPostOnDevice(float* x, int64_t t, int64_t n, int64_t d, const float* a, const float* post, const float* comb) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dx, Upload(x, F32(t * n * d), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer da, Upload(a, F32(t * d), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dpost, Upload(post, F32(t * n), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dcomb, Upload(comb, F32(t * n * n), s.get()));
  HcDims p;
  p.n = n;
  p.d = d;
  GYRE_RETURN_IF_ERROR(
      HcPost(dx.get<float>(), t, da.get<float>(), dpost.get<float>(), dcomb.get<float>(), p, s.get()));
  return Download(x, dx, F32(t * n * d), s);
}

Status EmbeddingOnDevice(const int32_t* ids, int64_t n, const float* table_f32, const uint16_t* table_bf16,
                         int64_t vocab, int64_t d, float* y) {
  if ((table_f32 == nullptr) == (table_bf16 == nullptr))
    return Status::InvalidArgument("embedding: give exactly one of table_f32, table_bf16");
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  const bool bf16 = table_bf16 != nullptr;
  const size_t table_bytes = static_cast<size_t>(vocab * d) * (bf16 ? 2 : 4);
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dids, Upload(ids, sizeof(int32_t) * n, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dt, Upload(bf16 ? static_cast<const void*>(table_bf16) : table_f32, table_bytes,
                                                s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dy, Poisoned(F32(n * d), s.get()));
  DMat table;
  table.data = dt.get();
  table.rows = vocab;
  table.cols = d;
  table.bf16 = bf16;
  GYRE_RETURN_IF_ERROR(Embedding(dids.get<int32_t>(), n, table, dy.get<float>(), s.get()));
  return Download(y, dy, F32(n * d), s);
}

Status StreamMeanOnDevice(const float* x, int64_t t, int64_t n, int64_t d, const int32_t* rows, int64_t r, float* y) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dx, Upload(x, F32(t * n * d), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer drows, Upload(rows, rows ? sizeof(int32_t) * r : 0, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dy, Poisoned(F32(r * d), s.get()));
  GYRE_RETURN_IF_ERROR(
      StreamMean(dx.get<float>(), n, d, rows ? drows.get<int32_t>() : nullptr, r, dy.get<float>(), s.get()));
  return Download(y, dy, F32(r * d), s);
}

Status GatherRowsOnDevice(const float* x, int64_t t, int64_t d, const int32_t* rows, int64_t r, float* y) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dx, Upload(x, F32(t * d), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer drows, Upload(rows, sizeof(int32_t) * r, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dy, Poisoned(F32(r * d), s.get()));
  GYRE_RETURN_IF_ERROR(GatherRows(dx.get<float>(), d, drows.get<int32_t>(), r, dy.get<float>(), s.get()));
  return Download(y, dy, F32(r * d), s);
}

Status CastF32ToBf16OnDevice(const float* x, int64_t n, uint16_t* y) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dx, Upload(x, F32(n), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dy, Poisoned(sizeof(uint16_t) * n, s.get()));
  GYRE_RETURN_IF_ERROR(CastF32ToBf16(dx.get<float>(), n, dy.get(), s.get()));
  return Download(y, dy, sizeof(uint16_t) * n, s);
}

Status ArgmaxOnDevice(const float* logits, int64_t r, int64_t v, int32_t* ids) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dl, Upload(logits, F32(r * v), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dids, Poisoned(sizeof(int32_t) * r, s.get()));
  GYRE_RETURN_IF_ERROR(Argmax(dl.get<float>(), r, v, dids.get<int32_t>(), s.get()));
  return Download(ids, dids, sizeof(int32_t) * r, s);
}

}  // namespace gyre::cuda
