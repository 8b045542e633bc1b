// PacedConnection: a Connection decorator that holds its sends to a link rate, so a transfer
// takes the time it would take on a slower link (a NIC, a cross-host path) while the bytes still
// go through the real transport underneath. The feedback layer uses it to give a small model's
// transfer the share of the prefill's time that the full model's has (cli/disagg_scenario.h):
// a send returns once the link would have carried its bytes, as a blocking write to a saturated
// socket does. Receive and Close pass through.
//
// Pacing: the link is busy until `free_at`; a send of n bytes starts at max(now, free_at), keeps
// the link busy for n / bytes_per_second, and returns when that ends. The sleep costs no CPU.
// Thread safety: as Connection (one sender at a time).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "transfer/connection.h"

namespace gyre::transfer {

class PacedConnection final : public Connection {
 public:
  // REQUIRES: inner != nullptr, bytes_per_second > 0.
  PacedConnection(std::unique_ptr<Connection> inner, double bytes_per_second);

  Status Send(std::span<const std::byte> head, std::span<const std::byte> body) override;
  Result<Message> Receive(std::chrono::milliseconds timeout) override { return inner_->Receive(timeout); }
  void Close() override { inner_->Close(); }

  // Seconds the link has been held busy by sends so far (sum of n / bytes_per_second).
  double busy_seconds() const { return busy_s_; }

 private:
  std::unique_ptr<Connection> inner_;
  const double bytes_per_second_;
  std::chrono::steady_clock::time_point free_at_{};
  double busy_s_ = 0;
};

}  // namespace gyre::transfer
