#include "transfer/transfer_engine.h"

#include "core/trace.h"
#include "transfer/checksum.h"

namespace gyre::transfer {
namespace {

std::string RequestName(uint64_t id) { return "request " + std::to_string(id); }

}  // namespace

// ---- sender --------------------------------------------------------------------------------------

SenderStats TransferSender::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

Status TransferSender::SendAttempt(uint64_t id, uint32_t attempt, const SequenceImage& im,
                                   std::span<const uint64_t> sums) {
  const uint32_t num_pages = static_cast<uint32_t>(im.pages.size());
  FrameHeader h{.kind = FrameKind::kBegin, .request_id = id, .attempt = attempt, .seq = 0};
  BeginInfo b{im.format, im.num_tokens, im.next_token, num_pages, im.next_logprob, im.next_top};
  GYRE_RETURN_IF_ERROR(conn_.Send(EncodeFrame(h, EncodeBegin(b))));
  int64_t bytes = 0;
  h.kind = FrameKind::kPiece;
  for (uint32_t seq = 0; seq <= num_pages; ++seq) {
    const std::vector<std::byte>& piece = seq < num_pages ? im.pages[seq] : im.state;
    h.seq = seq;
    h.payload_bytes = piece.size();
    h.payload_checksum = sums[seq];  // computed once, in Send
    GYRE_RETURN_IF_ERROR(conn_.Send(EncodeFrameHeader(h), piece));
    bytes += static_cast<int64_t>(piece.size());
  }
  h.kind = FrameKind::kEnd;
  h.seq = 0;
  GYRE_RETURN_IF_ERROR(conn_.Send(EncodeFrame(h, EncodeEnd({num_pages + 1ull, DigestOf(sums)}))));
  std::lock_guard<std::mutex> l(mu_);
  stats_.bytes_sent += bytes;
  stats_.pieces_sent += num_pages + 1;
  return Status::Ok();
}

Status TransferSender::AwaitAnswer(uint64_t id, uint32_t attempt) {
  const auto deadline = std::chrono::steady_clock::now() + opts_.ack_timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    Result<Message> m = conn_.Receive(left);
    if (!m.ok()) {
      if (m.status().code() == StatusCode::kDeadlineExceeded) break;
      return m.status();
    }
    Result<FrameHeader> h = DecodeHeader(*m);
    if (!h.ok() || h->request_id != id) continue;  // damaged, or about another request
    Result<std::span<const std::byte>> p = PayloadOf(*h, *m);
    if (!p.ok()) continue;
    // An Ack of an earlier attempt is as good: the receiver accepted that attempt's verified copy.
    if (h->kind == FrameKind::kAck && h->attempt <= attempt) return Status::Ok();
    if (h->kind == FrameKind::kNack && h->attempt == attempt) {
      Status why = DecodeStatus(*p);
      return why.ok() ? Status::DataLoss("receiver refused the attempt") : why;
    }
  }
  return DeadlineExceeded("no answer within " + std::to_string(opts_.ack_timeout.count()) + " ms");
}

Status TransferSender::Send(uint64_t id, const SequenceImage& im) {
  GYRE_SPAN("transfer.send", "transfer");
  GYRE_RETURN_IF_ERROR(ValidateImage(im));
  std::vector<uint64_t> sums;
  sums.reserve(im.pages.size() + 1);
  for (const auto& p : im.pages) sums.push_back(Checksum(p));
  sums.push_back(Checksum(im.state));
  {
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.requests;
  }
  Status last;
  for (int a = 1; a <= opts_.max_attempts; ++a) {
    {
      std::lock_guard<std::mutex> l(mu_);
      ++stats_.attempts;
      stats_.retries += a > 1;
    }
    const uint32_t attempt = static_cast<uint32_t>(a);
    last = SendAttempt(id, attempt, im, sums);
    if (last.ok()) last = AwaitAnswer(id, attempt);
    if (last.ok()) {
      std::lock_guard<std::mutex> l(mu_);
      ++stats_.completed;
      return Status::Ok();
    }
    if (last.code() == StatusCode::kUnavailable) break;  // the link is gone: no retry on it
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.failed;
  }
  // Best effort: the receiver drops what it holds (it may have accepted an attempt whose Ack was lost).
  FrameHeader h{.kind = FrameKind::kAbort, .request_id = id, .attempt = static_cast<uint32_t>(opts_.max_attempts)};
  (void)conn_.Send(EncodeFrame(h, {}));
  return last.WithContext("transfer of " + RequestName(id) + " failed");
}

// ---- receiver ------------------------------------------------------------------------------------

TransferReceiver::TransferReceiver(Connection& conn, const ReceiverOptions& opts) : conn_(conn), opts_(opts) {
  thread_ = std::thread([this] { Run(); });
}

TransferReceiver::~TransferReceiver() { Stop(); }

void TransferReceiver::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [id, st] : staging_) FreeStaging(st);
  staging_.clear();
  for (auto& [id, r] : ready_) held_bytes_ -= r.first.num_bytes();
  ready_.clear();
}

