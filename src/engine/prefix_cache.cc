#include "engine/prefix_cache.h"

#include <algorithm>

#include "core/status.h"

namespace gyre {

PrefixCache::PrefixCache(IdPool* pages, int64_t page_tokens, int64_t num_checkpoints, bool needs_state)
    : pages_(pages), page_tokens_(page_tokens), needs_state_(needs_state), meta_(pages->size()),
      ckpts_(needs_state ? num_checkpoints : 0) {
  for (int64_t i = static_cast<int64_t>(ckpts_.size()) - 1; i >= 0; --i) free_ckpts_.push_back(static_cast<CheckpointId>(i));
  stats_.checkpoints_total = static_cast<int64_t>(ckpts_.size());
}

uint64_t PrefixCache::ChainHash(uint64_t parent, std::span<const int32_t> tokens) {
  // splitmix64 over (parent, tokens): a key for the index only; Find compares the tokens.
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  };
  uint64_t h = mix(parent ^ 0x6a09e667f3bcc909ULL);
  for (int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

PageId PrefixCache::Find(PageId parent, std::span<const int32_t> tokens) const {
  const uint64_t ph = parent >= 0 ? meta_[parent].hash : 0;
  auto it = index_.find(ChainHash(ph, tokens));
  if (it == index_.end()) return -1;
  const Block& b = meta_[it->second];
  if (b.parent != parent || !std::equal(b.tokens.begin(), b.tokens.end(), tokens.begin(), tokens.end())) return -1;
  return it->second;
}

void PrefixCache::Ref(PageId p) {
  Block& b = meta_[p];
  if (b.refs++ == 0 && b.indexed) lru_.erase(b.lru);
}

void PrefixCache::Unref(PageId p) {
  Block& b = meta_[p];
  GYRE_CHECK(b.refs > 0);
  if (--b.refs > 0) return;
  if (b.indexed) {
    b.lru = lru_.insert(lru_.end(), p);
    return;
  }
  // Forgotten by Clear() while referenced: back to the pool now.
  DetachCheckpoint(p);
  b = Block{};
  pages_->Release(p);
}

PrefixCache::Match PrefixCache::Acquire(std::span<const int32_t> tokens, int64_t limit, Seq* seq) {
  Match m;
  seq->refs.clear();
  seq->generation = generation_;
  seq->stopped = false;
  std::vector<PageId> chain;
  int64_t usable = 0;  // blocks of `chain` up to the deepest restore point
  PageId parent = -1;
  for (int64_t j = 0; (j + 1) * page_tokens_ <= limit; ++j) {
    const PageId p = Find(parent, tokens.subspan(j * page_tokens_, page_tokens_));
    if (p < 0) break;
    chain.push_back(p);
    if (!needs_state_ || meta_[p].ckpt >= 0) usable = j + 1;
    parent = p;
  }
  chain.resize(usable);
  for (PageId p : chain) Ref(p);
  if (usable > 0 && needs_state_) {
    m.checkpoint = meta_[chain.back()].ckpt;
    Ckpt& c = ckpts_[m.checkpoint];
    ckpt_lru_.splice(ckpt_lru_.end(), ckpt_lru_, c.lru);
  }
  m.tokens = usable * page_tokens_;
  m.pages = chain;
  seq->refs = std::move(chain);
  return m;
}

void PrefixCache::CountLookup(int64_t queried, int64_t hit) {
  stats_.queried_tokens += queried;
  stats_.hit_tokens += hit;
}

void PrefixCache::Publish(Seq* seq, std::span<const int32_t> tokens, std::span<const PageId> block_table,
                          int64_t num_blocks) {
  if (seq->generation != generation_) seq->stopped = true;
  while (!seq->stopped && static_cast<int64_t>(seq->refs.size()) < num_blocks) {
    const int64_t j = static_cast<int64_t>(seq->refs.size());
    const PageId parent = j > 0 ? seq->refs.back() : -1;
    const std::span<const int32_t> blk = tokens.subspan(j * page_tokens_, page_tokens_);
    const PageId have = Find(parent, blk);
    if (have >= 0) {  // an equal block is cached: reference it (the sequence's page stays private)
      Ref(have);
      seq->refs.push_back(have);
      continue;
    }
    const uint64_t h = ChainHash(parent >= 0 ? meta_[parent].hash : 0, blk);
    if (index_.count(h)) {  // a different block under the same key: stop caching this sequence
      seq->stopped = true;
      break;
    }
    const PageId p = block_table[j];
    Block& b = meta_[p];
    GYRE_CHECK(!b.managed);
    b.managed = b.indexed = true;
    b.hash = h;
    b.parent = parent;
    b.tokens.assign(blk.begin(), blk.end());
    b.children.clear();
    b.refs = 1;
    b.ckpt = -1;
    if (parent >= 0) meta_[parent].children.push_back(p);
    index_[h] = p;
    seq->refs.push_back(p);
  }
}

void PrefixCache::Release(Seq* seq) {
  for (auto it = seq->refs.rbegin(); it != seq->refs.rend(); ++it) Unref(*it);
  seq->refs.clear();
}

CheckpointId PrefixCache::CheckpointOf(const Seq& seq, int64_t j) {
  if (j < 0 || j >= static_cast<int64_t>(seq.refs.size())) return -1;
  const CheckpointId c = meta_[seq.refs[j]].ckpt;
  if (c >= 0) ckpt_lru_.splice(ckpt_lru_.end(), ckpt_lru_, ckpts_[c].lru);
  return c;
}

CheckpointId PrefixCache::NewCheckpoint() {
  if (free_ckpts_.empty()) {
    if (ckpt_lru_.empty()) return -1;
    const CheckpointId victim = ckpt_lru_.front();
    DetachCheckpoint(ckpts_[victim].block);
    ++stats_.checkpoint_evictions;
  }
  if (free_ckpts_.empty()) return -1;
  const CheckpointId c = free_ckpts_.back();
  free_ckpts_.pop_back();
  ckpts_[c].used = true;
  ckpts_[c].block = -1;
  return c;
}

void PrefixCache::FreeCheckpoint(CheckpointId c) {
  Ckpt& k = ckpts_[c];
  GYRE_CHECK(k.used && k.block < 0);
  k.used = false;
  free_ckpts_.push_back(c);
}

void PrefixCache::Attach(const Seq& seq, int64_t j, CheckpointId c) {
  const bool mine = seq.generation == generation_ && j >= 0 && j < static_cast<int64_t>(seq.refs.size());
  if (!mine || meta_[seq.refs[j]].ckpt >= 0 || !meta_[seq.refs[j]].indexed) {
    FreeCheckpoint(c);
    return;
  }
  const PageId p = seq.refs[j];
  meta_[p].ckpt = c;
  ckpts_[c].block = p;
  ckpts_[c].lru = ckpt_lru_.insert(ckpt_lru_.end(), c);
  // The checkpoints above it in its chain are shadowed: a lookup through this block restores from
  // the deepest one, so they serve only prompts that leave the chain earlier. They go to the
  // front of the LRU (evicted first, nearest the root first), which keeps each conversation's
  // deepest checkpoint when several compete for a small budget (with plain LRU, the cyclic turns
  // of 4 conversations over 35 checkpoints evicted exactly the ones the next turn needed).
  for (PageId a = meta_[p].parent; a >= 0; a = meta_[a].parent) {
    if (meta_[a].ckpt >= 0) ckpt_lru_.splice(ckpt_lru_.begin(), ckpt_lru_, ckpts_[meta_[a].ckpt].lru);
  }
}

void PrefixCache::Drop(const Seq& seq, int64_t j, CheckpointId c) {
  if (j < 0 || j >= static_cast<int64_t>(seq.refs.size())) return;
  const PageId p = seq.refs[j];
  if (meta_[p].ckpt != c) return;  // evicted (and maybe reused) since
  DetachCheckpoint(p);
}

void PrefixCache::DetachCheckpoint(PageId p) {
  Block& b = meta_[p];
  if (b.ckpt < 0) return;
  Ckpt& k = ckpts_[b.ckpt];
  ckpt_lru_.erase(k.lru);
  k.block = -1;
  FreeCheckpoint(b.ckpt);
  b.ckpt = -1;
}

void PrefixCache::Evict(PageId p) {
  Block& b = meta_[p];
  GYRE_CHECK(b.refs == 0 && b.indexed);
  const std::vector<PageId> children = b.children;  // unreferenced too (a child's holder holds its parent)
  for (PageId c : children) Evict(c);
  if (b.parent >= 0) {
    auto& sib = meta_[b.parent].children;
    sib.erase(std::find(sib.begin(), sib.end(), p));
  }
  lru_.erase(b.lru);
  index_.erase(b.hash);
  DetachCheckpoint(p);
  b = Block{};
  pages_->Release(p);
  ++stats_.block_evictions;
}

bool PrefixCache::MakeFree(int64_t n) {
  while (pages_->num_free() < n && !lru_.empty()) Evict(lru_.front());
  return pages_->num_free() >= n;
}

void PrefixCache::Clear() {
  while (!lru_.empty()) {
    const PageId p = lru_.front();
    lru_.pop_front();
    Block& b = meta_[p];
    b.indexed = false;  // keeps Evict's recursion out: every block is handled here
    DetachCheckpoint(p);
    b = Block{};
    pages_->Release(p);
  }
  for (auto& [h, p] : index_) {  // the referenced rest: released by their holders
    Block& b = meta_[p];
    b.indexed = false;
    b.children.clear();
    DetachCheckpoint(p);
  }
  index_.clear();
  ++generation_;
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats s = stats_;
  s.cached_blocks = static_cast<int64_t>(index_.size());
  s.evictable_blocks = static_cast<int64_t>(lru_.size());
  s.checkpoints_used = static_cast<int64_t>(ckpts_.size() - free_ckpts_.size());
  return s;
}

}  // namespace gyre
