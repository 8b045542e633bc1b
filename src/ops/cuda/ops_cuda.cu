#include "ops/cuda/ops_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
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

namespace {
// The recurrent kernel's arguments for one sequence over device buffers (slots, o and the token
// layout are the caller's).
KdaRecurrentParams OneSequence(const DeviceBuffer& q, const DeviceBuffer& k, const DeviceBuffer& v,
                               const DeviceBuffer& g, const DeviceBuffer& beta, DeviceBuffer& state, int64_t h,
                               int64_t dk, int64_t num_slots) {
  KdaRecurrentParams p;
  p.q = q.get<float>();
  p.k = k.get<float>();
  p.v = v.get<float>();
  p.g = g.get<float>();
  p.beta = beta.get<float>();
  p.state = state.get<float>();
  p.num_seqs = 1;
  p.num_heads = static_cast<int>(h);
  p.head_dim = static_cast<int>(dk);
  p.num_slots = num_slots;
  return p;
}
}  // namespace

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
    KdaRecurrentParams p = OneSequence(dq, dk_, dv, dg, db, dstate, h, dk, 1);
    p.slots = dslots.get<int32_t>();
    p.o = dout.get<float>();
    p.num_tokens = static_cast<int>(t);
    GYRE_RETURN_IF_ERROR(KdaRecurrent(p, s.get()));
    GYRE_RETURN_IF_ERROR(s.Synchronize());
  }
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(o, dout.get(), act, cudaMemcpyDeviceToHost, s.get()));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(state, dstate.get(), st, cudaMemcpyDeviceToHost, s.get()));
  return s.Synchronize();
}

Status KdaReplayFoldOnDevice(const float* q, const float* k, const float* v, const float* g, const float* beta,
                             int64_t t, int64_t h, int64_t dk, float* state) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  const int64_t rows = std::max<int64_t>(t, 1);  // t = 0: one unused row keeps the buffers valid
  const size_t act = sizeof(float) * rows * h * dk, st = sizeof(float) * h * dk * dk;
  std::vector<float> pad(static_cast<size_t>(rows * h * dk), 0.0f), pad_b(static_cast<size_t>(rows * h), 0.0f);
  auto src = [&](const float* x, std::vector<float>& z) { return t > 0 ? x : z.data(); };
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dq, Upload(src(q, pad), act, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dk_, Upload(src(k, pad), act, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dv, Upload(src(v, pad), act, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dg, Upload(src(g, pad), act, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer db, Upload(src(beta, pad_b), sizeof(float) * rows * h, s.get()));
  // Two slots: 0 speculates then folds, 1 runs the plain recurrence.
  std::vector<float> two(2 * st / sizeof(float));
  std::copy(state, state + st / sizeof(float), two.begin());
  std::copy(state, state + st / sizeof(float), two.begin() + st / sizeof(float));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dstate, Upload(two.data(), 2 * st, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer o_spec, Poisoned(act, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer o_plain, Poisoned(act, s.get()));
  // Device ints: slot 0, slot 1, cu {0, t}, keep {1}.
  const int32_t ints[5] = {0, 1, 0, static_cast<int32_t>(t), 1};
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dints, Upload(ints, sizeof(ints), s.get()));
  const int32_t* di = dints.get<int32_t>();
  const KdaRecurrentParams p = OneSequence(dq, dk_, dv, dg, db, dstate, h, dk, 2);
  KdaRecurrentParams spec = p;  // the speculative launch: ragged rows, state kept
  spec.slots = di + 0;
  spec.cu_seqlens = di + 2;
  spec.keep = di + 4;
  spec.o = o_spec.get<float>();
  GYRE_RETURN_IF_ERROR(KdaRecurrent(spec, s.get()));
  std::vector<float> after(two.size());
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(after.data(), dstate.get(), 2 * st, cudaMemcpyDeviceToHost, s.get()));
  GYRE_RETURN_IF_ERROR(s.Synchronize());
  if (std::memcmp(after.data(), two.data(), st) != 0)
    return Status::Internal("kda.replay_fold: the speculative launch changed the state");
  KdaRecurrentParams fold = p;  // the commit: the same rows, state written, no outputs
  fold.slots = di + 0;
  fold.cu_seqlens = di + 2;
  fold.o = nullptr;
  GYRE_RETURN_IF_ERROR(KdaRecurrent(fold, s.get()));
  if (t > 0) {
    KdaRecurrentParams plain = p;  // the recurrence: fixed t tokens, slot 1, in place
    plain.slots = di + 1;
    plain.num_tokens = static_cast<int>(t);
    plain.o = o_plain.get<float>();
    GYRE_RETURN_IF_ERROR(KdaRecurrent(plain, s.get()));
  }
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(after.data(), dstate.get(), 2 * st, cudaMemcpyDeviceToHost, s.get()));
  std::vector<float> os(static_cast<size_t>(rows * h * dk)), op(os.size());
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(os.data(), o_spec.get(), act, cudaMemcpyDeviceToHost, s.get()));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(op.data(), o_plain.get(), act, cudaMemcpyDeviceToHost, s.get()));
  GYRE_RETURN_IF_ERROR(s.Synchronize());
  if (std::memcmp(after.data(), after.data() + st / sizeof(float), st) != 0)
    return Status::Internal("kda.replay_fold: the fold's state differs from the plain recurrence's");
  if (t > 0 && std::memcmp(os.data(), op.data(), act) != 0)
    return Status::Internal("kda.replay_fold: the speculative outputs differ from the plain recurrence's");
  std::copy(after.begin(), after.begin() + st / sizeof(float), state);
  return Status::Ok();
}

}  // namespace gyre::cuda
