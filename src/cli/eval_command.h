// `gyre eval`: the perplexity of a model on a text file, and its MTP layer's acceptance
// (feedback/text_eval.h, docs/engine.md "Evaluating a text").
//
//   gyre eval --model DIR --text FILE [--ctx N] [--backend cpu|cuda] [--max-tokens N] [--json]
//
// --ctx: context tokens per window (default 1024); --max-tokens: evaluate only the text's first N
// tokens (default: all). Prints a short summary, or one JSON object with --json
// (TextEvalReport::Json). MTP figures need --backend cpu (the CPU model's hidden states).
// Exit codes: 0 success; 1 bad input (missing or empty text file, ctx < 1, a text of fewer than
// 2 tokens, a model folder without tokenizer.json, no CUDA); 2 usage errors.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace gyre::cli {

// Registers `eval` on `app`; when it is selected after parsing, `*runner` holds the function that
// runs it.
void AddEvalCommand(CLI::App& app, std::function<int()>* runner);

}  // namespace gyre::cli
