// Checksums of transferred cache pieces: XXH64 (Debian libxxhash-dev), seed 0. A page or a state
// slot carries the XXH64 of its bytes; the receiver recomputes it before it accepts anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace gyre::transfer {

uint64_t Checksum(std::span<const std::byte> bytes);

}  // namespace gyre::transfer
