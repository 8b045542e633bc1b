#include "parallel/bootstrap.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

namespace gyre::parallel {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x53425947;  // "GYBS"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxBlob = 1 << 20;
constexpr uint8_t kAck = 'A';
constexpr uint8_t kGo = 'G';

struct Hello {
  uint32_t magic;
  uint32_t version;
  int32_t rank;
  int32_t world_size;
};

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }
  // Gives up ownership: the caller closes the descriptor.
  int Release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

int MsLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

// Waits until `fd` is readable (events = POLLIN) or writable (POLLOUT) before the deadline.
Status WaitFd(int fd, short events, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, MsLeft(deadline));
    if (rc > 0) return Status();
    if (rc == 0) return Status(StatusCode::kDeadlineExceeded, "timed out " + what);
    if (errno != EINTR) return Status::Unavailable(Errno("poll"));
  }
}

Status SendAll(int fd, const void* data, size_t n, Clock::time_point deadline, const std::string& peer) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    GYRE_RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline, "sending to " + peer));
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return Status::Unavailable(peer + " is gone (" + Errno("send") + ")");
    p += k;
    n -= static_cast<size_t>(k);
  }
  return Status();
}

Status RecvAll(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& peer) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    GYRE_RETURN_IF_ERROR(WaitFd(fd, POLLIN, deadline, "waiting for " + peer));
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k == 0) return Status::Unavailable(peer + " closed the connection");
    if (k < 0) return Status::Unavailable(peer + " is gone (" + Errno("recv") + ")");
    p += k;
    n -= static_cast<size_t>(k);
  }
  return Status();
}

Status SendReply(int fd, bool ok, std::span<const uint8_t> payload, Clock::time_point deadline,
                 const std::string& peer) {
  const uint8_t okb = ok ? 1 : 0;
  const uint32_t len = static_cast<uint32_t>(payload.size());
  GYRE_RETURN_IF_ERROR(SendAll(fd, &okb, 1, deadline, peer));
  GYRE_RETURN_IF_ERROR(SendAll(fd, &len, 4, deadline, peer));
  return SendAll(fd, payload.data(), payload.size(), deadline, peer);
}

void SendError(int fd, const Status& s, Clock::time_point deadline) {
  const std::string text = s.ToString();
  // Best effort: the peer may be gone already; give it at most a second.
  (void)SendReply(fd, false, {reinterpret_cast<const uint8_t*>(text.data()), text.size()},
                  std::min(deadline, Clock::now() + std::chrono::seconds(1)), "joiner");
}

Result<addrinfo*> Resolve(const std::string& addr, bool passive, bool allow_port_zero, std::string* host_out) {
  std::string host;
  int port = 0;
  GYRE_RETURN_IF_ERROR(SplitHostPort(addr, &host, &port, allow_port_zero));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) return Status::InvalidArgument("cannot resolve '" + addr + "': " + ::gai_strerror(rc));
  if (host_out) *host_out = host;
  return res;
}

}  // namespace

Result<std::unique_ptr<BootstrapServer>> BootstrapServer::Listen(const std::string& addr) {
  GYRE_ASSIGN_OR_RETURN(addrinfo* res, Resolve(addr, /*passive=*/true, /*allow_port_zero=*/true, nullptr));
  Status last = Status::Unavailable("no address to listen on for '" + addr + "'");
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (fd.get() < 0) {
      last = Status::Unavailable(Errno("socket"));
      continue;
    }
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), 128) != 0) {
      last = Status::Unavailable(Errno(("listen at " + addr).c_str()));
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    const int port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                              : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    ::freeaddrinfo(res);
    return std::unique_ptr<BootstrapServer>(new BootstrapServer(fd.Release(), port));
  }
  ::freeaddrinfo(res);
  return last;
}

BootstrapServer::~BootstrapServer() {
  if (fd_ >= 0) ::close(fd_);
}

