// The vision tower on the GPU (cuda_vision.h). Sections: weights; scratch; the forward pass.
// The order of operations is runtime/vision.cc's, op for op.
#include "runtime/cuda_vision.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <string>

#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/elementwise_cuda.h"
#include "ops/cuda/vision_cuda.h"
#include "ops/vision.h"

namespace gyre {

using cuda::DeviceBuffer;

namespace {

// A device weight: [rows, cols] row-major, fp32 or bf16; or a vector (rows = 1).
struct DW {
  DeviceBuffer buf;
  int64_t rows = 0, cols = 0;
  bool bf16 = false;
  const void* get() const { return buf.get(); }
  const float* f32() const { return buf.get<float>(); }
};

}  // namespace

struct CudaVisionTower::Impl {
  VisionConfig c;
  CudaVisionOptions opts;
  CudaVisionStats stats;
  mutable std::mutex mu;
  cuda::Stream stream;
  cuda::Event ev0, ev1;
  std::unique_ptr<cuda::GemmLt> gemm;
  cublasHandle_t blas = nullptr;

  struct Block {
    DW norm1, norm2, qkv, qkv_b, q_norm, k_norm, proj, proj_b, gate, gate_b, up, up_b, down, down_b;
  };
  DW patch, patch_b, post_norm, ds, ds_b, m_proj, m_norm_w, m_norm_b, m_gate, m_up, m_down;
  std::vector<Block> blocks;

  // Scratch, grown to the largest forward so far ([rows, width] fp32 unless noted).
  DeviceBuffer pv, x, normed, qkv, q, k, v, attn, tmp, gate, up, act, cosb, sinb, scores, xb16;
  DeviceBuffer qb, kb, vb, pb;  // bf16: the attention's operands and probabilities
  DeviceBuffer dsb, mproj, mnorm, mgate, mup, mact, out;
  int64_t score_floats = 0;

  ~Impl() {
    if (blas) (void)cublasDestroy(blas);
  }

  cudaStream_t s() const { return stream.get(); }

  Status Upload(const std::vector<float>& host, int64_t rows, int64_t cols, bool bf16, DW* w) {
    if (static_cast<int64_t>(host.size()) != rows * cols)
      return Status::Internal("cuda vision: a weight of " + std::to_string(host.size()) + " values, expected " +
                              std::to_string(rows * cols));
    w->rows = rows;
    w->cols = cols;
    w->bf16 = bf16;
    if (host.empty()) return Status::Ok();
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer f, cuda::Upload(host.data(), host.size() * 4, s()));
    if (!bf16) {
      w->buf = std::move(f);
    } else {
      GYRE_ASSIGN_OR_RETURN(w->buf, DeviceBuffer::Create(host.size() * 2));
      GYRE_RETURN_IF_ERROR(cuda::CastF32ToBf16(f.get<float>(), static_cast<int64_t>(host.size()), w->buf.get(), s()));
      GYRE_RETURN_IF_ERROR(stream.Synchronize());  // (f is freed on return)
    }
    stats.weight_bytes += static_cast<int64_t>(w->buf.bytes());
    return Status::Ok();
  }
  Status Mat(const Matrix& m, DW* w) { return Upload(m.data, m.rows, m.cols, opts.bf16_weights, w); }
  Status Vec(const std::vector<float>& v, DW* w) { return Upload(v, 1, static_cast<int64_t>(v.size()), false, w); }

  static Status Grow(DeviceBuffer& b, size_t bytes) {
    if (b.get() && b.bytes() >= bytes) return Status::Ok();
    b.Reset();
    GYRE_ASSIGN_OR_RETURN(b, DeviceBuffer::Create(std::max<size_t>(bytes, 256)));
    return Status::Ok();
  }

