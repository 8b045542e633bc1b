// The in-process transport: a mutex-guarded queue per direction shared by the two ends.
#include <condition_variable>
#include <deque>
#include <mutex>

#include "transfer/connection.h"

namespace gyre::transfer {
namespace {

// Shared by both ends (shared_ptr: each end's lifetime is its owner's).
struct Link {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Message> queue[2];  // queue[i]: messages for end i
  bool closed = false;           // guarded by mu
};

class LoopbackConnection final : public Connection {
 public:
  LoopbackConnection(std::shared_ptr<Link> link, int me) : link_(std::move(link)), me_(me) {}
  ~LoopbackConnection() override { Close(); }

  using Connection::Send;
  Status Send(std::span<const std::byte> head, std::span<const std::byte> body) override {
    Message m(head.begin(), head.end());
    m.insert(m.end(), body.begin(), body.end());
    std::lock_guard<std::mutex> l(link_->mu);
    if (link_->closed) return Status::Unavailable("loopback connection closed");
    link_->queue[1 - me_].push_back(std::move(m));
    link_->cv.notify_all();
    return Status::Ok();
  }

  Result<Message> Receive(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> l(link_->mu);
    std::deque<Message>& q = link_->queue[me_];
    if (!link_->cv.wait_for(l, timeout, [&] { return !q.empty() || link_->closed; }))
      return DeadlineExceeded("no message within " + std::to_string(timeout.count()) + " ms");
    if (link_->closed) return Status::Unavailable("loopback connection closed");
    Message m = std::move(q.front());
    q.pop_front();
    return m;
  }

  void Close() override {
    std::lock_guard<std::mutex> l(link_->mu);
    link_->closed = true;
    link_->queue[0].clear();
    link_->queue[1].clear();
    link_->cv.notify_all();
  }

 private:
  std::shared_ptr<Link> link_;
  int me_;
};

}  // namespace

std::pair<std::unique_ptr<Connection>, std::unique_ptr<Connection>> MakeLoopbackPair() {
  auto link = std::make_shared<Link>();
  return {std::make_unique<LoopbackConnection>(link, 0), std::make_unique<LoopbackConnection>(link, 1)};
}

}  // namespace gyre::transfer
