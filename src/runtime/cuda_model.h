// CudaModel: a glm5_next / kimi_linear text model resident on one GPU, and its forward step over
// a ragged batch (docs/cuda.md "The model on the GPU").
//
// The same function as runtime/model.h's Model::Forward with fp32 activations: token-wise work
// (projections, norms, hyper-connections, MoE) runs on the whole batch; KDA runs the recurrent
// kernel for decode tokens and the chunked kernels for prefill pieces; DSA/MLA layers write their
// rows into a paged cache and read it through block tables. Weights are fp32 (parity with the CPU
// engine) or bf16 (GEMM operands; norms, gates, router, hyper-connection mix stay fp32).
//
// It is a ModelRunner (runtime/model_runner.h): the engine's page and slot ids address its device
// page pool and state slots (it keeps no free list); a piece with start 0 zeroes its slot. The
// last row of each sampling piece is sampled on the device (cuda::SampleRows, greedy rows by
// cuda::Argmax) with the log-softmax of the sampled id (cuda::RowLogProbs); only ids and logprobs
// are copied back, plus the rows of pieces that ask for top_logprobs (alternatives computed on the
// host from that row) or when the caller asks for logits.
//
// Memory: every allocation is made in Create (weights, the page pool, state slots, step scratch
// for max_batch_tokens, workspaces); Step allocates only when a logits or chunk workspace must
// grow. Decode steps of `decode_graphs` run as CUDA graphs captured per (batch bucket, context
// bucket, sampling or greedy) on first use; so do verify steps whose pieces are all speculative
// (no logit processing, no mask; all drafting the same k MTP tokens, or none), each piece padded to
// 1 + speculative_tokens tokens.
//
// This header includes no CUDA header (plain C++), so host code compiles against it; it exists
// only in GYRE_CUDA builds.
// Thread safety: not thread-safe; one owner thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "model/weights.h"
#include "quant/kv_cache.h"
#include "runtime/model_runner.h"

