// `gyre plan`: the memory plan of a model on N GPUs, and optionally a throughput projection
// (parallel/memory_plan.h, parallel/projection.h; docs/planning.md).
//
//   gyre plan (--config FILE | --model DIR) --gpus N --gpu-memory BYTES
//             [--tp N] [--ep N] [--pp N] [--cp N] [--weights bf16|fp8|int8]
//             [--kv-cache-dtype bf16|fp8|int8|fp32] [--max-num-seqs S] [--max-model-len L]
//             [--max-batch-tokens T] [--reserve BYTES] [--json]
//             [--project BENCH.json [--bench-prefill-chunk N] [--link-gbs G] [--link-latency-us U]
//              [--decode-batches 1,16,...]]
//
// Prints, per GPU of each pipeline stage: weights by component, DSA cache, KDA state, activation
// estimate, reserve and headroom; the longest single request and the number of sequences of
// --max-model-len that fit. BYTES take the suffixes of ParseByteSize (K, M, G, T: powers of 1024;
// KB, MB, GB: powers of 1000). --max-model-len defaults to config.json's max_position_embeddings
// (4096 when absent).
//
// Exit codes: 0 the plan fits; 1 the plan is inconsistent or does not fit (the plan is printed,
// the reason goes to stderr), or the config / bench file cannot be read; 2 usage errors.
#pragma once

#include <functional>

namespace CLI {
class App;
}  // namespace CLI

namespace gyre::cli {

// Registers `plan` on `app`: when selected after app.parse(), `*runner` runs it and returns the
// exit code.
void AddPlanCommand(CLI::App& app, std::function<int()>* runner);

}  // namespace gyre::cli