  // y[n, W.rows] = x[n, W.cols] · Wᵀ (+ bias).
  Status Linear(const float* x, int64_t n, const DW& w, const DW* bias, float* y) {
    if (w.bf16) {
      GYRE_RETURN_IF_ERROR(Grow(xb16, static_cast<size_t>(n * w.cols) * 2));
      GYRE_RETURN_IF_ERROR(cuda::CastF32ToBf16(x, n * w.cols, xb16.get(), s()));
      GYRE_RETURN_IF_ERROR(gemm->Run(cuda::GemmDType::kBf16F32, xb16.get(), w.get(), y, n, w.rows, w.cols, s()));
    } else {
      GYRE_RETURN_IF_ERROR(gemm->Run(cuda::GemmDType::kF32, x, w.get(), y, n, w.rows, w.cols, s()));
    }
    if (bias && bias->cols > 0) GYRE_RETURN_IF_ERROR(cuda::AddBias(y, n, w.rows, bias->f32(), s()));
    return Status::Ok();
  }

  Status Reserve(int64_t N, int64_t longest) {
    const int64_t D = c.hidden_size, I = c.intermediate_size, O = c.out_hidden_size;
    const int64_t PI = c.projection_intermediate_size, hd = c.head_dim(), M = N / (c.spatial_merge_size * c.spatial_merge_size);
    const auto F = [](int64_t n) { return static_cast<size_t>(n) * 4; };
    for (auto* b : {&x, &normed, &q, &k, &v, &attn, &tmp}) GYRE_RETURN_IF_ERROR(Grow(*b, F(N * D)));
    GYRE_RETURN_IF_ERROR(Grow(pv, F(N * c.patch_elems())));
    GYRE_RETURN_IF_ERROR(Grow(qkv, F(N * 3 * D)));
    for (auto* b : {&gate, &up, &act}) GYRE_RETURN_IF_ERROR(Grow(*b, F(N * I)));
    for (auto* b : {&cosb, &sinb}) GYRE_RETURN_IF_ERROR(Grow(*b, F(N * hd)));
    for (auto* b : {&dsb, &mproj, &mnorm, &out}) GYRE_RETURN_IF_ERROR(Grow(*b, F(M * O)));
    for (auto* b : {&mgate, &mup, &mact}) GYRE_RETURN_IF_ERROR(Grow(*b, F(M * PI)));
    // Scores: the configured workspace, but never under one query row of every head.
    const int64_t want = std::max<int64_t>(opts.score_workspace_bytes / 4, c.num_heads * longest);
    if (want > score_floats) {
      GYRE_RETURN_IF_ERROR(Grow(scores, F(want)));
      if (opts.bf16_weights) GYRE_RETURN_IF_ERROR(Grow(pb, static_cast<size_t>(want) * 2));
      score_floats = want;
    }
    if (opts.bf16_weights)
      for (auto* b : {&qb, &kb, &vb}) GYRE_RETURN_IF_ERROR(Grow(*b, static_cast<size_t>(N * D) * 2));
    return Status::Ok();
  }
};

