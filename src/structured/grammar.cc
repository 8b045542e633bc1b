#include "structured/grammar.h"

#include <algorithm>

#include "structured/json_schema.h"
#include "structured/regex.h"

namespace gyre::structured {

Result<std::string> SpecRegex(const ConstraintSpec& spec) {
  switch (spec.kind) {
    case ConstraintSpec::Kind::kRegex: return spec.regex;
    case ConstraintSpec::Kind::kChoice: {
      if (spec.choices.empty()) return Status::InvalidArgument("the choice list is empty");
      std::string o;
      for (size_t i = 0; i < spec.choices.size(); ++i) o += (i ? "|" : "") + ("(" + RegexQuote(spec.choices[i]) + ")");
      return o;
    }
    case ConstraintSpec::Kind::kJsonSchema: return JsonSchemaRegex(spec.schema);
    case ConstraintSpec::Kind::kJsonObject: return JsonObjectRegex();
  }
  return Status::InvalidArgument("unknown constraint kind");
}

Result<std::shared_ptr<Grammar>> Grammar::Compile(const ConstraintSpec& spec, std::shared_ptr<const TokenTrie> trie) {
  GYRE_ASSIGN_OR_RETURN(std::string re, SpecRegex(spec));
  GYRE_ASSIGN_OR_RETURN(ByteDfa dfa, CompileRegex(re));
  return std::make_shared<Grammar>(std::move(dfa), std::move(trie));
}

bool Grammar::Mask(int32_t state, std::span<uint32_t> words) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = cache_.find(state);
    if (it != cache_.end()) {
      std::copy(it->second.begin(), it->second.end(), words.begin());
      return std::any_of(words.begin(), words.end(), [](uint32_t w) { return w != 0; });
    }
  }
  trie_->Mask(dfa_, state, words);
  {
    std::lock_guard<std::mutex> l(mu_);
    const int64_t bytes = static_cast<int64_t>(words.size()) * 4;
    if (cache_bytes_ + bytes <= kMaskCacheBytes) {
      cache_.emplace(state, std::vector<uint32_t>(words.begin(), words.end()));
      cache_bytes_ += bytes;
    }
  }
  return std::any_of(words.begin(), words.end(), [](uint32_t w) { return w != 0; });
}

bool GrammarConstraint::FillMask(std::span<uint32_t> words) {
  if (ended_) {
    std::fill(words.begin(), words.end(), 0u);
    return false;
  }
  return g_->Mask(state_, words);
}

Status GrammarConstraint::Accept(int32_t id) {
  const TokenTrie& t = g_->trie();
  if (ended_) return Status::InvalidArgument("token " + std::to_string(id) + " after the end of a constrained output");
  if (t.IsEos(id)) {
    if (!g_->dfa().Accepting(state_))
      return Status::InvalidArgument("end of sequence before the constrained output is complete");
    ended_ = true;
    return Status::Ok();
  }
  const std::string& b = t.Bytes(id);
  const int32_t next = b.empty() ? ByteDfa::kDead
                                 : g_->dfa().Walk(state_, reinterpret_cast<const uint8_t*>(b.data()), b.size());
  if (next == ByteDfa::kDead)
    return Status::InvalidArgument("token " + std::to_string(id) + " does not continue the constrained output");
  state_ = next;
  return Status::Ok();
}

bool GrammarConstraint::Complete() const {
  return ended_ || (g_->dfa().Accepting(state_) && !g_->dfa().HasExit(state_));
}

}  // namespace gyre::structured
