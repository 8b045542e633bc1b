// N-gram (prompt lookup) drafts for speculative decoding (docs/engine.md "Speculative decoding"):
// guesses a sequence's next tokens by finding its latest n-gram earlier in its own tokens and
// proposing what followed there. No model, no state: a pure function of the tokens.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace gyre {

// For n from n_max down to n_min (>= 1): when the last n tokens of `tokens` also occur earlier,
// at the latest such occurrence that has a token after it, `out` ← up to k tokens that followed
// it (never past the end of `tokens`), and returns true. Returns false (out empty) when no n-gram
// of those lengths recurs or k < 1.
bool NgramDraft(std::span<const int32_t> tokens, int64_t n_min, int64_t n_max, int64_t k, std::vector<int32_t>* out);

// NgramDraft for one sequence whose tokens only grow, in O(n_max^2) per new token instead of a
// scan of the whole sequence per step: for each n it keeps, by a 64-bit hash of every n-gram that
// has a token after it, the latest start of that n-gram. A hit is compared token by token; a hash
// collision falls back to NgramDraft's scan for that n, so the answer is always NgramDraft's.
// Tokens that do not extend the previous call's (shorter, or a different last indexed token)
// rebuild the index. Memory: one map entry per (position, n). Thread safety: none (one sequence).
class NgramIndex {
 public:
  NgramIndex(int64_t n_min, int64_t n_max);
  // == NgramDraft(tokens, n_min, n_max, k, out).
  bool Draft(std::span<const int32_t> tokens, int64_t k, std::vector<int32_t>* out);
  int64_t collisions() const { return collisions_; }

 private:
  static uint64_t Hash(std::span<const int32_t> gram);
  int64_t n_min_, n_max_;
  int64_t indexed_ = 0;  // tokens [0, indexed_) are in the maps (as followers of earlier n-grams)
  int32_t last_ = 0;     // tokens[indexed_ - 1]
  std::vector<std::unordered_map<uint64_t, int64_t>> latest_;  // [n - n_min]: hash → latest start
  int64_t collisions_ = 0;
};

}  // namespace gyre
