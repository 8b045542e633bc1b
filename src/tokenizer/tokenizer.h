// Tokenizer: HuggingFace `tokenizer.json` byte-level BPE (the format GLM, Qwen, Llama-3 and the
// gyre fixtures use).
//
// Pipeline for Encode: added/special tokens are matched first (longest match, left to right) and
// emitted as their ids; the text between them goes through the normalizer (NFC), the
// pre-tokenizers (Split with a PCRE2 regex, then ByteLevel byte->unicode mapping) and BPE merges.
// Decode maps ids back through the ByteLevel decoder. The `post_processor` is ignored: Encode
// never adds BOS/EOS (callers add them from TokenizerConfig).
//
// Supported tokenizer.json subset (anything else is InvalidArgument naming the field):
//   normalizer     null | NFC | NFD | NFKC | NFKD | Sequence of those
//   pre_tokenizer  null | ByteLevel | Split (Regex or String pattern, any behavior, invert) |
//                  Sequence of those. Regexes use Oniguruma syntax as in HF, run with PCRE2.
//   model          BPE (dropout null/0, no continuing_subword_prefix / end_of_word_suffix)
//   decoder        ByteLevel, or a Sequence holding only ByteLevel
//   added_tokens   ids are assigned as HF assigns them on load (equal to the "id" fields for any
//                  well-formed file); single_word, lstrip, rstrip and normalized are honoured.
//
// Thread safety: a Tokenizer is immutable after construction (its internal BPE word cache is
// guarded by a mutex); all const methods may be called concurrently. A StreamDecoder is not
// thread-safe (one per stream).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gyre {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads `path`, which is a tokenizer.json file or a model folder holding one.
  // Errors: NotFound (no file), InvalidArgument (malformed JSON, unsupported model/normalizer/
  // pre-tokenizer/decoder type: the message names the field).
  static Result<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  // Same, from the JSON text itself.
  static Result<std::unique_ptr<Tokenizer>> FromJson(std::string_view json_text);

  // Encodes UTF-8 `text`. When `parse_special` is false, special added tokens are treated as
  // plain text (non-special added tokens still match). Errors: InvalidArgument if `text` is not
  // valid UTF-8; ResourceExhausted if a pre-tokenizer regex hits PCRE2's match limit (only
  // pathological patterns do).
  virtual Result<std::vector<int32_t>> Encode(std::string_view text, bool parse_special = true) const = 0;

  // Decodes ids to UTF-8 text. Invalid byte sequences become U+FFFD exactly as Rust's
  // String::from_utf8_lossy does (as HF does). With `skip_special`, special tokens are dropped.
  // An id inside the range that names no token (a hole in the vocab) decodes to nothing.
  // Errors: InvalidArgument if an id is outside [0, vocab_size()).
  virtual Result<std::string> Decode(std::span<const int32_t> ids, bool skip_special = false) const = 0;

  // Raw bytes of one token after the ByteLevel decoder (may be a partial UTF-8 sequence).
  // Added tokens give their content; like HF, a content made only of ByteLevel-alphabet chars
  // is mapped through it too (for "<|im_end|>" that is the content itself). Empty for an
  // invalid id.
  virtual std::string TokenBytes(int32_t id) const = 0;

  // One past the largest id (vocab + added tokens).
  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> TokenToId(std::string_view token) const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;
};

// Incremental detokenization for streaming: Push returns the text that became complete with this
// token, never half a UTF-8 character; Flush returns what is left (invalid tails as U+FFFD).
// The concatenation of all Push results and Flush equals Tokenizer::Decode of all ids (with the
// same skip_special). An invalid id contributes nothing. `tokenizer` must outlive the decoder.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  std::string Push(int32_t id);
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete UTF-8 character
};

// What gyre reads from tokenizer_config.json (missing or null fields leave defaults).
struct TokenizerConfig {
  // Each is a string or an AddedToken object {"content": ...} in the file.
  std::optional<std::string> bos_token, eos_token, pad_token;
  bool add_bos_token = false;
  // A string, or from a list of {"name", "template"} the one named "default"; empty when absent.
  std::string chat_template;
  // 0 when absent; "no limit" values (HF writes 1e30) saturate at INT64_MAX.
  int64_t model_max_length = 0;
};
// Reads `dir`/tokenizer_config.json. NotFound if absent; InvalidArgument if malformed (the
// message names the field).
Result<TokenizerConfig> LoadTokenizerConfig(const std::string& dir);

}  // namespace gyre
