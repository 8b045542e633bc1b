// Normalizer stage of tokenizer.json: `null`, a Unicode normalization form (NFC, NFD, NFKC,
// NFKD, via utf8proc) or a Sequence of those (internal).
//
// Thread safety: immutable after parsing; Normalize may be called concurrently.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/json_util.h"

namespace gyre::tok {

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// `text` in normal form `form`. REQUIRES: `text` is valid UTF-8. Errors: Internal if utf8proc
// fails (it only does so on invalid input or allocation failure).
Result<std::string> ApplyNormalForm(std::string_view text, NormalForm form);

class Normalizer {
 public:
  // Parses the "normalizer" value `j` (may be null). Unknown types are InvalidArgument naming
  // `path` and the type.
  static Result<Normalizer> FromJson(const Json& j, const std::string& path);

  bool empty() const { return forms_.empty(); }
  // Applies every form in order. REQUIRES: `text` is valid UTF-8.
  Result<std::string> Normalize(std::string_view text) const;

 private:
  Status Add(const Json& j, const std::string& path, int depth);

  std::vector<NormalForm> forms_;
};

}  // namespace gyre::tok
