#include "transfer/faulty_connection.h"

#include <thread>

namespace gyre::transfer {

std::string FaultPolicy::ToString() const {
  return "seed=" + std::to_string(seed) + " drop=" + std::to_string(drop) + " delay=" + std::to_string(delay) +
         " truncate=" + std::to_string(truncate) + " corrupt=" + std::to_string(corrupt) +
         " duplicate=" + std::to_string(duplicate) + " reorder=" + std::to_string(reorder) +
         " kill_after=" + std::to_string(kill_after);
}

FaultyConnection::FaultyConnection(std::unique_ptr<Connection> inner, const FaultPolicy& policy)
    : inner_(std::move(inner)), policy_(policy), rng_(policy.seed) {}

FaultCounts FaultyConnection::counts() const {
  std::lock_guard<std::mutex> l(mu_);
  return counts_;
}

Status FaultyConnection::Send(std::span<const std::byte> head, std::span<const std::byte> body) {
  std::lock_guard<std::mutex> l(mu_);
  if (policy_.kill_after >= 0 && counts_.sent >= policy_.kill_after) {
    if (!counts_.killed) inner_->Close();
    counts_.killed = true;
    return Status::Unavailable("fault injection: link killed after " + std::to_string(counts_.sent) + " messages");
  }
  ++counts_.sent;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  // Every draw is made for every message, so one fault's probability does not shift the others'.
  const bool drop = u(rng_) < policy_.drop, delay = u(rng_) < policy_.delay, truncate = u(rng_) < policy_.truncate,
             corrupt = u(rng_) < policy_.corrupt, duplicate = u(rng_) < policy_.duplicate,
             reorder = u(rng_) < policy_.reorder;
  const uint64_t r1 = rng_(), r2 = rng_();
  if (delay) {
    ++counts_.delayed;
    std::this_thread::sleep_for(std::chrono::milliseconds(policy_.delay_ms));
  }
  if (drop) {
    ++counts_.dropped;
    return Status::Ok();
  }
  Message m(head.begin(), head.end());
  m.insert(m.end(), body.begin(), body.end());
  if (truncate && !m.empty()) {
    ++counts_.truncated;
    m.resize(r1 % m.size());
  }
  if (corrupt && !m.empty()) {
    ++counts_.corrupted;
    m[r2 % m.size()] ^= static_cast<std::byte>(1u << (r2 >> 61));
  }
  if (reorder && !held_) {
    ++counts_.reordered;
    held_ = std::move(m);
    return Status::Ok();
  }
  GYRE_RETURN_IF_ERROR(inner_->Send(m));
  if (duplicate) {
    ++counts_.duplicated;
    GYRE_RETURN_IF_ERROR(inner_->Send(m));
  }
  if (held_) {
    Message h = std::move(*held_);
    held_.reset();
    GYRE_RETURN_IF_ERROR(inner_->Send(h));
  }
  return Status::Ok();
}

}  // namespace gyre::transfer