int64_t TransferReceiver::held_bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return held_bytes_;
}

int64_t TransferReceiver::num_in_flight() const {
  std::lock_guard<std::mutex> l(mu_);
  int64_t n = 0;
  for (const auto& [id, st] : staging_) n += !st.refused;
  return n;
}

ReceiverStats TransferReceiver::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

Result<SequenceImage> TransferReceiver::Take(uint64_t id, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  const bool done = cv_.wait_for(l, timeout, [&] {
    return ready_.count(id) || aborted_.count(id) || link_closed_ || stop_;
  });
  if (auto it = ready_.find(id); it != ready_.end()) {
    SequenceImage im = std::move(it->second.first);
    ready_.erase(it);
    held_bytes_ -= im.num_bytes();
    return im;
  }
  if (!done) return DeadlineExceeded(RequestName(id) + ": no verified transfer within " +
                                             std::to_string(timeout.count()) + " ms");
  if (aborted_.count(id)) return Status::Cancelled(RequestName(id) + ": the sender aborted the transfer");
  return Status::Unavailable(RequestName(id) + ": the link closed before the transfer completed");
}

void TransferReceiver::Drop(uint64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  DropLocked(id);
}

void TransferReceiver::DropLocked(uint64_t id) {
  if (auto it = staging_.find(id); it != staging_.end()) {
    FreeStaging(it->second);
    staging_.erase(it);
  }
  if (auto it = ready_.find(id); it != ready_.end()) {
    held_bytes_ -= it->second.first.num_bytes();
    ready_.erase(it);
  }
}

void TransferReceiver::Run() {
  for (;;) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return;
      ExpireIdle();
    }
    Result<Message> m = conn_.Receive(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> l(mu_);
    if (!m.ok()) {
      if (m.status().code() == StatusCode::kDeadlineExceeded) continue;
      // The link is gone: nothing staged can complete.
      link_closed_ = true;
      for (auto& [id, st] : staging_) FreeStaging(st);
      staging_.clear();
      cv_.notify_all();
      return;
    }
    Result<FrameHeader> h = DecodeHeader(*m);
    if (!h.ok()) {
      ++stats_.bad_frames;  // who sent it is unknown: the sender's timeout covers it
      continue;
    }
    Handle(*h, *m);
  }
}

void TransferReceiver::FreeStaging(Staging& st) {
  held_bytes_ -= st.bytes;
  st.bytes = 0;
  st.pieces.clear();
}

void TransferReceiver::ExpireIdle() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = ready_.begin(); it != ready_.end();) {
    if (now - it->second.second < opts_.ready_timeout) {
      ++it;
      continue;
    }
    ++stats_.expired;
    held_bytes_ -= it->second.first.num_bytes();
    it = ready_.erase(it);
  }
  for (auto* ids : {&completed_, &aborted_})
    std::erase_if(*ids, [&](const auto& e) { return now - e.second >= opts_.remember_timeout; });
  for (auto it = staging_.begin(); it != staging_.end();) {
    if (now - it->second.last_seen < opts_.staging_timeout) {
      ++it;
      continue;
    }
    stats_.abandoned += !it->second.refused;
    FreeStaging(it->second);
    it = staging_.erase(it);
  }
}

void TransferReceiver::Answer(FrameKind kind, uint64_t id, uint32_t attempt, const Status& s) {
  FrameHeader h{.kind = kind, .request_id = id, .attempt = attempt};
  (void)conn_.Send(EncodeFrame(h, kind == FrameKind::kNack ? EncodeStatus(s) : std::vector<std::byte>{}));
}

void TransferReceiver::Refuse(uint64_t id, Staging& st, const Status& why) {
  ++stats_.refused;
  FreeStaging(st);
  st.begin.reset();
  st.end.reset();
  st.refused = true;
  Answer(FrameKind::kNack, id, st.attempt, why);
}

