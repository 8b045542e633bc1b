// serve/image_cache.h: hits only on byte-equal images (also when every hash collides), LRU
// eviction by bytes, entries over the capacity not kept, and EncodeImage through the cache giving
// the tower's rows for a real image, encoded once.
#include "serve/image_cache.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>

#include "serve/image_inputs.h"

namespace gyre::serve {
namespace {

std::shared_ptr<const EncodedImage> Rows(int64_t tokens, int64_t width, uint32_t seed) {
  auto e = std::make_shared<EncodedImage>();
  e->num_tokens = tokens;
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  e->embeds.resize(static_cast<size_t>(tokens * width));
  for (float& v : e->embeds) v = g(rng);
  return e;
}

std::vector<uint8_t> Bytes(size_t n, uint8_t fill) { return std::vector<uint8_t>(n, fill); }

TEST(ImageCache, HitsOnlyTheSameBytes) {
  ImageEmbeddingCache c(int64_t{1} << 20);
  const auto a = Bytes(100, 1), b = Bytes(100, 2), a_longer = Bytes(101, 1);
  EXPECT_EQ(c.Find(a), nullptr);
  c.Insert(a, Rows(4, 8, 1));
  auto hit = c.Find(a);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->embeds, Rows(4, 8, 1)->embeds);
  EXPECT_EQ(c.Find(b), nullptr);
  EXPECT_EQ(c.Find(a_longer), nullptr);
  const ImageCacheStats st = c.stats();
  EXPECT_EQ(st.hits, 1);
  EXPECT_EQ(st.misses, 3);
  EXPECT_EQ(st.entries, 1);
  EXPECT_EQ(st.bytes, ImageEmbeddingCache::EntryBytes(100, *Rows(4, 8, 1)));
}

TEST(ImageCache, CollidingHashesNeverMixImages) {
  // Every image in one bucket: only the byte comparison tells them apart.
  ImageEmbeddingCache c(int64_t{1} << 20, [](std::span<const uint8_t>) { return uint64_t{7}; });
  for (uint8_t k = 0; k < 10; ++k) c.Insert(Bytes(64, k), Rows(3, 5, k));
  for (uint8_t k = 0; k < 10; ++k) {
    auto hit = c.Find(Bytes(64, k));
    ASSERT_NE(hit, nullptr) << int(k);
    EXPECT_EQ(hit->embeds, Rows(3, 5, k)->embeds) << int(k);
  }
  EXPECT_EQ(c.Find(Bytes(64, 200)), nullptr);
  // A second insert of the same bytes keeps the first rows.
  c.Insert(Bytes(64, 3), Rows(3, 5, 99));
  EXPECT_EQ(c.Find(Bytes(64, 3))->embeds, Rows(3, 5, 3)->embeds);
  EXPECT_EQ(c.stats().entries, 10);
}

TEST(ImageCache, EvictsLeastRecentlyUsedByBytes) {
  const int64_t one = ImageEmbeddingCache::EntryBytes(1000, *Rows(16, 16, 0));
  ImageEmbeddingCache c(2 * one + one / 2);  // room for two
  const auto a = Bytes(1000, 'a'), b = Bytes(1000, 'b'), d = Bytes(1000, 'd');
  c.Insert(a, Rows(16, 16, 1));
  c.Insert(b, Rows(16, 16, 2));
  ASSERT_NE(c.Find(a), nullptr);  // a is now the most recently used
  c.Insert(d, Rows(16, 16, 3));   // evicts b
  EXPECT_NE(c.Find(a), nullptr);
  EXPECT_EQ(c.Find(b), nullptr);
  EXPECT_NE(c.Find(d), nullptr);
  const ImageCacheStats st = c.stats();
  EXPECT_EQ(st.evictions, 1);
  EXPECT_EQ(st.entries, 2);
  EXPECT_EQ(st.bytes, 2 * one);
  EXPECT_LE(st.bytes, st.capacity_bytes);
}

TEST(ImageCache, AnEntryOverTheCapacityIsNotKept) {
  ImageEmbeddingCache c(ImageEmbeddingCache::EntryBytes(10, *Rows(2, 2, 0)));
  c.Insert(Bytes(10, 1), Rows(2, 2, 0));
  ASSERT_NE(c.Find(Bytes(10, 1)), nullptr);
  c.Insert(Bytes(10, 2), Rows(64, 64, 0));  // larger than everything: nothing evicted for it
  EXPECT_EQ(c.Find(Bytes(10, 2)), nullptr);
  EXPECT_NE(c.Find(Bytes(10, 1)), nullptr);
  ImageEmbeddingCache none(0);
  none.Insert(Bytes(10, 1), Rows(2, 2, 0));
  EXPECT_EQ(none.Find(Bytes(10, 1)), nullptr);
  EXPECT_EQ(none.stats().entries, 0);
}

TEST(ImageCache, ConcurrentUseKeepsTheAccounting) {
  const int64_t one = ImageEmbeddingCache::EntryBytes(256, *Rows(8, 8, 0));
  ImageEmbeddingCache c(5 * one);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&c, t] {
      for (int i = 0; i < 500; ++i) {
        const uint8_t k = static_cast<uint8_t>((i * 7 + t) % 12);
        auto hit = c.Find(Bytes(256, k));
        if (hit) {
          ASSERT_EQ(hit->embeds, Rows(8, 8, k)->embeds);
        } else {
          c.Insert(Bytes(256, k), Rows(8, 8, k));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const ImageCacheStats st = c.stats();
  EXPECT_EQ(st.hits + st.misses, 4 * 500);
  EXPECT_LE(st.entries, 5);
  EXPECT_EQ(st.bytes, st.entries * one);
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

TEST(ImageCache, EncodeImageEncodesARepeatedImageOnce) {
  const std::string root = GYRE_SOURCE_DIR;
  ImageInputOptions o;
  o.cache_bytes = int64_t{64} << 20;
  auto cached = LoadImageEncoder(root + "/tests/fixtures/glm5_tiny", o);
  ASSERT_TRUE(cached.ok()) << cached.status().ToString();
  ASSERT_NE((*cached)->cache, nullptr);
  auto plain = LoadImageEncoder(root + "/tests/fixtures/glm5_tiny", {});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->cache, nullptr);
  const auto png = ReadFile(root + "/tests/fixtures/images/rgb_140x112.png");
  const auto jpg = ReadFile(root + "/tests/fixtures/images/rgb_140x112.jpg");
  ASSERT_FALSE(png.empty());
  ASSERT_FALSE(jpg.empty());
  auto ref = EncodeImage(**plain, png, "f");
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  ASSERT_EQ(ref->num_tokens, 20);
  for (int i = 0; i < 3; ++i) {
    auto e = EncodeImage(**cached, png, "f");
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->num_tokens, ref->num_tokens);
    EXPECT_EQ(e->embeds, ref->embeds) << "pass " << i;
  }
  ImageCacheStats st = (*cached)->cache->stats();
  EXPECT_EQ(st.misses, 1);
  EXPECT_EQ(st.hits, 2);
  // The same pixels as JPEG are other bytes: their own entry, their own rows.
  auto j = EncodeImage(**cached, jpg, "f");
  ASSERT_TRUE(j.ok());
  auto jref = EncodeImage(**plain, jpg, "f");
  ASSERT_TRUE(jref.ok());
  EXPECT_EQ(j->embeds, jref->embeds);
  // A corrupt image is an error each time and is not cached.
  const std::vector<uint8_t> bad(png.begin(), png.begin() + 200);
  EXPECT_FALSE(EncodeImage(**cached, bad, "f").ok());
  EXPECT_FALSE(EncodeImage(**cached, bad, "f").ok());
  st = (*cached)->cache->stats();
  EXPECT_EQ(st.entries, 2);
  EXPECT_EQ(st.misses, 4);
}

}  // namespace
}  // namespace gyre::serve
