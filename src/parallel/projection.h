// Throughput projection for a parallel plan (`gyre plan --project BENCH.json`, docs/planning.md
// "Projection"): decode and prefill tokens/s of a model on G GPUs, from per-op costs measured on
// ONE GPU by `gyre bench model --backend cuda` (its JSON: `decode[].eager_step_op_ms`,
// `prefill[].last_chunk_op_ms`) plus the communication each step needs under a stated link model.
//
// It is a projection, not a measurement: nothing here has run on several GPUs. The model:
//   * Per-op costs per layer: the bench's "<kind>/<op>" sums divided by the bench model's layers of
//     that kind (MoE / dense ops by the layers that have them). The bench model must have the
//     target's shapes (hidden size, heads, experts, ...; the layer count and order may differ).
//   * TP-split ops (kda.in_proj/gates/conv/recurrent/chunk/out, mla.in_proj/attention/out,
//     lm_head) cost their measured time at the replica's batch ÷ tp; every other op (norms,
//     hyper-connections, indexer, cache write, router, shared expert, dense MLP, embedding) runs
//     replicated at the replica's batch. mla.in_proj's replicated q_a / kv_a part is counted as
//     split (optimistic by that part).
//   * Routed experts with ep > 1: every GPU of a stage runs 1/G of the stage's expert work: the
//     measured one-GPU time at the stage's global batch × ep / G, ÷ ep (uniform routing assumed).
//     With ep = 1 each replica runs all experts for its own tokens (TP ranks repeat that work).
//   * Decode costs are interpolated piecewise-linearly in the batch between measured batches and
//     extrapolated linearly past the largest; prefill costs scale linearly in tokens.
//   * Communication (bf16 payloads, no overlap with compute): TP all-reduce after each attention
//     block (ring: 2(tp−1)/tp · bytes); EP dispatch and combine all-to-all per MoE layer
//     ((ep−1)/ep of each GPU's rows leave it), then an all-gather that re-replicates the tokens in
//     the TP group; PP sends the n hyper-connection streams between stages. Each collective costs
//     latency_us + bytes / link_gbs.
//   * PP: decode keeps m = min(batch, pp) micro-batches in flight; a cycle lasts max(one pass through
//     all stages, m × the slowest stage) and yields one token per sequence. Prefill streams a
//     prompt's chunks through the stages: chunk tokens / slowest stage.
//   * cp > 1 is not projected (the plans define CP for KDA prefill only).
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "parallel/memory_plan.h"

namespace gyre::parallel {

// Per-layer op costs (ms) at one measured point.
struct OpCosts {
  std::map<std::string, double> kda, dsa, mla;  // attention block, norms and hyper-connections of one layer of the kind
  std::map<std::string, double> moe;            // one MoE block (averaged over the attention kinds)
  std::map<std::string, double> dense;          // one dense MLP block
  std::map<std::string, double> outer;          // embed, head.norm, lm_head, argmax
};

struct MeasuredPoint {
  int64_t tokens = 0;   // tokens of the step (decode: batch; prefill: the chunk)
  int64_t context = 0;  // context length the step ran at
  OpCosts ops;
};

struct BenchCosts {
  std::string gpu, config_file;
  ModelConfig bench_config;
  std::vector<MeasuredPoint> decode, prefill;  // decode sorted by batch
};

// Parses a `gyre bench model --backend cuda` JSON. `prefill_chunk`: the --prefill-chunk of that
// run (the JSON does not record it; the bench's default is 8192). Errors: InvalidArgument for
// malformed JSON, a missing field, or a run without per-op costs.
Result<BenchCosts> ParseBenchCosts(const std::string& json_text, int64_t prefill_chunk);

// OK iff the bench model's per-layer shapes equal the target's; otherwise InvalidArgument naming
// the first field that differs.
Status CheckSameShapes(const ModelConfig& bench, const ModelConfig& target);

struct LinkModel {
  double link_gbs = 450;    // per GPU per direction (NVLink 4 on H100/H200 SXM: 18 links × 25 GB/s)
  double latency_us = 10;   // per collective (assumed, not measured)
};

struct ProjectedStep {
  std::string phase;            // "decode" or "prefill"
  int64_t batch = 0;            // decode: sequences in flight over all GPUs; prefill: tokens per step over all GPUs
  int64_t context = 0;
  double compute_ms = 0, comm_ms = 0;  // slowest stage: its compute and its communication
  double step_ms = 0;           // one step of the slowest stage (with pp: per micro-batch)
  double latency_ms = 0;        // decode: one token of one sequence through all stages (TPOT)
  double tokens_per_s = 0;
  int64_t tp_allreduce_bytes = 0, ep_alltoall_bytes = 0, pp_send_bytes = 0;  // per GPU per step, sent
};

struct Projection {
  std::vector<ProjectedStep> steps;
  std::string source;  // "<gpu>, <config_file>"
};

// REQUIRES: plan came from PlanMemory(c, ...) (a consistent shape). Errors: InvalidArgument for
// cp > 1, shapes that differ (CheckSameShapes), no measured decode or prefill point.
Result<Projection> Project(const ModelConfig& c, const MemoryPlan& plan, const BenchCosts& costs,
                           const LinkModel& link, const std::vector<int64_t>& decode_batches);

}  // namespace gyre::parallel
