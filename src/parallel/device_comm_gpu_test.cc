// GPU tests of the device communicators (CUDA build; needs a GPU): NcclCommunicator with one
// rank, SharedDeviceGroup with 2 and 4 rank-threads on device 0, and the timeout paths.
// Every collective runs on fresh random data into poisoned (NaN) outputs and is compared bit for
// bit against the host InProcessGroup run on the same data (communicator.h semantics).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "core/dtype.h"
#include "parallel/communicator.h"
#include "parallel/nccl_communicator.h"
#include "parallel/shared_device_group.h"

namespace gyre::parallel {
namespace {

using std::chrono::milliseconds;

#define CUDA_OK(expr) ASSERT_EQ(cudaSuccess, (expr)) << #expr

uint32_t FreshSeed() {
  static const uint32_t base = std::random_device{}();
  static std::atomic<uint32_t> k{0};
  return base + 7919 * k++;
}

// Host values as the device will hold them: bf16 data is rounded to bf16 first.
std::vector<float> RandomValues(size_t n, DType dtype, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dtype == DType::kBF16 ? RoundBf16(u(rng)) : u(rng);
  return v;
}

// Device buffer of `n` elements of `dtype`.
struct DeviceBuffer {
  DeviceBuffer(size_t n, DType dtype) : n(n), dtype(dtype) {
    if (bytes() > 0) {
      EXPECT_EQ(cudaSuccess, cudaMalloc(&ptr, bytes()));
    }
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  size_t bytes() const { return n * CommElementBytes(dtype); }
  void Upload(const std::vector<float>& v, cudaStream_t s) {
    ASSERT_EQ(v.size(), n);
    host.resize(bytes());
    for (size_t i = 0; i < n; ++i) {
      if (dtype == DType::kF32) {
        std::memcpy(&host[4 * i], &v[i], 4);
      } else {
        const uint16_t h = F32ToBf16(v[i]);
        std::memcpy(&host[2 * i], &h, 2);
      }
    }
    if (n) {
      CUDA_OK(cudaMemcpyAsync(ptr, host.data(), bytes(), cudaMemcpyHostToDevice, s));
    }
  }
  void Poison(cudaStream_t s) {
    if (n) {
      CUDA_OK(cudaMemsetAsync(ptr, 0xFF, bytes(), s));  // all-ones: NaN in fp32 and bf16
    }
  }
  // Device contents as floats (exact: bf16 widens exactly). REQUIRES: the stream is synced.
  std::vector<float> Download() {
    std::vector<uint8_t> raw(bytes());
    if (n) {
      EXPECT_EQ(cudaSuccess, cudaMemcpy(raw.data(), ptr, bytes(), cudaMemcpyDeviceToHost));
    }
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
      if (dtype == DType::kF32) {
        std::memcpy(&v[i], &raw[4 * i], 4);
      } else {
        uint16_t h;
        std::memcpy(&h, &raw[2 * i], 2);
        v[i] = Bf16ToF32(h);
      }
    }
    return v;
  }
  size_t n;
  DType dtype;
  void* ptr = nullptr;
  std::vector<uint8_t> host;  // pinned-free staging for the async upload; lives with the buffer
};

// Bitwise equality, NaN (the poison) never equal.
void ExpectSameBits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    if (a != b || got[i] != got[i]) {
      if (bad++ < 3) ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements differ";
}

// The inputs of one round of every collective for n ranks, and the host references.
struct Round {
  static constexpr int64_t kAr = 1031, kAg = 333, kRs = 257, kP2p = 129;
  int n;
  DType dtype;
  std::vector<std::vector<float>> ar, ag, rs, a2a, p2p;
  std::vector<std::vector<int64_t>> send_counts;
  // References per rank.
  std::vector<std::vector<float>> ar_ref, ag_ref, rs_ref, a2a_ref;
  std::vector<std::vector<int64_t>> recv_counts;

