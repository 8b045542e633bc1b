// libFuzzer target: UnpackEmbeds (transfer/embeds_image.h), which reads an image-rows image that a
// peer sent (verified by the transfer protocol's checksums, so well-formed on the wire, but its
// header and sizes are the peer's word).
//
// Input layout (so that most inputs pass ValidateImage and reach the header parser):
//   byte 0: rows per piece - 1 (mod 16); byte 1: pieces - 1 (mod 8); byte 2: rows in the last piece
//   - 1 (mod rows per piece); bytes 3-4: header size S (little-endian, at most what is left); then S
//   header bytes; the rest is cut into equal pieces (a remainder is dropped).
//
// Whatever the bytes: no crash, hang, throw or UBSan report; a refusal is InvalidArgument; and an
// accepted image packs back to itself byte for byte (PackEmbeds ∘ UnpackEmbeds is the identity on
// what UnpackEmbeds accepts), or the target traps.
//
// Run: scripts/fuzz.sh (seeds: src/transfer/testdata/fuzz_embeds_image/).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "transfer/embeds_image.h"

namespace {

using gyre::StatusCode;
using namespace gyre::transfer;

constexpr uint64_t kTower = 42;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  const int64_t rows_per_piece = 1 + data[0] % 16;
  const int64_t pieces = 1 + data[1] % 8;
  const int64_t last_rows = 1 + data[2] % rows_per_piece;
  size_t head = static_cast<size_t>(data[3]) | (static_cast<size_t>(data[4]) << 8);
  data += 5;
  size -= 5;
  if (head > size) head = size;
  SequenceImage im;
  im.format.backend = kEmbedsBackend;
  im.format.page_tokens = rows_per_piece;
  im.format.model_fingerprint = kTower;
  im.num_tokens = (pieces - 1) * rows_per_piece + last_rows;
  im.state.resize(head);
  if (head > 0) std::memcpy(im.state.data(), data, head);
  im.format.bytes_per_slot = static_cast<int64_t>(head);
  const size_t rest = size - head;
  const size_t piece_bytes = rest / static_cast<size_t>(pieces);
  im.format.bytes_per_page = static_cast<int64_t>(piece_bytes);
  for (int64_t p = 0; p < pieces; ++p) {
    im.pages.emplace_back(piece_bytes);
    if (piece_bytes > 0) std::memcpy(im.pages.back().data(), data + head + p * piece_bytes, piece_bytes);
  }
  auto batch = UnpackEmbeds(im, kTower);
  if (!batch.ok()) {
    if (batch.status().code() != StatusCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  auto again = PackEmbeds(*batch, rows_per_piece);
  if (!again.ok() || !(*again == im)) __builtin_trap();
  return 0;
}
