// PacedConnection: a Connection decorator that holds its sends to a link rate, so a transfer
// takes the time it would take on a slower link (a NIC, a cross-host path) while the bytes still
// go through the real transport underneath. The feedback layer uses it to give a small model's
// transfer the share of the prefill's time that the full model's has (cli/disagg_scenario.h):
// a send returns once the link would have carried its bytes, as a blocking write to a saturated
// socket does. Receive and Close pass through.
//
// Pacing (LinkPacer, shared by the connections over one link): the link is busy until `free_at`; a
// send of n bytes starts at max(now, free_at), keeps the link busy for n / bytes_per_second, and
// returns when that ends. The sleep costs no CPU.
// Thread safety: as Connection (one sender at a time per connection).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>

#include "transfer/connection.h"

namespace gyre::transfer {

// The rate of one link, shared by every connection over it (two connections to one peer share its
// bandwidth, as on a NIC): a send reserves the link from max(now, free_at) for bytes / rate.
// Thread safety: Reserve from any thread.
class LinkPacer {
 public:
  // REQUIRES: bytes_per_second > 0.
  explicit LinkPacer(double bytes_per_second) : bytes_per_second_(bytes_per_second) {}
  // The time at which the link has carried `bytes` more (the caller sleeps until then).
  std::chrono::steady_clock::time_point Reserve(size_t bytes);
  // Seconds the link has been reserved so far (sum of bytes / rate).
  double busy_seconds() const;

 private:
  const double bytes_per_second_;
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point free_at_{};
  double busy_s_ = 0;
};

class PacedConnection final : public Connection {
 public:
  // REQUIRES: inner and link non-null.
  PacedConnection(std::unique_ptr<Connection> inner, std::shared_ptr<LinkPacer> link);

  Status Send(std::span<const std::byte> head, std::span<const std::byte> body) override;
  Result<Message> Receive(std::chrono::milliseconds timeout) override { return inner_->Receive(timeout); }
  void Close() override { inner_->Close(); }

 private:
  std::unique_ptr<Connection> inner_;
  std::shared_ptr<LinkPacer> link_;
};

}  // namespace gyre::transfer
