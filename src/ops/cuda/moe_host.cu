// Registry entry points of the MoE kernels (moe_host.h): upload, poison, run, sync, copy back.
#include "ops/cuda/moe_host.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/moe_cuda.h"

namespace gyre::cuda {
namespace {

// fp32 → bf16 bits, round to nearest even (what the checkpoint loader does).
std::vector<__nv_bfloat16> ToBf16(const float* v, size_t n) {
  std::vector<__nv_bfloat16> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = __float2bfloat16_rn(v[i]);
  return out;
}

}  // namespace

Status MoeRouteOnDevice(const float* logits, int64_t n, const float* bias, const ops::RouterParams& p, int32_t* idx,
                        float* w) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  const size_t nk = static_cast<size_t>(n * p.top_k);
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dl, Upload(logits, sizeof(float) * n * p.num_experts, s.get()));
  DeviceBuffer db;
  if (bias) {
    GYRE_ASSIGN_OR_RETURN(db, Upload(bias, sizeof(float) * p.num_experts, s.get()));
  }
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer didx, Poisoned(sizeof(int32_t) * nk, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dw, Poisoned(sizeof(float) * nk, s.get()));
  const RouteDims d{p.num_experts, p.top_k, p.n_group, p.topk_group, p.norm_topk_prob, p.routed_scaling_factor};
  GYRE_RETURN_IF_ERROR(MoeRoute(dl.get<float>(), n, bias ? db.get<float>() : nullptr, d, didx.get<int32_t>(),
                                dw.get<float>(), s.get()));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(idx, didx.get(), sizeof(int32_t) * nk, cudaMemcpyDeviceToHost, s.get()));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(w, dw.get(), sizeof(float) * nk, cudaMemcpyDeviceToHost, s.get()));
  return s.Synchronize();
}

Status MoeExpertsOnDevice(const float* x, int64_t n, const int32_t* idx, const float* w, int64_t top_k,
                          const float* gate_up, const float* down, const ops::ExpertDims& d, bool bf16_weights,
                          float swiglu_limit, float* out) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  const int64_t E = d.num_experts, D = d.hidden, I = d.inter;
  const size_t gu = static_cast<size_t>(E * 2 * I * D), dn = static_cast<size_t>(E * D * I);
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dx, Upload(x, sizeof(float) * n * D, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer didx, Upload(idx, sizeof(int32_t) * n * top_k, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dw, Upload(w, sizeof(float) * n * top_k, s.get()));
  DeviceBuffer dgu, ddn;
  std::vector<__nv_bfloat16> gu16, dn16;
  if (bf16_weights) {
    gu16 = ToBf16(gate_up, gu);
    dn16 = ToBf16(down, dn);
    GYRE_ASSIGN_OR_RETURN(dgu, Upload(gu16.data(), 2 * gu, s.get()));
    GYRE_ASSIGN_OR_RETURN(ddn, Upload(dn16.data(), 2 * dn, s.get()));
  } else {
    GYRE_ASSIGN_OR_RETURN(dgu, Upload(gate_up, 4 * gu, s.get()));
    GYRE_ASSIGN_OR_RETURN(ddn, Upload(down, 4 * dn, s.get()));
  }
  MoeExpertWeights ew;
  ew.gate_up = dgu.get();
  ew.down = ddn.get();
  ew.bf16 = bf16_weights;
  ew.num_experts = E;
  ew.hidden = D;
  ew.inter = I;
  const size_t ws_bytes = MoeExpertsWorkspaceBytes(ew, n, top_k);
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer ws, Poisoned(ws_bytes, s.get()));  // intermediates start as NaN too
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dout, Poisoned(sizeof(float) * n * D, s.get()));
  GYRE_RETURN_IF_ERROR(MoeExperts(dx.get<float>(), n, didx.get<int32_t>(), dw.get<float>(), top_k, ew, swiglu_limit,
                                  dout.get<float>(), ws.get(), ws.bytes(), s.get()));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out, dout.get(), sizeof(float) * n * D, cudaMemcpyDeviceToHost, s.get()));
  return s.Synchronize();  // the uploads' host vectors and the device buffers outlive the work
}

}  // namespace gyre::cuda
