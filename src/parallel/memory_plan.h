// The memory planner behind `gyre plan` (docs/planning.md): what one GPU holds under a parallel
// plan of a glm5_next / kimi_linear model — weights by component, the DSA/MLA cache, KDA state,
// an activation workspace estimate, a runtime reserve — and the headroom left, computed from the
// ModelConfig alone (parameter counts from model/model_size.h, the same as `gyre inspect`).
//
// The sharding follows the plans of this folder (docs/parallel.md), per pipeline stage of G =
// num_gpus / pp GPUs:
//   * TP (tp ranks): KDA heads, MLA heads (q_b, kv_b, o_proj) and the LM-head vocabulary are split
//     (the largest slice counts: Split(H, tp, 0)); the MLA latent, the indexer, norms,
//     hyper-connections, the router, the dense MLP and the shared expert are replicated; the DSA
//     cache (latent + indexer keys) is replicated on every TP rank, the KDA state split by heads.
//   * EP (ep ranks): routed experts are split (Split(E, ep, 0)); ep must divide G (the stage's
//     GPUs hold G / ep copies of each expert slice).
//   * PP (pp stages): contiguous layer ranges Split(L, pp, s); the embedding sits on stage 0, the
//     final norm and LM head on the last stage.
//   * CP (cp ranks): a KDA prefill's sequence is split; weights, DSA cache and KDA state are
//     replicated on the cp ranks of a group.
//   G / (tp·cp) = dp attention replicas per stage serve disjoint sequences: each holds the cache
//   and state of ceil(max_num_seqs / dp) sequences.
// Nothing here has run on several GPUs; the byte counts are exact for the parameters and caches as
// stated, the activation and reserve terms are estimates whose formulas docs/planning.md gives.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace gyre::parallel {

// Weight storage. kFp8 / kInt8 quantize the GEMM weights of KDA, MLA (not the indexer), dense MLP
// and experts (issue 14's W8A8: fp8 with one fp32 scale per 128×128 block; int8 with one fp32
// scale per output channel); embedding, LM head and indexer stay bf16; norms, hyper-connection
// mixers and the router stay fp32 (as the CUDA model keeps them).
enum class WeightDtype { kBf16, kFp8, kInt8 };
// DSA/MLA cache storage. kBf16 / kFp8 / kInt8: the reference packing (latent, k_rot, indexer key,
// pool gate γ per token and layer), 8-bit kinds with one fp32 scale per token and part. kFp32: the
// CUDA model today (fp32 latent, k_rot, indexer key, γ and a pooled-key row per token).
enum class CacheDtype { kBf16, kFp8, kInt8, kFp32 };

const char* WeightDtypeName(WeightDtype d);
const char* CacheDtypeName(CacheDtype d);

struct PlanOptions {
  int64_t num_gpus = 1;
  int64_t gpu_memory_bytes = 0;  // per GPU
  int64_t tp = 1, ep = 1, pp = 1, cp = 1;
  WeightDtype weights = WeightDtype::kBf16;
  CacheDtype kv_cache = CacheDtype::kBf16;
  int64_t max_num_seqs = 1;       // concurrent sequences, all replicas together
  int64_t max_model_len = 4096;   // tokens per sequence (prompt + output)
  int64_t max_batch_tokens = 8192;  // new tokens per step and attention replica (prefill chunk budget)
  int64_t page_tokens = 64;         // the cache is allocated in pages of this many tokens
  int64_t reserve_bytes = int64_t(3) << 30;  // CUDA context, library workspaces, NCCL buffers, slack
};

// Per-GPU bytes of one pipeline stage (every GPU of a stage holds the same amounts, up to the
// ±1 of uneven splits; the largest slice is counted).
struct StageMemory {
  int64_t stage = 0, layer_begin = 0, layer_end = 0;  // layers [begin, end)
  // Weights by component.
  int64_t embedding = 0, lm_head = 0;
  int64_t attention = 0;  // MLA/DSA projections incl. the indexer
  int64_t kda = 0;
  int64_t dense_mlp = 0, routed_experts = 0, shared_experts = 0;
  int64_t norms_hc_router = 0;  // RMSNorms, hyper-connection mixers, routers, final norm
  int64_t weights() const {
    return embedding + lm_head + attention + kda + dense_mlp + routed_experts + shared_experts + norms_hc_router;
  }
  int64_t cache_bytes_per_token = 0;          // DSA/MLA cache of one token of one sequence
  int64_t cache_bytes = 0;                    // seqs_per_replica sequences of max_model_len (page-rounded)
  int64_t kda_state_bytes_per_sequence = 0;   // fp32 conv tails + fp32 recurrent state, this GPU's heads
  int64_t kda_state_bytes = 0;                // seqs_per_replica sequences
  int64_t activation_bytes = 0;               // ActivationBytes(...) at max_batch_tokens, max_model_len
  int64_t reserve_bytes = 0;
  int64_t used() const { return weights() + cache_bytes + kda_state_bytes + activation_bytes + reserve_bytes; }
  int64_t headroom_bytes = 0;                 // gpu_memory_bytes - used(); negative when it does not fit
};

struct MemoryPlan {
  PlanOptions options;
  int64_t gpus_per_stage = 0, dp = 0;  // dp: attention replicas per stage
  int64_t seqs_per_replica = 0;
  std::vector<StageMemory> stages;
  int64_t worst_stage = 0;             // the stage with the least headroom
  // Empty when the plan fits; otherwise why not, with the numbers.
  std::string refusal;
  // The longest single request that fits (one sequence on its replica, others empty), a multiple
  // of page_tokens; 0 when not even one page fits.
  int64_t max_context_per_request = 0;
  // How many sequences of max_model_len fit at once over all replicas.
  int64_t max_seqs_at_max_model_len = 0;
  bool fits() const { return refusal.empty(); }
};

// Checks the plan's shape and computes the memory. Errors (InvalidArgument): a count < 1, no GPU
// memory, num_gpus not divisible by pp, a stage's GPUs not divisible by tp·cp or by ep, more TP
// ranks than KDA or MLA heads, a vocabulary not divisible by tp (the LM head's all-gather needs
// it), more EP ranks than routed experts, more stages than layers, cp > 1 without KDA layers.
// A plan that is consistent but does not fit is returned with `refusal` set.
Result<MemoryPlan> PlanMemory(const ModelConfig& c, const PlanOptions& o);

// The activation workspace estimate of one GPU of `stage` (formula in docs/planning.md):
// fp32 activations for `batch_tokens` tokens per step, the indexer's pool scores over a context of
// `context` tokens, and `logit_rows` full-vocabulary logit rows.
int64_t ActivationBytes(const ModelConfig& c, const PlanOptions& o, int64_t layer_begin, int64_t layer_end,
                        int64_t batch_tokens, int64_t context, int64_t logit_rows);

}  // namespace gyre::parallel
