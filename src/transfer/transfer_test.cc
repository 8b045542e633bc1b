// The transfer protocol on its own (no model): frames detect every damaged bit, a transfer over
// loopback and TCP is byte-exact, and under every injected fault a transfer either completes
// byte-exact or fails with a Status, nothing damaged is accepted, and the receiver's held bytes
// return to zero. Runner-level equivalence is in disagg_equivalence_test.cc.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <thread>

#include "transfer/checksum.h"
#include "transfer/faulty_connection.h"
#include "transfer/paced_connection.h"
#include "transfer/tcp_pair_for_tests.h"
#include "transfer/transfer_engine.h"
#include "transfer/wire.h"

namespace gyre::transfer {
namespace {

using std::chrono::milliseconds;

// A random image of `num_tokens` tokens (fresh random bytes, never zeros).
SequenceImage RandomImage(int64_t num_tokens, uint64_t seed, int64_t page_bytes = 1000, int64_t slot_bytes = 700) {
  std::mt19937_64 rng(seed);
  SequenceImage im;
  im.format = {"test", 16, page_bytes, slot_bytes, 42};
  im.num_tokens = num_tokens;
  im.next_token = static_cast<int32_t>(rng() % 1000);
  im.next_logprob = -static_cast<float>(rng() % 10000) / 1000.0f;
  im.next_top.resize(rng() % 4);  // top_logprobs 0..3
  for (auto& [id, lp] : im.next_top) id = static_cast<int32_t>(rng() % 1000), lp = -static_cast<float>(rng() % 10000) / 1000.0f;
  im.pages.resize(PagesFor(im.format, num_tokens));
  for (auto& p : im.pages) {
    p.resize(page_bytes);
    for (auto& b : p) b = static_cast<std::byte>(rng());
  }
  im.state.resize(slot_bytes);
  for (auto& b : im.state) b = static_cast<std::byte>(rng());
  return im;
}

TEST(TransferWire, EveryFlippedBitAndEveryTruncationIsDetected) {
  std::vector<std::byte> payload(37);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::byte>(i * 7 + 3);
  const Message m = EncodeFrame({.kind = FrameKind::kPiece, .request_id = 9, .attempt = 2, .seq = 5}, payload);
  auto h = DecodeHeader(m);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->request_id, 9u);
  EXPECT_EQ(h->seq, 5u);
  ASSERT_TRUE(PayloadOf(*h, m).ok());
  for (size_t bit = 0; bit < m.size() * 8; ++bit) {
    Message bad = m;
    bad[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    auto bh = DecodeHeader(bad);
    EXPECT_TRUE(!bh.ok() || !PayloadOf(*bh, bad).ok()) << "bit " << bit;
  }
  for (size_t n = 0; n < m.size(); ++n) EXPECT_FALSE(DecodeHeader(std::span(m).first(n)).ok()) << n;
}

TEST(TransferWire, BeginRoundTripsAndRejectsInconsistentSizes) {
  BeginInfo b{{"cpu", 16, 4096, 512, 7}, 33, 5, 3};
  auto d = DecodeBegin(EncodeBegin(b));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->format, b.format);
  EXPECT_EQ(d->num_tokens, 33);
  EXPECT_EQ(d->next_token, 5);
  EXPECT_EQ(d->next_logprob, 0.0f);
  EXPECT_TRUE(d->next_top.empty());
  EXPECT_TRUE(d->SameFirst(b));
  // The first token's logprob and alternatives travel bit for bit.
  b.next_logprob = -1.25e-3f;
  b.next_top = {{5, -1.25e-3f}, {901, -6.5f}, {7, -std::numeric_limits<float>::infinity()}};
  d = DecodeBegin(EncodeBegin(b));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->next_logprob, b.next_logprob);
  EXPECT_EQ(d->next_top, b.next_top);
  EXPECT_TRUE(d->SameFirst(b));
  BeginInfo other = b;
  other.next_top[1].second = -6.25f;
  EXPECT_FALSE(other.SameFirst(b));
  // Every truncation of the frame is malformed (the alternatives are the tail).
  const std::vector<std::byte> full = EncodeBegin(b);
  for (size_t n = 0; n < full.size(); ++n) EXPECT_FALSE(DecodeBegin(std::span(full).first(n)).ok()) << n;
  b.next_top.assign(kMaxTopLogprobs + 1, {1, -1.0f});
  EXPECT_EQ(DecodeBegin(EncodeBegin(b)).status().code(), StatusCode::kDataLoss);
  b.next_top.clear();
  // A token count near INT64_MAX (found by wire_fuzz: PagesFor overflowed) is only inconsistent.
  EXPECT_EQ(PagesFor(b.format, std::numeric_limits<int64_t>::max()), (std::numeric_limits<int64_t>::max() - 1) / 16 + 1);
  BeginInfo huge = b;
  huge.num_tokens = std::numeric_limits<int64_t>::max() - 3;
  EXPECT_EQ(DecodeBegin(EncodeBegin(huge)).status().code(), StatusCode::kDataLoss);
  b.num_pages = 2;  // 33 tokens need 3 pages of 16
  EXPECT_EQ(DecodeBegin(EncodeBegin(b)).status().code(), StatusCode::kDataLoss);
}