namespace gyre {

namespace parallel {
class DeviceCommunicator;  // parallel/device_communicator.h
}  // namespace parallel

// One tensor-parallel rank (docs/parallel.md "TP on the CUDA model"): the config and weights given
// to FromHost are this rank's shard (parallel/tp_model.h ShardModelForTp); the model all-reduces
// the partial sums of each layer's output projection (and of the MLP when it is sharded) and
// all-gathers the LM head's vocabulary blocks through `comm`, on its step stream. Every rank then
// holds the whole logits row and samples the same token. Decode steps run eagerly (no CUDA
// graphs) under TP: a communicator whose ranks meet on the host (SharedDeviceGroup) cannot be
// captured.
struct CudaTpOptions {
  parallel::DeviceCommunicator* comm = nullptr;  // null: no tensor parallelism
  bool mlp_sharded = true;                       // the MLP's intermediate width is split (all-reduce after it)
  int64_t vocab_rows = 0;                        // LM-head rows per rank (ceil(V / ranks), zero-padded)
  int64_t full_vocab = 0;                        // the model's vocabulary (the gathered row width)
  // Expert parallelism (with mlp_sharded): the host weights hold routed experts
  // [expert_begin, expert_begin + expert_count) of the router's n_routed_experts; (token, slot)
  // pairs routed elsewhere are skipped. 0: every expert.
  int64_t expert_begin = 0, expert_count = 0;
};

// One pipeline stage (docs/parallel.md "Layer split"): the config and weights given to FromHost are
// this stage's layers (parallel/tp_model.h ShardModelForPp). A stage after the first receives the
// hidden streams from the stage before instead of embedding; a stage before the last sends its
// output streams on. The last stage sends its sampled ids back to the first (which resolves
// kPrevToken inputs from them). Every stage still runs the head (the others' tokens are unused).
// Decode steps run eagerly under PP.
struct CudaPpOptions {
  parallel::DeviceCommunicator* comm = nullptr;  // null: no layer split; rank = stage
};

struct CudaModelOptions {
  bool bf16_weights = false;
  int64_t max_seqs = 64;             // KDA state slots = concurrent sequences
  int64_t max_batch_tokens = 4096;   // new tokens per Forward call
  int64_t kv_tokens = 65536;         // page pool capacity in tokens (all sequences)
  // > 0: size the page pool from free GPU memory instead of kv_tokens: this fraction of the memory
  // free after weights and scratch (state slots come out of it first).
  double gpu_memory_utilization = 0;
  // With gpu_memory_utilization: bytes kept out of the pool for a later ReserveCheckpoints (the
  // prefix cache's KDA checkpoint budget), subtracted from the free memory before the fraction.
  int64_t reserve_bytes = 0;
  // With gpu_memory_utilization and no reserve_bytes: this fraction of the memory budget
  // (gpu_memory_utilization x free after weights and scratch) is kept out of the pool instead, for
  // the prefix cache's automatic checkpoint budget (gyre serve's default: 0.1 with prefix caching).
  // What was kept is CudaModelStats::reserved_bytes.
  double reserve_fraction = 0;
  // With reserve_fraction: keep at least this many KDA states' bytes (one checkpoint each), up to
  // a quarter of the memory budget.
  int64_t reserve_min_states = 0;
  int64_t max_seq_tokens = 0;        // longest sequence (block-table width); 0: min(kv_tokens, 2^17)
  int64_t page_tokens = 64;
  uint64_t seed = 0;                 // random weights
  bool decode_graphs = true;         // CUDA graphs for decode-only steps and all-speculative verify steps
  bool profile_layers = false;       // time every layer of each step with CUDA events (eager steps)
  // Storage dtype of each attention layer's latent / k_rot cache rows (quant/kv_cache.h); empty:
  // every layer fp32. Otherwise one entry per layer of the config (KDA entries ignored). The page
  // pool's bytes per token, the gpu_memory_utilization sizing and the transfer images follow it.
  KvCachePolicy kv_cache;
  // > 0: speculative decoding with ReplaySSM (model_runner.h; docs/engine.md "Speculative
  // decoding"): pieces of up to 1 + speculative_tokens tokens may be speculative. Reserves, per KDA
  // layer and slot, a ring of that many tokens' KDA inputs (pre-conv inputs, gates, betas:
  // CudaModelStats::spec_bytes). 0: capacity().speculative is false. Not under TP or layer split.
  int64_t speculative_tokens = 0;
  // > 0: MTP drafts (docs/engine.md "MTP drafts"; StepPiece::mtp): the checkpoint's MTP layer goes
  // to the device (random weights for Random) and drafts up to this many tokens after a sampling
  // piece, chained greedily. Each page then also holds one fp32 MTP key row (latent | rope) per
  // token position q >= 1 (MTP position q - 1, read through PagedBatch::pos_shift 1), and each slot
  // the pre-norm hidden state of its last token; both are in the page / slot images and the KDA
  // checkpoints, as on the CPU runner. A chain writes its keys into scratch pages past the pool
  // (a copy of the page it starts in), never into the sequence's pages past the piece. Verify steps
  // whose pieces all draft the same k replay a graph; other steps with MTP pieces run eagerly. Not
  // under TP or layer split.
  int64_t mtp_drafts = 0;
  CudaTpOptions tp;                  // tensor parallelism (default: none)
  CudaPpOptions pp;                  // layer split (default: none); not together with tp
};

struct CudaModelStats {
  int64_t weight_bytes = 0, kv_bytes = 0, state_bytes = 0, scratch_bytes = 0;
  int64_t reserved_bytes = 0;  // kept out of the pool (reserve_bytes, or reserve_fraction's share)
  int64_t spec_bytes = 0;      // ReplaySSM rings (speculative_tokens > 0)
  int64_t mtp_bytes = 0;       // MTP drafts: the chain's scratch pages (page and slot parts are in kv_bytes / state_bytes)
  int64_t mtp_chain_steps = 0; // MTP layer passes run for draft chains (one per draft position per step)
  int64_t spec_folds = 0;      // commits folded on the device (tokens > 0), and their launches' batches
  int64_t spec_fold_batches = 0;
  int64_t graphs = 0, graph_replays = 0;
  // With profile_layers: milliseconds of the last eager step: embedding, each layer, head.
  double embed_ms = 0, head_ms = 0;
  std::vector<double> layer_ms;
  // With profile_layers: milliseconds of the last eager step by section ("<attn kind>/<op>" inside
  // layers, summed over the layers of that kind; "embed", "head.norm", "lm_head", "argmax").
  std::map<std::string, double> op_ms;
  // Every step, from CUDA events around the step's stream work: GPU busy time of the step and the
  // GPU idle time since the previous step ended (host work between steps: scheduling, emitting,
  // uploads). Also recorded as trace spans "gpu.busy" / "gpu.idle" (category "gpu", track
  // kGpuTraceTid) when tracing is on; `gyre analyze` sums them.
  int64_t steps = 0;
  double busy_ms_total = 0, idle_ms_total = 0, idle_ms_max = 0;
  std::vector<float> idle_us;  // per step after the first (the most recent 1M)
};

// Trace track of the GPU spans ("gpu.busy", "gpu.idle"); their durations come from CUDA events,
// their placement is the host time the step's synchronisation returned.
inline constexpr uint32_t kGpuTraceTid = 0xFFFF;

class CudaModel final : public ModelRunner {
 public:
  // Uploads host weights (the CPU engine's bound weights; fp32 or rounded to bf16 per options).
  static Result<std::unique_ptr<CudaModel>> FromHost(const ModelConfig& config, const ModelWeights& weights,
                                                     const CudaModelOptions& opts);
  // Builds random weights directly in GPU memory (no checkpoint, no host copy): the distributions
  // of model/random_weights.h (not the same values), deterministic in (seed, tensor).
  static Result<std::unique_ptr<CudaModel>> Random(const ModelConfig& config, const CudaModelOptions& opts);
  ~CudaModel();
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  const ModelConfig& config() const override;
  RunnerCapacity capacity() const override;
  std::string backend() const override { return "cuda"; }
  CudaModelStats stats() const;

