// RAII owners for CUDA resources (style.md §2.5): DeviceBuffer (cudaMalloc/cudaFree), Stream, Event.
//
// All three are move-only. Factories return Result so that an allocation failure is a Status, not
// an abort. Destructors never fail loudly: a cudaFree error at teardown is ignored (the context is
// going away or already broken, and the error was or will be reported by the next checked call).
// Thread safety: an object is used by one thread at a time; the CUDA calls themselves are
// thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "ops/cuda/cuda_check.h"

namespace gyre::cuda {

// Owns `bytes` of device memory (plain cudaMalloc, never managed memory).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Result<DeviceBuffer> Create(size_t bytes) {
    DeviceBuffer b;
    if (bytes > 0) GYRE_CUDA_RETURN_IF_ERROR(cudaMalloc(&b.ptr_, bytes));
    b.bytes_ = bytes;
    return Result<DeviceBuffer>(std::move(b));
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void Reset() {
    if (ptr_) (void)cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Owns a non-blocking CUDA stream.
class Stream {
 public:
  Stream() = default;
  static Result<Stream> Create() {
    Stream s;
    GYRE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s.s_, cudaStreamNonBlocking));
    return Result<Stream>(std::move(s));
  }
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      if (s_) (void)cudaStreamDestroy(s_);
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (s_) (void)cudaStreamDestroy(s_);
  }
  cudaStream_t get() const { return s_; }
  // Blocks the calling thread until all work queued on the stream has finished.
  Status Synchronize() const {
    GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s_));
    return Status::Ok();
  }

 private:
  cudaStream_t s_ = nullptr;
};

// Owns a CUDA event with timing enabled.
class Event {
 public:
  Event() = default;
  static Result<Event> Create() {
    Event e;
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e.e_));
    return Result<Event>(std::move(e));
  }
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      if (e_) (void)cudaEventDestroy(e_);
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
    if (e_) (void)cudaEventDestroy(e_);
  }
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// Host-to-device helpers for checks (the op registry's CUDA path, self-checks): a fresh buffer
// holding `bytes` copied from host `src`, enqueued on `s` (src must stay valid until the stream
// reaches the copy). At least 16 bytes are allocated, so an empty tensor still has a valid pointer.
inline Result<DeviceBuffer> Upload(const void* src, size_t bytes, cudaStream_t s) {
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(bytes < 16 ? 16 : bytes));
  if (bytes > 0) GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.get(), src, bytes, cudaMemcpyHostToDevice, s));
  return Result<DeviceBuffer>(std::move(b));
}

// A fresh buffer filled with 0xFF bytes (fp32 NaN, int32 -1), so outputs a kernel leaves unwritten
// show up.
inline Result<DeviceBuffer> Poisoned(size_t bytes, cudaStream_t s) {
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(bytes < 16 ? 16 : bytes));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(b.get(), 0xFF, b.bytes(), s));
  return Result<DeviceBuffer>(std::move(b));
}

// True when the n floats at host `p` still hold Poisoned's bytes (never written).
inline bool AllPoison(const float* p, int64_t n) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(p);
  for (size_t i = 0; i < sizeof(float) * static_cast<size_t>(n); ++i)
    if (bytes[i] != 0xFF) return false;
  return true;
}

// Copies `bytes` of `src` back to host `dst` on `s` and waits for the stream.
inline Status Download(void* dst, const DeviceBuffer& src, size_t bytes, const Stream& s) {
  if (bytes > 0) GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src.get(), bytes, cudaMemcpyDeviceToHost, s.get()));
  return s.Synchronize();
}

}  // namespace gyre::cuda