// One transfer over a pair of connections, the receiver on its own thread.
struct Outcome {
  Status sent;
  Result<SequenceImage> taken = Status::Internal("not run");
  SenderStats sender;
  ReceiverStats receiver;
  int64_t held_after = -1;
};

Outcome RunTransfer(Connection& tx, Connection& rx, const SequenceImage& im, int max_attempts = 4) {
  Outcome o;
  ReceiverOptions ro;
  ro.staging_timeout = milliseconds(300);
  TransferReceiver receiver(rx, ro);
  SenderOptions so;
  so.max_attempts = max_attempts;
  so.ack_timeout = milliseconds(200);
  TransferSender sender(tx, so);
  o.sent = sender.Send(77, im);
  // A failed sender sends Abort last; let the receiver see it (unless the fault ate it).
  for (int i = 0; i < 30 && !o.sent.ok() && receiver.stats().aborted == 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  o.taken = receiver.Take(77, o.sent.ok() ? milliseconds(2000) : milliseconds(100));
  // Pools back to zero: whatever was staged is freed (at the latest by the staging timeout).
  for (int i = 0; i < 200 && receiver.held_bytes() != 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  o.held_after = receiver.held_bytes();
  o.sender = sender.stats();
  o.receiver = receiver.stats();
  return o;
}

TEST(TransferLoopback, CompletesByteExact) {
  auto [a, b] = MakeLoopbackPair();
  for (int64_t n : {1, 16, 17, 100}) {
    const SequenceImage im = RandomImage(n, n);
    Outcome o = RunTransfer(*a, *b, im);
    ASSERT_TRUE(o.sent.ok()) << o.sent.ToString();
    ASSERT_TRUE(o.taken.ok()) << o.taken.status().ToString();
    EXPECT_EQ(*o.taken, im);
    EXPECT_EQ(o.sender.attempts, 1);
    EXPECT_EQ(o.receiver.pieces_received, static_cast<int64_t>(im.pages.size()) + 1);
    EXPECT_EQ(o.held_after, 0);
  }
}

// A paced link carries the same bytes, and holds the sender for the bytes it sent over the rate:
// busy time is exactly bytes / rate (every frame counted), and the send takes at least that long.
// Two connections over one link share its rate.
TEST(TransferLoopback, PacedLinkCarriesTheImageAndHoldsTheSender) {
  constexpr double kRate = 4e6;  // bytes per second: this image's ~20 KB take ~5 ms
  auto link = std::make_shared<LinkPacer>(kRate);
  const SequenceImage im = RandomImage(300, 3);
  // Frames: Begin, one per page, the state, End; each a 48-byte header and its payload.
  const int64_t frames = static_cast<int64_t>(im.pages.size()) + 3;
  const double min_bytes = static_cast<double>(im.num_bytes() + frames * static_cast<int64_t>(kFrameHeaderBytes));
  for (int round = 1; round <= 2; ++round) {  // the second round: another connection, the same link
    auto [a, b] = MakeLoopbackPair();
    PacedConnection paced(std::move(a), link);
    const auto t0 = std::chrono::steady_clock::now();
    Outcome o = RunTransfer(paced, *b, im);
    ASSERT_TRUE(o.sent.ok()) << o.sent.ToString();
    ASSERT_TRUE(o.taken.ok()) << o.taken.status().ToString();
    EXPECT_EQ(*o.taken, im);
    EXPECT_GE(link->busy_seconds(), round * min_bytes / kRate);
    EXPECT_LT(link->busy_seconds(), round * (min_bytes + 4096) / kRate);  // Begin and End payloads are small
    EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), min_bytes / kRate);
  }
}

