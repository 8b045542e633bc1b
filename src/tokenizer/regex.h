// PCRE2-backed regex for tokenizer.json Split patterns (internal).
//
// HF tokenizers compiles "Regex" patterns with Oniguruma (Ruby syntax). We compile them with
// PCRE2 (UTF + UCP, JIT when available) after a small translation that keeps the semantics the
// GPT-2-family patterns rely on:
//   * `\s` / `\S` use Oniguruma's whitespace set (PCRE2's lacks U+0085 and adds U+180E);
//   * `\w` / `\W` use Oniguruma's word set (Letter, Mark, Number, Connector_Punctuation);
//   * `\h` / `\H` are hex digits, as in Ruby syntax;
//     (inside a bracket class without Other_Number, as Oniguruma does);
//   (`\S`, `\W`, `\H` inside a bracket class and `\b` keep PCRE2's meaning);
//   * `^` and `$` match at line boundaries (Ruby semantics: PCRE2_MULTILINE).
// Matches are iterated like the `onig` crate's find_iter: after a match ending at e, an empty
// match at e is skipped and the search resumes one char later.
//
// Thread safety: a Regex is immutable after construction; FindAll may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

struct pcre2_real_code_8;
struct pcre2_real_match_context_8;

namespace gyre::tok {

// [begin, end) byte offsets of one match.
using MatchRange = std::pair<size_t, size_t>;

class Regex {
 public:
  // Compiles an Oniguruma-syntax pattern. Errors: InvalidArgument with PCRE2's message and the
  // offset in the pattern.
  static Result<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  // Compiles a literal string (tokenizer.json {"String": ...}); the empty string matches the
  // empty string everywhere, as HF's escaped regex does.
  static Result<std::unique_ptr<Regex>> Literal(std::string_view text);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Replaces `*matches` with the successive matches in `text`.
  // REQUIRES: `text` is valid UTF-8.
  // Errors: ResourceExhausted when PCRE2's match or heap limit is hit (pathological pattern),
  // Internal for any other PCRE2 failure. `*matches` is unspecified on error.
  Status FindAll(std::string_view text, std::vector<MatchRange>* matches) const;

 private:
  Regex(pcre2_real_code_8* code, pcre2_real_match_context_8* mctx)
      : code_(code), mctx_(mctx) {}
  static Result<std::unique_ptr<Regex>> Build(std::string_view pattern, uint32_t options);

  // Constant after construction.
  pcre2_real_code_8* code_;
  pcre2_real_match_context_8* mctx_;
};

// The Oniguruma -> PCRE2 translation described above (exposed for tests).
std::string TranslateOnigPattern(std::string_view pattern);

}  // namespace gyre::tok
