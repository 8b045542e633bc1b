// TCP transport over Boost.Asio: each message goes as an 8-byte little-endian length and its
// bytes. A reader thread per connection drains the socket into a queue, so Receive can wait with
// a timeout and a Send never waits on the peer's reads beyond the socket buffers.
// Thread safety: as Connection; TcpListener is used by one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "transfer/connection.h"

namespace gyre::transfer {

// Largest message a TCP connection accepts (a longer length prefix closes the connection).
inline constexpr uint64_t kMaxTcpMessageBytes = uint64_t{1} << 32;

class TcpListener {
 public:
  // Listens on `host`:`port` (port 0: an ephemeral port, see port()). Unavailable when the
  // address cannot be bound.
  static Result<std::unique_ptr<TcpListener>> Listen(const std::string& host, uint16_t port);
  virtual ~TcpListener() = default;
  virtual uint16_t port() const = 0;
  // The next incoming connection, waiting at most `timeout` (DeadlineExceeded).
  virtual Result<std::unique_ptr<Connection>> Accept(std::chrono::milliseconds timeout) = 0;
};

// Connects to `host`:`port` within `timeout`: Unavailable (refused, unresolvable) or
// DeadlineExceeded.
Result<std::unique_ptr<Connection>> TcpConnect(const std::string& host, uint16_t port,
                                               std::chrono::milliseconds timeout);

}  // namespace gyre::transfer
