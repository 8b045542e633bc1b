// Correctness at length (issue 22 item 2), where no reference can run the whole prompt: the model
// is checked against itself through the runner seam (runtime/model_runner.h), on any backend.
//
//  1. Chunk-size invariance: the same random prompt of `tokens` ids is prefilled once per entry of
//     `chunks` (pieces of that many tokens). The last token's logits and the slot's KDA state image
//     (every KDA layer's conv tails and recurrent states, compared as fp32 values) of each run are
//     compared with the first run's (rel-L2, max |diff|, same argmax).
//  2. Decode vs prefill at the end of the prompt: the first tokens−tail tokens are prefilled in
//     pieces of chunks[0] and the slot's KDA state checkpointed; then the last `tail` tokens run as
//     one piece with the logits of every row, and, from the checkpoint in a second slot (sharing the
//     prefix's full pages, the partial page copied), one decode step per token. Row j of the piece
//     is compared with decode step j, and the two final KDA states with each other.
//  3. The same at the start of the prompt: the first `head` tokens as one all-logits piece vs one
//     token at a time from position 0.
//
// The pass rule is rel-L2 against the given tolerances, which the caller states per weight and
// cache dtype (docs/feedback.md "Correctness at length"): summation order differs between chunkings
// (piece boundaries) and between the prefill and decode kernels, so runs are close, not bit-equal.
// Decoded rows are gated twice: the median row against logits_tol (the rounding noise of every row)
// and the worst row against worst_tol (with bf16 operands a rounding difference can flip a discrete
// choice — an expert of the router's top-k, a pool of the indexer's — and move one row far more;
// docs/feedback.md gives the measured spread). Argmax agreement is reported, not gated.
// Also reported: seconds and tokens/s of every prefill, and the decode steps' median time at the end
// of the prompt (a step with the logits copied back, eager).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "runtime/model_runner.h"

namespace gyre::feedback {

struct LengthCheckOptions {
  int64_t tokens = 4096;             // prompt length
  std::vector<int64_t> chunks;       // prefill piece sizes (>= 1 entry); chunks[0] is the reference
  int64_t tail = 32;                 // 0: skip check 2
  int64_t head = 16;                 // 0: skip check 3
  uint64_t seed = 22;                // prompt ids
  double logits_tol = 1e-3;          // rel-L2 limits: last logits of each chunking, KDA states, and the
  double state_tol = 1e-3;           // median decoded row
  double worst_tol = 1e-3;           // rel-L2 limit of the worst decoded row
};

struct LengthChunkRow {
  int64_t chunk = 0;
  double seconds = 0, tokens_per_s = 0;
  double logits_rel_l2 = 0, logits_max_abs = 0, state_rel_l2 = 0, state_max_abs = 0;
  bool argmax_same = true;
};

struct LengthDecodeRow {
  std::string where;                 // "tail" or "head"
  int64_t pos0 = 0, n = 0;           // positions [pos0, pos0 + n)
  double worst_rel_l2 = 0;           // over the n rows
  double median_rel_l2 = 0;
  std::vector<double> row_rel_l2;    // per row, in order
  int64_t argmax_agree = 0;          // rows whose argmax is the same
  double state_rel_l2 = 0;           // final KDA states (tail only; 0 otherwise)
  double decode_step_ms_median = 0;  // per decode step, logits copied back
};

struct LengthCheckReport {
  LengthCheckOptions options;
  std::string backend;
  int64_t vocab = 0, state_floats = 0;
  std::vector<LengthChunkRow> chunks;
  std::vector<LengthDecodeRow> decode;
  bool pass = false;
  std::vector<std::string> failures;  // one line per tolerance broken
  nlohmann::json Json() const;
  std::string Human() const;
};

// Needs a runner with >= 2 slots, pages for tokens + tail + 2 pages' worth of tokens, and
// max_step_tokens >= every chunk, tail and head (InvalidArgument otherwise). Reserves one KDA
// checkpoint (replacing any checkpoint store). Errors of the runner are returned as they come.
Result<LengthCheckReport> CheckLength(ModelRunner& runner, const LengthCheckOptions& o);

// Pages CheckLength needs for `o` at `page_tokens` tokens per page.
int64_t LengthCheckPages(const LengthCheckOptions& o, int64_t page_tokens);

}  // namespace gyre::feedback
