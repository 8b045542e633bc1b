// Shard arithmetic shared by the plans: which slice of a dimension a rank owns, and slicing of
// weight matrices into column-parallel (output rows) and row-parallel (input columns) pieces.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/matrix.h"

namespace gyre::parallel {

// The half-open slice [begin, end) of `total` items owned by `rank` of `size`: contiguous,
// sizes differ by at most one, lower ranks take the larger slices.
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
Range Split(int64_t total, int size, int rank);

// Rows [r0, r1) of w (a column-parallel slice of a [out, in] weight: fewer outputs).
Matrix SliceRows(const Matrix& w, int64_t r0, int64_t r1);
// Columns [c0, c1) of w (a row-parallel slice: the inputs this rank holds).
Matrix SliceCols(const Matrix& w, int64_t c0, int64_t c1);
// Elements [b, e) of v.
std::vector<float> SliceVec(std::span<const float> v, int64_t b, int64_t e);

// Copies src [n, src_cols] into columns [col0, col0 + src_cols) of dst [n, dst_cols].
void PutColumns(const float* src, int64_t n, int64_t src_cols, float* dst, int64_t dst_cols, int64_t col0);

}  // namespace gyre::parallel