CudaVisionTower::CudaVisionTower(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaVisionTower::~CudaVisionTower() = default;
const VisionConfig& CudaVisionTower::config() const { return impl_->c; }
CudaVisionStats CudaVisionTower::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

// ---- weights ---------------------------------------------------------------------------------

Result<std::unique_ptr<CudaVisionTower>> CudaVisionTower::FromHost(const VisionConfig& config,
                                                                   const VisionWeights& w,
                                                                   const CudaVisionOptions& opts) {
  const int64_t hd = config.head_dim();
  if (config.num_heads <= 0 || config.hidden_size % config.num_heads != 0 || hd % 2 != 0 || hd > 1024)
    return Status::InvalidArgument("cuda vision tower: head_dim " + std::to_string(hd) + " (hidden_size " +
                                   std::to_string(config.hidden_size) + " / num_heads " +
                                   std::to_string(config.num_heads) + ") must be even and at most 1024");
  if (static_cast<int64_t>(w.blocks.size()) != config.depth)
    return Status::InvalidArgument("cuda vision tower: " + std::to_string(w.blocks.size()) + " blocks for depth " +
                                   std::to_string(config.depth));
  auto m = std::make_unique<Impl>();
  m->c = config;
  m->opts = opts;
  GYRE_ASSIGN_OR_RETURN(m->stream, cuda::Stream::Create());
  GYRE_ASSIGN_OR_RETURN(m->ev0, cuda::Event::Create());
  GYRE_ASSIGN_OR_RETURN(m->ev1, cuda::Event::Create());
  GYRE_ASSIGN_OR_RETURN(m->gemm, cuda::GemmLt::Create());
  GYRE_CUDA_RETURN_IF_ERROR(cublasCreate(&m->blas));
  GYRE_RETURN_IF_ERROR(m->Mat(w.patch_embed, &m->patch));
  GYRE_RETURN_IF_ERROR(m->Vec(w.patch_embed_bias, &m->patch_b));
  for (const VisionBlockWeights& b : w.blocks) {
    Impl::Block d;
    GYRE_RETURN_IF_ERROR(m->Vec(b.norm1, &d.norm1));
    GYRE_RETURN_IF_ERROR(m->Vec(b.norm2, &d.norm2));
    GYRE_RETURN_IF_ERROR(m->Mat(b.qkv, &d.qkv));
    GYRE_RETURN_IF_ERROR(m->Vec(b.qkv_bias, &d.qkv_b));
    GYRE_RETURN_IF_ERROR(m->Vec(b.q_norm, &d.q_norm));
    GYRE_RETURN_IF_ERROR(m->Vec(b.k_norm, &d.k_norm));
    GYRE_RETURN_IF_ERROR(m->Mat(b.proj, &d.proj));
    GYRE_RETURN_IF_ERROR(m->Vec(b.proj_bias, &d.proj_b));
    GYRE_RETURN_IF_ERROR(m->Mat(b.gate, &d.gate));
    GYRE_RETURN_IF_ERROR(m->Vec(b.gate_bias, &d.gate_b));
    GYRE_RETURN_IF_ERROR(m->Mat(b.up, &d.up));
    GYRE_RETURN_IF_ERROR(m->Vec(b.up_bias, &d.up_b));
    GYRE_RETURN_IF_ERROR(m->Mat(b.down, &d.down));
    GYRE_RETURN_IF_ERROR(m->Vec(b.down_bias, &d.down_b));
    m->blocks.push_back(std::move(d));
  }
  GYRE_RETURN_IF_ERROR(m->Vec(w.post_norm, &m->post_norm));
  GYRE_RETURN_IF_ERROR(m->Mat(w.downsample, &m->ds));
  GYRE_RETURN_IF_ERROR(m->Vec(w.downsample_bias, &m->ds_b));
  GYRE_RETURN_IF_ERROR(m->Mat(w.merger_proj, &m->m_proj));
  GYRE_RETURN_IF_ERROR(m->Vec(w.merger_norm_w, &m->m_norm_w));
  GYRE_RETURN_IF_ERROR(m->Vec(w.merger_norm_b, &m->m_norm_b));
  GYRE_RETURN_IF_ERROR(m->Mat(w.merger_gate, &m->m_gate));
  GYRE_RETURN_IF_ERROR(m->Mat(w.merger_up, &m->m_up));
  GYRE_RETURN_IF_ERROR(m->Mat(w.merger_down, &m->m_down));
  GYRE_RETURN_IF_ERROR(m->stream.Synchronize());
  return std::unique_ptr<CudaVisionTower>(new CudaVisionTower(std::move(m)));
}

Result<VisionTowerFn> CudaVisionTowerFn(const VisionConfig& config, const VisionWeights& weights,
                                        const CudaVisionOptions& opts) {
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<CudaVisionTower> t, CudaVisionTower::FromHost(config, weights, opts));
  std::shared_ptr<CudaVisionTower> tower = std::move(t);
  return VisionTowerFn([tower](std::span<const float> pv, std::span<const ImageGrid> grids, std::vector<float>* out) {
    return tower->Forward(pv, grids, out);
  });
}

// ---- the forward pass --------------------------------------------------------------------------

