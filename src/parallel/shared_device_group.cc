#include "parallel/shared_device_group.h"

#include <cuda_runtime.h>

#include <mutex>
#include <numeric>
#include <string>
#include <thread>

#include "parallel/rank_sync.h"
#include "parallel/shared_device_group_kernel.h"

namespace gyre::parallel {

namespace {

using Clock = std::chrono::steady_clock;

Status CudaError(cudaError_t e, const std::string& what) {
  return Status::Internal(what + ": " + cudaGetErrorString(e));
}

#define GYRE_CUDA_OR_FAIL(expr, what)                                \
  do {                                                               \
    if (cudaError_t _e = (expr); _e != cudaSuccess) {                \
      return g_->Fail(CudaError(_e, std::string(what) + ": " #expr)); \
    }                                                                \
  } while (0)

}  // namespace

struct SharedDeviceGroup::Shared {
  Shared(int n, int device, std::chrono::milliseconds timeout, WaitMode wait)
      : n(n), device(device), wait(wait), sync(n, timeout), slots(n), mail(static_cast<size_t>(n) * n) {}

  // Constant after construction.
  const int n;
  const int device;
  const WaitMode wait;
  std::vector<cudaEvent_t> ready, pulled;          // per rank: staging filled / its pull done
  std::vector<cudaEvent_t> mail_ready, mail_done;  // per (src, dst) pair: n * n

  RankSync sync;  // host barrier, sticky failure; its mu also guards the mailboxes

  // Slot r: written by rank r before the first barrier of a collective, read by all between
  // the barriers (as in InProcessGroup).
  struct Slot {
    const char* op = "";
    DType dtype = DType::kF32;
    int64_t count = 0;
    std::vector<int64_t> send_counts, recv_counts;
    std::string error;
    void* staging = nullptr;  // device, owned by rank r
    size_t staging_bytes = 0;
  };
  std::vector<Slot> slots;

  // Mailbox (src, dst) for Send/Recv; guarded by sync.mu.
  struct Mail {
    bool posted = false, taken = false;
    const void* ptr = nullptr;
    int64_t count = 0;
    DType dtype = DType::kF32;
  };
  std::vector<Mail> mail;  // index src * n + dst

  Status Broken() { return sync.Broken(); }
  Status Fail(Status s) { return sync.Fail(std::move(s)); }
  Status Barrier(int rank) { return sync.Barrier(rank, slots[rank].op); }
};

namespace {

class SharedRank final : public DeviceCommunicator {
 public:
  SharedRank(SharedDeviceGroup::Shared* g, int rank) : g_(g), rank_(rank) {}
  ~SharedRank() override {
    if (mine_) cudaEventDestroy(mine_);
  }

  int rank() const override { return rank_; }
  int size() const override { return g_->n; }
  int device() const override { return g_->device; }
  Status status() const override { return g_->Broken(); }

  Status AllReduceSum(const void* in, void* out, int64_t count, DType dtype, DeviceStream stream) override {
    const int64_t eb = CommElementBytes(dtype);
    GYRE_RETURN_IF_ERROR(Publish("AllReduceSum", dtype, count, in, count * eb, stream));
    return Exchange(stream, [&]() -> Status {
      SumRanksParams p;
      p.n = g_->n;
      for (int s = 0; s < g_->n; ++s) p.src[s] = g_->slots[s].staging;
      p.count = count;
      p.out = out;
      return LaunchSumRanks(p, dtype, stream);
    });
  }

  Status AllGather(const void* in, void* out, int64_t count, DType dtype, DeviceStream stream) override {
    const int64_t eb = CommElementBytes(dtype);
    GYRE_RETURN_IF_ERROR(Publish("AllGather", dtype, count, in, count * eb, stream));
    return Exchange(stream, [&]() -> Status {
      for (int s = 0; s < g_->n; ++s) {
        if (count == 0) break;
        if (cudaError_t e = cudaMemcpyAsync(static_cast<char*>(out) + s * count * eb, g_->slots[s].staging,
                                            count * eb, cudaMemcpyDeviceToDevice, stream);
            e != cudaSuccess) {
          return CudaError(e, "AllGather copy");
        }
      }
      return Status();
    });
  }

  Status ReduceScatterSum(const void* in, void* out, int64_t count, DType dtype, DeviceStream stream) override {
    const int64_t eb = CommElementBytes(dtype);
    GYRE_RETURN_IF_ERROR(Publish("ReduceScatterSum", dtype, count, in, g_->n * count * eb, stream));
    return Exchange(stream, [&]() -> Status {
      SumRanksParams p;
      p.n = g_->n;
      for (int s = 0; s < g_->n; ++s) p.src[s] = g_->slots[s].staging;
      p.offset = rank_ * count;
      p.count = count;
      p.out = out;
      return LaunchSumRanks(p, dtype, stream);
    });
  }

  Status AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                   std::span<const int64_t> recv_counts, DType dtype, DeviceStream stream) override {
    const int n = g_->n;
    std::string error;
    if (static_cast<int>(send_counts.size()) != n || static_cast<int>(recv_counts.size()) != n) {
      error = "AllToAllV: send_counts and recv_counts need size() entries";
    }
    int64_t total = 0;
    if (error.empty()) {
      for (int p = 0; p < n; ++p) {
        if (send_counts[p] < 0 || recv_counts[p] < 0) error = "AllToAllV: negative count";
        total += send_counts[p];
      }
    }
    const int64_t eb = CommElementBytes(dtype);
    GYRE_RETURN_IF_ERROR(Publish("AllToAllV", dtype, n, send, error.empty() ? total * eb : 0, stream, error));
    auto& me = g_->slots[rank_];
    if (error.empty()) {
      me.send_counts.assign(send_counts.begin(), send_counts.end());
      me.recv_counts.assign(recv_counts.begin(), recv_counts.end());
    }
    return Exchange(stream, [&]() -> Status {
      int64_t roff = 0;
      for (int s = 0; s < n; ++s) {
        const auto& src = g_->slots[s];
        const int64_t soff = std::accumulate(src.send_counts.begin(), src.send_counts.begin() + rank_, int64_t{0});
        const int64_t c = src.send_counts[rank_];
        if (c > 0) {
          if (cudaError_t e = cudaMemcpyAsync(static_cast<char*>(recv) + roff * eb,
                                              static_cast<const char*>(src.staging) + soff * eb, c * eb,
                                              cudaMemcpyDeviceToDevice, stream);
              e != cudaSuccess) {
            return CudaError(e, "AllToAllV copy");
          }
        }
        roff += c;
      }
      return Status();
    });
  }

  Status Barrier(DeviceStream stream) override {
    GYRE_RETURN_IF_ERROR(Publish("Barrier", DType::kF32, 0, nullptr, 0, stream));
    return Exchange(stream, [] { return Status(); });
  }

  Status Send(const void* buf, int64_t count, DType dtype, int peer, DeviceStream stream) override {
    GYRE_RETURN_IF_ERROR(CheckPeer("Send", dtype, count, peer));
    GYRE_CUDA_OR_FAIL(cudaSetDevice(g_->device), "Send");
    const int box = rank_ * g_->n + peer;
    std::unique_lock<std::mutex> lock(g_->sync.mu);
    auto& m = g_->mail[box];
    if (!g_->sync.cv.wait_for(lock, g_->sync.timeout(), [&] { return !m.posted || !g_->sync.broken.ok(); })) {
      return g_->sync.TimedOutLocked(rank_, "to post a Send to rank " + std::to_string(peer));
    }
    if (!g_->sync.broken.ok()) return g_->sync.broken;
    if (cudaError_t e = cudaEventRecord(g_->mail_ready[box], stream); e != cudaSuccess) {
      return g_->sync.FailLocked(CudaError(e, "Send: cudaEventRecord"));
    }
    m = {true, false, buf, count, dtype};
    g_->sync.cv.notify_all();
    if (!g_->sync.cv.wait_for(lock, g_->sync.timeout(), [&] { return m.taken || !g_->sync.broken.ok(); })) {
      return g_->sync.TimedOutLocked(rank_, "for rank " + std::to_string(peer) + " to Recv");
    }
    if (!g_->sync.broken.ok()) return g_->sync.broken;
    m = {};
    g_->sync.cv.notify_all();
    lock.unlock();
    // The receiver's copy reads `buf`: this stream may not overwrite it before the copy is done.
    GYRE_CUDA_OR_FAIL(cudaStreamWaitEvent(stream, g_->mail_done[box], 0), "Send");
    return Finish(stream, "Send");
  }

  Status Recv(void* buf, int64_t count, DType dtype, int peer, DeviceStream stream) override {
    GYRE_RETURN_IF_ERROR(CheckPeer("Recv", dtype, count, peer));
    GYRE_CUDA_OR_FAIL(cudaSetDevice(g_->device), "Recv");
    const int box = peer * g_->n + rank_;
    std::unique_lock<std::mutex> lock(g_->sync.mu);
    auto& m = g_->mail[box];
    const auto arrived = [&] { return (m.posted && !m.taken) || !g_->sync.broken.ok(); };
    if (!g_->sync.cv.wait_for(lock, g_->sync.timeout(), arrived)) {
      return g_->sync.TimedOutLocked(rank_, "for a Send from rank " + std::to_string(peer));
    }
    if (!g_->sync.broken.ok()) return g_->sync.broken;
    Status s;
    if (m.count != count || m.dtype != dtype) {
      s = Status::InvalidArgument("Recv on rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) +
                                  " sent " + std::to_string(m.count) + " elements of " +
                                  std::string(DTypeName(m.dtype)) + ", this rank expects " + std::to_string(count) +
                                  " of " + std::string(DTypeName(dtype)));
    }
    const int64_t bytes = count * CommElementBytes(dtype);
    cudaError_t e = cudaSuccess;
    if (s.ok()) e = cudaStreamWaitEvent(stream, g_->mail_ready[box], 0);
    if (s.ok() && e == cudaSuccess && bytes > 0) {
      e = cudaMemcpyAsync(buf, m.ptr, bytes, cudaMemcpyDeviceToDevice, stream);
    }
    if (s.ok() && e == cudaSuccess) e = cudaEventRecord(g_->mail_done[box], stream);
    if (s.ok() && e != cudaSuccess) s = CudaError(e, "Recv copy");
    if (!s.ok()) {
      return g_->sync.FailLocked(s);
    }
    m.taken = true;
    g_->sync.cv.notify_all();
    lock.unlock();
    return Finish(stream, "Recv");
  }

  Status Wait() override {
    GYRE_RETURN_IF_ERROR(g_->Broken());
    if (!mine_) return Status();
    const auto deadline = Clock::now() + g_->sync.timeout();
    for (;;) {
      const cudaError_t e = cudaEventQuery(mine_);
      if (e == cudaSuccess) return Status();
      if (e != cudaErrorNotReady) return g_->Fail(CudaError(e, "rank " + std::to_string(rank_) + " Wait"));
      if (Clock::now() >= deadline) {
        return g_->Fail(Status(StatusCode::kDeadlineExceeded,
                               "rank " + std::to_string(rank_) + ": its device work did not complete within " +
                                   std::to_string(g_->sync.timeout().count()) + " ms"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  Status CheckPeer(const char* op, DType dtype, int64_t count, int peer) {
    GYRE_RETURN_IF_ERROR(g_->Broken());
    std::string why;
    if (CommElementBytes(dtype) == 0) why = "dtype must be F32 or BF16";
    if (count < 0) why = "negative count";
    if (peer < 0 || peer >= g_->n || peer == rank_) why = "bad peer " + std::to_string(peer);
    if (!why.empty()) return g_->Fail(Status::InvalidArgument(std::string(op) + ": " + why));
    return Status();
  }

  // Fills this rank's slot and copies `bytes` of `in` into its staging buffer on `stream`, then
  // records its ready event. A local argument error travels in the slot, so every rank fails.
  Status Publish(const char* op, DType dtype, int64_t count, const void* in, int64_t bytes, DeviceStream stream,
                 std::string error = "") {
    GYRE_RETURN_IF_ERROR(g_->Broken());  // broken: leave the slots alone, others may be reading
    auto& me = g_->slots[rank_];
    me.op = op;
    me.dtype = dtype;
    me.count = count;
    me.send_counts.clear();
    me.recv_counts.clear();
    me.error = std::move(error);
    if (me.error.empty() && CommElementBytes(dtype) == 0) me.error = std::string(op) + ": dtype must be F32 or BF16";
    if (me.error.empty() && count < 0) me.error = std::string(op) + ": negative count";
    GYRE_CUDA_OR_FAIL(cudaSetDevice(g_->device), op);
    if (me.error.empty() && bytes > 0) {
      if (static_cast<size_t>(bytes) > me.staging_bytes) {
        // The previous collective made this stream wait for every pull from the old buffer.
        GYRE_CUDA_OR_FAIL(cudaStreamSynchronize(stream), op);
        if (me.staging) GYRE_CUDA_OR_FAIL(cudaFree(me.staging), op);
        me.staging = nullptr;
        me.staging_bytes = 0;
        GYRE_CUDA_OR_FAIL(cudaMalloc(&me.staging, bytes), op);
        me.staging_bytes = static_cast<size_t>(bytes);
      }
      GYRE_CUDA_OR_FAIL(cudaMemcpyAsync(me.staging, in, bytes, cudaMemcpyDeviceToDevice, stream), op);
    }
    GYRE_CUDA_OR_FAIL(cudaEventRecord(g_->ready[rank_], stream), op);
    return Status();
  }

  // Barrier, agreement check, pull (in stream order after every rank's staging), barrier,
  // and the stream waits for every rank's pull before it may reuse its staging.
  template <typename Pull>
  Status Exchange(DeviceStream stream, Pull pull) {
    GYRE_RETURN_IF_ERROR(g_->Barrier(rank_));
    const auto& first = g_->slots[0];
    for (int s = 0; s < g_->n; ++s) {
      const auto& slot = g_->slots[s];
      std::string why;
      if (!slot.error.empty()) {
        why = slot.error;
      } else if (std::string(slot.op) != first.op) {
        why = std::string("rank 0 called ") + first.op + " while this rank called " + slot.op;
      } else if (slot.dtype != first.dtype) {
        why = std::string(slot.op) + ": dtypes differ from rank 0's";
      } else if (slot.count != first.count) {
        why = std::string(slot.op) + ": rank 0 passed " + std::to_string(first.count) + " elements, this rank " +
              std::to_string(slot.count);
      }
      if (!why.empty()) return g_->Fail(Status::InvalidArgument("rank " + std::to_string(s) + ": " + why));
    }
    // AllToAllV: what each rank expects must be what its sources send (every slot is valid now).
    for (int s = 0; s < g_->n; ++s) {
      const auto& slot = g_->slots[s];
      for (int d = 0; d < static_cast<int>(slot.recv_counts.size()); ++d) {
        if (slot.recv_counts[d] != g_->slots[d].send_counts[s]) {
          return g_->Fail(Status::InvalidArgument(
              "rank " + std::to_string(s) + ": AllToAllV expects " + std::to_string(slot.recv_counts[d]) +
              " elements from rank " + std::to_string(d) + ", which sends " +
              std::to_string(g_->slots[d].send_counts[s])));
        }
      }
    }
    for (int s = 0; s < g_->n; ++s) GYRE_CUDA_OR_FAIL(cudaStreamWaitEvent(stream, g_->ready[s], 0), first.op);
    if (Status s = pull(); !s.ok()) return g_->Fail(s);
    GYRE_CUDA_OR_FAIL(cudaEventRecord(g_->pulled[rank_], stream), first.op);
    GYRE_RETURN_IF_ERROR(g_->Barrier(rank_));
    for (int s = 0; s < g_->n; ++s) GYRE_CUDA_OR_FAIL(cudaStreamWaitEvent(stream, g_->pulled[s], 0), "pull");
    return Finish(stream, "collective");
  }

  Status Finish(DeviceStream stream, const char* op) {
    if (!mine_) GYRE_CUDA_OR_FAIL(cudaEventCreateWithFlags(&mine_, cudaEventDisableTiming), op);
    GYRE_CUDA_OR_FAIL(cudaEventRecord(mine_, stream), op);
    if (g_->wait == WaitMode::kEachCall) return Wait();
    return Status();
  }

  SharedDeviceGroup::Shared* g_;
  int rank_;
  cudaEvent_t mine_ = nullptr;  // recorded after this rank's latest call
};

}  // namespace

Result<std::unique_ptr<SharedDeviceGroup>> SharedDeviceGroup::Create(int n, int device,
                                                                     std::chrono::milliseconds timeout,
                                                                     WaitMode wait) {
  if (n < 1 || n > kMaxRanks) {
    return Status::InvalidArgument("SharedDeviceGroup: n must be in [1, " + std::to_string(kMaxRanks) + "]");
  }
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return CudaError(e, "SharedDeviceGroup: cudaSetDevice");
  auto group = std::unique_ptr<SharedDeviceGroup>(new SharedDeviceGroup());
  group->shared_ = std::make_unique<Shared>(n, device, timeout, wait);
  Shared& g = *group->shared_;
  auto make = [](std::vector<cudaEvent_t>* v, size_t k) -> Status {
    for (size_t i = 0; i < k; ++i) {
      cudaEvent_t ev = nullptr;
      if (cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming); e != cudaSuccess) {
        return CudaError(e, "SharedDeviceGroup: cudaEventCreate");
      }
      v->push_back(ev);
    }
    return Status();
  };
  GYRE_RETURN_IF_ERROR(make(&g.ready, n));
  GYRE_RETURN_IF_ERROR(make(&g.pulled, n));
  GYRE_RETURN_IF_ERROR(make(&g.mail_ready, static_cast<size_t>(n) * n));
  GYRE_RETURN_IF_ERROR(make(&g.mail_done, static_cast<size_t>(n) * n));
  for (int r = 0; r < n; ++r) group->ranks_.push_back(std::make_unique<SharedRank>(&g, r));
  return group;
}

SharedDeviceGroup::~SharedDeviceGroup() {
  if (!shared_) return;
  cudaSetDevice(shared_->device);
  // Pending pulls may still read staging buffers: let the device finish first.
  cudaDeviceSynchronize();
  ranks_.clear();
  for (auto* v : {&shared_->ready, &shared_->pulled, &shared_->mail_ready, &shared_->mail_done}) {
    for (cudaEvent_t ev : *v) cudaEventDestroy(ev);
  }
  for (auto& slot : shared_->slots) {
    if (slot.staging) cudaFree(slot.staging);
  }
}

int SharedDeviceGroup::size() const { return shared_->n; }

DeviceCommunicator& SharedDeviceGroup::Rank(int r) { return *ranks_.at(r); }

void SharedDeviceGroup::Abort(Status s) { (void)shared_->Fail(std::move(s)); }

Status SharedDeviceGroup::status() const { return shared_->Broken(); }

}  // namespace gyre::parallel
