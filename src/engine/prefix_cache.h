// PrefixCache: the engine's bookkeeping of a hybrid prefix cache (docs/engine.md "Prefix
// caching"). It owns no storage: page ids come from the engine's page IdPool, checkpoint ids
// name the runner's checkpoint storage (ModelRunner::ReserveCheckpoints); what is in them is the
// runner's.
//
// Blocks. A block is page_tokens tokens at a block-aligned position of a sequence, held in one
// full page. Its key is a chain hash (the parent block's hash and its own tokens), and a cached
// block records its parent block and its tokens, so a lookup compares ids, never trusts a hash.
// A cached block is shared by reference count and never written: a sequence only writes
// positions past its cached prefix, which starts on a page boundary (no partial page is shared).
// Unreferenced cached blocks sit in an LRU and are evicted (with the blocks below them: a block
// is reachable only through its parent) when the engine needs pages, before it preempts.
//
// Checkpoints. A KDA checkpoint holds one slot's state (conv tails + recurrent states of every
// KDA layer) after the last token of a cached block, so a hit restores the state at that block's
// end and prefills only the rest. Checkpoints have their own pool (the byte budget / the runner's
// bytes_per_slot) and their own LRU, in which a checkpoint shadowed by a deeper one of its chain
// (attached later) is demoted to the front; a block loses its checkpoint when either is evicted. A model
// without KDA layers needs no state: every cached block is a restore point.
//
// Invariants (checked): every referenced block's parent is referenced (a sequence holds its whole
// chain), so evicting an unreferenced block never drops a referenced one.
// Thread safety: none; the engine thread owns it.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/memory_pools.h"

namespace gyre {

using CheckpointId = int32_t;

struct PrefixCacheStats {
  int64_t queried_tokens = 0;       // tokens looked up at admission
  int64_t hit_tokens = 0;           // of those, restored from the cache (state restored too)
  int64_t cached_blocks = 0;        // blocks in the index (referenced or not)
  int64_t evictable_blocks = 0;     // unreferenced cached blocks (pages the engine can take back)
  int64_t block_evictions = 0;
  int64_t checkpoints_used = 0, checkpoints_total = 0;
  int64_t checkpoint_evictions = 0;
};

class PrefixCache {
 public:
  // `pages`: the engine's page pool (outlives this); `num_checkpoints`: the runner's checkpoint
  // ids 0..num_checkpoints-1; `needs_state`: the model has KDA layers (a restore point needs a
  // checkpoint).
  PrefixCache(IdPool* pages, int64_t page_tokens, int64_t num_checkpoints, bool needs_state);
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // One sequence's view of the cache: the cached blocks it holds a reference on (block j of the
  // sequence is refs[j]; a block the sequence computed while an equal one was already cached
  // stays a private page of its block table, and the sequence references the cached one), and
  // how many of its blocks are settled.
  struct Seq {
    std::vector<PageId> refs;
    uint64_t generation = 0;  // Clear() ends publishing for sequences of an older generation
    bool stopped = false;     // a hash collision or a Clear(): publish no further blocks
  };

  struct Match {
    std::vector<PageId> pages;  // the block table's first pages (referenced for the caller)
    CheckpointId checkpoint = -1;
    int64_t tokens = 0;         // pages.size() * page_tokens
  };
  // The longest restorable prefix of tokens[0, limit): the indexed chain of full blocks, cut at
  // the deepest block with a checkpoint (any block when the model has no KDA layer). `seq`
  // (empty) then holds references on the returned pages; its checkpoint is marked recently used.
  // A miss returns tokens 0. Adds to queried_tokens / hit_tokens only via CountLookup.
  Match Acquire(std::span<const int32_t> tokens, int64_t limit, Seq* seq);
  // Counts an admission's lookup for /metrics (called once the restore is issued).
  void CountLookup(int64_t queried, int64_t hit);

  // Settles the sequence's blocks up to `num_blocks` full blocks whose tokens are known and whose
  // rows are written (or will be, in stream order, before any later step): each becomes a cached
  // block (its page from `block_table`, referenced by `seq`) or, when an equal block is already
  // cached, `seq` references that one.
  void Publish(Seq* seq, std::span<const int32_t> tokens, std::span<const PageId> block_table, int64_t num_blocks);
  // Whether `page` is a cached block (freed by Release, not by the caller).
  bool IsCached(PageId page) const { return meta_[page].managed; }
  // Drops the sequence's references (deepest first: they are evicted before their parents).
  void Release(Seq* seq);

  // The checkpoint of the sequence's settled block `j` (-1 when none); marks it recently used.
  CheckpointId CheckpointOf(const Seq& seq, int64_t j);
  // A free checkpoint id, evicting the least recently used attached one if none is free; -1 when
  // every checkpoint is held by a sequence (not attached yet).
  CheckpointId NewCheckpoint();
  // Attaches `ckpt` (from NewCheckpoint, saved by the runner) to the sequence's settled block j.
  // When the block has one already or is not the sequence's (stopped), `ckpt` is freed instead.
  void Attach(const Seq& seq, int64_t j, CheckpointId ckpt);
  // Detaches (if still attached to the sequence's block j) and frees `ckpt`.
  void Drop(const Seq& seq, int64_t j, CheckpointId ckpt);
  void FreeCheckpoint(CheckpointId ckpt);

  // Evicts unreferenced blocks (least recently used first) until `n` pages are free. Returns
  // whether they are.
  bool MakeFree(int64_t n);
  // Forgets every cached block and checkpoint (after a runner error: their contents are unknown).
  // Referenced blocks go back to the pool when released.
  void Clear();

  PrefixCacheStats stats() const;
  int64_t page_tokens() const { return page_tokens_; }

 private:
  struct Block {
    bool managed = false;  // a cached block (referenced or in the LRU); false: a free or private page
    bool indexed = false;  // reachable by lookup
    uint64_t hash = 0;
    PageId parent = -1;
    std::vector<int32_t> tokens;
    std::vector<PageId> children;
    int32_t refs = 0;
    std::list<PageId>::iterator lru;  // valid when indexed && refs == 0
    CheckpointId ckpt = -1;
  };
  struct Ckpt {
    PageId block = -1;  // attached to; -1 while held by a sequence
    bool used = false;
    std::list<CheckpointId>::iterator lru;  // valid when block >= 0
  };
  static uint64_t ChainHash(uint64_t parent, std::span<const int32_t> tokens);
  PageId Find(PageId parent, std::span<const int32_t> tokens) const;
  void Ref(PageId b);
  void Unref(PageId b);
  void Evict(PageId b);
  void DetachCheckpoint(PageId b);

  IdPool* pages_;
  const int64_t page_tokens_;
  const bool needs_state_;
  std::vector<Block> meta_;  // by page id
  std::unordered_map<uint64_t, PageId> index_;
  std::list<PageId> lru_;    // unreferenced indexed blocks, least recently used first
  std::vector<Ckpt> ckpts_;
  std::vector<CheckpointId> free_ckpts_;
  std::list<CheckpointId> ckpt_lru_;
  uint64_t generation_ = 1;
  PrefixCacheStats stats_;
};

}  // namespace gyre
