// UTF-8 and Unicode helpers shared by the tokenizer stages (internal to src/tokenizer/).
//
// Validation and lossy decoding follow Rust's `str::from_utf8` / `String::from_utf8_lossy`
// exactly (HF tokenizers decodes with the latter): an invalid sequence is replaced by one U+FFFD
// per "maximal subpart" (the longest prefix of a valid sequence, at least one byte).
//
// Thread safety: all functions are pure and may be called concurrently.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gyre::tok {

// Result of reading one UTF-8 sequence at some offset.
struct Utf8Step {
  int len;         // bytes consumed: the whole char when valid, else the maximal subpart (>= 1)
  bool valid;      // true iff `len` bytes form one valid scalar value
  bool truncated;  // !valid and the input ended inside an otherwise valid prefix
};

// Reads the sequence starting at s[i]. REQUIRES: i < s.size().
Utf8Step NextUtf8(std::string_view s, size_t i);

// True iff `s` is well-formed UTF-8 (no overlongs, surrogates or values above U+10FFFF).
bool IsValidUtf8(std::string_view s);

// `bytes` as UTF-8, with each maximal invalid subpart replaced by U+FFFD (Rust from_utf8_lossy).
std::string Utf8Lossy(std::string_view bytes);

// Length of the suffix of `bytes` that is a valid but incomplete UTF-8 sequence (0..3): the
// bytes a streaming decoder must hold back because a later token may complete them.
size_t IncompleteUtf8Tail(std::string_view bytes);

// Decodes the char at s[*i] and advances *i. REQUIRES: s is valid UTF-8 and *i is a boundary.
char32_t DecodeUtf8(std::string_view s, size_t* i);
void AppendUtf8(char32_t cp, std::string* out);

// Unicode White_Space (Rust `char::is_whitespace`, regex `\s`).
bool IsWhiteSpace(char32_t cp);
// Rust regex `\w` (Alphabetic, Mark, Decimal_Number, Connector_Punctuation, Join_Control),
// approximated from the general category.
bool IsWordChar(char32_t cp);

}  // namespace gyre::tok
