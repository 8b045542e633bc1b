#include "structured/token_trie.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "tokenizer/tokenizer.h"

namespace gyre::structured {

namespace {
constexpr size_t kMaxTokenBytes = 65535;  // depth_ is 16-bit
}

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes, std::vector<int32_t> eos_ids, int64_t vocab)
    : vocab_(vocab), bytes_(static_cast<size_t>(vocab)), eos_(std::move(eos_ids)) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < vocab && i < static_cast<int64_t>(token_bytes.size()); ++i) {
    if (token_bytes[i].empty() || token_bytes[i].size() > kMaxTokenBytes || IsEos(static_cast<int32_t>(i))) continue;
    bytes_[i] = token_bytes[i];
    ids.push_back(static_cast<int32_t>(i));
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b] || (bytes_[a] == bytes_[b] && a < b); });
  std::vector<int32_t> path;  // node per depth along the previous token
  auto pop_to = [&](size_t depth) {
    while (path.size() > depth) {
      nodes_[path.back()].end = static_cast<int32_t>(nodes_.size());
      path.pop_back();
    }
  };
  const std::string* prev = nullptr;
  for (int32_t id : ids) {  // sorted: a node's tokens are consecutive in `ids`
    const std::string& s = bytes_[id];
    size_t lcp = 0;
    if (prev) {
      const size_t n = std::min(prev->size(), s.size());
      while (lcp < n && (*prev)[lcp] == s[lcp]) ++lcp;
    }
    pop_to(lcp);
    for (size_t d = lcp; d < s.size(); ++d) {
      path.push_back(static_cast<int32_t>(nodes_.size()));
      Node n;
      n.byte = static_cast<uint8_t>(s[d]);
      n.depth = static_cast<uint16_t>(d + 1);
      nodes_.push_back(n);
    }
    max_depth_ = std::max<int>(max_depth_, static_cast<int>(s.size()));
    Node& at = nodes_[path.back()];
    if (at.num_tok == 0) at.tok_first = static_cast<int32_t>(tokens_.size());
    if (at.num_tok < UINT16_MAX) {
      tokens_.push_back(id);
      ++at.num_tok;
    }
    prev = &s;
  }
  pop_to(0);
}

std::shared_ptr<const TokenTrie> TokenTrie::FromTokenizer(const Tokenizer& tok, int64_t vocab,
                                                          std::vector<int32_t> eos_ids) {
  std::vector<std::string> bytes(static_cast<size_t>(vocab));
  const int64_t n = std::min<int64_t>(vocab, tok.vocab_size());
  for (int64_t i = 0; i < n; ++i)
    if (!tok.IsSpecial(static_cast<int32_t>(i))) bytes[i] = tok.TokenBytes(static_cast<int32_t>(i));
  return std::make_shared<const TokenTrie>(bytes, std::move(eos_ids), vocab);
}

bool TokenTrie::IsEos(int32_t id) const { return std::find(eos_.begin(), eos_.end(), id) != eos_.end(); }

const std::string& TokenTrie::Bytes(int32_t id) const {
  static const std::string kNone;
  return id >= 0 && id < vocab_ ? bytes_[id] : kNone;
}

void TokenTrie::Mask(const ByteDfa& dfa, int32_t state, std::span<uint32_t> words) const {
  std::fill(words.begin(), words.end(), 0u);
  std::vector<int32_t> st(static_cast<size_t>(max_depth_) + 1);
  st[0] = state;
  const int32_t n = static_cast<int32_t>(nodes_.size());
  const Node* nodes = nodes_.data();
  for (int32_t i = 0; i < n;) {
    const Node& nd = nodes[i];
    const int32_t s = dfa.Next(st[nd.depth - 1], nd.byte);
    if (s == ByteDfa::kDead) {
      i = nd.end;
      continue;
    }
    st[nd.depth] = s;
    for (int32_t k = nd.tok_first; k < nd.tok_first + nd.num_tok; ++k) words[tokens_[k] >> 5] |= 1u << (tokens_[k] & 31);
    ++i;
  }
  if (dfa.Accepting(state))
    for (int32_t e : eos_)
      if (e >= 0 && e < vocab_) words[e >> 5] |= 1u << (e & 31);
}

}  // namespace gyre::structured
