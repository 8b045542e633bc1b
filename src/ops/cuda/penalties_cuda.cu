// Logit processing kernels (penalties_cuda.h) and the host entry point for the op registry
// (ops_cuda.h PenaltiesOnDevice).
#include "ops/cuda/penalties_cuda.h"

#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/ops_cuda.h"

namespace gyre::cuda {
namespace {

__global__ void CountTokensKernel(const CountEntryDev* entries, int64_t n, const int32_t* last_token, int64_t vocab,
                                  int32_t* out_counts, uint8_t* in_prompt) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const CountEntryDev e = entries[i];
  if (e.slot < 0) return;
  const int32_t id = e.id >= 0 ? e.id : last_token[e.slot];
  if (id < 0 || id >= vocab) return;
  const int64_t at = static_cast<int64_t>(e.slot) * vocab + id;
  if (e.prompt) {
    in_prompt[at] = 1;
  } else {
    atomicAdd(&out_counts[at], 1);
  }
}

__global__ void ApplyPenaltyRowsKernel(float* logits, int64_t vocab, const PenaltyRowDev* params,
                                       const int32_t* bias_ids, const float* bias_values, const int32_t* stop_ids,
                                       const int32_t* out_counts, const uint8_t* in_prompt) {
  const int64_t r = blockIdx.x;
  const PenaltyRowDev p = params[r];
  if (!p.active) return;
  float* row = logits + r * vocab;
  if (threadIdx.x == 0) {
    for (int32_t k = p.bias_begin; k < p.bias_end; ++k) row[bias_ids[k]] = __fadd_rn(row[bias_ids[k]], bias_values[k]);
    for (int32_t k = p.stop_begin; k < p.stop_end; ++k) row[stop_ids[k]] = -INFINITY;
  }
  __syncthreads();
  if (p.slot < 0) return;
  const int32_t* counts = out_counts + static_cast<int64_t>(p.slot) * vocab;
  const uint8_t* prompt = in_prompt + static_cast<int64_t>(p.slot) * vocab;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const int32_t c = counts[i];
    if (c == 0 && !prompt[i]) continue;
    float l = row[i];
    if (p.repetition != 1.0f) l = l > 0.0f ? __fdiv_rn(l, p.repetition) : __fmul_rn(l, p.repetition);
    if (c > 0) {
      l = __fsub_rn(l, __fmul_rn(p.frequency, static_cast<float>(c)));
      l = __fsub_rn(l, p.presence);
    }
    row[i] = l;
  }
}

}  // namespace

Status CountTokens(const CountEntryDev* entries, int64_t n, const int32_t* last_token, int64_t vocab,
                   int32_t* out_counts, uint8_t* in_prompt, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  if (n < 0 || vocab < 1 || !entries || !last_token || !out_counts || !in_prompt)
    return Status::InvalidArgument("CountTokens: bad size or null pointer");
  CountTokensKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(entries, n, last_token, vocab,
                                                                                out_counts, in_prompt);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

Status ApplyPenaltyRows(float* logits, int64_t rows, int64_t vocab, const PenaltyRowDev* params,
                        const int32_t* bias_ids, const float* bias_values, const int32_t* stop_ids,
                        const int32_t* out_counts, const uint8_t* in_prompt, cudaStream_t stream) {
  if (rows == 0) return Status::Ok();
  if (rows < 0 || rows > 65535 || vocab < 1 || !logits || !params || !bias_ids || !bias_values || !stop_ids ||
      !out_counts || !in_prompt)
    return Status::InvalidArgument("ApplyPenaltyRows: bad shape or null pointer");
  ApplyPenaltyRowsKernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(logits, vocab, params, bias_ids, bias_values,
                                                                          stop_ids, out_counts, in_prompt);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

Status PenaltiesOnDevice(float* logits, int64_t rows, int64_t vocab, const PenaltyRowsHost& in) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  const size_t nb = sizeof(float) * static_cast<size_t>(rows * vocab);
  std::vector<PenaltyRowDev> params(rows);
  std::vector<int32_t> bias_ids, stop_ids;
  std::vector<float> bias_values;
  for (int64_t r = 0; r < rows; ++r) {
    const PenaltyRowsHost::Row& h = in.rows[r];
    PenaltyRowDev& p = params[r];
    p.active = 1;
    p.slot = static_cast<int32_t>(r);
    p.presence = h.presence;
    p.frequency = h.frequency;
    p.repetition = h.repetition;
    p.bias_begin = static_cast<int32_t>(bias_ids.size());
    for (const auto& [id, b] : h.bias) {
      bias_ids.push_back(id);
      bias_values.push_back(b);
    }
    p.bias_end = static_cast<int32_t>(bias_ids.size());
    p.stop_begin = static_cast<int32_t>(stop_ids.size());
    if (h.mask_stops) stop_ids.insert(stop_ids.end(), h.stop_ids.begin(), h.stop_ids.end());
    p.stop_end = static_cast<int32_t>(stop_ids.size());
  }
  bias_ids.push_back(0);  // never empty: the launcher refuses null pointers
  bias_values.push_back(0);
  stop_ids.push_back(0);
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dl, Upload(logits, nb, s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dp, Upload(params.data(), sizeof(PenaltyRowDev) * params.size(), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dbi, Upload(bias_ids.data(), 4 * bias_ids.size(), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dbv, Upload(bias_values.data(), 4 * bias_values.size(), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dst, Upload(stop_ids.data(), 4 * stop_ids.size(), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dc, Upload(in.output_counts, 4 * static_cast<size_t>(rows * vocab), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dpr, Upload(in.in_prompt, static_cast<size_t>(rows * vocab), s.get()));
  GYRE_RETURN_IF_ERROR(ApplyPenaltyRows(dl.get<float>(), rows, vocab, dp.get<PenaltyRowDev>(), dbi.get<int32_t>(),
                                        dbv.get<float>(), dst.get<int32_t>(), dc.get<int32_t>(), dpr.get<uint8_t>(),
                                        s.get()));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits, dl.get(), nb, cudaMemcpyDeviceToHost, s.get()));
  return s.Synchronize();
}

}  // namespace gyre::cuda
