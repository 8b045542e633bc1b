#include "ops/cuda/cublaslt_gemm.h"

#include <cublasLt.h>

#include <string>

#include "ops/cuda/cuda_check.h"

namespace gyre::cuda {

// Row-major y[m,n] = x[m,k]·w[n,k]ᵀ is column-major yᵀ[n,m] = op(A)·B with A = w viewed as
// column-major [k, n] (op = T) and B = x viewed as column-major [k, m] (op = N).
struct GemmLt::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

Result<std::unique_ptr<GemmLt>> GemmLt::Create(size_t workspace_bytes) {
  std::unique_ptr<GemmLt> g(new GemmLt());
  GYRE_CUDA_RETURN_IF_ERROR(cublasLtCreate(&g->handle_));
  GYRE_ASSIGN_OR_RETURN(g->workspace_, DeviceBuffer::Create(workspace_bytes));
  return Result<std::unique_ptr<GemmLt>>(std::move(g));
}

GemmLt::~GemmLt() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

Status GemmLt::Run(GemmDType dtype, const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k,
                   cudaStream_t stream, int64_t ldx, int64_t ldy) {
  if (m <= 0 || n <= 0 || k <= 0) return Status::InvalidArgument("gemm: sizes must be positive");
  if (ldx == 0) ldx = k;
  if (ldy == 0) ldy = n;
  if (ldx < k || ldy < n) return Status::InvalidArgument("gemm: row strides must be at least k and n");
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  if (!aligned(x) || !aligned(w) || !aligned(y)) return Status::InvalidArgument("gemm: pointers must be 16-byte aligned");
  const auto key = std::make_tuple(m, n, k, static_cast<int>(dtype), ldx, ldy);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    // ---- one heuristic query per shape ----
    auto plan = std::make_unique<Plan>();
    const cudaDataType_t t = dtype == GemmDType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
    const cudaDataType_t out_t = dtype == GemmDType::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
    GYRE_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    GYRE_CUDA_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
    GYRE_CUDA_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)));
    GYRE_CUDA_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->a, t, k, n, k));
    GYRE_CUDA_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->b, t, k, m, ldx));
    GYRE_CUDA_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->c, out_t, n, m, ldy));
    cublasLtMatmulPreference_t pref = nullptr;
    GYRE_CUDA_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = workspace_.bytes();
    const uint32_t align = 16;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    GYRE_CUDA_RETURN_IF_ERROR(st);
    if (found == 0)
      return Status::Unimplemented("gemm: cuBLASLt has no algorithm for m=" + std::to_string(m) +
                                   " n=" + std::to_string(n) + " k=" + std::to_string(k));
    plan->algo = result.algo;
    it = plans_.emplace(key, std::move(plan)).first;
  }
  const Plan& p = *it->second;
  const float alpha = 1.0f, beta = 0.0f;
  GYRE_CUDA_RETURN_IF_ERROR(cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo,
                                           workspace_.get(), workspace_.bytes(), stream));
  return Status::Ok();
}

}  // namespace gyre::cuda
