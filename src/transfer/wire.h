// The transfer protocol's frames (docs/disaggregation.md "Protocol"). Every message is one frame:
// a fixed 48-byte header and a payload. The header carries the request id, the attempt, the
// piece's sequence number and the XXH64 of the payload (for a page or a state slot: its
// checksum), and ends with the XXH64 of the header's own first 40 bytes, so a damaged header is
// recognised before any field of it is believed. Integers are little-endian.
//
//   kBegin  seq 0   payload BeginInfo: sizes and format of the sequence image
//   kPiece  seq i   payload: page i (0 <= i < num_pages), or the KDA state (i == num_pages)
//   kEnd    seq 0   payload EndInfo: number of pieces and the XXH64 of their checksums in order
//   kAck    seq 0   receiver → sender: the attempt (or an earlier one) was verified and accepted
//   kNack   seq 0   receiver → sender: the attempt was refused; payload: status code + message
//   kAbort  seq 0   sender → receiver: the sender gave up; drop whatever is held for the request
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"
#include "transfer/connection.h"
#include "transfer/sequence_image.h"

namespace gyre::transfer {

enum class FrameKind : uint16_t { kBegin = 1, kPiece = 2, kEnd = 3, kAck = 4, kNack = 5, kAbort = 6 };

inline constexpr size_t kFrameHeaderBytes = 48;

struct FrameHeader {
  FrameKind kind = FrameKind::kBegin;
  uint64_t request_id = 0;
  uint32_t attempt = 0;
  uint32_t seq = 0;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;  // XXH64 of the payload
};

inline constexpr size_t kMaxTopLogprobs = 256;  // a Begin frame with more alternatives is malformed

struct BeginInfo {
  CacheFormat format;
  int64_t num_tokens = 0;
  int32_t next_token = -1;
  uint64_t num_pages = 0;
  float next_logprob = 0;                            // SequenceImage::next_logprob
  std::vector<std::pair<int32_t, float>> next_top;   // SequenceImage::next_top (at most kMaxTopLogprobs)
  // The same first token, logprob and alternatives (floats compared by their bits).
  bool SameFirst(const BeginInfo& o) const;
};

struct EndInfo {
  uint64_t num_pieces = 0;
  uint64_t digest = 0;  // XXH64 of the pieces' checksums (uint64 little-endian, in seq order)
};

// A frame with `payload`; header.payload_bytes and payload_checksum are filled in here.
Message EncodeFrame(FrameHeader header, std::span<const std::byte> payload);
// The 48 header bytes alone, for a payload sent beside them (Connection::Send(head, body)).
// REQUIRES: header.payload_bytes and payload_checksum describe that payload.
Message EncodeFrameHeader(const FrameHeader& header);
// The header of `message`. DataLoss when the message is shorter than a header, the magic or
// version is wrong, the header checksum fails, or the payload length disagrees with the message.
// The payload checksum is not checked here (see PayloadOf).
Result<FrameHeader> DecodeHeader(std::span<const std::byte> message);
// The payload of a message whose header decoded; DataLoss when its checksum fails.
Result<std::span<const std::byte>> PayloadOf(const FrameHeader& h, std::span<const std::byte> message);

std::vector<std::byte> EncodeBegin(const BeginInfo& b);
Result<BeginInfo> DecodeBegin(std::span<const std::byte> payload);
std::vector<std::byte> EncodeEnd(const EndInfo& e);
Result<EndInfo> DecodeEnd(std::span<const std::byte> payload);
std::vector<std::byte> EncodeStatus(const Status& s);
Status DecodeStatus(std::span<const std::byte> payload);

// XXH64 over the checksums in order (EndInfo::digest).
uint64_t DigestOf(std::span<const uint64_t> checksums);

}  // namespace gyre::transfer