void TransferReceiver::Handle(const FrameHeader& h, std::span<const std::byte> message) {
  const uint64_t id = h.request_id;
  if (h.kind == FrameKind::kAck || h.kind == FrameKind::kNack) return;  // not ours to receive
  if (h.kind == FrameKind::kAbort) {
    DropLocked(id);
    ++stats_.aborted;
    aborted_.emplace(id, std::chrono::steady_clock::now());
    completed_.erase(id);
    cv_.notify_all();
    return;
  }
  if (completed_.count(id) || aborted_.count(id)) {
    // A retry of an accepted transfer (its Ack was lost): answer again at its End, keep nothing.
    if (completed_.count(id) && h.kind == FrameKind::kEnd) Answer(FrameKind::kAck, id, h.attempt, Status::Ok());
    return;
  }
  auto [it, fresh] = staging_.try_emplace(id);
  Staging& st = it->second;
  if (!fresh && h.attempt < st.attempt) return;  // a stale frame of an earlier attempt
  if (fresh || h.attempt > st.attempt) {
    FreeStaging(st);
    st = Staging{};
    st.attempt = h.attempt;
  }
  st.last_seen = std::chrono::steady_clock::now();
  if (st.refused) return;
  Result<std::span<const std::byte>> payload = PayloadOf(h, message);
  if (!payload.ok()) return Refuse(id, st, payload.status());
  switch (h.kind) {
    case FrameKind::kBegin: {
      Result<BeginInfo> b = DecodeBegin(*payload);
      if (!b.ok()) return Refuse(id, st, b.status());
      const int64_t total = static_cast<int64_t>(b->num_pages) * b->format.bytes_per_page + b->format.bytes_per_slot;
      if (total > opts_.max_request_bytes)
        return Refuse(id, st, Status::ResourceExhausted(RequestName(id) + ": " + std::to_string(total) +
                                                        " bytes exceed the receiver's limit"));
      if (st.begin && !(st.begin->format == b->format && st.begin->num_tokens == b->num_tokens &&
                        st.begin->SameFirst(*b)))
        return Refuse(id, st, Status::DataLoss(RequestName(id) + ": two different begin frames"));
      st.begin = *b;
      break;
    }
    case FrameKind::kPiece: {
      if (st.begin && h.seq > st.begin->num_pages)
        return Refuse(id, st, Status::DataLoss(RequestName(id) + ": piece " + std::to_string(h.seq) + " of " +
                                               std::to_string(st.begin->num_pages + 1)));
      if (auto p = st.pieces.find(h.seq); p != st.pieces.end()) {
        if (p->second.first != h.payload_checksum)
          return Refuse(id, st, Status::DataLoss(RequestName(id) + ": two different copies of piece " +
                                                 std::to_string(h.seq)));
        break;  // an identical duplicate
      }
      const int64_t n = static_cast<int64_t>(payload->size());
      if (st.bytes + n > opts_.max_request_bytes)
        return Refuse(id, st, Status::ResourceExhausted(RequestName(id) + ": exceeds the receiver's limit"));
      st.pieces.emplace(h.seq, std::make_pair(h.payload_checksum, Message(payload->begin(), payload->end())));
      st.bytes += n;
      held_bytes_ += n;
      ++stats_.pieces_received;
      stats_.bytes_received += n;
      break;
    }
    case FrameKind::kEnd: {
      Result<EndInfo> e = DecodeEnd(*payload);
      if (!e.ok()) return Refuse(id, st, e.status());
      st.end = *e;
      break;
    }
    default:
      return;
  }
  TryComplete(id, st);
}

void TransferReceiver::TryComplete(uint64_t id, Staging& st) {
  if (!st.begin || !st.end) return;
  const BeginInfo& b = *st.begin;
  const uint64_t num_pieces = b.num_pages + 1;
  if (st.end->num_pieces != num_pieces)
    return Refuse(id, st, Status::DataLoss(RequestName(id) + ": end frame counts " +
                                           std::to_string(st.end->num_pieces) + " pieces, begin announced " +
                                           std::to_string(num_pieces)));
  if (st.pieces.size() < num_pieces) return;  // more to come (reordered), or the sender will time out and retry
  // Every piece is in [0, num_pages] (checked at arrival or below) and none is missing.
  std::vector<uint64_t> sums;
  sums.reserve(num_pieces);
  for (const auto& [seq, piece] : st.pieces) {
    if (seq >= num_pieces)
      return Refuse(id, st, Status::DataLoss(RequestName(id) + ": piece " + std::to_string(seq) + " out of range"));
    const int64_t want = seq < b.num_pages ? b.format.bytes_per_page : b.format.bytes_per_slot;
    if (static_cast<int64_t>(piece.second.size()) != want)
      return Refuse(id, st, Status::DataLoss(RequestName(id) + ": piece " + std::to_string(seq) + " has " +
                                             std::to_string(piece.second.size()) + " bytes, " + std::to_string(want) +
                                             " expected"));
    sums.push_back(piece.first);
  }
  if (DigestOf(sums) != st.end->digest)
    return Refuse(id, st, Status::DataLoss(RequestName(id) + ": the pieces do not match the sender's digest"));
  SequenceImage im;
  im.format = b.format;
  im.num_tokens = b.num_tokens;
  im.next_token = b.next_token;
  im.next_logprob = b.next_logprob;
  im.next_top = b.next_top;
  im.pages.reserve(b.num_pages);
  for (auto& [seq, piece] : st.pieces) {
    if (seq < b.num_pages) {
      im.pages.push_back(std::move(piece.second));
    } else {
      im.state = std::move(piece.second);
    }
  }
  if (Status v = ValidateImage(im); !v.ok()) return Refuse(id, st, Status::DataLoss(v.message()));
  // The bytes move from staging to ready: held_bytes_ is unchanged.
  const uint32_t attempt = st.attempt;
  st.bytes = 0;
  staging_.erase(id);
  const auto now = std::chrono::steady_clock::now();
  ready_.emplace(id, std::make_pair(std::move(im), now));
  completed_.emplace(id, now);
  ++stats_.accepted;
  Answer(FrameKind::kAck, id, attempt, Status::Ok());
  cv_.notify_all();
}

}  // namespace gyre::transfer