Status BootstrapServer::Serve(int world_size, std::span<const uint8_t> blob, std::chrono::milliseconds timeout) {
  if (world_size < 1) return Status::InvalidArgument("bootstrap: world size must be >= 1");
  if (blob.size() > kMaxBlob) return Status::InvalidArgument("bootstrap: blob larger than 1 MiB");
  const auto deadline = Clock::now() + timeout;
  std::map<int, Fd> peers;  // rank -> connection
  auto fail_all = [&](const Status& s) {
    for (auto& [r, fd] : peers) SendError(fd.get(), s, deadline);
    return s;
  };
  while (static_cast<int>(peers.size()) < world_size - 1) {
    Status waited = WaitFd(fd_, POLLIN, deadline, "");
    if (!waited.ok()) {
      std::string missing;
      for (int r = 1; r < world_size; ++r)
        if (!peers.count(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      const Status s =
          waited.code() == StatusCode::kDeadlineExceeded
              ? Status(StatusCode::kDeadlineExceeded, "bootstrap: rank 0 waited " + std::to_string(timeout.count()) +
                                                          " ms; rank(s) " + missing + " did not join")
              : waited;
      return fail_all(s);
    }
    Fd conn(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.get() < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      return fail_all(Status::Unavailable(Errno("bootstrap: accept")));
    }
    const int one = 1;
    ::setsockopt(conn.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Hello h{};
    Status got = RecvAll(conn.get(), &h, sizeof(h), deadline, "a joining rank");
    if (!got.ok()) continue;  // a stray or vanished connection before its hello: not a rank yet
    Status bad;
    if (h.magic != kMagic || h.version != kVersion) {
      bad = Status::InvalidArgument("bootstrap: a peer spoke another protocol (magic/version mismatch)");
    } else if (h.world_size != world_size) {
      bad = Status::InvalidArgument("bootstrap: rank " + std::to_string(h.rank) + " says world size " +
                                    std::to_string(h.world_size) + ", rank 0 says " + std::to_string(world_size));
    } else if (h.rank < 1 || h.rank >= world_size) {
      bad = Status::InvalidArgument("bootstrap: rank " + std::to_string(h.rank) + " is outside [1, " +
                                    std::to_string(world_size) + ")");
    } else if (peers.count(h.rank)) {
      bad = Status::InvalidArgument("bootstrap: rank " + std::to_string(h.rank) + " joined twice");
    }
    if (!bad.ok()) {
      SendError(conn.get(), bad, deadline);
      return fail_all(bad);
    }
    peers.emplace(h.rank, std::move(conn));
  }
  for (auto& [r, fd] : peers) {
    Status s = SendReply(fd.get(), true, blob, deadline, "rank " + std::to_string(r));
    if (!s.ok()) return fail_all(s.WithContext("bootstrap"));
  }
  for (auto& [r, fd] : peers) {
    uint8_t ack = 0;
    Status s = RecvAll(fd.get(), &ack, 1, deadline, "rank " + std::to_string(r));
    if (s.ok() && ack != kAck) s = Status::DataLoss("rank " + std::to_string(r) + " sent a bad ack");
    // Closing every connection without the go byte tells the joiners that the group failed.
    if (!s.ok()) return s.WithContext("bootstrap");
  }
  for (auto& [r, fd] : peers) {
    Status s = SendAll(fd.get(), &kGo, 1, deadline, "rank " + std::to_string(r));
    if (!s.ok()) return s.WithContext("bootstrap");
  }
  return Status();
}

Result<BootstrapResult> BootstrapJoin(const std::string& addr, int rank, int world_size,
                                      std::chrono::milliseconds timeout) {
  if (rank < 1 || rank >= world_size) {
    return Status::InvalidArgument("bootstrap: a joining rank must be in [1, world size), got " + std::to_string(rank));
  }
  const auto deadline = Clock::now() + timeout;
  std::string host;
  GYRE_ASSIGN_OR_RETURN(addrinfo* res, Resolve(addr, /*passive=*/false, /*allow_port_zero=*/false, &host));
  const std::string peer = "rank 0 at " + addr;
  Fd fd;
  std::string last_error;
  // Rank 0 may start after us: retry refused connections until the deadline.
  while (fd.get() < 0) {
    for (addrinfo* ai = res; ai && fd.get() < 0; ai = ai->ai_next) {
      Fd s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
      if (s.get() < 0) continue;
      if (::connect(s.get(), ai->ai_addr, ai->ai_addrlen) == 0) {
        fd = std::move(s);
      } else {
        last_error = std::strerror(errno);
      }
    }
    if (fd.get() >= 0) break;
    if (Clock::now() >= deadline) {
      ::freeaddrinfo(res);
      return Status(StatusCode::kDeadlineExceeded, "bootstrap: rank " + std::to_string(rank) + " could not reach " +
                                                       peer + " within " + std::to_string(timeout.count()) +
                                                       " ms (" + last_error + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50, std::max(1, MsLeft(deadline)))));
  }
  ::freeaddrinfo(res);
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const Hello h{kMagic, kVersion, rank, world_size};
  GYRE_RETURN_IF_ERROR(SendAll(fd.get(), &h, sizeof(h), deadline, peer).WithContext("bootstrap"));
  uint8_t ok = 0;
  uint32_t len = 0;
  GYRE_RETURN_IF_ERROR(RecvAll(fd.get(), &ok, 1, deadline, peer).WithContext("bootstrap"));
  GYRE_RETURN_IF_ERROR(RecvAll(fd.get(), &len, 4, deadline, peer).WithContext("bootstrap"));
  if (len > kMaxBlob) {
    return Status::DataLoss("bootstrap: rank 0 announced a blob of " + std::to_string(len) + " bytes");
  }
  std::vector<uint8_t> payload(len);
  GYRE_RETURN_IF_ERROR(RecvAll(fd.get(), payload.data(), len, deadline, peer).WithContext("bootstrap"));
  if (!ok) {
    return Status::InvalidArgument("bootstrap: rank 0 refused the group: " +
                                   std::string(payload.begin(), payload.end()));
  }
  GYRE_RETURN_IF_ERROR(SendAll(fd.get(), &kAck, 1, deadline, peer).WithContext("bootstrap"));
  uint8_t go = 0;
  Status s = RecvAll(fd.get(), &go, 1, deadline, peer);
  if (!s.ok()) return s.WithContext("bootstrap: the group failed after the blob was sent (another rank is gone?)");
  if (go != kGo) return Status::DataLoss("bootstrap: rank 0 sent a bad go byte");
  return BootstrapResult{world_size, std::move(payload)};
}

Result<BootstrapResult> Bootstrap(const DistOptions& o, std::span<const uint8_t> blob) {
  GYRE_RETURN_IF_ERROR(Validate(o));
  if (o.nnodes == 1) return BootstrapResult{1, std::vector<uint8_t>(blob.begin(), blob.end())};
  if (o.node_rank != 0) return BootstrapJoin(o.dist_init_addr, o.node_rank, o.nnodes, o.timeout);
  GYRE_ASSIGN_OR_RETURN(auto server, BootstrapServer::Listen(o.dist_init_addr));
  GYRE_RETURN_IF_ERROR(server->Serve(o.nnodes, blob, o.timeout));
  return BootstrapResult{o.nnodes, std::vector<uint8_t>(blob.begin(), blob.end())};
}

}  // namespace gyre::parallel
