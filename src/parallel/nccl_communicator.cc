#include "parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <numeric>
#include <string>
#include <thread>

namespace gyre::parallel {

namespace {

using Clock = std::chrono::steady_clock;

Status NcclError(ncclResult_t r, const std::string& what) {
  return Status::Internal(what + ": " + ncclGetErrorString(r) + " (" + std::to_string(static_cast<int>(r)) + ")");
}

Status CudaError(cudaError_t e, const std::string& what) {
  return Status::Internal(what + ": " + cudaGetErrorString(e));
}

ncclDataType_t NcclType(DType d) { return d == DType::kF32 ? ncclFloat32 : ncclBfloat16; }

void Pause() { std::this_thread::sleep_for(std::chrono::microseconds(50)); }

}  // namespace

Result<std::vector<uint8_t>> NcclCommunicator::NewUniqueId() {
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return NcclError(r, "ncclGetUniqueId");
  std::vector<uint8_t> bytes(sizeof(id.internal));
  std::memcpy(bytes.data(), id.internal, bytes.size());
  return bytes;
}

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(std::span<const uint8_t> id, int world, int rank,
                                                                   int device, NcclOptions options) {
  ncclUniqueId uid;
  if (id.size() != sizeof(uid.internal)) {
    return Status::InvalidArgument("NCCL unique id: expected " + std::to_string(sizeof(uid.internal)) +
                                   " bytes, got " + std::to_string(id.size()));
  }
  if (world < 1 || rank < 0 || rank >= world) {
    return Status::InvalidArgument("NCCL: rank " + std::to_string(rank) + " outside [0, " + std::to_string(world) +
                                   ")");
  }
  std::memcpy(uid.internal, id.data(), id.size());
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return CudaError(e, "cudaSetDevice(" + std::to_string(device) + ")");
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const auto deadline = Clock::now() + options.timeout;
  ncclResult_t r = ncclCommInitRankConfig(&comm, world, uid, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm) ncclCommAbort(comm);
    return NcclError(r, "ncclCommInitRankConfig (rank " + std::to_string(rank) + ")");
  }
  for (;;) {
    ncclResult_t st = ncclInProgress;
    if (ncclResult_t q = ncclCommGetAsyncError(comm, &st); q != ncclSuccess) st = q;
    if (st == ncclSuccess) break;
    if (st != ncclInProgress) {
      ncclCommAbort(comm);
      return NcclError(st, "NCCL init of rank " + std::to_string(rank));
    }
    if (Clock::now() >= deadline) {
      ncclCommAbort(comm);
      return Status(StatusCode::kDeadlineExceeded,
                    "NCCL init of rank " + std::to_string(rank) + " of " + std::to_string(world) + " waited " +
                        std::to_string(options.timeout.count()) + " ms for the other ranks; aborted");
    }
    Pause();
  }
  auto c = std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, world, rank, device, options));
  cudaEvent_t ev = nullptr;
  if (cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming); e != cudaSuccess) {
    c->Abort(CudaError(e, "cudaEventCreate"));
    return c->broken_;
  }
  c->last_ = ev;
  if (cudaError_t e = cudaMalloc(&c->scratch_, sizeof(float)); e != cudaSuccess) {
    c->Abort(CudaError(e, "cudaMalloc (barrier scratch)"));
    return c->broken_;
  }
  return c;
}

NcclCommunicator::NcclCommunicator(ncclComm* comm, int world, int rank, int device, NcclOptions options)
    : comm_(comm), world_(world), rank_(rank), device_(device), options_(options) {}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  if (comm_ && broken_.ok()) {
    // Finalize flushes outstanding work; bounded like everything else.
    ncclResult_t r = ncclCommFinalize(comm_);
    const auto deadline = Clock::now() + options_.timeout;
    while (r == ncclSuccess || r == ncclInProgress) {
      ncclResult_t st = ncclInProgress;
      if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess || st != ncclInProgress) {
        r = st;
        break;
      }
      if (Clock::now() >= deadline) break;
      Pause();
    }
    if (r == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  if (comm_) ncclCommAbort(comm_);
  if (scratch_) cudaFree(scratch_);
  if (last_) cudaEventDestroy(last_);
}