  Round(int n, DType dtype, uint32_t seed) : n(n), dtype(dtype) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> cnt(0, 50);
    for (int r = 0; r < n; ++r) {
      ar.push_back(RandomValues(kAr, dtype, rng));
      ag.push_back(RandomValues(kAg, dtype, rng));
      rs.push_back(RandomValues(n * kRs, dtype, rng));
      p2p.push_back(RandomValues(kP2p, dtype, rng));
      std::vector<int64_t> c(n);
      int64_t total = 0;
      for (int d = 0; d < n; ++d) total += c[d] = (r + d) % 3 == 1 ? 0 : cnt(rng);  // some empty blocks
      send_counts.push_back(c);
      a2a.push_back(RandomValues(total, dtype, rng));
    }
    ar_ref.resize(n);
    ag_ref.resize(n);
    rs_ref.resize(n);
    a2a_ref.resize(n);
    recv_counts.resize(n);
    // The host reference: the same collectives through InProcessGroup.
    const Status s = RunOnRanks(n, [&](Communicator& c) -> Status {
      const int r = c.rank();
      ar_ref[r] = ar[r];
      GYRE_RETURN_IF_ERROR(c.AllReduceSum(ar_ref[r]));
      ag_ref[r].resize(n * kAg);
      GYRE_RETURN_IF_ERROR(c.AllGather(ag[r], ag_ref[r]));
      rs_ref[r].resize(kRs);
      GYRE_RETURN_IF_ERROR(c.ReduceScatterSum(rs[r], rs_ref[r]));
      return c.AllToAllV(a2a[r], send_counts[r], &a2a_ref[r], &recv_counts[r]);
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (dtype == DType::kBF16) {  // the device sums in fp32 and rounds once
      for (auto* v : {&ar_ref, &rs_ref})
        for (auto& x : *v) RoundBf16InPlace(x);
    }
  }
};

// Rank r's part: every collective on device buffers, then checks against the references.
void RunRank(DeviceCommunicator& c, const Round& round, bool p2p) {
  const int r = c.rank(), n = round.n;
  const DType dt = round.dtype;
  CUDA_OK(cudaSetDevice(c.device()));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const std::string who = "rank " + std::to_string(r) + "/" + std::to_string(n) + " " + std::string(DTypeName(dt));

  DeviceBuffer ar_in(Round::kAr, dt), ar_out(Round::kAr, dt), ar_inplace(Round::kAr, dt);
  DeviceBuffer ag_in(Round::kAg, dt), ag_out(n * Round::kAg, dt);
  DeviceBuffer rs_in(n * Round::kRs, dt), rs_out(Round::kRs, dt);
  DeviceBuffer a2a_in(round.a2a[r].size(), dt), a2a_out(round.a2a_ref[r].size(), dt);
  DeviceBuffer p2p_in(Round::kP2p, dt), p2p_out(Round::kP2p, dt);
  ar_in.Upload(round.ar[r], s);
  ar_inplace.Upload(round.ar[r], s);
  ag_in.Upload(round.ag[r], s);
  rs_in.Upload(round.rs[r], s);
  a2a_in.Upload(round.a2a[r], s);
  p2p_in.Upload(round.p2p[r], s);
  for (auto* b : {&ar_out, &ag_out, &rs_out, &a2a_out, &p2p_out}) b->Poison(s);

  Status st = c.AllReduceSum(ar_in.ptr, ar_out.ptr, Round::kAr, dt, s);
  EXPECT_TRUE(st.ok()) << who << " AllReduceSum: " << st.ToString();
  st = c.AllReduceSum(ar_inplace.ptr, ar_inplace.ptr, Round::kAr, dt, s);
  EXPECT_TRUE(st.ok()) << who << " AllReduceSum in place: " << st.ToString();
  st = c.AllGather(ag_in.ptr, ag_out.ptr, Round::kAg, dt, s);
  EXPECT_TRUE(st.ok()) << who << " AllGather: " << st.ToString();
  st = c.ReduceScatterSum(rs_in.ptr, rs_out.ptr, Round::kRs, dt, s);
  EXPECT_TRUE(st.ok()) << who << " ReduceScatterSum: " << st.ToString();
  st = c.AllToAllV(a2a_in.ptr, round.send_counts[r], a2a_out.ptr, round.recv_counts[r], dt, s);
  EXPECT_TRUE(st.ok()) << who << " AllToAllV: " << st.ToString();
  if (p2p && n > 1) {
    // A ring: rank 0 sends first, the others receive first, so blocking pairs never deadlock.
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    if (r == 0) {
      st = c.Send(p2p_in.ptr, Round::kP2p, dt, next, s);
      EXPECT_TRUE(st.ok()) << who << " Send: " << st.ToString();
      st = c.Recv(p2p_out.ptr, Round::kP2p, dt, prev, s);
      EXPECT_TRUE(st.ok()) << who << " Recv: " << st.ToString();
    } else {
      st = c.Recv(p2p_out.ptr, Round::kP2p, dt, prev, s);
      EXPECT_TRUE(st.ok()) << who << " Recv: " << st.ToString();
      st = c.Send(p2p_in.ptr, Round::kP2p, dt, next, s);
      EXPECT_TRUE(st.ok()) << who << " Send: " << st.ToString();
    }
  }
  st = c.Barrier(s);
  EXPECT_TRUE(st.ok()) << who << " Barrier: " << st.ToString();
  st = c.Wait();
  EXPECT_TRUE(st.ok()) << who << " Wait: " << st.ToString();
  CUDA_OK(cudaStreamSynchronize(s));

  ExpectSameBits(ar_out.Download(), round.ar_ref[r], who + " AllReduceSum");
  ExpectSameBits(ar_inplace.Download(), round.ar_ref[r], who + " AllReduceSum in place");
  ExpectSameBits(ag_out.Download(), round.ag_ref[r], who + " AllGather");
  ExpectSameBits(rs_out.Download(), round.rs_ref[r], who + " ReduceScatterSum");
  ExpectSameBits(a2a_out.Download(), round.a2a_ref[r], who + " AllToAllV");
  if (p2p && n > 1) ExpectSameBits(p2p_out.Download(), round.p2p[(r + n - 1) % n], who + " Send/Recv");
  CUDA_OK(cudaStreamDestroy(s));
}

// Runs RunRank on one thread per rank.
void RunThreads(int n, const std::function<DeviceCommunicator&(int)>& rank, const Round& round, bool p2p) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { RunRank(rank(r), round, p2p); });
  for (auto& t : threads) t.join();
}

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// A GPU test without a GPU fails: a skip would read as a pass in `ctest -L gpu`.
#define REQUIRE_GPU() ASSERT_TRUE(HaveGpu()) << "no CUDA device: test_device_comm needs a GPU"

// ---- NCCL, one rank ------------------------------------------------------------------------

TEST(NcclCommunicator, WorldOfOneMatchesTheHostReference) {
  REQUIRE_GPU();
  for (WaitMode wait : {WaitMode::kEachCall, WaitMode::kOnWait}) {
    // A unique id serves one communicator's init (its bootstrap root accepts one group): a new
    // id per communicator. (Reusing it hung the second init until the 60 s timeout.)
    auto id = NcclCommunicator::NewUniqueId();
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    auto comm = NcclCommunicator::Create(*id, 1, 0, 0, {milliseconds(60000), wait});
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const uint32_t seed = FreshSeed();
      SCOPED_TRACE("seed " + std::to_string(seed));
      Round round(1, dt, seed);
      RunRank(**comm, round, /*p2p=*/false);
    }
    EXPECT_TRUE((*comm)->status().ok());
  }
}

