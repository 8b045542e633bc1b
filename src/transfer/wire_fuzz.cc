// libFuzzer target: the transfer wire's decoders (transfer/wire.h), which read bytes from the
// network: DecodeHeader, PayloadOf, DecodeBegin (format, token count, first token, its logprob and
// alternatives), DecodeEnd.
//
// Input: byte 0 picks the path, the rest is the data.
//   0: the data is a whole frame (header + payload): DecodeHeader, then PayloadOf and the payload
//      decoder of the frame's kind. (Random bytes rarely pass the header checksum: paths 1-2 reach
//      the payload decoders.)
//   1: the data is a Begin payload; 2: an End payload: the decoder alone, then the same payload
//      framed by EncodeFrame and decoded through DecodeHeader and PayloadOf.
//
// Whatever the bytes: no crash, hang, throw or UBSan report, a refusal is DataLoss, and an accepted
// Begin keeps the receiver's contract (trap on violation): num_tokens >= 1, page count ==
// PagesFor(format, num_tokens), at most kMaxTopLogprobs alternatives, and it re-encodes to itself.
//
// Run: scripts/fuzz.sh (seeds: src/transfer/testdata/fuzz_wire/).
#include <cstddef>
#include <cstdint>
#include <span>

#include "transfer/wire.h"

namespace {

using gyre::StatusCode;
using namespace gyre::transfer;

void CheckBegin(std::span<const std::byte> p) {
  auto b = DecodeBegin(p);
  if (!b.ok()) {
    if (b.status().code() != StatusCode::kDataLoss) __builtin_trap();
    return;
  }
  if (b->num_tokens < 1 || static_cast<int64_t>(b->num_pages) != PagesFor(b->format, b->num_tokens) ||
      b->next_top.size() > kMaxTopLogprobs) {
    __builtin_trap();
  }
  auto again = DecodeBegin(EncodeBegin(*b));
  if (!again.ok() || !(again->format == b->format) || again->num_tokens != b->num_tokens ||
      again->num_pages != b->num_pages || !again->SameFirst(*b)) {
    __builtin_trap();
  }
}

void CheckEnd(std::span<const std::byte> p) {
  auto e = DecodeEnd(p);
  if (!e.ok() && e.status().code() != StatusCode::kDataLoss) __builtin_trap();
}

void CheckFrame(std::span<const std::byte> m) {
  auto h = DecodeHeader(m);
  if (!h.ok()) {
    if (h.status().code() != StatusCode::kDataLoss) __builtin_trap();
    return;
  }
  auto p = PayloadOf(*h, m);
  if (!p.ok()) return;
  if (h->kind == FrameKind::kBegin) CheckBegin(*p);
  if (h->kind == FrameKind::kEnd) CheckEnd(*p);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const std::byte> rest(reinterpret_cast<const std::byte*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      CheckFrame(rest);
      break;
    case 1:
    case 2: {
      const bool begin = data[0] % 3 == 1;
      if (begin) CheckBegin(rest);
      else CheckEnd(rest);
      const Message framed =
          EncodeFrame({.kind = begin ? FrameKind::kBegin : FrameKind::kEnd, .request_id = 1, .attempt = 0, .seq = 0}, rest);
      CheckFrame(framed);
      break;
    }
  }
  return 0;
}
