// Vision-tower kernels (vision_cuda.h). Sections: element-wise epilogues; q/k/v split with the
// per-head norm and RoPE; attention (cuBLAS strided-batched GEMMs around a row softmax); the
// registry's host entry points.
//
// Plan: the tower's FLOPs are in its linear layers (cuBLASLt, runtime/cuda_vision.cu) and in the
// attention's two GEMMs per head, which run here as strided-batched SGEMMs over the heads; the
// rest is memory-bound (one pass each) and small next to them.
#include "ops/cuda/vision_cuda.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/ops_cuda.h"

namespace gyre::cuda {
namespace {

constexpr int kThreads = 256;

int Grid(int64_t n) { return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 8192))); }


// ---- element-wise epilogues ------------------------------------------------------------------

__global__ void AddBiasKernel(float* y, int64_t n, int64_t d, const float* bias) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * d;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += bias[i % d];
}

__global__ void AddBiasResidualKernel(float* x, const float* y, int64_t n, int64_t d, const float* bias) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * d;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] += bias ? y[i] + bias[i % d] : y[i];  // (the CPU adds the bias into y first, then y into x)
}

__global__ void GeluErfKernel(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  }
}

// ---- q / k / v split, per-head norm, RoPE ------------------------------------------------------

// Block reduction of one value over blockDim.x threads (a multiple of 32, <= 1024).
__device__ float BlockSum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // (red is reused across calls)
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float s = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) s += red[w];
  return s;
}

// One block per (row, head, which ∈ {q, k}) for the rotation; v rows are copied by the same grid.
// blockDim.x = head_dim rounded up to a multiple of 32. x' = norm(x)·cos + rotate_half(norm(x))·sin.
__global__ void QkvSplitKernel(const float* qkv, int64_t n, int64_t heads, int64_t hd, const float* q_norm,
                               const float* k_norm, float eps, const float* cos, const float* sin, float* q, float* k,
                               float* v) {
  extern __shared__ float sh[];  // [hd] normed values, then 32 reduction slots
  float* xs = sh;
  float* red = sh + hd;
  const int64_t row = blockIdx.x, h = blockIdx.y;
  const int which = blockIdx.z;  // 0 q, 1 k, 2 v
  const int64_t D = heads * hd;
  const int j = threadIdx.x;
  const float* src = qkv + row * 3 * D + which * D + h * hd;
  if (which == 2) {
    if (j < hd) v[row * D + h * hd + j] = src[j];
    return;
  }
  const float x = j < hd ? src[j] : 0.0f;
  const float ss = BlockSum(x * x, red);
  const float* w = which == 0 ? q_norm : k_norm;
  // ops::RmsNorm: y = w ⊙ x · (1 / sqrt(mean(x²) + eps)).
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(hd) + eps);
  if (j < hd) xs[j] = w[j] * (x * inv);
  __syncthreads();
  if (j < hd) {
    const int64_t half = hd / 2;
    const float rot = j < half ? -xs[j + half] : xs[j - half];
    float* dst = (which == 0 ? q : k) + row * D + h * hd;
    dst[j] = xs[j] * cos[row * hd + j] + rot * sin[row * hd + j];
  }
}

// In place; one block per (row, head), blockDim.x >= hd.
__global__ void RopeKernel(float* x, int64_t ld, int64_t hd, const float* cos, const float* sin) {
  extern __shared__ float xs[];
  const int64_t row = blockIdx.x, h = blockIdx.y;
  const int j = threadIdx.x;
  float* p = x + row * ld + h * hd;
  if (j < hd) xs[j] = p[j];
  __syncthreads();
  if (j < hd) {
    const int64_t half = hd / 2;
    const float rot = j < half ? -xs[j + half] : xs[j - half];
    p[j] = xs[j] * cos[row * hd + j] + rot * sin[row * hd + j];
  }
}

// ---- attention -------------------------------------------------------------------------------

// Row softmax over rows of length `len` (one block per row): into p (the same rows; p may be s).
template <typename OutT>
__global__ void SoftmaxRowsKernel(float* s, int64_t len, OutT* p) {
  __shared__ float red[32];
  float* row = s + blockIdx.x * len;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) mx = fmaxf(mx, row[j]);
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red[warp] = mx;
  __syncthreads();
  mx = -INFINITY;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) mx = fmaxf(mx, red[w]);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    const float e = expf(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  sum = BlockSum(sum, red);
  const float inv = 1.0f / sum;
  OutT* prow = p + blockIdx.x * len;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    if constexpr (std::is_same_v<OutT, float>) {
      prow[j] = row[j] * inv;
    } else {
      prow[j] = __float2bfloat16_rn(row[j] * inv);
    }
  }
}

}  // namespace

