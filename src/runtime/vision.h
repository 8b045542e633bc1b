// The glm5_next vision tower on the CPU (docs/model-glm5-next.md §7, docs/engine.md "Vision
// tower"), fp32 throughout (its ops: ops/vision.h): it matches transformers 5.17 run in fp32 with TF32 off.
//
// Input: `pixel_values` [N, C·T·P·P] as the reference processor emits it (patches of every image
// concatenated, each image's patches in block-major order over spatial_merge_size² blocks) and
// one grid [t, h, w] per image (N = Σ t·h·w). Output: one row of out_hidden_size per LLM image
// token (N / merge² rows), images in order.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"
#include "model/vision_weights.h"

namespace gyre {

struct ImageGrid {
  int64_t t = 1, h = 0, w = 0;  // in patches
};

// (h, w) patch coordinates of one grid in the tower's order: row-major over merge×merge blocks,
// row-major inside a block, the whole list repeated for each of the t temporal slices.
// REQUIRES: h and w are multiples of `merge`.
std::vector<std::pair<int32_t, int32_t>> VisionPatchPositions(const ImageGrid& g, int64_t merge);

// Optional intermediates of VisionForward (all [rows, width] row-major, fp32).
struct VisionTrace {
  std::vector<float> patch_embed;     // [N, D]
  std::vector<float> block0;          // [N, D] output of the first block (empty when depth is 0)
  std::vector<float> post_layernorm;  // [N, D]
  std::vector<float> downsample;      // [N/m², O]
};

// The patch positions (VisionPatchPositions of every grid, in order) and the attention segments
// (one per temporal slice of every image: h·w rows each) of a tower input, with the argument
// checks of VisionForward (its errors, below). Shared by the CPU and the CUDA tower.
Status PlanVisionInputs(const VisionConfig& c, size_t num_pixel_values, std::span<const ImageGrid> grids,
                        std::vector<std::pair<int32_t, int32_t>>* pos, std::vector<int64_t>* segments);

// Runs the tower. Errors: InvalidArgument when grids are empty or not positive, h or w is not a
// multiple of spatial_merge_size, or pixel_values.size() != Σ t·h·w · patch_elems.
Status VisionForward(const VisionConfig& c, const VisionWeights& w, std::span<const float> pixel_values,
                     std::span<const ImageGrid> grids, std::vector<float>* image_embeds, VisionTrace* trace = nullptr);

// A tower as a callable (VisionForward's arguments, no trace): what serve::ImageEncoder runs.
using VisionTowerFn = std::function<Status(std::span<const float> pixel_values, std::span<const ImageGrid> grids,
                                           std::vector<float>* image_embeds)>;

// Writes image embeddings into the text embeddings `embeds` [ids.size(), D] at the image
// placeholder positions (ids == image_token_id outside a video span, §7.5), rows in order.
// Errors: InvalidArgument when the number of image positions differs from image_embeds.size()/D.
Status MergeImageEmbeddings(std::span<const int32_t> ids, const VisionConfig& c, std::span<const float> image_embeds,
                            int64_t D, std::span<float> embeds);

}  // namespace gyre