void NcclCommunicator::Abort(Status s) {
  if (comm_) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  if (broken_.ok()) broken_ = std::move(s);
}

Status NcclCommunicator::Begin(DType dtype, int64_t count, const char* op) {
  if (!broken_.ok()) return broken_;
  Status s;
  if (CommElementBytes(dtype) == 0) {
    s = Status::InvalidArgument(std::string(op) + ": dtype must be F32 or BF16, got " + std::string(DTypeName(dtype)));
  } else if (count < 0) {
    s = Status::InvalidArgument(std::string(op) + ": negative count");
  } else if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
    s = CudaError(e, op);
  }
  return s.ok() ? s : Fail(s);
}

Status NcclCommunicator::Fail(Status s) {
  // The peers would wait for this rank's part of the collective: abort so they fail too.
  Abort(std::move(s));
  return broken_;
}

Status NcclCommunicator::PollInProgress(const char* op) {
  const auto deadline = Clock::now() + options_.timeout;
  for (;;) {
    ncclResult_t st = ncclInProgress;
    if (ncclResult_t q = ncclCommGetAsyncError(comm_, &st); q != ncclSuccess) st = q;
    if (st == ncclSuccess) return Status();
    if (st != ncclInProgress) {
      Abort(NcclError(st, std::string(op) + " on rank " + std::to_string(rank_)));
      return broken_;
    }
    if (Clock::now() >= deadline) {
      Abort(Status(StatusCode::kDeadlineExceeded, std::string(op) + " on rank " + std::to_string(rank_) +
                                                      " could not be enqueued within " +
                                                      std::to_string(options_.timeout.count()) + " ms; aborted"));
      return broken_;
    }
    Pause();
  }
}

Status NcclCommunicator::Finish(int nccl_result, DeviceStream stream, const char* op) {
  const auto r = static_cast<ncclResult_t>(nccl_result);
  if (r == ncclInProgress) {
    GYRE_RETURN_IF_ERROR(PollInProgress(op));
  } else if (r != ncclSuccess) {
    Abort(NcclError(r, std::string(op) + " on rank " + std::to_string(rank_)));
    return broken_;
  }
  if (cudaError_t e = cudaEventRecord(last_, stream); e != cudaSuccess) {
    Abort(CudaError(e, std::string(op) + ": cudaEventRecord"));
    return broken_;
  }
  any_enqueued_ = true;
  if (options_.wait == WaitMode::kEachCall) return Wait();
  return Status();
}

Status NcclCommunicator::Wait() {
  if (!broken_.ok()) return broken_;
  if (!any_enqueued_) return Status();
  const auto deadline = Clock::now() + options_.timeout;
  for (;;) {
    const cudaError_t e = cudaEventQuery(last_);
    if (e == cudaSuccess) return Status();
    if (e != cudaErrorNotReady) {
      Abort(CudaError(e, "rank " + std::to_string(rank_) + " waiting for its collectives"));
      return broken_;
    }
    ncclResult_t st = ncclSuccess;
    if (ncclResult_t q = ncclCommGetAsyncError(comm_, &st); q != ncclSuccess) st = q;
    if (st != ncclSuccess && st != ncclInProgress) {
      Abort(NcclError(st, "rank " + std::to_string(rank_) + ": a collective failed"));
      return broken_;
    }
    if (Clock::now() >= deadline) {
      Abort(Status(StatusCode::kDeadlineExceeded,
                   "rank " + std::to_string(rank_) + ": collectives did not complete within " +
                       std::to_string(options_.timeout.count()) + " ms (a peer skipped one or is gone); aborted"));
      return broken_;
    }
    Pause();
  }
}

