// Communicator: the collectives a parallel plan uses to exchange shards between ranks, and
// InProcessGroup, an implementation where the ranks are std::threads of one process.
//
// Collective contract (every implementation):
//   * Every rank of a group calls the same collectives in the same order, with argument sizes
//     that agree (the sizes each method names). A rank that skips a collective leaves the others
//     waiting; InProcessGroup turns that into DeadlineExceeded after its timeout.
//   * Buffers are fp32; integers travel as exact float values (plans keep them below 2^24).
//   * A failed collective (size mismatch, timeout) makes the group broken: that call and every
//     later call on every rank return the same non-OK status (sticky, like leveldb's background
//     error), so a plan cannot continue on half-exchanged data.
//
// Determinism: InProcessGroup reduces in rank order, acc = ((x_0 + x_1) + x_2) + ..., in fp32,
// so every rank receives bitwise the same sum and a rerun reproduces it bit for bit. A NCCL
// group does not promise this order (ring and tree reductions associate differently); a test
// that needs bitwise results across ranks must not assume it on GPUs.
//
// NOTE: GPU ranks use DeviceCommunicator (device_communicator.h: NCCL, or SharedDeviceGroup
// with ranks sharing one GPU), the same contract on device buffers. Nothing in src/parallel has
// run on more than one GPU.
//
// Thread safety: a Communicator belongs to the one thread that plays its rank. The group's
// shared state is internally synchronised.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"

namespace gyre::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Replaces `data` with the element-wise sum of every rank's `data`.
  // REQUIRES: the same data.size() on every rank.
  virtual Status AllReduceSum(std::span<float> data) = 0;

  // out = concat over ranks 0..size()-1 of each rank's `in` (rank-major).
  // REQUIRES: the same in.size() on every rank; out.size() == size() * in.size().
  virtual Status AllGather(std::span<const float> in, std::span<float> out) = 0;

  // `in` holds size() blocks of out.size() elements; rank r receives the sum over ranks of
  // block r. REQUIRES: in.size() == size() * out.size(), the same on every rank.
  virtual Status ReduceScatterSum(std::span<const float> in, std::span<float> out) = 0;

  // Personalised exchange with per-rank counts. `send` holds size() consecutive blocks, block d
  // (send_counts[d] elements) going to rank d. On return `recv` holds the blocks sent to this
  // rank, concatenated in source-rank order, and (*recv_counts)[s] is the size of the block from
  // rank s. Counts may be zero. REQUIRES: send_counts.size() == size() and their sum ==
  // send.size().
  virtual Status AllToAllV(std::span<const float> send, std::span<const int64_t> send_counts,
                           std::vector<float>* recv, std::vector<int64_t>* recv_counts) = 0;

  // Returns when every rank has called Barrier.
  virtual Status Barrier() = 0;
};

// A group of `n` in-process ranks. Create returns the group; Rank(r) is the communicator that
// the thread playing rank r uses. The group must outlive every use of its communicators.
class InProcessGroup {
 public:
  // REQUIRES: n >= 1. `timeout`: how long a collective waits for the slowest rank.
  static std::unique_ptr<InProcessGroup> Create(int n, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  ~InProcessGroup();
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  int size() const;
  Communicator& Rank(int r);
  // Marks the group broken with `s` (REQUIRES: !s.ok()): every waiting and every later
  // collective returns it. Used when one rank fails outside a collective, so that the others
  // stop waiting for it.
  void Abort(Status s);
  // The first failure of the group (OK while none).
  Status status() const;

  struct Shared;  // communicator.cc

 private:
  explicit InProcessGroup(int n, std::chrono::milliseconds timeout);
  std::unique_ptr<Shared> shared_;
  std::vector<std::unique_ptr<Communicator>> ranks_;
};

// Runs `fn` once per rank of a fresh InProcessGroup of `n`, each on its own std::thread, and
// joins them. Each rank thread runs its OpenMP regions single-threaded (ranks are the
// parallelism). A rank that fails aborts the group, so the others do not wait for it. Returns OK
// when every rank returned OK, else the group's first failure (with "rank r" as context when a
// rank failed outside a collective).
Status RunOnRanks(int n, const std::function<Status(Communicator&)>& fn);

}  // namespace gyre::parallel
