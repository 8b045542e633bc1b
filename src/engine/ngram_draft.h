// N-gram (prompt lookup) drafts for speculative decoding (docs/engine.md "Speculative decoding"):
// guesses a sequence's next tokens by finding its latest n-gram earlier in its own tokens and
// proposing what followed there. No model, no state: a pure function of the tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace gyre {

// For n from n_max down to n_min (>= 1): when the last n tokens of `tokens` also occur earlier,
// at the latest such occurrence that has a token after it, `out` ← up to k tokens that followed
// it (never past the end of `tokens`), and returns true. Returns false (out empty) when no n-gram
// of those lengths recurs or k < 1.
bool NgramDraft(std::span<const int32_t> tokens, int64_t n_min, int64_t n_max, int64_t k, std::vector<int32_t>* out);

}  // namespace gyre
