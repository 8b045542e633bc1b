// Pre-tokenizer stage of tokenizer.json (internal): Split, ByteLevel and Sequence.
//
//   Split      {"pattern": {"Regex": r} | {"String": s}, "behavior": b, "invert": bool}, with b one
//              of Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous (HF semantics:
//              matches and the gaps between them are both pieces).
//   ByteLevel  {"add_prefix_space": bool, "use_regex": bool}: prepends ' ' to a piece that does
//              not start with one, splits with the GPT-2 pattern when use_regex, then maps every
//              byte to the GPT-2 byte-level alphabet.
//   Sequence   {"pretokenizers": [...]}, applied in order to every piece.
//
// Thread safety: immutable after parsing; Apply may be called concurrently.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/json_util.h"

namespace gyre::tok {

// The pattern HF's ByteLevel uses when use_regex is true.
inline constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;

  // Parses the "pre_tokenizer" value `j`; null gives a stage that changes nothing. Errors:
  // InvalidArgument naming the field (unknown type, bad behavior, regex that does not compile).
  static Result<std::unique_ptr<PreTokenizer>> FromJson(const Json& j, const std::string& path);

  // Replaces each piece of `*pieces` by the pieces this stage splits it into, in order, dropping
  // empty ones. REQUIRES: every piece is valid UTF-8. Errors: those of Regex::FindAll; `*pieces`
  // is unspecified on error.
  virtual Status Apply(std::vector<std::string>* pieces) const = 0;
};

}  // namespace gyre::tok
