// The glm5_next vision tower on the GPU (docs/vision.md "CUDA tower"): runtime/vision.h's
// VisionForward with the same inputs and outputs, its weights on the device. Linear layers through
// cuBLASLt (fp32 weights: FP32 compute, TF32 off; or bf16 weights and activations with fp32
// accumulation and fp32 outputs), the attention as cuBLAS strided-batched GEMMs around a row
// softmax (fp32, or bf16 operands on the tensor cores with the bf16 option), the rest as one-pass kernels (ops/cuda/vision_cuda.h, elementwise_cuda.h).
//
// Parity: with fp32 weights it matches the CPU tower (and transformers' goldens) to fp32
// reassociation (src/runtime/cuda_vision_gpu_test.cc states the bounds).
// Thread safety: Forward may be called from any thread; calls are serialised by a mutex (one
// forward at a time on the tower's own stream, beside whatever else runs on the device).
// Plain C++ header (no CUDA types): the server and the CLI include it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/vision_weights.h"
#include "runtime/vision.h"

namespace gyre {

struct CudaVisionOptions {
  // bf16 weights, GEMM inputs and attention operands (fp32 accumulation, scores, softmax and
  // activations), else fp32 throughout.
  bool bf16_weights = false;
  // Device workspace for the attention scores: bounds the query rows per chunk (heads · rows ·
  // segment length floats); at least one query row of the longest segment is always allocated.
  int64_t score_workspace_bytes = int64_t{256} << 20;
};

struct CudaVisionStats {
  int64_t weight_bytes = 0;   // on the device
  int64_t forwards = 0, images = 0, patches = 0;
  double last_ms = 0;         // device time of the last forward (events around it)
};

class CudaVisionTower {
 public:
  // Uploads the weights to the current device. Errors: InvalidArgument for a config the kernels do
  // not take (odd head_dim, head_dim > 1024), Internal for CUDA errors (out of memory included).
  static Result<std::unique_ptr<CudaVisionTower>> FromHost(const VisionConfig& config, const VisionWeights& weights,
                                                           const CudaVisionOptions& opts = {});
  ~CudaVisionTower();
  CudaVisionTower(const CudaVisionTower&) = delete;
  CudaVisionTower& operator=(const CudaVisionTower&) = delete;

  // As VisionForward (the same argument checks and errors); blocks until the rows are on the host.
  Status Forward(std::span<const float> pixel_values, std::span<const ImageGrid> grids,
                 std::vector<float>* image_embeds, VisionTrace* trace = nullptr);

  const VisionConfig& config() const;
  CudaVisionStats stats() const;

 private:
  struct Impl;
  explicit CudaVisionTower(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The tower as a VisionTowerFn (serve::ImageInputOptions::make_tower): owns a CudaVisionTower.
Result<VisionTowerFn> CudaVisionTowerFn(const VisionConfig& config, const VisionWeights& weights,
                                        const CudaVisionOptions& opts = {});

}  // namespace gyre
