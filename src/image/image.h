// Image decoding and preprocessing for the glm5_next vision tower (docs/vision.md,
// docs/model-glm5-next.md §7.6): PNG / JPEG bytes -> RGB8 -> bicubic resize (bit-exact with
// Pillow's) -> rescale, CLIP normalisation, zero padding -> patch rows in block-major order, as the
// transformers 5.17 image processor (PIL path) emits `pixel_values` and `image_grid_thw`.
//
// Decoding uses libpng and libjpeg(-turbo), linked statically. Every failure is a Status with a
// message (InvalidArgument for corrupt, truncated or unsupported data; ResourceExhausted for an
// image over the limits, checked on the declared size before any pixel buffer is allocated).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace gyre {

struct RgbImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> pixels;  // [height][width][3]
};

struct ImageLimits {
  int64_t max_bytes = int64_t{20} << 20;  // encoded size
  // Declared width × height. Pillow refuses images above twice its MAX_IMAGE_PIXELS (89,478,485)
  // as decompression bombs; gyre refuses above once that.
  int64_t max_pixels = 89'478'485;
  int64_t max_side = 65'535;
};

enum class AlphaMode {
  kCompositeOnWhite,  // older transformers' convert_to_rgb: RGBA alpha-composited on opaque white
  kDrop,              // PIL's Image.convert("RGB"), the alpha dropped: what the transformers 5.17
                      // glm5_next processor does (its goldens, 2026-12-05); the default
};

// "png", "jpeg" or "" from the leading magic bytes.
std::string SniffImageFormat(std::span<const uint8_t> data);

// Decodes a PNG or JPEG to RGB8 the way PIL opens the file and converts it (grey, grey+alpha,
// palette with tRNS, 16-bit: PIL keeps the high byte of 16-bit RGB(A) and grey+alpha and clips
// 16-bit grey to 255; 1/2/4-bit grey is scaled to 8 bits). JPEG: 1 or 3 components (CMYK refused).
// EXIF orientation is not applied (the processor does not apply it to an opened PIL image).
Result<RgbImage> DecodeImage(std::span<const uint8_t> data, const ImageLimits& limits = {},
                             AlphaMode alpha = AlphaMode::kDrop);

// Pillow's Image.resize(size, Image.BICUBIC) on an RGB8 image, bit for bit: separable two-pass
// convolution (horizontal first, then vertical; a pass is skipped when its size does not change),
// the support widened by the downscale factor, coefficients normalised and rounded to 22-bit fixed
// point, results rounded and clipped to 8 bits after each pass.
RgbImage ResizeBicubic(const RgbImage& in, int64_t width, int64_t height);

struct ImagePreprocessConfig {
  int64_t patch_size = 14;
  int64_t temporal_patch_size = 2;
  int64_t merge_size = 2;
  int64_t min_tokens = 16;    // LLM tokens of one image (canvas pixels / (patch·merge)²)
  int64_t max_tokens = 8000;
  float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
  float std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
};

struct ImageSize {
  int64_t content_w = 0, content_h = 0;  // the image after the resize
  int64_t canvas_w = 0, canvas_h = 0;    // multiples of patch·merge; content at the top left
};

// The resize / canvas rule of §7.6 for a width × height image, as transformers 5.17's glm5_next
// image processor computes it (docs/vision.md "Size rule"). Errors: InvalidArgument for an empty
// image or a side above 2^24 px.
Result<ImageSize> PlanImageSize(int64_t width, int64_t height, const ImagePreprocessConfig& c);

struct PreprocessedImage {
  std::vector<float> pixel_values;  // [grid_t·grid_h·grid_w, 3·T·P·P]
  int64_t grid_t = 1, grid_h = 0, grid_w = 0;
  int64_t num_tokens = 0;  // LLM image tokens: grid_t·grid_h·grid_w / merge²
};

// Resize, pad, rescale by 1/255, normalise and patchify one image (the frame is repeated to the
// temporal patch size). Row order: block-major over merge×merge blocks; row layout [C][T][P][P].
Result<PreprocessedImage> PreprocessImage(const RgbImage& img, const ImagePreprocessConfig& c = {});

}  // namespace gyre
