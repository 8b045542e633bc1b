// DeviceCommunicator: the collectives of communicator.h on DEVICE buffers, enqueued on a stream
// the caller chooses. Two implementations:
//   * NcclCommunicator (nccl_communicator.h): one rank per GPU, NCCL underneath; ranks are
//     threads of one process or processes on several hosts (bootstrap.h hands out the id).
//   * SharedDeviceGroup (shared_device_group.h): ranks are threads sharing ONE GPU, collectives
//     by device copies and a fixed-order reduction. It proves a plan's data flow on one GPU;
//     it proves nothing about NCCL.
//
// Contract (every implementation), as for the host Communicator:
//   * Every rank calls the same collectives in the same order with agreeing counts and dtype.
//   * Buffers are device pointers on the communicator's device, fp32 or bf16 (DType::kF32,
//     DType::kBF16); counts are elements. Sums of bf16 accumulate in fp32 inside one kernel where
//     the implementation allows it (SharedDeviceGroup) and are rounded to bf16 once.
//   * A call enqueues its work on `stream` and returns; the results are ready in stream order.
//     Inputs must stay untouched, and outputs unread, until then. In-place AllReduceSum
//     (in == out) is allowed; other collectives need disjoint in and out.
//   * Timeouts: a collective that does not complete within the communicator's timeout (a rank
//     skipped it, a peer died) makes the call return DeadlineExceeded instead of hanging, and
//     aborts the communicator (NCCL: ncclCommAbort). With WaitMode::kEachCall (the default) every
//     call waits for its own completion; with kOnWait the calls only enqueue and Wait() checks.
//   * Sticky failure: after any failed call, that call and every later call on this rank return
//     the same non-OK status; a group implementation fails every rank (like leveldb's bg error).
//
// Thread safety: a DeviceCommunicator belongs to the one thread that plays its rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "core/status.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*; this header needs no CUDA headers

namespace gyre::parallel {

using DeviceStream = CUstream_st*;

enum class WaitMode {
  kEachCall,  // every collective waits (bounded by the timeout) until its work has completed
  kOnWait,    // collectives only enqueue; Wait() bounds the wait for everything enqueued
};

class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int device() const = 0;  // the CUDA device the buffers live on

  // out[i] = sum over ranks of in[i], `count` elements. in == out allowed.
  virtual Status AllReduceSum(const void* in, void* out, int64_t count, DType dtype, DeviceStream stream) = 0;

  // out = concat over ranks (rank-major) of each rank's `count` elements of `in`;
  // out holds size() * count elements.
  virtual Status AllGather(const void* in, void* out, int64_t count, DType dtype, DeviceStream stream) = 0;

  // `in` holds size() blocks of `count` elements; out (count elements) = sum over ranks of
  // block rank().
  virtual Status ReduceScatterSum(const void* in, void* out, int64_t count, DType dtype, DeviceStream stream) = 0;

  // Personalised exchange. `send` holds size() consecutive blocks, block d (send_counts[d]
  // elements) going to rank d; `recv` receives the blocks sent to this rank in source-rank
  // order, block s holding recv_counts[s] elements. recv_counts must equal what the sources
  // send (exchange the counts first, e.g. as an AllGather of counts; a device NCCL exchange
  // cannot discover sizes). Counts are host arrays of size() entries; zeros allowed.
  virtual Status AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                           std::span<const int64_t> recv_counts, DType dtype, DeviceStream stream) = 0;

  // Point to point: `count` elements to / from `peer`. A Send must meet a matching Recv on the
  // peer (same count and dtype); pairs between two ranks match in call order.
  virtual Status Send(const void* buf, int64_t count, DType dtype, int peer, DeviceStream stream) = 0;
  virtual Status Recv(void* buf, int64_t count, DType dtype, int peer, DeviceStream stream) = 0;

  // Returns once every rank has reached the barrier; work enqueued on `stream` after it runs
  // after the work every rank enqueued on its stream before it (NCCL: a one-element all-reduce
  // on `stream`).
  virtual Status Barrier(DeviceStream stream) = 0;

  // Waits (bounded by the timeout) for this rank's latest call and, in stream order, everything
  // before it on that call's stream. OK when it completed. A rank that spreads its calls over
  // several streams calls Wait after the last call on each of them.
  virtual Status Wait() = 0;

  // The sticky failure of this rank (OK while none).
  virtual Status status() const = 0;
};

// Bytes per element of a communicator dtype; 0 for dtypes the communicators do not carry.
inline int64_t CommElementBytes(DType d) { return d == DType::kF32 ? 4 : d == DType::kBF16 ? 2 : 0; }

}  // namespace gyre::parallel
