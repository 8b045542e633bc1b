#include "ops/cuda/ops_cuda.h"

#include <cuda_runtime.h>

#include <vector>

#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/kda_cuda.h"

namespace gyre::cuda {

Status LinearF32OnDevice(const float* x, int64_t n, int64_t in, const float* w, int64_t out, float* y) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<GemmLt> gemm, GemmLt::Create());
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dx, Upload(x, sizeof(float) * n * in, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dw, Upload(w, sizeof(float) * out * in, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dy, Poisoned(sizeof(float) * n * out, s.get()));
  GYRE_RETURN_IF_ERROR(gemm->Run(GemmDType::kF32, dx.get(), dw.get(), dy.get(), n, out, in, s.get()));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(y, dy.get(), sizeof(float) * n * out, cudaMemcpyDeviceToHost, s.get()));
  return s.Synchronize();
}

Status KdaOnDevice(bool chunked, const float* q, const float* k, const float* v, const float* g, const float* beta,
                   int64_t t, int64_t h, int64_t dk, float* state, float* o) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  const size_t act = sizeof(float) * t * h * dk, st = sizeof(float) * h * dk * dk;
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dq, Upload(q, act, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dk_, Upload(k, act, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dv, Upload(v, act, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dg, Upload(g, act, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer db, Upload(beta, sizeof(float) * t * h, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dstate, Upload(state, st, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dout, Poisoned(act, s.get()));
  if (chunked) {
    KdaChunkParams p;
    p.q = dq.get<float>();
    p.k = dk_.get<float>();
    p.v = dv.get<float>();
    p.g = dg.get<float>();
    p.beta = db.get<float>();
    p.state = dstate.get<float>();
    p.o = dout.get<float>();
    p.cu_seqlens = {0, t};
    p.slots = {0};
    p.num_heads = static_cast<int>(h);
    p.head_dim = static_cast<int>(dk);
    p.num_slots = 1;
    const size_t ws_bytes = KdaChunkWorkspaceBytes(p.cu_seqlens, p.num_heads, p.head_dim);
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer ws, Poisoned(ws_bytes, s.get()));  // intermediates start as NaN too
    GYRE_RETURN_IF_ERROR(KdaChunk(p, ws.get(), ws.bytes(), s.get()));
    GYRE_RETURN_IF_ERROR(s.Synchronize());  // ws dies at the end of this scope
  } else {
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer dslots, DeviceBuffer::Create(sizeof(int32_t)));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dslots.get(), 0, sizeof(int32_t), s.get()));
    KdaRecurrentParams p;
    p.q = dq.get<float>();
    p.k = dk_.get<float>();
    p.v = dv.get<float>();
    p.g = dg.get<float>();
    p.beta = db.get<float>();
    p.slots = dslots.get<int32_t>();
    p.state = dstate.get<float>();
    p.o = dout.get<float>();
    p.num_seqs = 1;
    p.num_tokens = static_cast<int>(t);
    p.num_heads = static_cast<int>(h);
    p.head_dim = static_cast<int>(dk);
    p.num_slots = 1;
    GYRE_RETURN_IF_ERROR(KdaRecurrent(p, s.get()));
    GYRE_RETURN_IF_ERROR(s.Synchronize());
  }
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(o, dout.get(), act, cudaMemcpyDeviceToHost, s.get()));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(state, dstate.get(), st, cudaMemcpyDeviceToHost, s.get()));
  return s.Synchronize();
}

}  // namespace gyre::cuda
