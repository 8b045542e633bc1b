// transfer/embeds_image.h: image embeddings packed as a SequenceImage round-trip bit for bit (odd
// widths, pieces that do not divide the rows), damaged or foreign images are refused by name, and
// the transfer engine carries them over TCP with injected faults complete and exact or not at all.
#include "transfer/embeds_image.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "transfer/faulty_connection.h"
#include "transfer/tcp_pair_for_tests.h"
#include "transfer/transfer_engine.h"

namespace gyre::transfer {
namespace {

using std::chrono::milliseconds;

EmbedsBatch RandomBatch(std::vector<int64_t> tokens, int64_t width, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g;
  EmbedsBatch b;
  b.tower_fingerprint = 0xfeedULL + seed;
  b.width = width;
  for (int64_t t : tokens) {
    ImageRowsOf im;
    im.content_hash = rng();
    im.num_tokens = t;
    im.rows.resize(static_cast<size_t>(t * width));
    for (float& v : im.rows) v = g(rng);
    b.images.push_back(std::move(im));
  }
  return b;
}

TEST(EmbedsImage, RoundTripsBitForBit) {
  struct Case {
    std::vector<int64_t> tokens;
    int64_t width, rows_per_piece;
  };
  for (const Case& c : {Case{{20}, 64, 64}, Case{{20, 1, 144}, 37, 16}, Case{{64}, 8, 64}, Case{{3, 5}, 1, 1},
                        Case{{1000}, 3, 7}}) {
    const EmbedsBatch b = RandomBatch(c.tokens, c.width, c.tokens.size() + c.width);
    auto packed = PackEmbeds(b, c.rows_per_piece);
    ASSERT_TRUE(packed.ok()) << packed.status().ToString();
    EXPECT_TRUE(ValidateImage(*packed).ok());
    EXPECT_EQ(packed->format.backend, kEmbedsBackend);
    int64_t total = 0;
    for (int64_t t : c.tokens) total += t;
    EXPECT_EQ(packed->num_tokens, total);
    EXPECT_EQ(static_cast<int64_t>(packed->pages.size()), (total + c.rows_per_piece - 1) / c.rows_per_piece);
    auto back = UnpackEmbeds(*packed, b.tower_fingerprint);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, b);  // floats compared exactly
  }
}

TEST(EmbedsImage, RefusesBadBatches) {
  EmbedsBatch b = RandomBatch({4}, 8, 1);
  EXPECT_FALSE(PackEmbeds(b, 0).ok());
  EXPECT_FALSE(PackEmbeds(EmbedsBatch{}, 16).ok());
  b.images[0].rows.pop_back();
  EXPECT_EQ(PackEmbeds(b, 16).status().code(), StatusCode::kInvalidArgument);
  b = RandomBatch({4}, 8, 1);
  b.width = 0;
  EXPECT_FALSE(PackEmbeds(b, 16).ok());
}

TEST(EmbedsImage, RefusesForeignAndDamagedImages) {
  const EmbedsBatch b = RandomBatch({20, 7}, 16, 2);
  auto packed = PackEmbeds(b, 8);
  ASSERT_TRUE(packed.ok());
  auto expect_refused = [&](const SequenceImage& im, const char* what) {
    auto r = UnpackEmbeds(im, b.tower_fingerprint);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  };
  // Another tower.
  auto other = UnpackEmbeds(*packed, b.tower_fingerprint + 1);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("another vision tower"), std::string::npos);
  // A KV-cache image is not embeddings.
  SequenceImage im = *packed;
  im.format.backend = "cpu";
  expect_refused(im, "not image embeddings");
  // Header fields.
  im = *packed;
  im.state[0] = std::byte{0};
  expect_refused(im, "magic");
  im = *packed;
  im.state.pop_back();
  im.format.bytes_per_slot -= 1;
  expect_refused(im, "header");
  im = *packed;
  int64_t tokens = 0;
  std::memcpy(&tokens, im.state.data() + 24 + 8, 8);  // image 0's token count
  tokens += 1;
  std::memcpy(im.state.data() + 24 + 8, &tokens, 8);
  expect_refused(im, "sum to");
  // Padding after the last row (27 rows in pieces of 8: the last piece holds 3).
  im = *packed;
  im.pages.back().back() = std::byte{1};
  expect_refused(im, "padding");
  // A piece count that disagrees with the rows (ValidateImage).
  im = *packed;
  im.pages.pop_back();
  EXPECT_FALSE(UnpackEmbeds(im, b.tower_fingerprint).ok());
}

// The transfer engine carries an embeddings image as it carries a cache: over TCP, with faults,
// the receiver hands out only a verified byte-exact copy, and it unpacks to the rows sent.
TEST(EmbedsImage, TravelsOverTcpExactlyOrNotAtAll) {
  int64_t completed = 0;
  for (uint64_t seed : {0, 1, 2, 3, 4}) {
    auto [client, server] = TcpPair();
    ASSERT_TRUE(client && server);
    std::unique_ptr<Connection> tx = WithMixedFaults(std::move(client), seed);
    const EmbedsBatch b = RandomBatch({144, 20, 1}, 96, seed);
    auto packed = PackEmbeds(b);
    ASSERT_TRUE(packed.ok());
    ReceiverOptions ro;
    ro.staging_timeout = milliseconds(300);
    TransferReceiver receiver(*server, ro);
    SenderOptions so;
    so.max_attempts = 4;
    so.ack_timeout = milliseconds(200);
    TransferSender sender(*tx, so);
    const Status sent = sender.Send(1000 + seed, *packed);
    auto taken = receiver.Take(1000 + seed, sent.ok() ? milliseconds(2000) : milliseconds(100));
    if (seed == 0) {
      ASSERT_TRUE(sent.ok()) << sent.ToString();
    }
    if (sent.ok()) {
      ++completed;
      ASSERT_TRUE(taken.ok()) << taken.status().ToString();
      EXPECT_EQ(*taken, *packed);
      auto back = UnpackEmbeds(*taken, b.tower_fingerprint);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(*back, b);
    } else {
      EXPECT_FALSE(taken.ok()) << "a failed send handed out an image (seed " << seed << ")";
    }
    for (int i = 0; i < 200 && receiver.held_bytes() != 0; ++i) std::this_thread::sleep_for(milliseconds(10));
    EXPECT_EQ(receiver.held_bytes(), 0);
  }
  EXPECT_GE(completed, 2);
}

}  // namespace
}  // namespace gyre::transfer
