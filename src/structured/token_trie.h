// TokenTrie: the byte strings of a model's vocabulary in a trie stored in depth-first order, so
// that the set of tokens a ByteDfa allows from a state is one pass over the trie that skips every
// subtree whose prefix is already dead (a mask is a trie walk, not a scan of every token times its
// length).
//
// Tokens with no bytes (holes in the vocabulary, ids past the tokenizer's vocabulary) and special
// tokens are never allowed, except the EOS ids, which a mask allows exactly at accepting states.
// Immutable after construction; safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "structured/byte_dfa.h"

namespace gyre {
class Tokenizer;
}

namespace gyre::structured {

class TokenTrie {
 public:
  // token_bytes[id] for ids [0, vocab) (empty: never allowed; ids past its end likewise).
  TokenTrie(const std::vector<std::string>& token_bytes, std::vector<int32_t> eos_ids, int64_t vocab);
  // From a tokenizer (TokenBytes of every non-special id) for a model of `vocab` ids.
  static std::shared_ptr<const TokenTrie> FromTokenizer(const Tokenizer& tok, int64_t vocab,
                                                        std::vector<int32_t> eos_ids);

  int64_t vocab() const { return vocab_; }
  int64_t mask_words() const { return (vocab_ + 31) / 32; }
  int64_t num_nodes() const { return static_cast<int64_t>(nodes_.size()); }
  const std::vector<int32_t>& eos_ids() const { return eos_; }
  bool IsEos(int32_t id) const;
  // The bytes of `id` ("" for a token that is never allowed).
  const std::string& Bytes(int32_t id) const;

  // words ← the tokens allowed from `state` of `dfa` (bit id % 32 of words[id / 32]); the EOS ids
  // iff the state accepts. REQUIRES: words.size() == mask_words(), state valid.
  void Mask(const ByteDfa& dfa, int32_t state, std::span<uint32_t> words) const;

 private:
  int64_t vocab_;
  std::vector<std::string> bytes_;  // [vocab]
  std::vector<int32_t> eos_;
  // Nodes in depth-first pre-order (the root is implicit), packed so that a walk reads one array.
  struct Node {
    int32_t end = 0;        // one past the last node of its subtree
    int32_t tok_first = 0;  // tokens_[tok_first .. tok_first + num_tok) end at this node
    uint16_t num_tok = 0;
    uint16_t depth = 0;     // 1 + the depth of its parent
    uint8_t byte = 0;       // the edge byte into the node
  };
  std::vector<Node> nodes_;
  std::vector<int32_t> tokens_;
  int max_depth_ = 0;
};

}  // namespace gyre::structured
