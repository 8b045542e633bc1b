// Image embeddings as a SequenceImage (issue 17 item 4, docs/vision.md "Encode role"): the unit an
// encode instance hands to the instance that prefills, carried by the transfer engine with the
// checks it gives a cache (XXH64 per piece, digest, Ack/Nack, retries, Abort). Packing them into
// the image type the protocol already moves keeps one protocol and one set of fault tests.
//
// Layout (format.backend "image-embeds"): the rows of all images of one request, in order,
// concatenated ([total_tokens, width] fp32) and cut into pieces of `rows_per_piece` rows (the
// "pages"; the last one zero-padded); `state` is the header: magic, version, width, image count,
// then per image the XXH64 of its bytes (as the request named them, before decoding) and its
// token count. format.model_fingerprint names the tower (the caller's fingerprint of its vision
// config and weights), so rows of another model's tower are refused at unpacking.
//
// Status: this is the hand-off unit and its checks, tested over the loopback and TCP transports
// with injected faults. The encode role's serving side (`gyre serve --role encode`, a target that
// takes the rows instead of encoding, the router sending image requests through an encoder) is
// not built; docs/vision.md says what is missing.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "transfer/sequence_image.h"

namespace gyre::transfer {

inline constexpr const char* kEmbedsBackend = "image-embeds";

struct ImageRowsOf {
  uint64_t content_hash = 0;  // ImageContentHash of the image's bytes
  int64_t num_tokens = 0;     // LLM image tokens (rows)
  std::vector<float> rows;    // [num_tokens, width]
  bool operator==(const ImageRowsOf&) const = default;
};

struct EmbedsBatch {
  uint64_t tower_fingerprint = 0;
  int64_t width = 0;  // the tower's output hidden size
  std::vector<ImageRowsOf> images;
  bool operator==(const EmbedsBatch&) const = default;
};

// XXH64 of an image's bytes (the key a target checks its own request's images against).
uint64_t ImageContentHash(std::span<const uint8_t> bytes);

// InvalidArgument: no images, width < 1, rows_per_piece < 1, a row count that is not
// num_tokens * width, or a batch over 2^31 rows.
Result<SequenceImage> PackEmbeds(const EmbedsBatch& batch, int64_t rows_per_piece = 64);

// The batch of a verified image. InvalidArgument (naming what) for another backend, another tower
// (`expected_tower_fingerprint`), a header that does not parse or disagrees with the pieces, or
// non-zero padding.
Result<EmbedsBatch> UnpackEmbeds(const SequenceImage& image, uint64_t expected_tower_fingerprint);

}  // namespace gyre::transfer
