#include "transfer/paced_connection.h"

#include <algorithm>
#include <thread>

namespace gyre::transfer {

std::chrono::steady_clock::time_point LinkPacer::Reserve(size_t bytes) {
  using Clock = std::chrono::steady_clock;
  const double seconds = static_cast<double>(bytes) / bytes_per_second_;
  std::lock_guard<std::mutex> l(mu_);
  const Clock::time_point start = std::max(Clock::now(), free_at_);
  free_at_ = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  busy_s_ += seconds;
  return free_at_;
}

double LinkPacer::busy_seconds() const {
  std::lock_guard<std::mutex> l(mu_);
  return busy_s_;
}

PacedConnection::PacedConnection(std::unique_ptr<Connection> inner, std::shared_ptr<LinkPacer> link)
    : inner_(std::move(inner)), link_(std::move(link)) {}

Status PacedConnection::Send(std::span<const std::byte> head, std::span<const std::byte> body) {
  const auto done = link_->Reserve(head.size() + body.size());
  Status s = inner_->Send(head, body);
  std::this_thread::sleep_until(done);
  return s;
}

}  // namespace gyre::transfer