Status AddBias(float* y, int64_t n, int64_t d, const float* bias, cudaStream_t stream) {
  if (!bias || n <= 0 || d <= 0) return Status::Ok();
  AddBiasKernel<<<Grid(n * d), kThreads, 0, stream>>>(y, n, d, bias);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

Status AddBiasResidual(float* x, const float* y, int64_t n, int64_t d, const float* bias, cudaStream_t stream) {
  if (n <= 0 || d <= 0) return Status::Ok();
  AddBiasResidualKernel<<<Grid(n * d), kThreads, 0, stream>>>(x, y, n, d, bias);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

Status GeluErf(float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return Status::Ok();
  GeluErfKernel<<<Grid(n), kThreads, 0, stream>>>(x, n);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

Status VisionQkvSplit(const float* qkv, int64_t n, int64_t heads, int64_t head_dim, const float* q_norm,
                      const float* k_norm, float eps, const float* cos, const float* sin, float* q, float* k, float* v,
                      cudaStream_t stream) {
  if (n <= 0 || heads <= 0 || head_dim <= 0 || head_dim % 2 != 0 || head_dim > 1024 || heads > 65535)
    return Status::InvalidArgument("vision qkv split: n " + std::to_string(n) + ", heads " + std::to_string(heads) +
                                   ", head_dim " + std::to_string(head_dim) + " (even, <= 1024)");
  for (int64_t r0 = 0; r0 < n; r0 += INT32_MAX) {
    const int64_t rows = std::min<int64_t>(n - r0, INT32_MAX);
    const int threads = static_cast<int>((head_dim + 31) / 32 * 32);
    const int64_t D = heads * head_dim;
    QkvSplitKernel<<<dim3(static_cast<unsigned>(rows), static_cast<unsigned>(heads), 3), threads,
                     (head_dim + 32) * sizeof(float), stream>>>(qkv + r0 * 3 * D, rows, heads, head_dim, q_norm,
                                                                k_norm, eps, cos + r0 * head_dim, sin + r0 * head_dim,
                                                                q + r0 * D, k + r0 * D, v + r0 * D);
    GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return Status::Ok();
}

Status VisionRope(float* x, int64_t ld, int64_t n, int64_t heads, int64_t head_dim, const float* cos, const float* sin,
                  cudaStream_t stream) {
  if (n <= 0 || heads <= 0 || head_dim <= 0 || head_dim % 2 != 0 || head_dim > 1024 || heads > 65535 ||
      n > INT32_MAX || ld < heads * head_dim)
    return Status::InvalidArgument("vision rope: n " + std::to_string(n) + ", heads " + std::to_string(heads) +
                                   ", head_dim " + std::to_string(head_dim) + ", ld " + std::to_string(ld));
  const int threads = static_cast<int>((head_dim + 31) / 32 * 32);
  RopeKernel<<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(heads)), threads, head_dim * sizeof(float),
               stream>>>(x, ld, head_dim, cos, sin);
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

Status VisionAttention(cublasContext* handle, const float* q, const float* k, const float* v,
                       std::span<const int64_t> segments, int64_t heads, int64_t head_dim, float* out, float* scores,
                       int64_t score_floats, cudaStream_t stream, const VisionAttentionBf16* bf16) {
  const int64_t D = heads * head_dim;
  int64_t longest = 0;
  for (int64_t len : segments) {
    if (len <= 0) return Status::InvalidArgument("vision attention: a segment of " + std::to_string(len) + " rows");
    longest = std::max(longest, len);
  }
  if (heads <= 0 || head_dim <= 0 || longest > INT32_MAX || D > INT32_MAX)
    return Status::InvalidArgument("vision attention: heads " + std::to_string(heads) + ", head_dim " +
                                   std::to_string(head_dim));
  if (score_floats < heads * longest)
    return Status::InvalidArgument("vision attention: a score workspace of " + std::to_string(score_floats) +
                                   " floats is under heads × the longest segment (" + std::to_string(heads * longest) +
                                   ")");
  GYRE_CUDA_RETURN_IF_ERROR(cublasSetStream(handle, stream));
  GYRE_CUDA_RETURN_IF_ERROR(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));  // FP32: no TF32
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim)), one = 1.0f, zero = 0.0f;
  int64_t start = 0;
  for (int64_t len : segments) {
    // Query rows per chunk: the scores of every head for `rows` queries fit the workspace.
    const int64_t rows = std::min<int64_t>(len, score_floats / (heads * len));
    for (int64_t q0 = 0; q0 < len; q0 += rows) {
      const int64_t nq = std::min(rows, len - q0);
      const int64_t qo = (start + q0) * D, ko = start * D;
      // Row-major S[h] [nq, len] = scale · Q_h · K_hᵀ, as column-major Sᵀ = K_h · Q_hᵀ (see the header).
      if (bf16) {
        const auto* kb = static_cast<const __nv_bfloat16*>(bf16->k) + ko;
        const auto* qb = static_cast<const __nv_bfloat16*>(bf16->q) + qo;
        GYRE_CUDA_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
            handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(len), static_cast<int>(nq), static_cast<int>(head_dim),
            &scale, kb, CUDA_R_16BF, static_cast<int>(D), head_dim, qb, CUDA_R_16BF, static_cast<int>(D), head_dim,
            &zero, scores, CUDA_R_32F, static_cast<int>(len), nq * len, static_cast<int>(heads), CUBLAS_COMPUTE_32F,
            CUBLAS_GEMM_DEFAULT));
      } else {
        GYRE_CUDA_RETURN_IF_ERROR(cublasSgemmStridedBatched(
            handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(len), static_cast<int>(nq), static_cast<int>(head_dim),
            &scale, k + ko, static_cast<int>(D), head_dim, q + qo, static_cast<int>(D), head_dim, &zero, scores,
            static_cast<int>(len), nq * len, static_cast<int>(heads)));
      }
      const int64_t nrows = heads * nq;
      for (int64_t r0 = 0; r0 < nrows; r0 += INT32_MAX) {
        const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(nrows - r0, INT32_MAX));
        if (bf16) {
          SoftmaxRowsKernel<<<blocks, kThreads, 0, stream>>>(scores + r0 * len, len,
                                                             static_cast<__nv_bfloat16*>(bf16->p) + r0 * len);
        } else {
          SoftmaxRowsKernel<<<blocks, kThreads, 0, stream>>>(scores + r0 * len, len, scores + r0 * len);
        }
        GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
      }
      // Row-major O_h [nq, hd] (row stride D) = P_h · V_h, as column-major Oᵀ = V_hᵀ · P_hᵀ.
      if (bf16) {
        GYRE_CUDA_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
            handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(head_dim), static_cast<int>(nq), static_cast<int>(len),
            &one, static_cast<const __nv_bfloat16*>(bf16->v) + ko, CUDA_R_16BF, static_cast<int>(D), head_dim,
            bf16->p, CUDA_R_16BF, static_cast<int>(len), nq * len, &zero, out + qo, CUDA_R_32F, static_cast<int>(D),
            head_dim, static_cast<int>(heads), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      } else {
        GYRE_CUDA_RETURN_IF_ERROR(cublasSgemmStridedBatched(
            handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(head_dim), static_cast<int>(nq), static_cast<int>(len),
            &one, v + ko, static_cast<int>(D), head_dim, scores, static_cast<int>(len), nq * len, &zero, out + qo,
            static_cast<int>(D), head_dim, static_cast<int>(heads)));
      }
    }
    start += len;
  }
  return Status::Ok();
}

