#include "transfer/tcp_connection.h"

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace gyre::transfer {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

void PutLength(uint64_t n, std::byte out[8]) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
}
uint64_t GetLength(const std::byte in[8]) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(in[i]) << (8 * i);
  return n;
}

class TcpConnection final : public Connection {
 public:
  // `io` owns the context `socket` belongs to (kept alive with it).
  TcpConnection(std::unique_ptr<asio::io_context> io, tcp::socket socket)
      : io_(std::move(io)), socket_(std::move(socket)) {
    boost::system::error_code ec;
    socket_.set_option(tcp::no_delay(true), ec);  // latency of small control messages (acks)
    reader_ = std::thread([this] { ReadLoop(); });
  }
  ~TcpConnection() override {
    Close();
    reader_.join();
    boost::system::error_code ec;
    socket_.close(ec);
  }

  using Connection::Send;
  Status Send(std::span<const std::byte> head, std::span<const std::byte> body) override {
    if (closed_.load(std::memory_order_acquire)) return Status::Unavailable("tcp connection closed");
    std::byte len[8];
    PutLength(head.size() + body.size(), len);
    std::lock_guard<std::mutex> l(send_mu_);
    boost::system::error_code ec;
    const std::array<asio::const_buffer, 3> bufs = {asio::buffer(len, 8), asio::buffer(head.data(), head.size()),
                                                    asio::buffer(body.data(), body.size())};
    asio::write(socket_, bufs, ec);
    if (ec) {
      Close();
      return Status::Unavailable("tcp send: " + ec.message());
    }
    return Status::Ok();
  }

  Result<Message> Receive(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_for(l, timeout, [&] { return !queue_.empty() || peer_done_; }))
      return DeadlineExceeded("no message within " + std::to_string(timeout.count()) + " ms");
    if (queue_.empty()) return Status::Unavailable("tcp connection closed: " + close_reason_);
    Message m = std::move(queue_.front());
    queue_.pop_front();
    return m;
  }

  // NOTE: shutdown(2) on the descriptor is what wakes the reader thread's blocking read; it is a
  // plain syscall, safe while another thread reads (Asio's socket object is not touched).
  void Close() override {
    if (closed_.exchange(true, std::memory_order_acq_rel)) return;
    ::shutdown(socket_.native_handle(), SHUT_RDWR);
  }

 private:
  void ReadLoop() {
    std::string reason = "peer closed";
    for (;;) {
      std::byte len[8];
      boost::system::error_code ec;
      asio::read(socket_, asio::buffer(len, 8), ec);
      if (ec) break;
      const uint64_t n = GetLength(len);
      if (n > kMaxTcpMessageBytes) {
        reason = "message of " + std::to_string(n) + " bytes exceeds the limit";
        Close();
        break;
      }
      Message m(n);
      asio::read(socket_, asio::buffer(m.data(), m.size()), ec);
      if (ec) {
        reason = "truncated message: " + ec.message();
        break;
      }
      std::lock_guard<std::mutex> l(mu_);
      queue_.push_back(std::move(m));
      cv_.notify_all();
    }
    closed_.store(true, std::memory_order_release);
    std::lock_guard<std::mutex> l(mu_);
    peer_done_ = true;
    close_reason_ = reason;
    cv_.notify_all();
  }

  std::unique_ptr<asio::io_context> io_;
  tcp::socket socket_;
  std::thread reader_;
  std::mutex send_mu_;        // one writer at a time
  std::atomic<bool> closed_{false};  // acq_rel: Close from any thread, checked before sends
  std::mutex mu_;             // guards the fields below
  std::condition_variable cv_;
  std::deque<Message> queue_;
  bool peer_done_ = false;
  std::string close_reason_;
};

class TcpListenerImpl final : public TcpListener {
 public:
  TcpListenerImpl() : acceptor_(io_) {}
  Status Open(const std::string& host, uint16_t port) {
    boost::system::error_code ec;
    const auto addr = asio::ip::make_address(host, ec);
    if (ec) return Status::InvalidArgument("listen address '" + host + "': " + ec.message());
    const tcp::endpoint ep(addr, port);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Status::Unavailable("listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
    return Status::Ok();
  }
  uint16_t port() const override { return acceptor_.local_endpoint().port(); }

  Result<std::unique_ptr<Connection>> Accept(std::chrono::milliseconds timeout) override {
    auto io = std::make_unique<asio::io_context>();
    tcp::socket socket(*io);
    boost::system::error_code result = asio::error::would_block;
    acceptor_.async_accept(socket, [&](const boost::system::error_code& ec) { result = ec; });
    io_.restart();
    io_.run_for(timeout);
    if (result == asio::error::would_block) {
      acceptor_.cancel();
      io_.restart();
      io_.run();  // the cancelled handler
      return DeadlineExceeded("no connection within " + std::to_string(timeout.count()) + " ms");
    }
    if (result) return Status::Unavailable("accept: " + result.message());
    return std::unique_ptr<Connection>(new TcpConnection(std::move(io), std::move(socket)));
  }

 private:
  asio::io_context io_;
  tcp::acceptor acceptor_;
};

}  // namespace

Result<std::unique_ptr<TcpListener>> TcpListener::Listen(const std::string& host, uint16_t port) {
  auto l = std::make_unique<TcpListenerImpl>();
  GYRE_RETURN_IF_ERROR(l->Open(host, port));
  return std::unique_ptr<TcpListener>(std::move(l));
}

Result<std::unique_ptr<Connection>> TcpConnect(const std::string& host, uint16_t port,
                                               std::chrono::milliseconds timeout) {
  auto io = std::make_unique<asio::io_context>();
  tcp::resolver resolver(*io);
  boost::system::error_code ec;
  const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) return Status::Unavailable("resolve " + host + ": " + ec.message());
  tcp::socket socket(*io);
  boost::system::error_code result = asio::error::would_block;
  asio::async_connect(socket, endpoints, [&](const boost::system::error_code& e, const tcp::endpoint&) { result = e; });
  io->run_for(timeout);
  if (result == asio::error::would_block) {
    socket.close(ec);
    io->restart();
    io->run();
    return DeadlineExceeded("connect to " + host + ":" + std::to_string(port) + " timed out");
  }
  if (result) return Status::Unavailable("connect to " + host + ":" + std::to_string(port) + ": " + result.message());
  io->restart();
  return std::unique_ptr<Connection>(new TcpConnection(std::move(io), std::move(socket)));
}

}  // namespace gyre::transfer
