// Matrix: an owned, row-major fp32 matrix, the CPU backend's weight type ([out, in] for linear
// layers, as in HF checkpoints). Vectors are Matrix with rows == 1 or plain std::vector<float>.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gyre {

struct Matrix {
  std::vector<float> data;  // rows * cols
  int64_t rows = 0, cols = 0;

  bool empty() const { return data.empty(); }
  float* row(int64_t r) { return data.data() + r * cols; }
  const float* row(int64_t r) const { return data.data() + r * cols; }
  std::span<const float> span() const { return data; }
  size_t bytes() const { return data.size() * sizeof(float); }
};

}  // namespace gyre