// ---- host entry points (the op registry) -------------------------------------------------------

namespace {
size_t F32(int64_t n) { return sizeof(float) * static_cast<size_t>(n); }
}  // namespace

Status VisionRopeOnDevice(const float* x, int64_t n, int64_t heads, int64_t head_dim, const float* cos,
                          const float* sin, float* out) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  // Rows padded by 8 floats: the padding must come back untouched (poison in, poison out).
  const int64_t D = heads * head_dim, ld = D + 8;
  std::vector<float> xp(n * ld);
  std::memset(xp.data(), 0xFF, F32(n * ld));
  for (int64_t i = 0; i < n; ++i) std::copy_n(x + i * D, D, &xp[i * ld]);
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dx, Upload(xp.data(), F32(n * ld), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dc, Upload(cos, F32(n * head_dim), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dsn, Upload(sin, F32(n * head_dim), s.get()));
  GYRE_RETURN_IF_ERROR(VisionRope(dx.get<float>(), ld, n, heads, head_dim, dc.get<float>(), dsn.get<float>(), s.get()));
  std::vector<float> yp(n * ld);
  GYRE_RETURN_IF_ERROR(Download(yp.data(), dx, F32(n * ld), s));
  for (int64_t i = 0; i < n; ++i) {
    if (!AllPoison(&yp[i * ld + D], ld - D))
      return Status::Internal("vision rope: row " + std::to_string(i) + " padding was written");
    std::copy_n(&yp[i * ld], D, out + i * D);
  }
  return Status::Ok();
}

Status VisionAttentionOnDevice(const float* q, const float* k, const float* v, int64_t n,
                               std::span<const int64_t> segments, int64_t heads, int64_t head_dim, float* out) {
  GYRE_ASSIGN_OR_RETURN(Stream s, Stream::Create());
  const int64_t D = heads * head_dim;
  int64_t longest = 0;
  for (int64_t len : segments) longest = std::max(longest, len);
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dq, Upload(q, F32(n * D), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dk, Upload(k, F32(n * D), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dv, Upload(v, F32(n * D), s.get()));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dout, Poisoned(F32(n * D), s.get()));
  // A workspace of about 3 query rows per chunk: the chunking runs on the registry's shapes too.
  const int64_t ws = heads * longest * std::min<int64_t>(3, longest);
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dws, DeviceBuffer::Create(F32(ws)));
  cublasHandle_t h = nullptr;
  GYRE_CUDA_RETURN_IF_ERROR(cublasCreate(&h));
  Status st = VisionAttention(h, dq.get<float>(), dk.get<float>(), dv.get<float>(), segments, heads, head_dim,
                              dout.get<float>(), dws.get<float>(), ws, s.get());
  const Status dl = st.ok() ? Download(out, dout, F32(n * D), s) : Status::Ok();
  (void)cublasDestroy(h);
  GYRE_RETURN_IF_ERROR(st);
  return dl;
}

}  // namespace gyre::cuda