Status CudaVisionTower::Forward(std::span<const float> pixel_values, std::span<const ImageGrid> grids,
                                std::vector<float>* image_embeds, VisionTrace* trace) {
  Impl& m = *impl_;
  const VisionConfig& c = m.c;
  const int64_t mg = c.spatial_merge_size, D = c.hidden_size, H = c.num_heads, hd = c.head_dim();
  const int64_t I = c.intermediate_size, O = c.out_hidden_size, PI = c.projection_intermediate_size;
  std::vector<std::pair<int32_t, int32_t>> pos;
  std::vector<int64_t> segments;
  GYRE_RETURN_IF_ERROR(PlanVisionInputs(c, pixel_values.size(), grids, &pos, &segments));
  const int64_t N = static_cast<int64_t>(pos.size()), M = N / (mg * mg);
  std::vector<float> cos, sin;
  ops::VisionRopeTables(pos, hd, c.rope_theta, &cos, &sin);

  std::lock_guard<std::mutex> lock(m.mu);
  const int64_t longest = *std::max_element(segments.begin(), segments.end());
  GYRE_RETURN_IF_ERROR(m.Reserve(N, longest));
  cudaStream_t s = m.s();
  auto up = [&](DeviceBuffer& dst, const float* src, int64_t n) -> Status {
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst.get(), src, static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice, s));
    return Status::Ok();
  };
  auto down = [&](std::vector<float>* dst, const DeviceBuffer& src, int64_t n) -> Status {
    dst->resize(static_cast<size_t>(n));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst->data(), src.get(), static_cast<size_t>(n) * 4,
                                              cudaMemcpyDeviceToHost, s));
    return m.stream.Synchronize();
  };
  GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(m.ev0.get(), s));
  GYRE_RETURN_IF_ERROR(up(m.pv, pixel_values.data(), N * c.patch_elems()));
  GYRE_RETURN_IF_ERROR(up(m.cosb, cos.data(), N * hd));
  GYRE_RETURN_IF_ERROR(up(m.sinb, sin.data(), N * hd));
  float* x = m.x.get<float>();
  // Patch embedding: a GEMM over the flattened patch rows.
  GYRE_RETURN_IF_ERROR(m.Linear(m.pv.get<float>(), N, m.patch, &m.patch_b, x));
  if (trace) GYRE_RETURN_IF_ERROR(down(&trace->patch_embed, m.x, N * D));
  for (size_t bi = 0; bi < m.blocks.size(); ++bi) {
    const Impl::Block& b = m.blocks[bi];
    float* normed = m.normed.get<float>();
    GYRE_RETURN_IF_ERROR(cuda::RmsNorm(x, N, D, D, b.norm1.f32(), c.rms_norm_eps, normed, D, s));
    GYRE_RETURN_IF_ERROR(m.Linear(normed, N, b.qkv, &b.qkv_b, m.qkv.get<float>()));
    GYRE_RETURN_IF_ERROR(cuda::VisionQkvSplit(m.qkv.get<float>(), N, H, hd, b.q_norm.f32(), b.k_norm.f32(),
                                              c.rms_norm_eps, m.cosb.get<float>(), m.sinb.get<float>(),
                                              m.q.get<float>(), m.k.get<float>(), m.v.get<float>(), s));
    cuda::VisionAttentionBf16 ab;
    if (m.opts.bf16_weights) {  // the attention's GEMMs on bf16 operands too
      GYRE_RETURN_IF_ERROR(cuda::CastF32ToBf16(m.q.get<float>(), N * D, m.qb.get(), s));
      GYRE_RETURN_IF_ERROR(cuda::CastF32ToBf16(m.k.get<float>(), N * D, m.kb.get(), s));
      GYRE_RETURN_IF_ERROR(cuda::CastF32ToBf16(m.v.get<float>(), N * D, m.vb.get(), s));
      ab = {m.qb.get(), m.kb.get(), m.vb.get(), m.pb.get()};
    }
    GYRE_RETURN_IF_ERROR(cuda::VisionAttention(m.blas, m.q.get<float>(), m.k.get<float>(), m.v.get<float>(), segments,
                                               H, hd, m.attn.get<float>(), m.scores.get<float>(), m.score_floats, s,
                                               m.opts.bf16_weights ? &ab : nullptr));
    GYRE_RETURN_IF_ERROR(m.Linear(m.attn.get<float>(), N, b.proj, nullptr, m.tmp.get<float>()));
    GYRE_RETURN_IF_ERROR(
        cuda::AddBiasResidual(x, m.tmp.get<float>(), N, D, b.proj_b.cols > 0 ? b.proj_b.f32() : nullptr, s));
    GYRE_RETURN_IF_ERROR(cuda::RmsNorm(x, N, D, D, b.norm2.f32(), c.rms_norm_eps, normed, D, s));
    GYRE_RETURN_IF_ERROR(m.Linear(normed, N, b.gate, &b.gate_b, m.gate.get<float>()));
    GYRE_RETURN_IF_ERROR(m.Linear(normed, N, b.up, &b.up_b, m.up.get<float>()));
    GYRE_RETURN_IF_ERROR(
        cuda::SwiGlu(m.gate.get<float>(), I, m.up.get<float>(), I, N, I, c.swiglu_limit, m.act.get<float>(), s));
    GYRE_RETURN_IF_ERROR(m.Linear(m.act.get<float>(), N, b.down, nullptr, m.tmp.get<float>()));
    GYRE_RETURN_IF_ERROR(
        cuda::AddBiasResidual(x, m.tmp.get<float>(), N, D, b.down_b.cols > 0 ? b.down_b.f32() : nullptr, s));
    if (trace && bi == 0) GYRE_RETURN_IF_ERROR(down(&trace->block0, m.x, N * D));
  }
  GYRE_RETURN_IF_ERROR(cuda::RmsNorm(x, N, D, D, m.post_norm.f32(), c.rms_norm_eps, m.normed.get<float>(), D, s));
  if (trace) GYRE_RETURN_IF_ERROR(down(&trace->post_layernorm, m.normed, N * D));
  // Downsample: each merge block's m² rows are contiguous, so the conv is a GEMM on [M, m²·D].
  GYRE_RETURN_IF_ERROR(m.Linear(m.normed.get<float>(), M, m.ds, &m.ds_b, m.dsb.get<float>()));
  if (trace) GYRE_RETURN_IF_ERROR(down(&trace->downsample, m.dsb, M * O));
  // Merger: proj → LayerNorm → GELU(erf) → clamped SwiGLU.
  GYRE_RETURN_IF_ERROR(m.Linear(m.dsb.get<float>(), M, m.m_proj, nullptr, m.mproj.get<float>()));
  GYRE_RETURN_IF_ERROR(
      cuda::LayerNorm(m.mproj.get<float>(), M, O, m.m_norm_w.f32(), m.m_norm_b.f32(), 1e-5f, m.mnorm.get<float>(), s));
  GYRE_RETURN_IF_ERROR(cuda::GeluErf(m.mnorm.get<float>(), M * O, s));
  GYRE_RETURN_IF_ERROR(m.Linear(m.mnorm.get<float>(), M, m.m_gate, nullptr, m.mgate.get<float>()));
  GYRE_RETURN_IF_ERROR(m.Linear(m.mnorm.get<float>(), M, m.m_up, nullptr, m.mup.get<float>()));
  GYRE_RETURN_IF_ERROR(
      cuda::SwiGlu(m.mgate.get<float>(), PI, m.mup.get<float>(), PI, M, PI, c.swiglu_limit, m.mact.get<float>(), s));
  GYRE_RETURN_IF_ERROR(m.Linear(m.mact.get<float>(), M, m.m_down, nullptr, m.out.get<float>()));
  GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(m.ev1.get(), s));
  GYRE_RETURN_IF_ERROR(down(image_embeds, m.out, M * O));
  float ms = 0;
  GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, m.ev0.get(), m.ev1.get()));
  m.stats.last_ms = ms;
  m.stats.forwards++;
  m.stats.images += static_cast<int64_t>(grids.size());
  m.stats.patches += N;
  return Status::Ok();
}

}  // namespace gyre
