// SharedDeviceGroup: n ranks as threads of one process sharing ONE GPU, implementing
// DeviceCommunicator with device-to-device copies and a fixed-order reduction kernel, so a
// parallel plan (each rank its own shard, stream and buffers) runs on the single H200 we have.
// NCCL cannot do this: it refuses two ranks of a communicator on one device.
//
// What it proves: the plan's data flow on the GPU (who holds what, what is exchanged, that the
// results recombine), with the same semantics as InProcessGroup, including its determinism:
// sums run in rank order ((x0 + x1) + x2) + ... in fp32 (bf16 inputs are widened, summed in
// fp32 and rounded once), so every rank gets the same bits. What it does not prove: anything
// about NCCL, links, or the speed of communication (all ranks share one GPU's memory system).
//
// How a collective runs: each rank copies its input into its own device staging buffer on its
// stream and records an event; a host barrier; each rank's stream waits for every rank's event
// and pulls what it needs from the staging buffers into its own outputs; an event and a second
// host barrier; each stream waits for every rank's pull before it may touch its staging again.
// Host barriers time out (DeadlineExceeded) when a rank skips a collective; any failure is
// sticky for the whole group. Send/Recv meet in a per-pair mailbox under the same timeout.
//
// Thread safety: Rank(r) belongs to the thread playing rank r; the group state is synchronised.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "parallel/device_communicator.h"

namespace gyre::parallel {

class SharedDeviceGroup {
 public:
  static constexpr int kMaxRanks = 16;

  // `n` ranks on CUDA `device`. REQUIRES: 1 <= n <= kMaxRanks.
  static Result<std::unique_ptr<SharedDeviceGroup>> Create(int n, int device,
                                                           std::chrono::milliseconds timeout = std::chrono::seconds(60),
                                                           WaitMode wait = WaitMode::kEachCall);
  ~SharedDeviceGroup();
  SharedDeviceGroup(const SharedDeviceGroup&) = delete;
  SharedDeviceGroup& operator=(const SharedDeviceGroup&) = delete;

  int size() const;
  DeviceCommunicator& Rank(int r);
  // Marks the group broken with `s` (REQUIRES: !s.ok()); waiting and later calls return it.
  void Abort(Status s);
  Status status() const;

  struct Shared;  // shared_device_group.cc

 private:
  SharedDeviceGroup() = default;
  std::unique_ptr<Shared> shared_;
  std::vector<std::unique_ptr<DeviceCommunicator>> ranks_;
};

}  // namespace gyre::parallel