TEST(NcclCommunicator, BadArgumentIsStickyAndAborts) {
  REQUIRE_GPU();
  auto id = NcclCommunicator::NewUniqueId();
  ASSERT_TRUE(id.ok());
  auto comm = NcclCommunicator::Create(*id, 1, 0, 0);
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  DeviceBuffer b(64, DType::kF32);
  const Status s = (*comm)->Send(b.ptr, 64, DType::kF32, /*peer=*/0, nullptr);  // to itself
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  const Status later = (*comm)->AllReduceSum(b.ptr, b.ptr, 64, DType::kF32, nullptr);
  EXPECT_EQ(later.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(later.message(), s.message());
}

TEST(NcclCommunicator, InitWithoutThePeerTimesOut) {
  REQUIRE_GPU();
  auto id = NcclCommunicator::NewUniqueId();
  ASSERT_TRUE(id.ok());
  // Rank 0 of 2; rank 1 never comes (NCCL refuses two ranks on one GPU anyway).
  auto comm = NcclCommunicator::Create(*id, 2, 0, 0, {milliseconds(2000), WaitMode::kEachCall});
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kDeadlineExceeded) << comm.status().ToString();
}

TEST(NcclCommunicator, CollectiveThatDoesNotCompleteTimesOut) {
  REQUIRE_GPU();
  auto id = NcclCommunicator::NewUniqueId();
  ASSERT_TRUE(id.ok());
  auto comm = NcclCommunicator::Create(*id, 1, 0, 0, {milliseconds(500), WaitMode::kEachCall});
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  CUDA_OK(cudaSetDevice(0));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  DeviceBuffer b(256, DType::kF32);
  // Stall the stream in front of the collective (a peer that never arrives looks the same to
  // this rank): a host function that spins until released, at most 10 s.
  static std::atomic<bool> release{false};
  release = false;
  CUDA_OK(cudaLaunchHostFunc(
      s,
      [](void*) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!release && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      },
      nullptr));
  // If ncclCommAbort waits for the stalled stream, this lets it finish after a few seconds.
  std::thread releaser([] {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    release = true;
  });
  const Status st = (*comm)->AllReduceSum(b.ptr, b.ptr, 256, DType::kF32, s);
  release = true;
  releaser.join();
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_EQ((*comm)->status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*comm)->Barrier(s).code(), StatusCode::kDeadlineExceeded);  // sticky
  cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
}

