#include "transfer/wire.h"

#include <bit>
#include <cstring>

#include "transfer/checksum.h"

namespace gyre::transfer {
namespace {

constexpr uint32_t kMagic = 0x58545947;  // "GYTX"
constexpr uint16_t kVersion = 2;  // 2: the Begin frame carries the first token's logprob and alternatives

class Writer {
 public:
  void U16(uint16_t v) { Int(v, 2); }
  void U32(uint32_t v) { Int(v, 4); }
  void U64(uint64_t v) { Int(v, 8); }
  void F32(float v) { U32(std::bit_cast<uint32_t>(v)); }
  void Bytes(std::span<const std::byte> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    Bytes(std::as_bytes(std::span<const char>(s.data(), s.size())));
  }
  std::vector<std::byte>& out() { return out_; }

 private:
  void Int(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
  }
  std::vector<std::byte> out_;
};

// Reads fields; after any short read ok() is false and every later read returns 0.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  uint16_t U16() { return static_cast<uint16_t>(Int(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Int(4)); }
  uint64_t U64() { return Int(8); }
  float F32() { return std::bit_cast<float>(U32()); }
  std::string Str() {
    const uint32_t n = U32();
    if (!ok_ || n > in_.size() - pos_) return Fail(), std::string();
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  bool ok() const { return ok_; }
  bool done() const { return ok_ && pos_ == in_.size(); }

 private:
  void Fail() { ok_ = false; }
  uint64_t Int(int n) {
    if (!ok_ || static_cast<size_t>(n) > in_.size() - pos_) return Fail(), 0;
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(in_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }
  std::span<const std::byte> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace

Message EncodeFrame(FrameHeader h, std::span<const std::byte> payload) {
  h.payload_bytes = payload.size();
  h.payload_checksum = Checksum(payload);
  Message m = EncodeFrameHeader(h);
  m.insert(m.end(), payload.begin(), payload.end());
  return m;
}

Message EncodeFrameHeader(const FrameHeader& h) {
  Writer w;
  w.out().reserve(kFrameHeaderBytes);
  w.U32(kMagic);
  w.U16(kVersion);
  w.U16(static_cast<uint16_t>(h.kind));
  w.U64(h.request_id);
  w.U32(h.attempt);
  w.U32(h.seq);
  w.U64(h.payload_bytes);
  w.U64(h.payload_checksum);
  w.U64(Checksum(w.out()));
  return std::move(w.out());
}

Result<FrameHeader> DecodeHeader(std::span<const std::byte> m) {
  if (m.size() < kFrameHeaderBytes)
    return Status::DataLoss("frame of " + std::to_string(m.size()) + " bytes is shorter than its header");
  Reader r(m.first(kFrameHeaderBytes));
  FrameHeader h;
  const uint32_t magic = r.U32();
  const uint16_t version = r.U16();
  const uint16_t kind = r.U16();
  h.request_id = r.U64();
  h.attempt = r.U32();
  h.seq = r.U32();
  h.payload_bytes = r.U64();
  h.payload_checksum = r.U64();
  const uint64_t header_sum = r.U64();
  if (header_sum != Checksum(m.first(kFrameHeaderBytes - 8))) return Status::DataLoss("frame header checksum mismatch");
  if (magic != kMagic || version != kVersion) return Status::DataLoss("not a transfer frame (magic or version)");
  if (kind < 1 || kind > 6) return Status::DataLoss("unknown frame kind " + std::to_string(kind));
  h.kind = static_cast<FrameKind>(kind);
  if (h.payload_bytes != m.size() - kFrameHeaderBytes)
    return Status::DataLoss("frame says " + std::to_string(h.payload_bytes) + " payload bytes, " +
                            std::to_string(m.size() - kFrameHeaderBytes) + " arrived");
  return h;
}

Result<std::span<const std::byte>> PayloadOf(const FrameHeader& h, std::span<const std::byte> m) {
  std::span<const std::byte> p = m.subspan(kFrameHeaderBytes);
  if (Checksum(p) != h.payload_checksum)
    return Status::DataLoss("request " + std::to_string(h.request_id) + " attempt " + std::to_string(h.attempt) +
                            ": piece " + std::to_string(h.seq) + " checksum mismatch");
  return p;
}

std::vector<std::byte> EncodeBegin(const BeginInfo& b) {
  Writer w;
  w.U64(b.num_pages);
  w.U64(static_cast<uint64_t>(b.num_tokens));
  w.U32(static_cast<uint32_t>(b.next_token));
  w.U64(static_cast<uint64_t>(b.format.page_tokens));
  w.U64(static_cast<uint64_t>(b.format.bytes_per_page));
  w.U64(static_cast<uint64_t>(b.format.bytes_per_slot));
  w.U64(b.format.model_fingerprint);
  w.Str(b.format.backend);
  w.F32(b.next_logprob);
  w.U32(static_cast<uint32_t>(b.next_top.size()));
  for (const auto& [id, lp] : b.next_top) {
    w.U32(static_cast<uint32_t>(id));
    w.F32(lp);
  }
  return std::move(w.out());
}

bool BeginInfo::SameFirst(const BeginInfo& o) const {
  auto bits = [](float f) { return std::bit_cast<uint32_t>(f); };
  if (next_token != o.next_token || bits(next_logprob) != bits(o.next_logprob) || next_top.size() != o.next_top.size())
    return false;
  for (size_t i = 0; i < next_top.size(); ++i)
    if (next_top[i].first != o.next_top[i].first || bits(next_top[i].second) != bits(o.next_top[i].second)) return false;
  return true;
}

Result<BeginInfo> DecodeBegin(std::span<const std::byte> p) {
  Reader r(p);
  BeginInfo b;
  b.num_pages = r.U64();
  b.num_tokens = static_cast<int64_t>(r.U64());
  b.next_token = static_cast<int32_t>(r.U32());
  b.format.page_tokens = static_cast<int64_t>(r.U64());
  b.format.bytes_per_page = static_cast<int64_t>(r.U64());
  b.format.bytes_per_slot = static_cast<int64_t>(r.U64());
  b.format.model_fingerprint = r.U64();
  b.format.backend = r.Str();
  b.next_logprob = r.F32();
  const uint32_t num_top = r.U32();
  if (num_top > kMaxTopLogprobs) return Status::DataLoss("malformed begin frame: " + std::to_string(num_top) + " alternatives");
  for (uint32_t i = 0; i < num_top && r.ok(); ++i) {
    const auto id = static_cast<int32_t>(r.U32());
    b.next_top.emplace_back(id, r.F32());
  }
  if (!r.done()) return Status::DataLoss("malformed begin frame");
  if (b.num_tokens < 1 || b.format.bytes_per_page < 0 || b.format.bytes_per_slot < 0 || b.format.page_tokens < 1 ||
      static_cast<int64_t>(b.num_pages) != PagesFor(b.format, b.num_tokens))
    return Status::DataLoss("inconsistent begin frame: " + std::to_string(b.num_pages) + " pages for " +
                            std::to_string(b.num_tokens) + " tokens of {" + b.format.ToString() + "}");
  return b;
}

std::vector<std::byte> EncodeEnd(const EndInfo& e) {
  Writer w;
  w.U64(e.num_pieces);
  w.U64(e.digest);
  return std::move(w.out());
}

Result<EndInfo> DecodeEnd(std::span<const std::byte> p) {
  Reader r(p);
  EndInfo e;
  e.num_pieces = r.U64();
  e.digest = r.U64();
  if (!r.done()) return Status::DataLoss("malformed end frame");
  return e;
}

std::vector<std::byte> EncodeStatus(const Status& s) {
  Writer w;
  w.U32(static_cast<uint32_t>(s.code()));
  w.Str(s.message());
  return std::move(w.out());
}

Status DecodeStatus(std::span<const std::byte> p) {
  Reader r(p);
  const uint32_t code = r.U32();
  std::string msg = r.Str();
  if (!r.done() || code == 0 || code > static_cast<uint32_t>(StatusCode::kUnimplemented))
    return Status::DataLoss("malformed refusal from the receiver");
  return Status(static_cast<StatusCode>(code), "receiver: " + msg);
}

uint64_t DigestOf(std::span<const uint64_t> sums) {
  Writer w;
  for (uint64_t s : sums) w.U64(s);
  return Checksum(w.out());
}

}  // namespace gyre::transfer
