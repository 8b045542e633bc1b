// Manifold-constrained hyper-connections (mHC), one site (docs/model-glm5-next.md §3.2–3.3).
#pragma once

#include <cstdint>
#include <span>

#include "core/matrix.h"
#include "ops/numerics.h"

namespace gyre::ops {

struct HcParams {
  int64_t n = 4;         // streams
  int64_t d = 0;         // hidden size
  float norm_eps = 1e-5f;
  float hc_eps = 1e-6f;
  int64_t sinkhorn_iters = 20;
};

// For each of `t` tokens with streams X [t, n, d]:
//   x̃ = rmsnorm(vec X) (no weight); μ = fn·x̃ (fp32); pre = σ(s0 μ_pre + b) + eps;
//   post = 2σ(s1 μ_post + b); C = Sinkhorn(softmax_rows(s2 μ_comb + b) + eps);
//   y = Σ_s pre[s]·X[s] (rounded once).
// Outputs: post [t, n], comb [t, n, n] (row-major C[i, j]), y [t, d].
void HcPre(const float* x, int64_t t, const Matrix& fn, std::span<const float> base, std::span<const float> scale,
           const HcParams& p, float* post, float* comb, float* y, const Numerics& num);

// X'[s] = round(post[s]) · a + Σ_j round(C[j, s]) · X[j] for every stream s (in place on x).
// a [t, d] is the sublayer output.
void HcPost(float* x, int64_t t, const float* a, const float* post, const float* comb, const HcParams& p,
            const Numerics& num);

}  // namespace gyre::ops