// The invariant under a fault: success means the receiver holds exactly what was sent; failure
// is a Status; anything the receiver hands out is byte-exact; nothing stays held.
void ExpectInvariant(const Outcome& o, const SequenceImage& im, const std::string& what) {
  if (o.sent.ok()) {
    ASSERT_TRUE(o.taken.ok()) << what << ": sent OK but " << o.taken.status().ToString();
  } else {
    EXPECT_FALSE(o.sent.message().empty()) << what;
  }
  if (o.taken.ok()) {
    EXPECT_TRUE(*o.taken == im) << what << ": a damaged image was accepted";
  }
  EXPECT_EQ(o.held_after, 0) << what;
}

struct FaultCase {
  std::string name;
  FaultPolicy policy;
  bool on_acks = false;  // damage the receiver's answers instead of the sender's frames
};

std::vector<FaultCase> FaultCases() {
  std::vector<FaultCase> c;
  auto add = [&](std::string n, auto set, bool acks = false) {
    FaultPolicy p;
    set(p);
    c.push_back({std::move(n), p, acks});
  };
  add("drop", [](FaultPolicy& p) { p.drop = 0.15; });
  add("delay", [](FaultPolicy& p) { p.delay = 0.3, p.delay_ms = 5; });
  add("truncate", [](FaultPolicy& p) { p.truncate = 0.15; });
  add("corrupt", [](FaultPolicy& p) { p.corrupt = 0.15; });
  add("duplicate", [](FaultPolicy& p) { p.duplicate = 0.3; });
  add("reorder", [](FaultPolicy& p) { p.reorder = 0.3; });
  add("kill", [](FaultPolicy& p) { p.kill_after = 4; });
  add("drop_acks", [](FaultPolicy& p) { p.drop = 0.5; }, true);
  add("corrupt_acks", [](FaultPolicy& p) { p.corrupt = 0.5; }, true);
  add("everything", [](FaultPolicy& p) {
    p.drop = p.truncate = p.corrupt = 0.05, p.duplicate = p.reorder = p.delay = 0.1, p.delay_ms = 2;
  });
  return c;
}

void PrintTo(const FaultCase& c, std::ostream* os) { *os << c.name << " {" << c.policy.ToString() << "}"; }

class TransferFaults : public ::testing::TestWithParam<FaultCase> {};

