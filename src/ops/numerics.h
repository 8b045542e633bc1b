// Numerics: where the CPU backend rounds activations.
//
// kF32: every activation stays fp32 (weights are used at the values stored on disk). This matches
// the reference run in fp32 (`model.float()`, TF32 off) to within fp32 reassociation noise.
// kBf16: activations are rounded to bf16 at the points where the bf16 reference rounds them
// (docs/model-glm5-next.md §8): after every linear layer, norm, activation product and residual
// add; reductions still accumulate in fp32. Matches a bf16 reference up to rounding-boundary
// flips.
#pragma once

#include <span>

#include "core/dtype.h"

namespace gyre {

enum class ActDType { kF32, kBf16 };

struct Numerics {
  ActDType act = ActDType::kF32;
  bool bf16() const { return act == ActDType::kBf16; }
  // Rounds `x` to the activation dtype (no-op for fp32).
  void Round(std::span<float> x) const {
    if (bf16()) RoundBf16InPlace(x);
  }
  float Round(float v) const { return bf16() ? RoundBf16(v) : v; }
};

}  // namespace gyre
