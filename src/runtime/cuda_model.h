// CudaModel: a glm5_next / kimi_linear text model resident on one GPU, and its forward step over
// a ragged batch (docs/cuda.md "The model on the GPU").
//
// The same function as runtime/model.h's Model::Forward with fp32 activations: token-wise work
// (projections, norms, hyper-connections, MoE) runs on the whole batch; KDA runs the recurrent
// kernel for decode tokens and the chunked kernels for prefill pieces; DSA/MLA layers write their
// rows into a paged cache and read it through block tables. Weights are fp32 (parity with the CPU
// engine) or bf16 (GEMM operands; norms, gates, router, hyper-connection mix stay fp32).
//
// Memory: every allocation is made in Create (weights, the page pool, state slots, step scratch
// for max_batch_tokens, workspaces); Forward allocates only when a logits or chunk workspace must
// grow. Decode steps of `decode_graphs` run as CUDA graphs captured per (batch bucket, context
// bucket) on first use.
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

namespace gyre {

struct CudaModelOptions {
  bool bf16_weights = false;
  int64_t max_seqs = 64;             // KDA state slots = concurrent sequences
  int64_t max_batch_tokens = 4096;   // new tokens per Forward call
  int64_t kv_tokens = 65536;         // page pool capacity in tokens (all sequences)
  int64_t page_tokens = 64;
  uint64_t seed = 0;                 // random weights
  bool decode_graphs = true;         // CUDA graphs for decode-only steps
  bool profile_layers = false;       // time every layer of each step with CUDA events (eager steps)
};

struct CudaModelStats {
  int64_t weight_bytes = 0, kv_bytes = 0, state_bytes = 0, scratch_bytes = 0;
  int64_t graphs = 0, graph_replays = 0;
  // With profile_layers: milliseconds of the last eager step: embedding, each layer, head.
  double embed_ms = 0, head_ms = 0;
  std::vector<double> layer_ms;
  // With profile_layers: milliseconds of the last eager step by section ("<attn kind>/<op>" inside
  // layers, summed over the layers of that kind; "embed", "head.norm", "lm_head", "argmax").
  std::map<std::string, double> op_ms;
};

class CudaModel {
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

  const ModelConfig& config() const;
  CudaModelStats stats() const;

  // A new empty sequence (a state slot, zeroed). ResourceExhausted when every slot is in use.
  Result<int> NewSequence();
  // Returns the sequence's pages and slot. Unknown ids are ignored.
  void Release(int seq);
  int64_t NumTokens(int seq) const;

  struct Input {
    int seq = -1;
    std::span<const int32_t> ids;  // new tokens (>= 1)
    bool all_logits = false;       // logits for every new token, else only the last
  };
  // One step. `logits` (may be null: none copied back) receives, per input in order, [1 or
  // ids.size(), vocab] rows; `next_ids` (may be null) the greedy argmax of each input's last row.
  // Errors: InvalidArgument (empty input, id outside the vocabulary, too many tokens, a sequence
  // twice), ResourceExhausted (pages), Internal (CUDA) — nothing is advanced on error.
  Status Forward(std::span<const Input> batch, std::vector<float>* logits, std::vector<int32_t>* next_ids = nullptr);

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
