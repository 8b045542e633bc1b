// Connection: a bidirectional, message-oriented link between a prefill and a decode instance, the
// I/O seam of the transfer engine (style.md §2.8: tests swap it). A message is a byte string sent
// whole; a transport keeps the messages of one direction in order and intact unless a fault
// decorator (faulty_connection.h) says otherwise — the protocol above (transfer_engine.h) never
// trusts that: it checksums and counts everything.
//
// Implementations: MakeLoopbackPair (in-process), TcpConnection (tcp_connection.h),
// FaultyConnection (a decorator).
// Thread safety: Send may be called from one thread while Receive runs on another; neither is
// called concurrently with itself. Close may be called from any thread, any number of times.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace gyre::transfer {

using Message = std::vector<std::byte>;

// core/status.h has no named constructor for this code.
inline Status DeadlineExceeded(std::string message) {
  return Status(StatusCode::kDeadlineExceeded, std::move(message));
}

class Connection {
 public:
  virtual ~Connection() = default;
  // Queues one message, the bytes of `head` followed by those of `body`, for the peer (a gather
  // write: the TCP transport writes `body` from where it lies). Unavailable once either side has
  // closed.
  virtual Status Send(std::span<const std::byte> head, std::span<const std::byte> body) = 0;
  Status Send(std::span<const std::byte> message) { return Send(message, {}); }
  // The next message from the peer, waiting at most `timeout`. DeadlineExceeded when none came in
  // time; Unavailable once the connection is closed (by either side) and no message is left.
  virtual Result<Message> Receive(std::chrono::milliseconds timeout) = 0;
  // Closes both directions and wakes a blocked Receive (here and at the peer). Idempotent.
  virtual void Close() = 0;
};

// Two connected in-process ends (messages are moved through a queue per direction).
std::pair<std::unique_ptr<Connection>, std::unique_ptr<Connection>> MakeLoopbackPair();

}  // namespace gyre::transfer