TEST_P(TransferFaults, CompleteAndExactOrFailedAndNothingHeld) {
  const FaultCase& fc = GetParam();
  int64_t fired = 0, completed = 0, failed = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    auto [a, b] = MakeLoopbackPair();
    FaultPolicy p = fc.policy;
    p.seed = seed;
    std::unique_ptr<Connection> tx = std::move(a), rx = std::move(b);
    FaultyConnection* faulty;
    if (fc.on_acks) {
      rx = std::make_unique<FaultyConnection>(std::move(rx), p);
      faulty = static_cast<FaultyConnection*>(rx.get());
    } else {
      tx = std::make_unique<FaultyConnection>(std::move(tx), p);
      faulty = static_cast<FaultyConnection*>(tx.get());
    }
    const SequenceImage im = RandomImage(16 * 5 + static_cast<int64_t>(seed), seed);
    Outcome o = RunTransfer(*tx, *rx, im);
    ExpectInvariant(o, im, fc.name + " " + p.ToString());
    const FaultCounts n = faulty->counts();
    fired += n.dropped + n.delayed + n.truncated + n.corrupted + n.duplicated + n.reordered + n.killed;
    (o.sent.ok() ? completed : failed) += 1;
    if (n.killed) {
      EXPECT_EQ(o.sent.code(), StatusCode::kUnavailable) << o.sent.ToString();
    }
  }
  EXPECT_GT(fired, 0) << "the fault never fired";
  // Retries make most faulty transfers complete; a dead link never does.
  if (fc.name == "kill") {
    EXPECT_EQ(completed, 0);
  } else {
    EXPECT_GT(completed, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Each, TransferFaults, ::testing::ValuesIn(FaultCases()),
                         [](const auto& info) { return info.param.name; });

TEST(TransferFaults, EveryFrameCorruptedFailsWithDataLossAndNothingAccepted) {
  auto [a, b] = MakeLoopbackPair();
  FaultPolicy p;
  p.corrupt = 1.0;
  p.seed = 3;
  FaultyConnection tx(std::move(a), p);
  const SequenceImage im = RandomImage(40, 3);
  Outcome o = RunTransfer(tx, *b, im, 2);
  EXPECT_FALSE(o.sent.ok());
  EXPECT_FALSE(o.taken.ok());
  EXPECT_EQ(o.receiver.accepted, 0);
  EXPECT_EQ(o.sender.attempts, 2);
  EXPECT_EQ(o.held_after, 0);
}

TEST(TransferFaults, EveryFrameDroppedTimesOut) {
  auto [a, b] = MakeLoopbackPair();
  FaultPolicy p;
  p.drop = 1.0;
  FaultyConnection tx(std::move(a), p);
  Outcome o = RunTransfer(tx, *b, RandomImage(20, 4), 2);
  EXPECT_EQ(o.sent.code(), StatusCode::kDeadlineExceeded) << o.sent.ToString();
  EXPECT_EQ(o.receiver.accepted, 0);
  EXPECT_EQ(o.held_after, 0);
}

TEST(TransferFaults, AbortDropsAnAcceptedImageWhoseAcksWereLost) {
  auto [a, b] = MakeLoopbackPair();
  FaultPolicy p;
  p.drop = 1.0;  // every Ack lost
  FaultyConnection rx(std::move(b), p);
  Outcome o = RunTransfer(*a, rx, RandomImage(20, 5), 2);
  EXPECT_EQ(o.sent.code(), StatusCode::kDeadlineExceeded) << o.sent.ToString();
  EXPECT_EQ(o.receiver.accepted, 1);
  EXPECT_EQ(o.taken.status().code(), StatusCode::kCancelled) << o.taken.status().ToString();
  EXPECT_EQ(o.held_after, 0);
}

TEST(TransferLoopback, AnImageNobodyTakesExpires) {
  auto [a, b] = MakeLoopbackPair();
  ReceiverOptions ro;
  ro.ready_timeout = milliseconds(100);
  TransferReceiver receiver(*b, ro);
  TransferSender sender(*a, {});
  ASSERT_TRUE(sender.Send(5, RandomImage(40, 5)).ok());
  EXPECT_GT(receiver.held_bytes(), 0);
  for (int i = 0; i < 300 && receiver.held_bytes() != 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(receiver.held_bytes(), 0);
  EXPECT_EQ(receiver.stats().expired, 1);
  EXPECT_EQ(receiver.Take(5, milliseconds(10)).status().code(), StatusCode::kDeadlineExceeded);
}

TEST(TransferTcp, CompletesByteExactAndSurvivesFaults) {
  for (uint64_t seed : {0, 1, 2, 3}) {
    auto [client, server] = TcpPair();
    ASSERT_TRUE(client && server);
    std::unique_ptr<Connection> tx = WithMixedFaults(std::move(client), seed);
    const SequenceImage im = RandomImage(300, seed, 4096, 2048);
    Outcome o = RunTransfer(*tx, *server, im);
    ExpectInvariant(o, im, "tcp seed " + std::to_string(seed));
    if (seed == 0) {
      ASSERT_TRUE(o.sent.ok()) << o.sent.ToString();
      EXPECT_EQ(o.sender.attempts, 1);
    }
  }
}

TEST(TransferTcp, PeerKilledMidTransferIsUnavailableOnBothSides) {
  auto [client, server] = TcpPair();
  ASSERT_TRUE(client && server);
  FaultPolicy p;
  p.kill_after = 5;
  FaultyConnection tx(std::move(client), p);
  Outcome o = RunTransfer(tx, *server, RandomImage(200, 9));
  EXPECT_EQ(o.sent.code(), StatusCode::kUnavailable) << o.sent.ToString();
  EXPECT_EQ(o.taken.status().code(), StatusCode::kUnavailable) << o.taken.status().ToString();
  EXPECT_EQ(o.receiver.accepted, 0);
  EXPECT_EQ(o.held_after, 0);
}

TEST(TransferTcp, ConnectToNothingIsUnavailable) {
  auto listener = TcpListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  const uint16_t port = (*listener)->port();
  listener->reset();
  auto c = TcpConnect("127.0.0.1", port, milliseconds(2000));
  EXPECT_FALSE(c.ok());
}

}  // namespace
}  // namespace gyre::transfer
