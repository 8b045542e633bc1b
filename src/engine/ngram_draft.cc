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

}  // namespace gyre
