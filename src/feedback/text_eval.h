// `gyre eval`: the perplexity of a model on a text, and the acceptance of its MTP layer
// (docs/engine.md "Evaluating a text").
//
// The text's ids are split into non-overlapping windows: window k is ids[k·ctx, k·ctx + ctx + 1)
// (ctx + 1 tokens; the last one may be shorter; a window of fewer than 2 tokens is dropped). Each
// window is a fresh sequence on the runner whose first L-1 tokens (L = window tokens) are
// prefilled with all-position logits; row j scores the window's token j+1, so every token but
// the text's first is scored exactly once. NLLs are accumulated in double from a stable
// log-softmax of the fp32 logits.
//
// MTP (when a CPU Model with an MTP layer is given): per window, the MTP layer runs over the
// window's first L-1 tokens and their pre-norm hidden states (one more CPU forward of the
// window). For t in 0..L-3 it counts acceptance, argmax(mtp_logits_t) == argmax(main logits row
// t+1) (both guesses of token t+2, ties → lower id), and the MTP's NLL of token t+2.
//
// Thread safety: one caller per runner (as ModelRunner).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "runtime/model.h"
#include "runtime/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace gyre::feedback {

struct TextEvalOptions {
  int64_t ctx = 1024;         // context tokens per window (>= 1)
  int64_t max_tokens = 0;     // > 0: evaluate only the text's first max_tokens tokens
  int64_t step_tokens = 512;  // prefill piece size (also capped by the runner's max_step_tokens)
};

struct MtpEvalReport {
  int64_t num_positions = 0;  // positions t compared (L-2 per window of L >= 3 tokens)
  int64_t num_accepted = 0;   // argmax(MTP) == argmax(main logits at t+1)
  double nll_sum = 0;         // nats, MTP's NLL of token t+2 over the positions
  double wall_s = 0;          // the extra CPU forward + MTP layer
  double acceptance() const;
  double mean_nll() const;
};

struct TextEvalReport {
  std::string backend;
  int64_t ctx = 0;
  int64_t num_tokens_file = 0;    // ids of the whole text
  int64_t num_tokens_used = 0;    // after max_tokens
  int64_t num_windows = 0;
  int64_t num_tokens_scored = 0;  // num_tokens_used - 1
  int64_t num_bytes = 0;          // bytes of the text (of the tokens used, when max_tokens cut it)
  double nll_sum = 0;             // nats
  double tokenize_s = 0;
  double wall_s = 0;              // scoring (main logits and MTP), without tokenizing
  bool has_mtp = false;           // the model has an MTP layer
  bool mtp_evaluated = false;     // MTP figures below are set
  std::string mtp_note;           // why they are not, when has_mtp && !mtp_evaluated
  MtpEvalReport mtp;

  double mean_nll() const;
  double perplexity() const;      // exp(mean_nll)
  double bits_per_byte() const;   // nll_sum / ln 2 / num_bytes
  double tokens_per_s() const;    // num_tokens_scored / wall_s
  nlohmann::json Json() const;    // every figure; "mtp": null without an MTP layer
  std::string Human() const;
};

// Scores `ids` (the first max_tokens of them when set) on `runner`, which needs a free slot and
// pages for ctx tokens. `mtp_model` may be null; when it is set and has an MTP layer, the MTP
// figures are computed on it (it must be the model the runner runs, on the CPU). `num_bytes`:
// bytes of the text the scored ids cover (for bits per byte).
// Errors: InvalidArgument for ctx < 1, step_tokens < 1, max_tokens < 0, fewer than 2 ids (after
// max_tokens) or an id outside the vocabulary; the runner's errors (ResourceExhausted when its
// pages or slots cannot hold a window).
Result<TextEvalReport> EvaluateIds(ModelRunner& runner, const Model* mtp_model, std::span<const int32_t> ids,
                                   int64_t num_bytes, const TextEvalOptions& opts);

// Tokenizes `text` with `tokenizer` (no special tokens added, special-token text treated as
// plain text) and scores it with EvaluateIds. Errors: InvalidArgument for an empty text or one
// that tokenizes to fewer than 2 tokens, the tokenizer's errors, and those of EvaluateIds.
Result<TextEvalReport> EvaluateText(ModelRunner& runner, const Model* mtp_model, const Tokenizer& tokenizer,
                                    std::string_view text, const TextEvalOptions& opts);

}  // namespace gyre::feedback
