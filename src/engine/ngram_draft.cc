#include "engine/ngram_draft.h"

#include <algorithm>

namespace gyre {

bool NgramDraft(std::span<const int32_t> tokens, int64_t n_min, int64_t n_max, int64_t k, std::vector<int32_t>* out) {
  out->clear();
  const int64_t size = static_cast<int64_t>(tokens.size());
  if (k < 1) return false;
  for (int64_t n = std::min(n_max, size - 1); n >= std::max<int64_t>(n_min, 1); --n) {
    const int64_t suffix = size - n;
    // Latest earlier occurrence [i, i + n) with i + n < size (a token follows it); i < suffix.
    for (int64_t i = suffix - 1; i >= 0; --i) {
      if (!std::equal(tokens.begin() + i, tokens.begin() + i + n, tokens.begin() + suffix)) continue;
      const int64_t from = i + n, to = std::min(size, from + k);
      out->assign(tokens.begin() + from, tokens.begin() + to);
      return true;
    }
  }
  return false;
}

NgramIndex::NgramIndex(int64_t n_min, int64_t n_max)
    : n_min_(std::max<int64_t>(n_min, 1)), n_max_(n_max) {
  latest_.resize(static_cast<size_t>(std::max<int64_t>(n_max_ - n_min_ + 1, 0)));
}

uint64_t NgramIndex::Hash(std::span<const int32_t> gram) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ gram.size();
  for (int32_t t : gram) {  // splitmix-style mixing per token
    h ^= static_cast<uint32_t>(t);
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return h;
}

bool NgramIndex::Draft(std::span<const int32_t> tokens, int64_t k, std::vector<int32_t>* out) {
  out->clear();
  const int64_t size = static_cast<int64_t>(tokens.size());
  if (size < indexed_ || (indexed_ > 0 && tokens[indexed_ - 1] != last_)) {  // not an extension: rebuild
    for (auto& m : latest_) m.clear();
    indexed_ = 0;
  }
  // Token p follows the n-grams ending right before it: index them (latest start wins).
  for (int64_t p = std::max<int64_t>(indexed_, 1); p < size; ++p) {
    for (int64_t n = n_min_; n <= n_max_ && n <= p; ++n) {
      latest_[n - n_min_][Hash(tokens.subspan(p - n, n))] = p - n;
    }
  }
  indexed_ = size;
  if (size > 0) last_ = tokens[size - 1];
  if (k < 1) return false;
  for (int64_t n = std::min(n_max_, size - 1); n >= n_min_; --n) {
    const auto suffix = tokens.subspan(size - n, n);
    const auto& m = latest_[n - n_min_];
    auto it = m.find(Hash(suffix));
    if (it == m.end()) continue;  // no earlier occurrence with a follower
    const int64_t i = it->second;
    if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + i)) {
      ++collisions_;  // another n-gram with this hash: the scan decides for this n
      std::vector<int32_t> got;
      if (NgramDraft(tokens, n, n, k, &got)) {
        *out = std::move(got);
        return true;
      }
      continue;
    }
    const int64_t from = i + n, to = std::min(size, from + k);
    out->assign(tokens.begin() + from, tokens.begin() + to);
    return true;
  }
  return false;
}

}  // namespace gyre
