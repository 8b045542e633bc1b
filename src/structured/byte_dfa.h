// ByteDfa: a deterministic automaton over bytes, the compiled form of every constraint (a regex,
// a choice list, a JSON schema). Built from a regex (structured/regex.h) by subset construction,
// then trimmed: a transition is kept only if the state it reaches can still reach an accepting
// state, so "not dead" means "some continuation completes the output".
//
// Immutable after construction; safe to share between threads.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace gyre::structured {

class ByteDfa {
 public:
  static constexpr int32_t kDead = -1;

  ByteDfa() = default;
  ByteDfa(std::vector<int32_t> next, std::vector<uint8_t> accepting);

  int32_t start() const { return 0; }
  int32_t num_states() const { return static_cast<int32_t>(accepting_.size()); }
  // The state after `byte` from `state` (kDead if no completion remains). REQUIRES: state valid.
  int32_t Next(int32_t state, uint8_t byte) const { return next_[static_cast<size_t>(state) * 256 + byte]; }
  bool Accepting(int32_t state) const { return accepting_[state] != 0; }
  // Some byte leads on from `state` (false: the output is complete at an accepting state).
  bool HasExit(int32_t state) const { return has_exit_[state] != 0; }
  // Runs `bytes` from `state`; kDead as soon as one byte has no transition.
  int32_t Walk(int32_t state, const uint8_t* bytes, size_t n) const;
  bool Matches(const std::string_view s) const;

 private:
  std::vector<int32_t> next_;       // [num_states * 256]
  std::vector<uint8_t> accepting_;  // [num_states]
  std::vector<uint8_t> has_exit_;   // [num_states]
};

}  // namespace gyre::structured
