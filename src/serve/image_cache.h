// The image embedding cache (issue 17 item 5, docs/vision.md): a repeated image is encoded once.
// Keyed by the image's content — the bytes its URL names, before decoding — so the same picture
// sent as a data URL or a file gets one entry per distinct byte string. A lookup hashes the bytes
// to find candidates and then compares them byte for byte with the stored copy, so a hash
// collision (even a crafted one) can never hand one image's rows to another: exact by
// construction. The value is what the tower gave (EncodedImage: token count and rows), and it
// depends only on the bytes, because the server's preprocessing and tower are fixed for its life.
//
// Bounded by bytes (the stored image bytes + the rows); least recently used entries are evicted
// first; an entry larger than the whole budget is not kept. Errors are never cached.
// Thread safety: every method may be called concurrently (one mutex; the tower runs outside it,
// so two requests missing on the same image both encode it, and the second insert is a no-op).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gyre::serve {

struct EncodedImage;

struct ImageCacheStats {
  int64_t hits = 0, misses = 0, evictions = 0, inserts = 0;
  int64_t bytes = 0, entries = 0;  // held now
  int64_t capacity_bytes = 0;
};

class ImageEmbeddingCache {
 public:
  // `hash` picks the bucket only (tests pass a constant one to prove that collisions are harmless).
  using HashFn = std::function<uint64_t(std::span<const uint8_t>)>;
  explicit ImageEmbeddingCache(int64_t capacity_bytes, HashFn hash = {});

  // The rows of an image whose bytes equal `image` exactly, or null (counted as a hit or a miss).
  std::shared_ptr<const EncodedImage> Find(std::span<const uint8_t> image);
  // Keeps `encoded` for `image`, evicting the least recently used entries to fit. A no-op when an
  // equal image is already held or when the entry alone exceeds the capacity.
  void Insert(std::span<const uint8_t> image, std::shared_ptr<const EncodedImage> encoded);

  ImageCacheStats stats() const;
  // Bytes an entry is charged: the image bytes, the rows, and a fixed overhead.
  static int64_t EntryBytes(size_t image_bytes, const EncodedImage& encoded);

 private:
  struct Entry {
    uint64_t hash = 0;
    std::vector<uint8_t> image;
    std::shared_ptr<const EncodedImage> encoded;
    int64_t bytes = 0;
  };
  using Lru = std::list<Entry>;  // most recently used first
  Lru::iterator FindLocked(uint64_t h, std::span<const uint8_t> image);

  const int64_t capacity_;
  const HashFn hash_;
  mutable std::mutex mu_;  // guards everything below
  Lru lru_;
  std::unordered_multimap<uint64_t, Lru::iterator> index_;
  ImageCacheStats stats_;
};

// The cache's series for /metrics (Prometheus text; `labels` without braces):
//   gyre_image_cache_hits_total, gyre_image_cache_misses_total, gyre_image_cache_evictions_total
//   (counters), gyre_image_cache_bytes, gyre_image_cache_entries, gyre_image_cache_capacity_bytes
//   (gauges).
std::string ImageCacheMetrics(const ImageCacheStats& st, const std::string& labels);

}  // namespace gyre::serve
