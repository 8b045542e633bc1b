#include "serve/image_cache.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "serve/image_inputs.h"
#include "serve/metrics.h"

namespace gyre::serve {

namespace {

uint64_t DefaultHash(std::span<const uint8_t> bytes) {
  return std::hash<std::string_view>{}(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

bool SameBytes(const std::vector<uint8_t>& a, std::span<const uint8_t> b) {
  return a.size() == b.size() && (b.empty() || std::memcmp(a.data(), b.data(), b.size()) == 0);
}

}  // namespace

ImageEmbeddingCache::ImageEmbeddingCache(int64_t capacity_bytes, HashFn hash)
    : capacity_(std::max<int64_t>(0, capacity_bytes)), hash_(hash ? std::move(hash) : HashFn(DefaultHash)) {
  stats_.capacity_bytes = capacity_;
}

int64_t ImageEmbeddingCache::EntryBytes(size_t image_bytes, const EncodedImage& encoded) {
  constexpr int64_t kOverhead = 128;  // list node, index node, shared_ptr control block
  return static_cast<int64_t>(image_bytes) + static_cast<int64_t>(encoded.embeds.size() * sizeof(float)) + kOverhead;
}

ImageEmbeddingCache::Lru::iterator ImageEmbeddingCache::FindLocked(uint64_t h, std::span<const uint8_t> image) {
  auto [lo, hi] = index_.equal_range(h);
  for (auto it = lo; it != hi; ++it) {
    if (SameBytes(it->second->image, image)) return it->second;
  }
  return lru_.end();
}

std::shared_ptr<const EncodedImage> ImageEmbeddingCache::Find(std::span<const uint8_t> image) {
  const uint64_t h = hash_(image);
  std::lock_guard<std::mutex> l(mu_);
  auto it = FindLocked(h, image);
  if (it == lru_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it);  // iterators stay valid
  return it->encoded;
}

void ImageEmbeddingCache::Insert(std::span<const uint8_t> image, std::shared_ptr<const EncodedImage> encoded) {
  if (!encoded) return;
  const int64_t bytes = EntryBytes(image.size(), *encoded);
  if (bytes > capacity_) return;
  const uint64_t h = hash_(image);
  std::vector<uint8_t> copy(image.begin(), image.end());  // outside the lock
  std::lock_guard<std::mutex> l(mu_);
  if (FindLocked(h, image) != lru_.end()) return;
  while (stats_.bytes + bytes > capacity_ && !lru_.empty()) {
    Entry& victim = lru_.back();
    auto [lo, hi] = index_.equal_range(victim.hash);
    for (auto it = lo; it != hi; ++it) {
      if (&*it->second == &victim) {
        index_.erase(it);
        break;
      }
    }
    stats_.bytes -= victim.bytes;
    --stats_.entries;
    ++stats_.evictions;
    lru_.pop_back();
  }
  lru_.push_front(Entry{h, std::move(copy), std::move(encoded), bytes});
  index_.emplace(h, lru_.begin());
  stats_.bytes += bytes;
  ++stats_.entries;
  ++stats_.inserts;
}

ImageCacheStats ImageEmbeddingCache::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

std::string ImageCacheMetrics(const ImageCacheStats& st, const std::string& labels) {
  auto n = [](int64_t v) { return static_cast<double>(v); };
  std::string out;
  ScalarText(out, "gyre_image_cache_hits_total", "counter", "Images whose embeddings came from the cache.", labels,
             n(st.hits));
  ScalarText(out, "gyre_image_cache_misses_total", "counter", "Images looked up and not found (then encoded).", labels,
             n(st.misses));
  ScalarText(out, "gyre_image_cache_evictions_total", "counter", "Cached images evicted to make room.", labels,
             n(st.evictions));
  ScalarText(out, "gyre_image_cache_bytes", "gauge", "Bytes held by the image embedding cache.", labels, n(st.bytes));
  ScalarText(out, "gyre_image_cache_entries", "gauge", "Images held by the image embedding cache.", labels,
             n(st.entries));
  ScalarText(out, "gyre_image_cache_capacity_bytes", "gauge", "The image embedding cache's capacity.", labels,
             n(st.capacity_bytes));
  return out;
}

}  // namespace gyre::serve
