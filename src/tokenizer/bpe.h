// BPE model of tokenizer.json (internal): `vocab`, `merges` (either "a b" strings or [a, b]
// pairs), `unk_token`, `fuse_unk`, `byte_fallback`, `ignore_merges`. `dropout` must be null or 0
// and `continuing_subword_prefix` / `end_of_word_suffix` null or empty.
//
// Merging follows HF's Word::merge_all: repeatedly apply the lowest-rank merge, the leftmost
// one among equal ranks, until none applies. Results for words shorter than 256 bytes are cached.
//
// Thread safety: immutable after construction except the word cache, which is guarded by
// cache_mu_; Tokenize may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/json_util.h"

namespace gyre::tok {

// std::hash<std::string_view> made transparent so maps keyed by std::string can be searched
// with a std::string_view without allocating.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using VocabMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // Parses the "model" object. Errors: InvalidArgument naming the field: wrong types, negative
  // ids, a merge whose parts or result are not in the vocab, unsupported options.
  static Result<std::unique_ptr<BpeModel>> FromJson(const Json& j, const std::string& path);
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Appends the ids for `word` (one pre-token) to `*out`. A char missing from the vocab becomes
  // byte-fallback tokens, else unk_token, else is dropped (as in HF). Errors: InvalidArgument
  // when unk_token is needed but is not in the vocab.
  Status Tokenize(std::string_view word, std::vector<int32_t>* out) const;

  const VocabMap& vocab() const { return vocab_; }
  std::optional<int32_t> TokenToId(std::string_view token) const;

 private:
  BpeModel() = default;
  Status ParseMerges(const Json& merges, const std::string& path);
  Status MergeWord(std::string_view word, std::vector<int32_t>* out) const;

  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  // Constant after construction.
  VocabMap vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<std::string> unk_token_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;

  // Guarded by cache_mu_: word -> ids, cleared when it reaches kCacheCapacity entries.
  mutable std::shared_mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>>
      cache_;
};

}  // namespace gyre::tok