Status NcclCommunicator::AllReduceSum(const void* in, void* out, int64_t count, DType dtype, DeviceStream stream) {
  GYRE_RETURN_IF_ERROR(Begin(dtype, count, "AllReduceSum"));
  return Finish(ncclAllReduce(in, out, static_cast<size_t>(count), NcclType(dtype), ncclSum, comm_, stream), stream,
                "AllReduceSum");
}

Status NcclCommunicator::AllGather(const void* in, void* out, int64_t count, DType dtype, DeviceStream stream) {
  GYRE_RETURN_IF_ERROR(Begin(dtype, count, "AllGather"));
  return Finish(ncclAllGather(in, out, static_cast<size_t>(count), NcclType(dtype), comm_, stream), stream,
                "AllGather");
}

Status NcclCommunicator::ReduceScatterSum(const void* in, void* out, int64_t count, DType dtype,
                                          DeviceStream stream) {
  GYRE_RETURN_IF_ERROR(Begin(dtype, count, "ReduceScatterSum"));
  return Finish(ncclReduceScatter(in, out, static_cast<size_t>(count), NcclType(dtype), ncclSum, comm_, stream),
                stream, "ReduceScatterSum");
}

Status NcclCommunicator::AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                                   std::span<const int64_t> recv_counts, DType dtype, DeviceStream stream) {
  GYRE_RETURN_IF_ERROR(Begin(dtype, 0, "AllToAllV"));
  if (static_cast<int>(send_counts.size()) != world_ || static_cast<int>(recv_counts.size()) != world_) {
    return Fail(Status::InvalidArgument("AllToAllV: send_counts and recv_counts need size() entries"));
  }
  for (int p = 0; p < world_; ++p) {
    if (send_counts[p] < 0 || recv_counts[p] < 0) return Fail(Status::InvalidArgument("AllToAllV: negative count"));
  }
  const int64_t eb = CommElementBytes(dtype);
  const auto* s = static_cast<const char*>(send);
  auto* d = static_cast<char*>(recv);
  // One group: NCCL schedules the sends and receives together, so no pair waits on another.
  ncclResult_t r = ncclGroupStart();
  int64_t soff = 0, roff = 0;
  for (int p = 0; p < world_ && r == ncclSuccess; ++p) {
    if (send_counts[p] > 0) {
      r = ncclSend(s + soff * eb, static_cast<size_t>(send_counts[p]), NcclType(dtype), p, comm_, stream);
    }
    if (r == ncclSuccess && recv_counts[p] > 0) {
      r = ncclRecv(d + roff * eb, static_cast<size_t>(recv_counts[p]), NcclType(dtype), p, comm_, stream);
    }
    soff += send_counts[p];
    roff += recv_counts[p];
  }
  const ncclResult_t end = ncclGroupEnd();
  return Finish(r != ncclSuccess ? r : end, stream, "AllToAllV");
}

Status NcclCommunicator::Send(const void* buf, int64_t count, DType dtype, int peer, DeviceStream stream) {
  GYRE_RETURN_IF_ERROR(Begin(dtype, count, "Send"));
  if (peer < 0 || peer >= world_ || peer == rank_) {
    return Fail(Status::InvalidArgument("Send: bad peer " + std::to_string(peer)));
  }
  return Finish(ncclSend(buf, static_cast<size_t>(count), NcclType(dtype), peer, comm_, stream), stream, "Send");
}

Status NcclCommunicator::Recv(void* buf, int64_t count, DType dtype, int peer, DeviceStream stream) {
  GYRE_RETURN_IF_ERROR(Begin(dtype, count, "Recv"));
  if (peer < 0 || peer >= world_ || peer == rank_) {
    return Fail(Status::InvalidArgument("Recv: bad peer " + std::to_string(peer)));
  }
  return Finish(ncclRecv(buf, static_cast<size_t>(count), NcclType(dtype), peer, comm_, stream), stream, "Recv");
}

Status NcclCommunicator::Barrier(DeviceStream stream) {
  GYRE_RETURN_IF_ERROR(Begin(DType::kF32, 1, "Barrier"));
  return Finish(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream), stream, "Barrier");
}

}  // namespace gyre::parallel
