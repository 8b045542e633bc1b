#include "parallel/shard.h"

#include <algorithm>
#include <cstring>

namespace gyre::parallel {

Range Split(int64_t total, int size, int rank) {
  const int64_t base = total / size, extra = total % size;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

Matrix SliceRows(const Matrix& w, int64_t r0, int64_t r1) {
  Matrix m;
  m.rows = r1 - r0;
  m.cols = w.cols;
  m.data.assign(w.data.begin() + r0 * w.cols, w.data.begin() + r1 * w.cols);
  return m;
}

Matrix SliceCols(const Matrix& w, int64_t c0, int64_t c1) {
  Matrix m;
  m.rows = w.rows;
  m.cols = c1 - c0;
  m.data.resize(m.rows * m.cols);
  for (int64_t r = 0; r < w.rows; ++r) std::memcpy(m.row(r), w.row(r) + c0, m.cols * sizeof(float));
  return m;
}

std::vector<float> SliceVec(std::span<const float> v, int64_t b, int64_t e) {
  return std::vector<float>(v.begin() + b, v.begin() + e);
}

void PutColumns(const float* src, int64_t n, int64_t src_cols, float* dst, int64_t dst_cols, int64_t col0) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * dst_cols + col0, src + i * src_cols, src_cols * sizeof(float));
}

}  // namespace gyre::parallel
