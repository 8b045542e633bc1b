#include "transfer/embeds_image.h"

#include <xxhash.h>

#include <cstring>
#include <string>

namespace gyre::transfer {

namespace {

constexpr uint32_t kMagic = 0x53424d45;  // "EMBS" little-endian
constexpr uint32_t kVersion = 1;
constexpr int64_t kHeadBytes = 4 + 4 + 8 + 8;
constexpr int64_t kPerImageBytes = 8 + 8;
constexpr int64_t kMaxRows = int64_t{1} << 31;
constexpr int64_t kMaxImages = 1 << 16;

template <typename T>
void Put(std::vector<std::byte>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

template <typename T>
bool Get(std::span<const std::byte> in, size_t& at, T* v) {
  if (at + sizeof(T) > in.size()) return false;
  std::memcpy(v, in.data() + at, sizeof(T));
  at += sizeof(T);
  return true;
}

Status Bad(const std::string& what) { return Status::InvalidArgument("image-embeds image: " + what); }

}  // namespace

uint64_t ImageContentHash(std::span<const uint8_t> bytes) { return XXH64(bytes.data(), bytes.size(), 0); }

Result<SequenceImage> PackEmbeds(const EmbedsBatch& batch, int64_t rows_per_piece) {
  if (batch.images.empty()) return Status::InvalidArgument("no images to pack");
  if (batch.width < 1) return Status::InvalidArgument("embedding width must be at least 1");
  if (rows_per_piece < 1) return Status::InvalidArgument("rows per piece must be at least 1");
  if (static_cast<int64_t>(batch.images.size()) > kMaxImages) return Status::InvalidArgument("too many images");
  int64_t total = 0;
  for (size_t i = 0; i < batch.images.size(); ++i) {
    const ImageRowsOf& im = batch.images[i];
    if (im.num_tokens < 1 || im.num_tokens > kMaxRows ||
        static_cast<int64_t>(im.rows.size()) / batch.width != im.num_tokens ||
        static_cast<int64_t>(im.rows.size()) % batch.width != 0)
      return Status::InvalidArgument("image " + std::to_string(i) + ": " + std::to_string(im.rows.size()) +
                                     " values for " + std::to_string(im.num_tokens) + " tokens of width " +
                                     std::to_string(batch.width));
    total += im.num_tokens;
    if (total > kMaxRows) return Status::InvalidArgument("more than 2^31 image rows");
  }
  SequenceImage out;
  out.format.backend = kEmbedsBackend;
  out.format.page_tokens = rows_per_piece;
  out.format.bytes_per_page = rows_per_piece * batch.width * static_cast<int64_t>(sizeof(float));
  out.format.bytes_per_slot = kHeadBytes + kPerImageBytes * static_cast<int64_t>(batch.images.size());
  out.format.model_fingerprint = batch.tower_fingerprint;
  out.num_tokens = total;
  out.next_token = -1;
  Put(out.state, kMagic);
  Put(out.state, kVersion);
  Put(out.state, batch.width);
  Put(out.state, static_cast<int64_t>(batch.images.size()));
  for (const ImageRowsOf& im : batch.images) {
    Put(out.state, im.content_hash);
    Put(out.state, im.num_tokens);
  }
  const int64_t row_bytes = batch.width * static_cast<int64_t>(sizeof(float));
  out.pages.assign(static_cast<size_t>(PagesFor(out.format, total)),
                   std::vector<std::byte>(static_cast<size_t>(out.format.bytes_per_page), std::byte{0}));
  int64_t row = 0;
  for (const ImageRowsOf& im : batch.images) {
    for (int64_t t = 0; t < im.num_tokens; ++t, ++row) {
      std::memcpy(out.pages[static_cast<size_t>(row / rows_per_piece)].data() + (row % rows_per_piece) * row_bytes,
                  im.rows.data() + t * batch.width, static_cast<size_t>(row_bytes));
    }
  }
  return out;
}

Result<EmbedsBatch> UnpackEmbeds(const SequenceImage& image, uint64_t expected_tower_fingerprint) {
  const CacheFormat& f = image.format;
  if (f.backend != kEmbedsBackend) return Bad("the format's backend is '" + f.backend + "', not image embeddings");
  if (f.model_fingerprint != expected_tower_fingerprint)
    return Bad("the rows come from another vision tower (fingerprint mismatch): both instances must serve the same model");
  GYRE_RETURN_IF_ERROR(ValidateImage(image));
  size_t at = 0;
  uint32_t magic = 0, version = 0;
  EmbedsBatch b;
  int64_t n = 0;
  if (!Get(image.state, at, &magic) || !Get(image.state, at, &version) || !Get(image.state, at, &b.width) ||
      !Get(image.state, at, &n))
    return Bad("header too short");
  if (magic != kMagic || version != kVersion) return Bad("header magic or version unknown");
  if (n < 1 || n > kMaxImages) return Bad("header image count out of range");
  // (Divisions first: a width from the header must not overflow the product.)
  const int64_t row_floats = f.page_tokens >= 1 ? f.bytes_per_page / static_cast<int64_t>(sizeof(float)) / f.page_tokens : 0;
  if (b.width < 1 || b.width != row_floats ||
      f.bytes_per_page != f.page_tokens * b.width * static_cast<int64_t>(sizeof(float)))
    return Bad("piece size disagrees with the width");
  if (static_cast<int64_t>(image.state.size()) != kHeadBytes + kPerImageBytes * n)
    return Bad("header size disagrees with its image count");
  b.tower_fingerprint = f.model_fingerprint;
  b.images.resize(static_cast<size_t>(n));
  int64_t total = 0;
  for (ImageRowsOf& im : b.images) {
    if (!Get(image.state, at, &im.content_hash) || !Get(image.state, at, &im.num_tokens)) return Bad("header too short");
    if (im.num_tokens < 1 || im.num_tokens > kMaxRows - total) return Bad("an image's token count is out of range");
    total += im.num_tokens;
  }
  if (total != image.num_tokens)
    return Bad("the images' token counts sum to " + std::to_string(total) + ", the image holds " +
               std::to_string(image.num_tokens));
  const int64_t row_bytes = b.width * static_cast<int64_t>(sizeof(float));
  int64_t row = 0;
  for (ImageRowsOf& im : b.images) {
    im.rows.resize(static_cast<size_t>(im.num_tokens * b.width));
    for (int64_t t = 0; t < im.num_tokens; ++t, ++row) {
      std::memcpy(im.rows.data() + t * b.width,
                  image.pages[static_cast<size_t>(row / f.page_tokens)].data() + (row % f.page_tokens) * row_bytes,
                  static_cast<size_t>(row_bytes));
    }
  }
  // The padding after the last row is zero (what PackEmbeds writes): anything else is not ours.
  if (!image.pages.empty()) {
    const std::vector<std::byte>& last = image.pages.back();
    for (size_t i = static_cast<size_t>((row % f.page_tokens == 0 ? f.page_tokens : row % f.page_tokens) * row_bytes);
         i < last.size(); ++i) {
      if (last[i] != std::byte{0}) return Bad("non-zero padding after the last row");
    }
  }
  return b;
}

}  // namespace gyre::transfer
