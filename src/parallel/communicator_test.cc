// InProcessGroup collectives: results, rank-order determinism, agreement checks, timeouts and
// abort.
#include "parallel/communicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

namespace gyre::parallel {
namespace {

std::vector<float> RandomVec(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng) * std::pow(10.0f, static_cast<float>(rng() % 7) - 3.0f);  // mixed magnitudes
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, AllReduceSumIsTheRankOrderSumOnEveryRank) {
  const int n = GetParam();
  const size_t len = 1000;
  // Expected: ((x0 + x1) + x2) + ... in fp32, computed here on one thread.
  std::vector<float> want = RandomVec(len, 0);
  for (int r = 1; r < n; ++r) {
    const auto x = RandomVec(len, r);
    for (size_t i = 0; i < len; ++i) want[i] += x[i];
  }
  for (int rep = 0; rep < 3; ++rep) {  // reruns reproduce the same bits
    std::vector<std::vector<float>> got(n);
    ASSERT_TRUE(RunOnRanks(n, [&](Communicator& c) {
                  got[c.rank()] = RandomVec(len, c.rank());
                  return c.AllReduceSum(got[c.rank()]);
                }).ok());
    for (int r = 0; r < n; ++r) EXPECT_TRUE(SameBits(got[r], want)) << "rank " << r << " rep " << rep;
  }
}

TEST_P(Collectives, AllGatherAndReduceScatterAreExact) {
  const int n = GetParam();
  std::vector<std::vector<float>> gathered(n), scattered(n);
  ASSERT_TRUE(RunOnRanks(n, [&](Communicator& c) {
                const int r = c.rank();
                std::vector<float> in = {static_cast<float>(r), static_cast<float>(10 * r)};
                gathered[r].resize(2 * n);
                GYRE_RETURN_IF_ERROR(c.AllGather(in, gathered[r]));
                // Block b of rank r holds r + b; rank b receives Σ_r (r + b) (exact in fp32).
                std::vector<float> blocks(3 * n);
                for (int b = 0; b < n; ++b)
                  for (int i = 0; i < 3; ++i) blocks[b * 3 + i] = static_cast<float>(r + b + i);
                scattered[r].resize(3);
                return c.ReduceScatterSum(blocks, scattered[r]);
              }).ok());
  for (int r = 0; r < n; ++r) {
    for (int s = 0; s < n; ++s) {
      EXPECT_EQ(gathered[r][2 * s], s);
      EXPECT_EQ(gathered[r][2 * s + 1], 10 * s);
    }
    for (int i = 0; i < 3; ++i) EXPECT_EQ(scattered[r][i], n * (n - 1) / 2 + n * (r + i));
  }
}

TEST_P(Collectives, AllToAllVDeliversUnevenBlocksInSourceOrder) {
  const int n = GetParam();
  std::vector<std::vector<float>> recv(n);
  std::vector<std::vector<int64_t>> counts(n);
  ASSERT_TRUE(RunOnRanks(n, [&](Communicator& c) {
                const int r = c.rank();
                // Rank r sends (r + d) % 3 values to rank d, each encoding (source, dest, i).
                std::vector<float> send;
                std::vector<int64_t> sc(n);
                for (int d = 0; d < n; ++d) {
                  sc[d] = (r + d) % 3;
                  for (int i = 0; i < sc[d]; ++i) send.push_back(static_cast<float>(100 * r + 10 * d + i));
                }
                GYRE_RETURN_IF_ERROR(c.AllToAllV(send, sc, &recv[r], &counts[r]));
                return c.Barrier();
              }).ok());
  for (int d = 0; d < n; ++d) {
    std::vector<float> want;
    for (int s = 0; s < n; ++s) {
      EXPECT_EQ(counts[d][s], (s + d) % 3);
      for (int i = 0; i < (s + d) % 3; ++i) want.push_back(static_cast<float>(100 * s + 10 * d + i));
    }
    EXPECT_EQ(recv[d], want) << "rank " << d;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, Collectives, ::testing::Values(1, 2, 3, 4, 8));

TEST(Communicator, SizeMismatchFailsEveryRankAndStaysFailed) {
  std::vector<Status> first(2), later(2);
  auto group = InProcessGroup::Create(2);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      Communicator& c = group->Rank(r);
      std::vector<float> v(r == 0 ? 4 : 5, 1.0f);
      first[r] = c.AllReduceSum(v);
      later[r] = c.Barrier();
    });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(first[r].code(), StatusCode::kInvalidArgument) << first[r].ToString();
    EXPECT_NE(first[r].message().find("AllReduceSum"), std::string::npos) << first[r].ToString();
    EXPECT_EQ(later[r].code(), StatusCode::kInvalidArgument) << "sticky";
  }
}

TEST(Communicator, DifferentCollectivesAreReported) {
  Status s = RunOnRanks(2, [](Communicator& c) {
    std::vector<float> v(2, 1.0f), out(4);
    return c.rank() == 0 ? c.AllReduceSum(v) : c.AllGather(v, out);
  });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("AllGather"), std::string::npos) << s.ToString();
}

TEST(Communicator, AMissingRankTimesOut) {
  auto group = InProcessGroup::Create(2, std::chrono::milliseconds(50));
  Status s;
  std::thread t([&] { s = group->Rank(0).Barrier(); });  // rank 1 never arrives
  t.join();
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_EQ(group->status().code(), StatusCode::kDeadlineExceeded);
}

TEST(Communicator, AFailingRankAbortsTheOthers) {
  const auto t0 = std::chrono::steady_clock::now();
  Status s = RunOnRanks(3, [](Communicator& c) {
    if (c.rank() == 1) return Status::Internal("boom");
    std::vector<float> v(3, 1.0f);
    return c.AllReduceSum(v);  // would wait 60 s for rank 1 without the abort
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace gyre::parallel
