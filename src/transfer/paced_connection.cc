#include "transfer/paced_connection.h"

#include <algorithm>
#include <thread>

namespace gyre::transfer {

PacedConnection::PacedConnection(std::unique_ptr<Connection> inner, double bytes_per_second)
    : inner_(std::move(inner)), bytes_per_second_(bytes_per_second) {}

Status PacedConnection::Send(std::span<const std::byte> head, std::span<const std::byte> body) {
  using Clock = std::chrono::steady_clock;
  const double seconds = static_cast<double>(head.size() + body.size()) / bytes_per_second_;
  const Clock::time_point start = std::max(Clock::now(), free_at_);
  free_at_ = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  busy_s_ += seconds;
  Status s = inner_->Send(head, body);
  std::this_thread::sleep_until(free_at_);
  return s;
}

}  // namespace gyre::transfer
