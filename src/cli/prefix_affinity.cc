#include "cli/prefix_affinity.h"

#include <xxhash.h>

#include <algorithm>

namespace gyre::cli {

std::string PromptKey(const nlohmann::json& body) {
  if (!body.is_object()) return "";
  std::string key = body.value("model", "");
  key += '\x1d';
  const auto m = body.find("messages");
  if (m != body.end() && m->is_array()) {
    if (auto t = body.find("tools"); t != body.end()) key += t->dump();
    key += '\x1d';
    for (const auto& msg : *m) {
      if (!msg.is_object()) return "";
      key += msg.value("role", "");
      key += '\x1f';
      if (auto c = msg.find("content"); c != msg.end()) key += c->is_string() ? c->get<std::string>() : c->dump();
      if (auto tc = msg.find("tool_calls"); tc != msg.end()) key += tc->dump();
      key += '\x1e';
    }
    return key;
  }
  const auto p = body.find("prompt");
  if (p == body.end()) return "";
  if (p->is_string()) return key + p->get<std::string>();
  if (p->is_array() && !p->empty() && p->front().is_number_integer()) {  // token ids
    for (const auto& id : *p) key += std::to_string(id.is_number_integer() ? id.get<int64_t>() : -1) + ',';
    return key;
  }
  return "";  // a batch of prompts: each is its own choice upstream; no affinity
}

std::vector<uint64_t> BlockChain(std::string_view key, size_t block_bytes) {
  std::vector<uint64_t> chain;
  if (block_bytes == 0) return chain;
  uint64_t h = 0;
  for (size_t at = 0; at + block_bytes <= key.size(); at += block_bytes) {
    h = XXH64(key.data() + at, block_bytes, h);
    chain.push_back(h);
  }
  return chain;
}

PrefixAffinity::PrefixAffinity(size_t num_instances, PrefixAffinityOptions o) : o_(o), tables_(num_instances) {}

size_t PrefixAffinity::Match(size_t instance, const std::vector<uint64_t>& chain) const {
  const Table& t = tables_[instance];
  size_t n = 0;
  while (n < chain.size() && t.where.count(chain[n])) ++n;
  return n;
}

void PrefixAffinity::Record(size_t instance, const std::vector<uint64_t>& chain) {
  Table& t = tables_[instance];
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    if (auto w = t.where.find(*it); w != t.where.end()) {
      t.lru.splice(t.lru.begin(), t.lru, w->second);
    } else {
      t.lru.push_front(*it);
      t.where.emplace(*it, t.lru.begin());
    }
  }
  while (t.lru.size() > o_.max_blocks_per_instance) {
    t.where.erase(t.lru.back());
    t.lru.pop_back();
  }
}

void PrefixAffinity::Forget(size_t instance) {
  tables_[instance].lru.clear();
  tables_[instance].where.clear();
}

PrefixAffinity::Choice PrefixAffinity::Choose(const std::vector<Candidate>& candidates,
                                              const std::vector<uint64_t>& chain) const {
  const Candidate* least = &candidates.front();
  for (const Candidate& c : candidates)
    if (c.load < least->load) least = &c;
  const Candidate* best = nullptr;
  size_t best_match = 0;
  for (const Candidate& c : candidates) {
    if (c.load > least->load + o_.balance_slack) continue;
    const size_t m = Match(c.instance, chain);
    if (m > best_match || (m == best_match && best && m > 0 && c.load < best->load)) {
      best = &c;
      best_match = m;
    }
  }
  if (best && best_match >= std::max<size_t>(o_.min_match_blocks, 1))
    return {best->instance, best_match, true};
  return {least->instance, Match(least->instance, chain), false};
}

}  // namespace gyre::cli
