// libFuzzer target: the speculative-decoding inputs a user controls — the text of
// `--speculative-config` (ParseSpeculativeConfig, engine/engine.h) — and the n-gram drafter
// (NgramDraft, engine/ngram_draft.h) over token sequences the model produced.
//
// First byte even: the rest is config text. Parsing must neither crash, hang, throw nor overflow
// (UBSan); a refusal is InvalidArgument; an accepted config has method "ngram" (the only one).
// First byte odd: bytes 1..3 are n_min, n_max and k (small, possibly 0), the rest tokens over a
// 4-symbol alphabet (so n-grams recur). NgramDraft must equal a brute-force definition: the
// longest n in [max(n_min, 1), min(n_max, size - 1)] whose final n-gram occurs earlier with a
// token after it, its latest such occurrence, and up to k tokens that followed (trap otherwise);
// NgramIndex (the incremental drafter the engine uses) must equal NgramDraft on every prefix.
//
// Run: scripts/fuzz.sh (seeds: src/engine/testdata/fuzz_speculative/).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/ngram_draft.h"

namespace {

// The definition, written the slow way: every (n, i) pair checked element by element.
bool ReferenceDraft(const std::vector<int32_t>& t, int64_t n_min, int64_t n_max, int64_t k, std::vector<int32_t>* out) {
  out->clear();
  const int64_t size = static_cast<int64_t>(t.size());
  if (k < 1) return false;
  for (int64_t n = n_max; n >= 1; --n) {
    if (n < n_min || n > size - 1) continue;
    int64_t best = -1;
    for (int64_t i = 0; i + n < size; ++i) {  // a token follows [i, i + n)
      if (i >= size - n) break;
      bool same = true;
      for (int64_t j = 0; j < n; ++j) same = same && t[i + j] == t[size - n + j];
      if (same) best = i;
    }
    if (best >= 0) {
      for (int64_t j = best + n; j < size && j < best + n + k; ++j) out->push_back(t[j]);
      return true;
    }
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if ((data[0] & 1) == 0) {
    const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
    auto r = gyre::ParseSpeculativeConfig(text);
    if (r.ok()) {
      if (r->method != "ngram") __builtin_trap();
    } else if (r.status().code() != gyre::StatusCode::kInvalidArgument) {
      __builtin_trap();
    }
    return 0;
  }
  if (size < 4) return 0;
  const int64_t n_min = data[1] % 8, n_max = data[2] % 8, k = data[3] % 8;
  std::vector<int32_t> tokens;
  for (size_t i = 4; i < size && tokens.size() < 512; ++i) tokens.push_back(data[i] % 4);
  std::vector<int32_t> got, want;
  const bool g = gyre::NgramDraft(tokens, n_min, n_max, k, &got);
  const bool w = ReferenceDraft(tokens, n_min, n_max, k, &want);
  if (g != w || got != want) __builtin_trap();
  if (g && (got.empty() || static_cast<int64_t>(got.size()) > k)) __builtin_trap();
  // The incremental index, fed every prefix in turn (as the engine feeds a growing sequence),
  // answers as NgramDraft at each length; then a shorter sequence (a rebuild) once more.
  gyre::NgramIndex index(n_min, n_max);
  std::vector<int32_t> a, b;
  for (size_t len = 0; len <= tokens.size(); ++len) {
    const std::span<const int32_t> prefix(tokens.data(), len);
    const bool x = index.Draft(prefix, k, &a);
    const bool y = gyre::NgramDraft(prefix, n_min, n_max, k, &b);
    if (x != y || a != b) __builtin_trap();
  }
  const std::span<const int32_t> half(tokens.data(), tokens.size() / 2);
  const bool x = index.Draft(half, k, &a);
  if (x != gyre::NgramDraft(half, n_min, n_max, k, &b) || a != b) __builtin_trap();
  return 0;
}
