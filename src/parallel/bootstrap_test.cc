#include "parallel/bootstrap.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <random>
#include <thread>

#include "parallel/dist_options.h"

namespace gyre::parallel {
namespace {

using std::chrono::milliseconds;

std::vector<uint8_t> RandomBlob(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

std::string Addr(int port) { return "127.0.0.1:" + std::to_string(port); }

// ---- options -------------------------------------------------------------------------------

TEST(DistOptions, ParsesSpaceAndEqualsFormsAndKeepsTheRest) {
  DistOptions o;
  std::vector<std::string> rest;
  ASSERT_TRUE(ParseDistOptions({"--model", "m", "--nnodes", "4", "--node-rank=3", "--dist-init-addr",
                                "10.0.0.7:5000", "--dist-timeout=9", "--tp", "8"},
                               &o, &rest)
                  .ok());
  EXPECT_EQ(o.nnodes, 4);
  EXPECT_EQ(o.node_rank, 3);
  EXPECT_EQ(o.dist_init_addr, "10.0.0.7:5000");
  EXPECT_EQ(o.timeout, std::chrono::seconds(9));
  EXPECT_EQ(rest, (std::vector<std::string>{"--model", "m", "--tp", "8"}));
}

TEST(DistOptions, DefaultsAreOneNode) {
  DistOptions o;
  std::vector<std::string> rest;
  ASSERT_TRUE(ParseDistOptions({}, &o, &rest).ok());
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.node_rank, 0);
}

TEST(DistOptions, RejectsBadValues) {
  DistOptions o;
  std::vector<std::string> rest;
  const std::vector<std::vector<std::string>> bad = {
      {"--nnodes", "0"},
      {"--nnodes", "two"},
      {"--nnodes"},
      {"--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "h:1"},
      {"--nnodes", "2"},  // no init address
      {"--nnodes", "2", "--dist-init-addr", "hostonly"},
      {"--nnodes", "2", "--dist-init-addr", "h:0"},
      {"--nnodes", "2", "--dist-init-addr", "h:70000"},
      {"--nnodes", "2", "--dist-init-addr", ":5000"},
      {"--nnodes", "2", "--dist-init-addr", "fe80::1:5000"},  // v6 without brackets
      {"--dist-timeout", "0"},
  };
  for (const auto& args : bad) {
    const Status s = ParseDistOptions(args, &o, &rest);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << args[0] << " " << (args.size() > 1 ? args[1] : "");
  }
}

TEST(DistOptions, SplitsV6InBrackets) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(SplitHostPort("[::1]:29500", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 29500);
}

// ---- bootstrap -----------------------------------------------------------------------------

// Runs a bootstrap of `world` ranks as threads; rank 0 serves, the others join with `hello`'s
// rank and world size (default: their own). Returns each rank's status and blob.
struct Outcome {
  std::vector<Status> status;
  std::vector<std::vector<uint8_t>> blob;
  std::vector<int> world;
};

Outcome RunGroup(int world, const std::vector<uint8_t>& blob, milliseconds timeout,
                 std::vector<std::pair<int, int>> joiners = {}) {
  if (joiners.empty())
    for (int r = 1; r < world; ++r) joiners.push_back({r, world});
  auto server = BootstrapServer::Listen("127.0.0.1:0");
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  const int port = (*server)->port();
  const size_t n = joiners.size() + 1;
  Outcome out{std::vector<Status>(n), std::vector<std::vector<uint8_t>>(n), std::vector<int>(n, 0)};
  std::vector<std::thread> threads;
  for (size_t j = 0; j < joiners.size(); ++j) {
    threads.emplace_back([&, j] {
      auto r = BootstrapJoin(Addr(port), joiners[j].first, joiners[j].second, timeout);
      out.status[j + 1] = r.status();
      if (r.ok()) {
        out.blob[j + 1] = r->blob;
        out.world[j + 1] = r->world_size;
      }
    });
  }
  out.status[0] = (*server)->Serve(world, blob, timeout);
  for (auto& t : threads) t.join();
  return out;
}

TEST(Bootstrap, EveryRankGetsRankZerosBlob) {
  for (int world : {1, 2, 4, 8}) {
    const auto blob = RandomBlob(128, 1000 + world);  // the size of an ncclUniqueId
    Outcome o = RunGroup(world, blob, milliseconds(20000));
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(o.status[r].ok()) << "world " << world << " rank " << r << ": " << o.status[r].ToString();
      if (r > 0) {
        EXPECT_EQ(o.blob[r], blob) << "rank " << r;
        EXPECT_EQ(o.world[r], world);
      }
    }
  }
}

TEST(Bootstrap, WrongWorldSizeFailsEveryone) {
  const auto blob = RandomBlob(128, 7);
  Outcome o = RunGroup(3, blob, milliseconds(5000), {{1, 3}, {2, 4}});
  EXPECT_EQ(o.status[0].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(o.status[0].message().find("world size 4"), std::string::npos) << o.status[0].ToString();
  for (int j = 1; j < 3; ++j) EXPECT_FALSE(o.status[j].ok()) << j;
}

TEST(Bootstrap, DuplicateRankFailsEveryone) {
  Outcome o = RunGroup(3, RandomBlob(64, 8), milliseconds(5000), {{1, 3}, {1, 3}});
  EXPECT_EQ(o.status[0].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(o.status[0].message().find("joined twice"), std::string::npos) << o.status[0].ToString();
  EXPECT_FALSE(o.status[1].ok());
  EXPECT_FALSE(o.status[2].ok());
}

TEST(Bootstrap, MissingRankTimesOutAndNamesIt) {
  Outcome o = RunGroup(3, RandomBlob(64, 9), milliseconds(500), {{1, 3}});
  EXPECT_EQ(o.status[0].code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(o.status[0].message().find("rank(s) 2 did not join"), std::string::npos) << o.status[0].ToString();
  EXPECT_FALSE(o.status[1].ok());
}

TEST(Bootstrap, JoinerTimesOutWithoutRankZero) {
  // Reserve a port, then close it: nobody listens there.
  auto server = BootstrapServer::Listen("127.0.0.1:0");
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  server->reset();
  auto r = BootstrapJoin(Addr(port), 1, 2, milliseconds(300));
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
}

TEST(Bootstrap, PeerGoneBeforeAckFailsRankZero) {
  auto server = BootstrapServer::Listen("127.0.0.1:0");
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  // A raw joiner that says hello as rank 1 of 2 and hangs up without reading the blob.
  std::thread rogue([port] {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    const uint32_t hello[4] = {0x53425947, 1, 1, 2};
    ASSERT_EQ(::send(fd, hello, sizeof(hello), 0), static_cast<ssize_t>(sizeof(hello)));
    ::close(fd);
  });
  const Status s = (*server)->Serve(2, RandomBlob(128, 10), milliseconds(5000));
  rogue.join();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.ToString();
}

TEST(Bootstrap, RankZeroGoneFailsJoiner) {
  auto server = BootstrapServer::Listen("127.0.0.1:0");
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  Status joined;
  std::thread joiner([&] { joined = BootstrapJoin(Addr(port), 1, 2, milliseconds(5000)).status(); });
  // Rank 0 accepts nothing and goes away: the joiner's connection is reset or closed.
  std::this_thread::sleep_for(milliseconds(100));
  server->reset();
  joiner.join();
  EXPECT_FALSE(joined.ok());
  EXPECT_NE(joined.code(), StatusCode::kOk);
}

TEST(Bootstrap, FromOptionsOverLoopback) {
  auto probe = BootstrapServer::Listen("127.0.0.1:0");
  ASSERT_TRUE(probe.ok());
  const int port = (*probe)->port();
  probe->reset();  // free the port for Bootstrap's own listener (SO_REUSEADDR)
  const auto blob = RandomBlob(128, 11);
  std::vector<Result<BootstrapResult>> results;
  for (int r = 0; r < 3; ++r) results.emplace_back(Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      DistOptions o;
      o.nnodes = 3;
      o.node_rank = r;
      o.dist_init_addr = Addr(port);
      o.timeout = milliseconds(20000);
      results[r] = Bootstrap(o, r == 0 ? std::span<const uint8_t>(blob) : std::span<const uint8_t>());
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(results[r].ok()) << r << ": " << results[r].status().ToString();
    EXPECT_EQ(results[r]->world_size, 3);
    EXPECT_EQ(results[r]->blob, blob);
  }
}

}  // namespace
}  // namespace gyre::parallel
