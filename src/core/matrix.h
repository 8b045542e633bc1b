// Matrix: an owned, row-major fp32 matrix, the CPU backend's weight type ([out, in] for linear
// layers, as in HF checkpoints). Vectors are Matrix with rows == 1 or plain std::vector<float>.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace gyre {

struct QuantizedWeight;  // quant/quant.h

struct Matrix {
  std::vector<float> data;  // rows * cols
  int64_t rows = 0, cols = 0;
  // Set when the checkpoint stores this weight quantized (FP8 blocks or INT8 channels,
  // docs/quantization.md). `data` then holds the dequantized values, which every fp32 consumer
  // reads (weight-only effect); ops::Linear runs W8A8 on `quant` instead. Shared, not owned alone:
  // copies of a Matrix (a tied lm_head) share the immutable quantized storage.
  std::shared_ptr<const QuantizedWeight> quant;

  bool empty() const { return data.empty(); }
  float* row(int64_t r) { return data.data() + r * cols; }
  const float* row(int64_t r) const { return data.data() + r * cols; }
  std::span<const float> span() const { return data; }
  size_t bytes() const { return data.size() * sizeof(float); }
};

}  // namespace gyre
