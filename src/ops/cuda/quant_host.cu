#include "ops/cuda/quant_host.h"

#include <cuda_runtime.h>
#include <string>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/quant_cuda.h"

namespace gyre::cuda {

Status QuantizeActOnDevice(bool fp8, const float* x, int64_t n, int64_t k, uint8_t* q, float* s) {
  const W8A8 scheme = fp8 ? W8A8::kFp8 : W8A8::kInt8;
  const int64_t sc = ActScaleCols(scheme, k);
  GYRE_ASSIGN_OR_RETURN(Stream st, Stream::Create());
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dx, Upload(x, 4 * n * k, st.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dq, Poisoned(n * k, st.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer ds, Poisoned(4 * n * sc, st.get()));
  const ActQuantArgs a{dx.get<float>(), n, k, 0, dq.get(), ds.get<float>()};
  GYRE_RETURN_IF_ERROR(QuantizeActivations(scheme, a, st.get()));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(q, dq.get(), n * k, cudaMemcpyDeviceToHost, st.get()));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s, ds.get(), 4 * n * sc, cudaMemcpyDeviceToHost, st.get()));
  return st.Synchronize();
}

Status GemmW8A8OnDevice(bool fp8, const uint8_t* qa, const float* sa, int64_t m, const uint8_t* wq, const float* ws,
                        int64_t N, int64_t K, int64_t groups, const std::vector<int32_t>& offsets, float* y) {
  const W8A8 scheme = fp8 ? W8A8::kFp8 : W8A8::kInt8;
  const int64_t sc = ActScaleCols(scheme, K);
  GYRE_ASSIGN_OR_RETURN(Stream st, Stream::Create());
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dqa, Upload(qa, m * K, st.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dsa, Upload(sa, 4 * m * sc, st.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dwq, Upload(wq, groups * N * K, st.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dws, Upload(ws, 4 * groups * N * sc, st.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dy, Poisoned(4 * m * N, st.get()));
  QWeight w{scheme, dwq.get(), dws.get<float>(), N, K};
  if (offsets.empty()) {
    GYRE_RETURN_IF_ERROR(GemmW8A8(dqa.get(), dsa.get<float>(), m, w, dy.get<float>(), 0, st.get()));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(y, dy.get(), 4 * m * N, cudaMemcpyDeviceToHost, st.get()));
    return st.Synchronize();
  }
  if (static_cast<int64_t>(offsets.size()) != groups + 1 || offsets.back() != m)
    return Status::InvalidArgument("grouped gemm: offsets must have groups + 1 entries ending at m");
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer doff, Upload(offsets.data(), 4 * offsets.size(), st.get()));
  // Both tile heights, so each kernel shape is checked by the same data.
  std::vector<float> y2(m * N);
  for (int block_m : {GroupedBlockM(0), GroupedBlockM(1 << 20)}) {
    const int64_t max_tiles = GroupedMaxTiles(m, groups, block_m);
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer tiles, Poisoned(16 * max_tiles, st.get()));
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer nt, Poisoned(4, st.get()));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dy.get(), 0xFF, 4 * m * N, st.get()));
    GYRE_RETURN_IF_ERROR(GroupedTiles(doff.get<int32_t>(), groups, block_m, tiles.get<int4>(), nt.get<int32_t>(),
                                      max_tiles, st.get()));
    GYRE_RETURN_IF_ERROR(GemmW8A8Grouped(dqa.get(), dsa.get<float>(), w, groups, tiles.get<int4>(),
                                         nt.get<int32_t>(), max_tiles, block_m, m, dy.get<float>(), st.get()));
    float* dst = block_m == GroupedBlockM(0) ? y : y2.data();
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, dy.get(), 4 * m * N, cudaMemcpyDeviceToHost, st.get()));
    GYRE_RETURN_IF_ERROR(st.Synchronize());
  }
  // The two tilings compute each output from the same products in the same order.
  for (int64_t i = 0; i < m * N; ++i) {
    const bool both_nan = y[i] != y[i] && y2[i] != y2[i];
    if (!both_nan && y[i] != y2[i])
      return Status::Internal("grouped gemm: the 16-row and 64-row tilings differ at " + std::to_string(i));
  }
  return Status::Ok();
}

Status MoeW8A8OnDevice(bool fp8, const float* x, int64_t n, const int32_t* idx, const float* w, int64_t top_k,
                       const uint8_t* gu_q, const float* gu_s, const uint8_t* dn_q, const float* dn_s, int64_t E,
                       int64_t D, int64_t I, float swiglu_limit, float* out) {
  const W8A8 scheme = fp8 ? W8A8::kFp8 : W8A8::kInt8;
  GYRE_ASSIGN_OR_RETURN(Stream st, Stream::Create());
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dx, Upload(x, 4 * n * D, st.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer didx, Upload(idx, 4 * n * top_k, st.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dw, Upload(w, 4 * n * top_k, st.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dguq, Upload(gu_q, E * 2 * I * D, st.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dgus, Upload(gu_s, 4 * E * 2 * I * ActScaleCols(scheme, D), st.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer ddnq, Upload(dn_q, E * D * I, st.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer ddns, Upload(dn_s, 4 * E * D * ActScaleCols(scheme, I), st.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dout, Poisoned(4 * n * D, st.get()));
  QMoeWeights mw;
  mw.gate_up = QWeight{scheme, dguq.get(), dgus.get<float>(), 2 * I, D};
  mw.down = QWeight{scheme, ddnq.get(), ddns.get<float>(), D, I};
  mw.num_experts = E;
  mw.hidden = D;
  mw.inter = I;
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer ws, Poisoned(MoeW8A8WorkspaceBytes(mw, n, top_k), st.get()));
  GYRE_RETURN_IF_ERROR(MoeExpertsW8A8(dx.get<float>(), n, didx.get<int32_t>(), dw.get<float>(), top_k, mw,
                                      swiglu_limit, dout.get<float>(), ws.get(), ws.bytes(), st.get()));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out, dout.get(), 4 * n * D, cudaMemcpyDeviceToHost, st.get()));
  return st.Synchronize();
}

}  // namespace gyre::cuda
