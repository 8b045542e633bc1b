// libFuzzer target: DecodeImage (PNG via libpng, JPEG via libjpeg-turbo) must never crash, hang,
// leak or allocate past its limits, whatever the bytes. The limits are small here (1 MiB pixels,
// 4096 per side), so a mutated header that declares a huge image must be refused before any pixel
// buffer exists (-rss_limit_mb catches one that is not). Accepted images are checked for
// consistency and run through the preprocessing (resize, normalise, patchify) when small.
//
// Run: scripts/fuzz.sh. Seeds (src/image/testdata/fuzz_image_decode/): tiny PNGs of every colour
// type (grey 1/8/16 bit, grey+alpha, RGB, RGBA, palette with tRNS, interlaced) and JPEGs (baseline
// 4:2:0, 4:4:4, greyscale, progressive).
#include <cstddef>
#include <cstdint>
#include <span>

#include "image/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gyre::ImageLimits lim;
  lim.max_pixels = 1 << 20;
  lim.max_side = 4096;
  for (auto alpha : {gyre::AlphaMode::kCompositeOnWhite, gyre::AlphaMode::kDrop}) {
    auto r = gyre::DecodeImage(std::span<const uint8_t>(data, size), lim, alpha);
    if (!r.ok()) {
      if (r.status().message().empty()) __builtin_trap();
      continue;
    }
    const auto& img = *r;
    if (img.width <= 0 || img.height <= 0 || img.width * img.height > lim.max_pixels) __builtin_trap();
    if (img.pixels.size() != static_cast<size_t>(img.width * img.height * 3)) __builtin_trap();
    if (alpha == gyre::AlphaMode::kDrop && img.width * img.height <= 64 * 64) {
      gyre::ImagePreprocessConfig c;
      c.max_tokens = 64;
      auto p = gyre::PreprocessImage(img, c);
      if (p.ok() && p->pixel_values.size() != static_cast<size_t>(p->grid_h * p->grid_w * 1176)) __builtin_trap();
    }
  }
  return 0;
}
