// SequenceImage: one sequence's cache as host bytes, the unit a prefill instance hands to a
// decode instance (docs/disaggregation.md). For a hybrid model the cache is two things and both
// travel: the DSA/MLA pages (latent, k_rot, indexer keys of every attention layer; one host image
// per page) and the slot's KDA state (conv tails and recurrent states of every KDA layer).
//
// ExportSequence / ImportSequence go through the runner seam (ModelRunner::ReadPages, ...), so
// they are ordered like steps: an export after the last prefill step is launched sees every
// layer of that step (whole-sequence granularity; no per-layer hook yet).
// Thread safety: the functions drive a runner, so they run on the runner's (engine) thread;
// ExportFinishedSequence may run on any thread (ModelRunner::ReadFinished's contract).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "runtime/model_runner.h"

namespace gyre::transfer {

// What the bytes mean: a receiver imports only an image of its own format (same backend, page
// size, byte sizes and model).
struct CacheFormat {
  std::string backend;           // ModelRunner::backend()
  int64_t page_tokens = 0;
  int64_t bytes_per_page = 0;
  int64_t bytes_per_slot = 0;
  uint64_t model_fingerprint = 0;  // XXH64 of the cache-shaping config fields
  bool operator==(const CacheFormat&) const = default;
  std::string ToString() const;
};

CacheFormat FormatOf(const ModelRunner& runner);

struct SequenceImage {
  CacheFormat format;
  int64_t num_tokens = 0;    // tokens whose rows are in the pages and whose state is in `state`
  int32_t next_token = -1;   // the token the prefill sampled (the decode's first input); -1: none
  // Its log-probability and the request's top_logprobs alternatives (best first), as the prefill
  // instance's engine reported them: the decode instance emits them with the token, so a client
  // asking for logprobs gets the first token's too.
  float next_logprob = 0;
  std::vector<std::pair<int32_t, float>> next_top;
  std::vector<std::vector<std::byte>> pages;  // ceil(num_tokens / page_tokens) × bytes_per_page
  std::vector<std::byte> state;               // bytes_per_slot

  int64_t num_bytes() const;
  bool operator==(const SequenceImage&) const = default;
};

// Pages needed for `num_tokens` tokens at `page_tokens` per page (0 when bytes_per_page is 0: a
// model without attention layers has no pages).
int64_t PagesFor(const CacheFormat& f, int64_t num_tokens);

// The image of the sequence in `slot` holding `num_tokens` (>= 1) tokens in `pages` (its block
// table; at least PagesFor(num_tokens) entries, only those are read). Reads nothing else and
// frees nothing. InvalidArgument for bad ids or a short block table; Internal (device).
Result<SequenceImage> ExportSequence(ModelRunner& runner, SlotId slot, std::span<const PageId> pages,
                                     int64_t num_tokens, int32_t next_token);

// The same image through ModelRunner::ReadFinished, from any thread (the transfer thread of a
// prefill instance), without waiting for steps in flight. REQUIRES: every step of the sequence has
// been collected and nothing writes its pages or slot until this returns (the engine holds an
// exported sequence). Unimplemented unless runner.ReadsFinishedConcurrently().
Result<SequenceImage> ExportFinishedSequence(ModelRunner& runner, SlotId slot, std::span<const PageId> pages,
                                             int64_t num_tokens, int32_t next_token);

// Writes `image` into `slot` and `pages` (the receiver's ids, at least image.pages.size()): the
// slot then holds a sequence of image.num_tokens tokens, and the next piece continues it with
// start == num_tokens. InvalidArgument when the image's format is not the runner's, or when its
// sizes disagree with its format; the runner's errors otherwise. On failure the slot holds no
// sequence the engine may continue (its contents are unspecified).
Status ImportSequence(ModelRunner& runner, const SequenceImage& image, SlotId slot, std::span<const PageId> pages);

// Checks an image against its own format: page count for num_tokens, page and state sizes.
Status ValidateImage(const SequenceImage& image);

}  // namespace gyre::transfer
