// Grammar-constrained decoding (docs/serve.md "Structured output"): a constraint spec (a regex, a
// choice list, a JSON schema, any JSON object) compiled to a ByteDfa over a model's vocabulary
// (TokenTrie), and the per-request TokenConstraint the engine drives.
//
// Why its own folder: it depends on the engine's TokenConstraint interface and the tokenizer, and
// the server depends on it; it is neither engine bookkeeping nor HTTP (serve → structured →
// engine).
//
// Masks: the set of allowed tokens depends only on the automaton state, so a Grammar caches the
// mask of each state it has reached (up to kMaskCacheBytes in all); a step's mask is a copy after
// the first visit and a trie walk (TokenTrie::Mask) before it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/token_constraint.h"
#include "structured/byte_dfa.h"
#include "structured/token_trie.h"

namespace gyre::structured {

struct ConstraintSpec {
  enum class Kind { kRegex, kChoice, kJsonSchema, kJsonObject };
  Kind kind = Kind::kRegex;
  std::string regex;                 // kRegex
  std::vector<std::string> choices;  // kChoice: the output is exactly one of them (non-empty list)
  nlohmann::json schema;             // kJsonSchema
};

// The regex a spec compiles to. InvalidArgument naming what is not supported.
Result<std::string> SpecRegex(const ConstraintSpec& spec);

// Compiled once per request; shared by its constraint. Thread-safe (the mask cache is locked).
class Grammar {
 public:
  static constexpr int64_t kMaskCacheBytes = 32 << 20;

  static Result<std::shared_ptr<Grammar>> Compile(const ConstraintSpec& spec, std::shared_ptr<const TokenTrie> trie);
  Grammar(ByteDfa dfa, std::shared_ptr<const TokenTrie> trie) : dfa_(std::move(dfa)), trie_(std::move(trie)) {}

  const ByteDfa& dfa() const { return dfa_; }
  const TokenTrie& trie() const { return *trie_; }
  // words ← the mask of `state` (cached). Returns whether any token is allowed.
  bool Mask(int32_t state, std::span<uint32_t> words);

 private:
  ByteDfa dfa_;
  std::shared_ptr<const TokenTrie> trie_;
  std::mutex mu_;
  std::map<int32_t, std::vector<uint32_t>> cache_;  // guarded by mu_
  int64_t cache_bytes_ = 0;                          // guarded by mu_
};

// A request's position in a grammar. Engine thread only (TokenConstraint).
class GrammarConstraint final : public TokenConstraint {
 public:
  explicit GrammarConstraint(std::shared_ptr<Grammar> g) : g_(std::move(g)), state_(g_->dfa().start()) {}
  bool FillMask(std::span<uint32_t> words) override;
  Status Accept(int32_t id) override;
  bool Complete() const override;
  int32_t state() const { return state_; }

 private:
  std::shared_ptr<Grammar> g_;
  int32_t state_;
  bool ended_ = false;  // EOS accepted
};

}  // namespace gyre::structured
