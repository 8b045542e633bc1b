// Image inputs of chat requests (docs/vision.md): the image_url of a content part fetched
// (data: URLs with base64 PNG / JPEG; file:// only under --allowed-local-media-path; http(s)
// refused), decoded and preprocessed (image/image.h), run through the vision tower (the CPU one,
// runtime/vision.h, or one the caller builds: ImageInputOptions::make_tower, e.g. the CUDA tower
// runtime/cuda_vision.h), and the prompt ids built with each image's placeholder expanded:
// image_start, image_token × (merged patches), image_end. The tower's rows become the request's
// prompt embeddings at the image_token positions.
//
// Every error is InvalidArgument naming the field ("'messages[0].content[1].image_url' ..."), so
// the client gets a 400 that says which image is at fault, also for an image over the limits.
// Thread safety: an ImageEncoder is immutable after construction; the functions are reentrant.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "image/image.h"
#include "model/vision_weights.h"
#include "runtime/model_runner.h"
#include "runtime/vision.h"
#include "serve/image_cache.h"

namespace gyre::serve {

struct ImageInputOptions {
  std::string allowed_local_media_path;  // "": file:// URLs are refused
  ImageLimits limits;
  int64_t max_images = 8;  // per request
  // The embedding cache's capacity (image_cache.h); 0: no cache.
  int64_t cache_bytes = 0;
  // Builds the tower that runs instead of the CPU one (VisionForward), from the loaded config and
  // weights; null: the CPU tower. The function it returns is called from request threads at once,
  // so it must be thread-safe (CudaVisionTower::Forward is). `tower_backend` names it ("cpu",
  // "cuda") for banners and status.
  std::function<Result<VisionTowerFn>(const VisionConfig&, const VisionWeights&)> make_tower;
  std::string tower_backend = "cpu";
};

// The vision tower of a deployment and its preprocessing (one per server).
struct ImageEncoder {
  VisionConfig config;
  VisionWeights weights;
  VisionTowerFn tower;  // null: VisionForward on `weights` (ImageInputOptions::make_tower)
  ImagePreprocessConfig preprocess;
  ImageInputOptions options;
  // Repeated images are encoded once (image_cache.h); null: every image is encoded. The pointer is
  // fixed; the cache is thread-safe.
  std::shared_ptr<ImageEmbeddingCache> cache;
};

// Loads config.json's vision_config and the model.visual.* weights of `model_dir`. NotFound when
// the checkpoint has no vision tower.
Result<std::shared_ptr<const ImageEncoder>> LoadImageEncoder(const std::string& model_dir, ImageInputOptions options);

// Standard base64 (RFC 4648 alphabet; padding optional, no whitespace).
Result<std::vector<uint8_t>> DecodeBase64(std::string_view s);

// The bytes an image URL names. `field` prefixes the errors.
Result<std::vector<uint8_t>> LoadImageUrl(const std::string& url, const std::string& field, const ImageInputOptions& o);

struct EncodedImage {
  int64_t num_tokens = 0;     // LLM image tokens
  std::vector<float> embeds;  // [num_tokens, out_hidden_size]
};

// Decodes, preprocesses and runs the tower on one image, or takes its rows from enc.cache when the
// same bytes were encoded before (the result is the same either way). `field` prefixes the errors.
Result<EncodedImage> EncodeImage(const ImageEncoder& enc, const std::vector<uint8_t>& bytes, const std::string& field);

// The number of LLM image tokens an image takes, as EncodeImage would give it, without running the
// tower or resampling: the image is decoded (so the same errors and limits apply) and the size rule
// gives its grid. For /tokenize. `field` prefixes the errors.
Result<int64_t> ImageTokenCount(const ImageEncoder& enc, const std::vector<uint8_t>& bytes, const std::string& field);

struct ImagePrompt {
  std::vector<int32_t> ids;
  std::shared_ptr<PromptEmbeds> embeds;
};

// Tokenizes `text` (a rendered prompt holding one serve::kImageSentinel per image, in order) as
// `encode(segment, first)` per text segment between them (special-token boundaries, so the same
// ids as one pass), with image i expanded in place. Errors: InvalidArgument when the number of
// sentinels differs from images.size() (the template dropped or repeated an image).
using EncodeTextFn = std::function<Result<std::vector<int32_t>>(const std::string& text, bool first)>;
Result<ImagePrompt> BuildImagePrompt(const std::string& text, const std::vector<EncodedImage>& images,
                                     const VisionConfig& vc, const EncodeTextFn& encode);

}  // namespace gyre::serve
