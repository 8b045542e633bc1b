// FaultyConnection: a Connection decorator that damages what it sends, driven by a seed, so the
// transfer protocol's checks and retries run without a real failure (style.md §2.8, Mooncake's
// fault proxy). Each Send draws, independently, whether to drop, delay, truncate, corrupt,
// duplicate or reorder the message (probabilities in FaultPolicy); `kill_after` closes the link
// (both ends see it closed) once that many messages have been sent, as a peer dying
// mid-transfer. Receive and Close pass through. Deterministic in (seed, sequence of sends).
// Thread safety: as Connection.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>

#include "transfer/connection.h"

namespace gyre::transfer {

struct FaultPolicy {
  uint64_t seed = 0;
  double drop = 0;       // the message is not sent
  double delay = 0;      // the sender sleeps delay_ms first
  int delay_ms = 20;
  double truncate = 0;   // a strict prefix is sent
  double corrupt = 0;    // one bit is flipped
  double duplicate = 0;  // sent twice
  double reorder = 0;    // held back and sent after the next message
  int64_t kill_after = -1;  // >= 0: close the link after this many sends

  std::string ToString() const;
};

// How often each fault fired (for tests that must see their fault happen).
struct FaultCounts {
  int64_t sent = 0, dropped = 0, delayed = 0, truncated = 0, corrupted = 0, duplicated = 0, reordered = 0;
  bool killed = false;
};

class FaultyConnection final : public Connection {
 public:
  // Wraps `inner` (owned).
  FaultyConnection(std::unique_ptr<Connection> inner, const FaultPolicy& policy);

  using Connection::Send;
  Status Send(std::span<const std::byte> head, std::span<const std::byte> body) override;
  Result<Message> Receive(std::chrono::milliseconds timeout) override { return inner_->Receive(timeout); }
  void Close() override { inner_->Close(); }

  FaultCounts counts() const;

 private:
  std::unique_ptr<Connection> inner_;
  const FaultPolicy policy_;
  mutable std::mutex mu_;  // guards the fields below (Send is the only writer)
  std::mt19937_64 rng_;
  std::optional<Message> held_;  // a reordered message waiting for the next send
  FaultCounts counts_;
};

}  // namespace gyre::transfer
