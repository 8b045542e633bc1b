// `gyre bench serve`: load generator against a running OpenAI-compatible server
// (src/serve/loadgen.h).
//
//   gyre bench serve --url URL [--model NAME] [--num-prompts N] [--request-rate R|inf]
//                    [--arrival poisson|fixed] [--max-concurrency C] [--input-len I]
//                    [--output-len O] [--prompts-file F] [--seed S] [--slo-ttft-ms X]
//                    [--slo-tpot-ms Y] [--api-key KEY] [--token-id-range N] [--json OUT]
//
// Prints vLLM's "Serving Benchmark Result" table to stdout; --json OUT writes gyre result JSON
// that `gyre compare A.json B.json` reads: {"meta": {machine, commit, config, ...}, "metrics":
// {"ttft_ms_p50": ..., ...}, "directions": {...}, "samples": {...}, "errors": [...]}.
// Exit codes: 0 when at least one request completed, 1 when none did (or the server is
// unreachable), 2 on usage errors.
#pragma once

#include "cli/serve_command.h"

namespace gyre::cli {

// Registers `serve` on `bench`, the `gyre bench` subcommand (which holds other benchmarks too):
// when it is selected after parsing, `*runner` holds the function that runs it.
void AddBenchServeCommand(CLI::App& bench, std::function<int()>* runner);

}  // namespace gyre::cli
