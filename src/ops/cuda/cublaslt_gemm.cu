#include "ops/cuda/cublaslt_gemm.h"

#include <cublasLt.h>

#include <string>

#include "core/trace.h"
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

namespace {
// Rows are bucketed to the next power of two: an algorithm found for one m of a bucket is tried
// (cublasLtMatmulAlgoCheck, no search) for the others, so a new prefill length does not cost a
// heuristic query per weight shape.
int64_t BucketRows(int64_t m) {
  int64_t b = 1;
  while (b < m) b <<= 1;
  return b;
}
}  // namespace

Result<std::unique_ptr<GemmLt>> GemmLt::Create(size_t workspace_bytes) {
  std::unique_ptr<GemmLt> g(new GemmLt());
  GYRE_CUDA_RETURN_IF_ERROR(cublasLtCreate(&g->handle_));
  GYRE_ASSIGN_OR_RETURN(g->workspace_, DeviceBuffer::Create(workspace_bytes));
  // cuBLASLt initializes its heuristics on the first query (measured on an H200: ~97 ms of host
  // time, bench/results/gpu_mcp_example): pay it here, at load, not in the first request's prefill.
  {
    GYRE_SPAN("gemm.init", "plan");
    Plan probe;
    cublasLtMatmulAlgo_t algo{};
    GYRE_RETURN_IF_ERROR(g->MakePlan(GemmDType::kF32, 64, 64, 64, 64, 64, &probe));
    GYRE_RETURN_IF_ERROR(g->Heuristic(probe, 64, 64, 64, &algo));
  }
  return Result<std::unique_ptr<GemmLt>>(std::move(g));
}

GemmLt::~GemmLt() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

Status GemmLt::MakePlan(GemmDType dtype, int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldy, Plan* plan) {
  const cudaDataType_t t = dtype == GemmDType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  const cudaDataType_t out_t = dtype == GemmDType::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  GYRE_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  GYRE_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
  GYRE_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)));
  GYRE_CUDA_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->a, t, k, n, k));
  GYRE_CUDA_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->b, t, k, m, ldx));
  GYRE_CUDA_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->c, out_t, n, m, ldy));
  return Status::Ok();
}

Status GemmLt::Prepare(GemmDType dtype, int64_t n, int64_t k, int64_t max_rows) {
  if (n <= 0 || k <= 0 || max_rows <= 0) return Status::InvalidArgument("gemm: sizes must be positive");
  for (int64_t b = 1; b <= BucketRows(max_rows); b <<= 1) {
    const auto bkey = std::make_tuple(b, n, k, static_cast<int>(dtype), k, n);
    if (bucket_algos_.count(bkey)) continue;
    Plan plan;
    cublasLtMatmulAlgo_t algo{};
    GYRE_RETURN_IF_ERROR(MakePlan(dtype, b, n, k, k, n, &plan));
    GYRE_RETURN_IF_ERROR(Heuristic(plan, b, n, k, &algo));
    bucket_algos_.emplace(bkey, algo);
  }
  return Status::Ok();
}

Status GemmLt::Heuristic(const Plan& plan, int64_t m, int64_t n, int64_t k, cublasLtMatmulAlgo_t* algo) {
  GYRE_SPAN("gemm.heuristic", "plan");
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
    st = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  GYRE_CUDA_RETURN_IF_ERROR(st);
  if (found == 0)
    return Status::Unimplemented("gemm: cuBLASLt has no algorithm for m=" + std::to_string(m) + " n=" + std::to_string(n) +
                                 " k=" + std::to_string(k));
  *algo = result.algo;
  ++heuristic_queries_;
  return Status::Ok();
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
    // ---- descriptors per exact shape; the algorithm per row bucket when it checks ----
    GYRE_SPAN("gemm.plan", "plan",
              trace::Attrs{.detail = "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k)});
    auto plan = std::make_unique<Plan>();
    GYRE_RETURN_IF_ERROR(MakePlan(dtype, m, n, k, ldx, ldy, plan.get()));
    const auto bkey = std::make_tuple(BucketRows(m), n, k, static_cast<int>(dtype), ldx, ldy);
    const auto b = bucket_algos_.find(bkey);
    bool reused = false;
    if (b != bucket_algos_.end()) {
      cublasLtMatmulHeuristicResult_t check{};
      reused = cublasLtMatmulAlgoCheck(handle_, plan->desc, plan->a, plan->b, plan->c, plan->c, &b->second, &check) ==
                   CUBLAS_STATUS_SUCCESS &&
               check.workspaceSize <= workspace_.bytes();
      if (reused) {
        plan->algo = b->second;
        ++algo_reuses_;
      }
    }
    if (!reused) {
      GYRE_RETURN_IF_ERROR(Heuristic(*plan, m, n, k, &plan->algo));
      if (b == bucket_algos_.end()) bucket_algos_.emplace(bkey, plan->algo);
    }
    it = plans_.emplace(key, std::move(plan)).first;
  }
  const Plan& p = *it->second;
  const float alpha = 1.0f, beta = 0.0f;
  // The launch on the host: the first launch of a kernel also loads its module (lazy loading).
  GYRE_SPAN("gemm.launch", "launch");
  GYRE_CUDA_RETURN_IF_ERROR(cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo,
                                           workspace_.get(), workspace_.bytes(), stream));
  return Status::Ok();
}

}  // namespace gyre::cuda
