// `gyre quantize` and `gyre quantize-eval` (docs/quantization.md).
//
//   gyre quantize --model DIR --out DIR --scheme fp8-block|int8 [--block N] [--keep REGEX ...]
//       writes a quantized HF-layout checkpoint (model/quantize_checkpoint.h); prints one line
//       (or one JSON object with --json): tensors quantized, bytes in and out. --keep: weights
//       whose full name matches stay unquantized (a mixed policy).
//   gyre quantize-eval --model REF --quantized DIR [--quantized DIR ...] --text FILE [--ctx N]
//                      [--max-tokens N] [--diff-tokens N] [--weight-only] [--json]
//       per quantized model vs REF on the text: perplexities, mean/max logit KL, top-1 agreement
//       (also by position), and the per-layer divergence of one prompt (the text's first
//       --diff-tokens tokens, default 64) with the layer where the relative error grows most.
//       --weight-only adds, per quantized model, a run of its dequantized weights without
//       activation quantization (what the weights alone cost).
// Exit codes: 0 success; 1 bad input (missing folders or files, unsupported scheme, write error);
// 2 usage errors.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace gyre::cli {

// Registers `quantize` and `quantize-eval` on `app`; when one is selected after parsing,
// `*runner` holds the function that runs it.
void AddQuantizeCommands(CLI::App& app, std::function<int()>* runner);

}  // namespace gyre::cli
