// Added tokens of tokenizer.json (internal): tokens such as "<|im_start|>" that are matched in
// the text before normalization and BPE, as HF's AddedVocabulary does.
//
//   * Ids are assigned as HF assigns them on load (the "id" field is only checked for type): a
//     content already in the model vocab keeps that id; otherwise the next id after the model
//     vocab / the largest added id. For well-formed files this equals the "id" field.
//   * Tokens with normalized=false are matched on the raw text; the remaining text is then
//     normalized and tokens with normalized=true are matched on it (against their normalized
//     content).
//   * Matching is leftmost-longest and non-overlapping. single_word drops a match that touches a
//     word char; lstrip/rstrip extend a match over the whitespace to its left/right. With
//     parse_special=false, special tokens are matched but then left in the text.
//
// Thread safety: immutable after construction; all const methods may be called concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "tokenizer/bpe.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizer.h"

namespace gyre::tok {

struct AddedToken {
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

// A piece of text after splitting on added tokens: [begin, end) bytes and the added token id,
// or -1 for plain text.
struct Segment {
  size_t begin, end;
  int32_t id;
};

class AddedVocabulary {
 public:
  // Parses the "added_tokens" array `j` (null means none). `model` and `normalizer` are used to
  // assign ids and normalize contents. Errors: InvalidArgument naming the entry.
  static Result<AddedVocabulary> FromJson(const Json& j, const std::string& path,
                                          const BpeModel& model, const Normalizer& normalizer);

  // Pass 1: splits raw `text` on the normalized=false tokens.
  void SplitRaw(std::string_view text, bool parse_special, std::vector<Segment>* out) const {
    raw_.Split(text, *this, parse_special, out);
  }
  // Pass 2: splits normalized `text` on the normalized=true tokens.
  void SplitNormalized(std::string_view text, bool parse_special, std::vector<Segment>* out) const {
    normalized_.Split(text, *this, parse_special, out);
  }

  // id -> token, for every added id.
  const std::unordered_map<int32_t, AddedToken>& tokens_by_id() const { return by_id_; }
  std::optional<int32_t> TokenToId(std::string_view content) const;
  // True iff `content` is the content of a special token.
  bool IsSpecialContent(const std::string& content) const { return special_.count(content) > 0; }

 private:
  // Leftmost-longest matcher over a fixed set of patterns.
  class Matcher {
   public:
    void Add(std::string pattern, int32_t id);
    void Finish();  // call after the last Add
    void Split(std::string_view text, const AddedVocabulary& vocab, bool parse_special,
               std::vector<Segment>* out) const;

   private:
    std::vector<std::pair<std::string, int32_t>> patterns_;
    std::array<std::vector<uint32_t>, 256> by_first_byte_;  // indices, longest first
  };

  Status Add(const AddedToken& token, const BpeModel& model);

  // Key of a token for HF's "an identical token is already added" check.
  static std::string Key(const AddedToken& t);

  std::unordered_map<std::string, int32_t> by_content_;
  int64_t max_added_id_ = -1;  // the largest value in by_content_ (ids only ever get added)
  std::unordered_map<int32_t, AddedToken> by_id_;
  std::unordered_set<std::string> by_id_keys_;  // Key() of every value of by_id_
  std::unordered_set<std::string> special_;
  std::vector<AddedToken> special_order_, plain_order_;  // HF's special_tokens / added_tokens
  Matcher raw_, normalized_;
};

}  // namespace gyre::tok
