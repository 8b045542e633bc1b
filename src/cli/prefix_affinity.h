// Prefix-aware choice of a prefill instance for `gyre router` (docs/disaggregation.md, "Routing").
//
// A prefill instance with prefix caching prefills only what its cache does not hold (issue 15), so
// turn N+1 of a conversation is cheap only where turn N ran. The router cannot see the instances'
// caches token by token; like SGLang's cache-aware router it keeps its own approximate record of
// what it sent where: the request's prompt, as a canonical byte string (PromptKey), cut into blocks
// of `block_bytes`, each block named by the XXH64 chain of everything up to its end. Per instance,
// an LRU set of those names (at most `max_blocks_per_instance`: memory stays bounded however long
// the router runs). A request goes to the instance holding the longest run of its leading blocks
// when that run is at least `min_match_blocks` and that instance's load is within `balance_slack`
// requests of the least loaded candidate; otherwise to the least loaded (ties: the earlier listed,
// as without affinity). What the router records is what it routed, not what the instance kept: an
// instance that evicted or restarted is recognised only by its slower TTFT, never by a wrong answer
// (the instance's own cache decides what is reused; this only picks where to ask).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>
#include <nlohmann/json.hpp>

namespace gyre::cli {

struct PrefixAffinityOptions {
  size_t block_bytes = 256;                // prompt bytes per recorded block
  size_t max_blocks_per_instance = 1 << 16;  // LRU bound per instance (16 MiB of prompt text at 256 B)
  size_t min_match_blocks = 1;             // shorter matches are ignored
  int64_t balance_slack = 4;               // accept up to this many more requests than the least loaded
};

// The canonical prompt of an OpenAI request body, such that a conversation's next turn extends
// the previous turn's key: the model, then (chat) the tools and each message's role and content,
// or (completions) the prompt. Empty when the body has neither messages nor a string / id prompt.
std::string PromptKey(const nlohmann::json& body);

// Names of the full blocks of `key`: name i is the XXH64 of block i seeded with name i - 1.
std::vector<uint64_t> BlockChain(std::string_view key, size_t block_bytes);

class PrefixAffinity {
 public:
  PrefixAffinity(size_t num_instances, PrefixAffinityOptions o);

  struct Candidate {
    size_t instance;  // index given to Record / Match
    int64_t load;     // queued + running requests (as the router counts them)
  };
  struct Choice {
    size_t instance;
    size_t matched_blocks;  // leading blocks of the request recorded for that instance
    bool by_prefix;         // chosen for its match (false: the least loaded)
  };
  // The instance for a request whose blocks are `chain`; `candidates` is non-empty, in listed order.
  Choice Choose(const std::vector<Candidate>& candidates, const std::vector<uint64_t>& chain) const;
  // Leading blocks of `chain` recorded for `instance`.
  size_t Match(size_t instance, const std::vector<uint64_t>& chain) const;
  // Records that `instance` received a prompt with these blocks: they become its most recently used,
  // the first block most of all (so a prefix outlives its extensions); beyond the bound the least
  // recently used are dropped.
  void Record(size_t instance, const std::vector<uint64_t>& chain);
  // Forgets an instance's blocks (it restarted or became unreachable).
  void Forget(size_t instance);
  size_t Blocks(size_t instance) const { return tables_[instance].lru.size(); }
  const PrefixAffinityOptions& options() const { return o_; }

 private:
  struct Table {
    std::list<uint64_t> lru;  // front: most recent
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
  };
  PrefixAffinityOptions o_;
  std::vector<Table> tables_;
};

}  // namespace gyre::cli
