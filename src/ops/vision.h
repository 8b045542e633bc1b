// Vision-tower ops (docs/model-glm5-next.md §7.2, §7.3), CPU fp32: the axial 2D RoPE and the
// non-causal attention restricted to per-image segments. runtime/vision.h composes them into the
// tower; `gyre verify ops` checks them (vision.rope, vision.attention) against ops/reference.h.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace gyre::ops {

// Axial RoPE tables for patch coordinates `pos` = (h, w): cos/sin [pos.size(), head_dim]. The
// angle of channel j is coord·inv_freq[j mod (head_dim/4)], coord = h in the quarters 0 and 2 and
// w in 1 and 3, inv_freq[i] = 1 / theta^(2i / (head_dim/2)) in fp32. REQUIRES: head_dim % 4 == 0.
void VisionRopeTables(std::span<const std::pair<int32_t, int32_t>> pos, int64_t head_dim, float theta,
                      std::vector<float>* cos, std::vector<float>* sin);

// Rotates every head of x [n, heads, head_dim] (row stride `ld`, heads contiguous) in place,
// NeoX style over the whole head: x' = x·cos + rotate_half(x)·sin, rotate_half(x) = [−x₂, x₁].
// cos/sin are [n, head_dim] (VisionRopeTables).
void ApplyVisionRope(float* x, int64_t ld, int64_t n, int64_t heads, int64_t head_dim, std::span<const float> cos,
                     std::span<const float> sin);

// Non-causal multi-head attention, each row attending only to the rows of its own segment
// (`segments`: consecutive lengths summing to n). q, k, v [n, heads·head_dim] with row stride `ld`;
// out [n, heads·head_dim] contiguous; scale head_dim^-1/2; softmax with max subtraction.
void VisionAttention(const float* q, const float* k, const float* v, int64_t ld, std::span<const int64_t> segments,
                     int64_t heads, int64_t head_dim, float* out);

// Exact (erf) GELU, in place.
void GeluErf(std::span<float> x);

}  // namespace gyre::ops
