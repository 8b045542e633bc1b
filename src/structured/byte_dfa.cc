#include "structured/byte_dfa.h"

namespace gyre::structured {

ByteDfa::ByteDfa(std::vector<int32_t> next, std::vector<uint8_t> accepting)
    : next_(std::move(next)), accepting_(std::move(accepting)), has_exit_(accepting_.size(), 0) {
  for (size_t s = 0; s < accepting_.size(); ++s)
    for (int b = 0; b < 256 && !has_exit_[s]; ++b) has_exit_[s] = next_[s * 256 + b] != kDead;
}

int32_t ByteDfa::Walk(int32_t state, const uint8_t* bytes, size_t n) const {
  for (size_t i = 0; i < n && state != kDead; ++i) state = Next(state, bytes[i]);
  return state;
}

bool ByteDfa::Matches(std::string_view s) const {
  if (num_states() == 0) return false;
  const int32_t st = Walk(start(), reinterpret_cast<const uint8_t*>(s.data()), s.size());
  return st != kDead && Accepting(st);
}

}  // namespace gyre::structured
