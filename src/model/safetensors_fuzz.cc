// libFuzzer target: ParseSafetensorsHeader and ParseSafetensorsIndex must never crash, hang or
// read out of bounds, whatever the bytes. Each input is tried three ways:
//   1. as a whole file image (prefix == file);
//   2. as the JSON header of an image whose length field is right and whose data section holds
//      kDataBytes zero bytes, so mutations reach the per-entry and overlap validation instead of
//      dying on a wrong length field;
//   3. as the text of a model.safetensors.index.json.
// Accepted headers are checked against the contract (ranges inside the data, sizes matching).
//
// Run: scripts/fuzz.sh. Seeds (src/model/testdata/fuzz_safetensors/): small valid files, a header
// JSON alone, an index.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "model/safetensors.h"

namespace {

constexpr size_t kDataBytes = 256;

void CheckAccepted(const gyre::SafetensorsHeader& h, uint64_t file_size) {
  if (h.data_offset > file_size) __builtin_trap();
  for (const auto& [name, e] : h.tensors) {
    if (e.begin > e.end || e.end > file_size - h.data_offset) __builtin_trap();
    if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end()) {
      if (e.end != e.begin) __builtin_trap();
      continue;
    }
    uint64_t bytes = gyre::DTypeSize(e.dtype);
    for (int64_t d : e.shape) {
      if (d < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) __builtin_trap();
    }
    if (e.end - e.begin != bytes) __builtin_trap();
  }
}

void Parse(std::span<const uint8_t> image) {
  auto h = gyre::ParseSafetensorsHeader(image, image.size());
  if (h.ok()) CheckAccepted(*h, image.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Parse(std::span<const uint8_t>(data, size));

  std::vector<uint8_t> image(8 + size + kDataBytes, 0);
  for (int i = 0; i < 8; ++i) image[i] = static_cast<uint8_t>(static_cast<uint64_t>(size) >> (8 * i));
  std::copy(data, data + size, image.begin() + 8);
  Parse(image);

  auto idx = gyre::ParseSafetensorsIndex(std::string_view(reinterpret_cast<const char*>(data), size));
  (void)idx;
  return 0;
}
