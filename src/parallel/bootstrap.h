// Bootstrap over TCP: the processes of a multi-node group meet at rank 0's --dist-init-addr;
// rank 0 hands every other rank an opaque blob (the bytes of an ncclUniqueId) and everyone
// learns the world size. CPU only (POSIX sockets); it carries a few hundred bytes once, at start.
//
// Protocol (all integers little-endian as the hosts are; the group is one architecture):
//   joiner -> rank 0: hello {magic "GYBS", version, rank, world_size}
//   rank 0 -> joiner: reply {ok byte, length, blob | error text}    after every rank said hello
//   joiner -> rank 0: ack byte
//   rank 0 -> joiner: go byte                                       after every rank acked
// so every rank returns OK only when all of them got the blob. A bad hello (a rank outside
// [1, world), a rank that already joined, a world size other than rank 0's) fails the whole
// bootstrap: rank 0 sends the reason to every joiner and returns it too. A joiner that
// disconnects before the go, or a rank 0 that goes away, fails the others with Unavailable.
// Nothing blocks past the timeout: DeadlineExceeded names who was missing.
//
// Thread safety: a BootstrapServer belongs to one thread. Separate objects are independent.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "parallel/dist_options.h"

namespace gyre::parallel {

struct BootstrapResult {
  int world_size = 0;
  std::vector<uint8_t> blob;
};

// Rank 0's side: listens first (so a test can learn the port), then serves one bootstrap.
class BootstrapServer {
 public:
  // Binds and listens at `addr` (host:port; port 0 picks a free port).
  static Result<std::unique_ptr<BootstrapServer>> Listen(const std::string& addr);
  ~BootstrapServer();
  BootstrapServer(const BootstrapServer&) = delete;
  BootstrapServer& operator=(const BootstrapServer&) = delete;

  int port() const { return port_; }

  // Waits for ranks 1..world_size-1, gives each `blob`, and returns when all have it.
  // REQUIRES: world_size >= 1; blob.size() <= 1 MiB.
  Status Serve(int world_size, std::span<const uint8_t> blob, std::chrono::milliseconds timeout);

 private:
  explicit BootstrapServer(int fd, int port) : fd_(fd), port_(port) {}
  int fd_;
  int port_;
};

// A joining rank's side: connects to rank 0 at `addr` (retrying while rank 0 is not up yet),
// says hello, and returns the blob. REQUIRES: 1 <= rank < world_size.
Result<BootstrapResult> BootstrapJoin(const std::string& addr, int rank, int world_size,
                                      std::chrono::milliseconds timeout);

// The whole thing from options: node 0 listens at o.dist_init_addr and serves `blob`; the other
// nodes join and return rank 0's blob. With nnodes == 1 returns `blob` at once.
Result<BootstrapResult> Bootstrap(const DistOptions& o, std::span<const uint8_t> blob);

}  // namespace gyre::parallel