// ---- SharedDeviceGroup: ranks as threads on device 0 ---------------------------------------

class SharedGroup : public ::testing::TestWithParam<std::tuple<int, WaitMode>> {};

TEST_P(SharedGroup, EveryCollectiveMatchesInProcessGroup) {
  REQUIRE_GPU();
  const auto [n, wait] = GetParam();
  auto group = SharedDeviceGroup::Create(n, 0, milliseconds(60000), wait);
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (int rep = 0; rep < 2; ++rep) {  // a second round reuses staging and events
      const uint32_t seed = FreshSeed();
      SCOPED_TRACE("seed " + std::to_string(seed));
      Round round(n, dt, seed);
      RunThreads(n, [&](int r) -> DeviceCommunicator& { return (*group)->Rank(r); }, round, /*p2p=*/true);
    }
  }
  EXPECT_TRUE((*group)->status().ok()) << (*group)->status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Ranks, SharedGroup,
                         ::testing::Combine(::testing::Values(1, 2, 4),
                                            ::testing::Values(WaitMode::kEachCall, WaitMode::kOnWait)));

TEST(SharedDeviceGroup, SkippedCollectiveTimesOutOnEveryRank) {
  REQUIRE_GPU();
  auto group = SharedDeviceGroup::Create(2, 0, milliseconds(300));
  ASSERT_TRUE(group.ok());
  DeviceBuffer b(128, DType::kF32);
  Status first, later;
  std::thread r0([&] { first = (*group)->Rank(0).AllReduceSum(b.ptr, b.ptr, 128, DType::kF32, nullptr); });
  r0.join();  // rank 1 skipped it
  later = (*group)->Rank(1).Barrier(nullptr);
  EXPECT_EQ(first.code(), StatusCode::kDeadlineExceeded) << first.ToString();
  EXPECT_EQ(later.code(), StatusCode::kDeadlineExceeded) << later.ToString();
  EXPECT_EQ((*group)->status().code(), StatusCode::kDeadlineExceeded);
}

TEST(SharedDeviceGroup, MismatchedCountsFailEveryRank) {
  REQUIRE_GPU();
  auto group = SharedDeviceGroup::Create(2, 0, milliseconds(5000));
  ASSERT_TRUE(group.ok());
  DeviceBuffer b0(64, DType::kF32), b1(65, DType::kF32);
  Status s0, s1;
  std::thread t0([&] { s0 = (*group)->Rank(0).AllReduceSum(b0.ptr, b0.ptr, 64, DType::kF32, nullptr); });
  std::thread t1([&] { s1 = (*group)->Rank(1).AllReduceSum(b1.ptr, b1.ptr, 65, DType::kF32, nullptr); });
  t0.join();
  t1.join();
  EXPECT_EQ(s0.code(), StatusCode::kInvalidArgument) << s0.ToString();
  EXPECT_EQ(s1.code(), StatusCode::kInvalidArgument) << s1.ToString();
}

TEST(SharedDeviceGroup, AllToAllVCountsThatDisagreeFailEveryRank) {
  REQUIRE_GPU();
  auto group = SharedDeviceGroup::Create(2, 0, milliseconds(5000));
  ASSERT_TRUE(group.ok());
  DeviceBuffer send(8, DType::kF32), recv(16, DType::kF32);
  const std::vector<int64_t> sc = {4, 4};
  const std::vector<int64_t> rc_right = {4, 4}, rc_wrong = {4, 5};
  Status s0, s1;
  std::thread t0([&] { s0 = (*group)->Rank(0).AllToAllV(send.ptr, sc, recv.ptr, rc_right, DType::kF32, nullptr); });
  std::thread t1([&] { s1 = (*group)->Rank(1).AllToAllV(send.ptr, sc, recv.ptr, rc_wrong, DType::kF32, nullptr); });
  t0.join();
  t1.join();
  EXPECT_EQ(s0.code(), StatusCode::kInvalidArgument) << s0.ToString();
  EXPECT_EQ(s1.code(), StatusCode::kInvalidArgument) << s1.ToString();
}

}  // namespace
}  // namespace gyre::parallel