  // One step (ModelRunner::Launch / Collect). Decode rows (start > 0, one token) and speculative
  // pieces run the recurrent KDA kernel, other pieces the chunked kernels. Errors: InvalidArgument
  // (empty piece, id outside the vocabulary, too many tokens or pieces, a slot twice, a page
  // outside the pool, a block table too short), Internal (CUDA).
  // Launch enqueues the step on the model's stream with pinned, double-buffered staging and
  // returns; Collect waits for the step's end event. kPrevToken inputs are resolved on the device.
  Status Launch(std::span<const StepPiece> pieces, bool want_logits = false) override;
  Status Collect(std::vector<SampledToken>* out, std::vector<float>* logits = nullptr) override;
  // KDA checkpoints in device memory (per KDA layer, laid out as the slots); SaveState and
  // RestoreState enqueue device-to-device copies on the step stream, ordered with launched steps.
  Status ReserveCheckpoints(int64_t count) override;
  Status SaveState(SlotId slot, CheckpointId ckpt) override;
  Status RestoreState(CheckpointId ckpt, SlotId slot, int64_t num_tokens) override;
  // Sequence transfer (compiled, not run on a GPU yet). A page's host image is, per attention
  // layer in order, its parts' page_tokens rows: latent, k_rot (when rope), and for indexer layers
  // k_I, γ and the pooled keys; a slot's, per KDA layer, the recurrent state then the conv tail.
  // The copies go on the step stream (ordered with launched steps) through pageable memory; each
  // call synchronizes the stream before it returns.
  // TODO(disagg): gather into pinned staging with one kernel instead of a copy per part (#12).
  Status ReadPages(std::span<const PageId> pages, std::span<std::byte> dst) override;
  Status WritePages(std::span<const PageId> pages, std::span<const std::byte> src) override;
  Status ReadSlotState(SlotId slot, std::span<std::byte> dst) override;
  Status WriteSlotState(SlotId slot, std::span<const std::byte> src, int64_t num_tokens) override;
  // Off the step stream: its own non-blocking stream and a pinned bounce buffer (lazily made,
  // guarded by a mutex), so a transfer thread reads an exported sequence while steps run. Not
  // under tensor parallelism or layer split (a rank holds part of each page), nor with
  // speculation (a commit's fold is device work on the step stream that such a read would not
  // wait for).
  bool ReadsFinishedConcurrently() const override;
  Status ReadFinished(std::span<const PageId> pages, std::span<std::byte> page_dst, SlotId slot,
                      std::span<std::byte> state_dst) override;
  // ReplaySSM (speculative_tokens > 0). A speculative piece runs with the decode rows: the conv
  // reads its tail without updating it, the recurrent kernel reads its state without writing it
  // back (outputs of every token as decoding gives them), and its pre-conv inputs, gates and betas
  // go to the slot's ring. CommitSpeculative queues (slot, n); the queued folds run as one batch
  // per KDA layer (ring rows → conv with tail update → recurrent state update, the kernels of
  // decoding) on the step stream before the next step or state operation (SaveState, RestoreState,
  // Read/WriteSlotState, Synchronize).
  Status CommitSpeculative(SlotId slot, int64_t num_accepted) override;

  // Blocks until the GPU is idle (for timing).
  Status Synchronize();
  // Turns CUDA graphs for decode steps on or off (eager steps are profiled per layer).
  void SetDecodeGraphs(bool on);

  struct Impl;

 private:
  explicit CudaModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gyre
