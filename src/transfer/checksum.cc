#include "transfer/checksum.h"

#include <xxhash.h>

namespace gyre::transfer {

uint64_t Checksum(std::span<const std::byte> bytes) { return XXH64(bytes.data(), bytes.size(), 0); }

}  // namespace gyre::transfer
