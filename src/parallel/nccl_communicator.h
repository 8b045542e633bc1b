// NcclCommunicator: a DeviceCommunicator backed by one NCCL communicator, one rank per GPU.
// Ranks are threads of one process (one per GPU) or processes on several hosts; either way
// every rank is created from the same ncclUniqueId, which rank 0 makes (NewUniqueId) and
// hands out (in process, or over TCP with bootstrap.h). Built only with GYRE_CUDA.
//
// Init and every call use NCCL's non-blocking mode (ncclConfig_t::blocking = 0): the host never
// blocks inside NCCL; it polls ncclCommGetAsyncError (and, for completion, a CUDA event) until
// the work is done or the timeout passes, and then calls ncclCommAbort and returns
// DeadlineExceeded. After an abort the communicator is dead for good (sticky).
//
// NCCL refuses two ranks of one communicator on one GPU; to run several ranks on the one GPU
// we have, use SharedDeviceGroup. Thread safety: one thread per communicator (DeviceCommunicator).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "parallel/device_communicator.h"

struct ncclComm;
struct CUevent_st;

namespace gyre::parallel {

struct NcclOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};  // init and every collective
  WaitMode wait = WaitMode::kEachCall;
};

class NcclCommunicator final : public DeviceCommunicator {
 public:
  // The bytes of a fresh ncclUniqueId (NCCL_UNIQUE_ID_BYTES of them); call on rank 0 only.
  static Result<std::vector<uint8_t>> NewUniqueId();

  // Rank `rank` of `world` on CUDA device `device`. Blocks (polling) until every rank has
  // joined or the timeout passes: DeadlineExceeded, the half-made communicator aborted.
  // REQUIRES: id is NewUniqueId()'s bytes from rank 0, used for this one group only (NCCL's
  // bootstrap root serves one init: a second group made from the same id waits until the timeout);
  // 0 <= rank < world.
  static Result<std::unique_ptr<NcclCommunicator>> Create(std::span<const uint8_t> id, int world, int rank,
                                                          int device, NcclOptions options = {});
  // Finalizes (bounded by the timeout) and destroys; aborts when broken or when finalizing hangs.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return world_; }
  int device() const override { return device_; }

  Status AllReduceSum(const void* in, void* out, int64_t count, DType dtype, DeviceStream stream) override;
  Status AllGather(const void* in, void* out, int64_t count, DType dtype, DeviceStream stream) override;
  Status ReduceScatterSum(const void* in, void* out, int64_t count, DType dtype, DeviceStream stream) override;
  Status AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                   std::span<const int64_t> recv_counts, DType dtype, DeviceStream stream) override;
  Status Send(const void* buf, int64_t count, DType dtype, int peer, DeviceStream stream) override;
  Status Recv(void* buf, int64_t count, DType dtype, int peer, DeviceStream stream) override;
  Status Barrier(DeviceStream stream) override;
  Status Wait() override;
  Status status() const override { return broken_; }

  // Aborts the NCCL communicator (ncclCommAbort) and makes `s` the sticky failure
  // (REQUIRES: !s.ok()). For a caller that gave up on a peer outside a collective.
  void Abort(Status s);

 private:
  NcclCommunicator(ncclComm* comm, int world, int rank, int device, NcclOptions options);
  Status Begin(DType dtype, int64_t count, const char* op);  // sticky + argument checks, device
  Status Fail(Status s);  // Abort(s) and return it: a local argument error is sticky too
  Status Finish(int nccl_result, DeviceStream stream, const char* op);  // poll, record, maybe wait
  Status PollInProgress(const char* op);

  ncclComm* comm_;  // null after an abort
  int world_, rank_, device_;
  NcclOptions options_;
  CUevent_st* last_ = nullptr;  // recorded after the latest call; Wait() polls it
  bool any_enqueued_ = false;
  float* scratch_ = nullptr;    // one device float for Barrier
  Status broken_;
};

}  // namespace gyre::parallel
