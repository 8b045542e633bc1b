// The transfer engine: moves one request's SequenceImage from a prefill instance to a decode
// instance over a Connection, complete and checked, or not at all (docs/disaggregation.md).
//
// Protocol (frames in wire.h): the sender sends Begin, one Piece per page and one for the KDA
// state (each with its sequence number and XXH64), and End (piece count and a digest of the
// checksums), then waits for the receiver's answer. The receiver verifies every frame's header
// and payload checksum, rejects duplicates that differ and pieces outside the announced range,
// and accepts the attempt only when Begin, End and every piece are present, sizes match the
// format and the digest matches; then it acknowledges (Ack). A refused attempt is answered with
// Nack; an unanswered one times out. The sender retries up to max_attempts (a new attempt number;
// frames of older attempts are ignored), and on giving up sends Abort so the receiver drops what
// it holds for the request.
//
// Ownership: the sender frees nothing: its caller keeps the pages and slot until Send returns OK
// (the receiver holds a verified copy), and keeps them on failure to retry elsewhere or end the
// request with the Status. The receiver owns staged bytes until Take hands the image over.
//
// Known gap: if the last Ack is lost and the Abort too, the sender reports failure while the
// receiver holds (byte-exact) data for the request; a decode instance must Take only requests
// the router assigned to it after the sender's success (the router sees both ends).
// Thread safety: TransferSender::Send runs on one thread at a time per sender; TransferReceiver's
// methods may be called from any thread (it runs its own thread, started in the constructor).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <optional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"
#include "transfer/connection.h"
#include "transfer/sequence_image.h"
#include "transfer/wire.h"

namespace gyre::transfer {

struct SenderOptions {
  int max_attempts = 3;
  std::chrono::milliseconds ack_timeout{5000};  // per attempt, from its End frame
};

struct SenderStats {
  int64_t requests = 0, completed = 0, failed = 0, attempts = 0, retries = 0;
  int64_t bytes_sent = 0, pieces_sent = 0;
};

class TransferSender {
 public:
  // Borrows `conn` (it outlives the sender); the sender reads only Ack/Nack frames from it.
  TransferSender(Connection& conn, const SenderOptions& opts) : conn_(conn), opts_(opts) {}
  TransferSender(const TransferSender&) = delete;
  TransferSender& operator=(const TransferSender&) = delete;

  // Sends `image` as request `request_id` and waits for the acknowledgement. OK: the receiver
  // holds a verified byte-exact copy (the caller may free pages and slot). Otherwise nothing the
  // caller owns changed: InvalidArgument (an inconsistent image), DataLoss (every attempt
  // refused; the last refusal's message), DeadlineExceeded (no answer), Unavailable (the link
  // closed: a peer died mid-transfer).
  Status Send(uint64_t request_id, const SequenceImage& image);

  SenderStats stats() const;

 private:
  // One attempt's frames; Unavailable when the link fails.
  Status SendAttempt(uint64_t request_id, uint32_t attempt, const SequenceImage& image,
                     std::span<const uint64_t> sums);
  // The answer to `attempt`: OK (Ack), the refusal (Nack), DeadlineExceeded or Unavailable.
  Status AwaitAnswer(uint64_t request_id, uint32_t attempt);

  Connection& conn_;
  const SenderOptions opts_;
  mutable std::mutex mu_;  // guards stats_
  SenderStats stats_;
};

struct ReceiverOptions {
  // A transfer that sends nothing for this long is dropped (a sender that died or gave up).
  std::chrono::milliseconds staging_timeout{30000};
  // An accepted image nobody takes for this long is dropped (its request was given up).
  std::chrono::milliseconds ready_timeout{120000};
  // How long accepted and aborted request ids are remembered (to re-acknowledge retries and
  // ignore late frames); bounds the memory of those sets.
  std::chrono::milliseconds remember_timeout{600000};
  int64_t max_request_bytes = int64_t{1} << 36;  // larger announced images are refused
};

struct ReceiverStats {
  int64_t accepted = 0, refused = 0, aborted = 0, abandoned = 0, expired = 0;
  int64_t bad_frames = 0;  // undecodable headers (ignored: nobody to answer)
  int64_t bytes_received = 0, pieces_received = 0;
};

class TransferReceiver {
 public:
  // Borrows `conn` (it outlives the receiver) and starts the receiving thread.
  TransferReceiver(Connection& conn, const ReceiverOptions& opts);
  ~TransferReceiver();
  TransferReceiver(const TransferReceiver&) = delete;
  TransferReceiver& operator=(const TransferReceiver&) = delete;

  // Stops the thread and drops everything staged or not taken. Idempotent.
  void Stop();

  // Waits at most `timeout` for request `request_id`'s verified image and hands it over.
  // DeadlineExceeded; Cancelled when the sender aborted it; Unavailable when the link closed
  // before it was complete.
  Result<SequenceImage> Take(uint64_t request_id, std::chrono::milliseconds timeout);
  // Drops whatever is held for `request_id` (staged or accepted and not taken).
  void Drop(uint64_t request_id);

  // Bytes held for transfers in progress and accepted images not taken (0 when idle; idle
  // transfers and untaken images expire after staging_timeout / ready_timeout).
  int64_t held_bytes() const;
  int64_t num_in_flight() const;  // transfers staged, not yet accepted
  ReceiverStats stats() const;

 private:
  struct Staging {
    uint32_t attempt = 0;
    bool refused = false;  // a tombstone: later frames of this attempt are ignored
    std::optional<BeginInfo> begin;
    std::optional<EndInfo> end;
    std::map<uint32_t, std::pair<uint64_t, Message>> pieces;  // seq → (checksum, payload)
    int64_t bytes = 0;
    std::chrono::steady_clock::time_point last_seen;
  };
  void Run();
  void Handle(const FrameHeader& h, std::span<const std::byte> message);
  // Refuses the request's current attempt: Nack, staged bytes freed, a tombstone kept.
  void Refuse(uint64_t id, Staging& st, const Status& why);
  void TryComplete(uint64_t id, Staging& st);
  void Answer(FrameKind kind, uint64_t id, uint32_t attempt, const Status& s);
  void ExpireIdle();
  void FreeStaging(Staging& st);
  void DropLocked(uint64_t id);  // Drop with mu_ held

  Connection& conn_;
  const ReceiverOptions opts_;
  std::thread thread_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  bool stop_ = false;
  bool link_closed_ = false;
  std::map<uint64_t, Staging> staging_;
  using TimePoint = std::chrono::steady_clock::time_point;
  std::map<uint64_t, std::pair<SequenceImage, TimePoint>> ready_;  // id → (image, accepted at)
  std::map<uint64_t, TimePoint> completed_;  // accepted ids (re-acknowledged when a retry arrives)
  std::map<uint64_t, TimePoint> aborted_;
  int64_t held_bytes_ = 0;
  ReceiverStats stats_;
};

}  // namespace gyre::transfer
