// Model: a loaded glm5_next / kimi_linear text model and its CPU forward step over a ragged batch.
//
// One Forward call runs every layer once over the concatenated new tokens of several sequences
// (any mix of prefill pieces and single decode tokens). Token-wise work (projections, norms,
// hyper-connections, MoE) runs on the whole batch; sequence-wise work (KDA conv + recurrence, DSA
// indexer + attention) runs per sequence against that sequence's SequenceState.
//
// Thread safety: a Model is immutable after Load; Forward may run concurrently on disjoint
// SequenceStates (ops parallelise internally, so one caller at a time is the efficient use).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "model/weights.h"
#include "ops/numerics.h"
#include "runtime/sequence_state.h"

namespace gyre {

struct ModelOptions {
  ActDType act = ActDType::kF32;  // activation rounding (ops/numerics.h)
};

// Called with a named intermediate tensor of one forward step, rows = the batch's tokens in order.
// Names: "embed_tokens", "layers.{i}.input_layernorm", "layers.{i}.self_attn",
// "layers.{i}.post_attention_layernorm", "layers.{i}.mlp", "layers.{i}" (glm5: the streams
// [N, n, D]), "norm", "logits".
using CaptureFn = std::function<void(std::string_view name, std::span<const float> data, std::vector<int64_t> shape)>;

struct SeqInput {
  SequenceState* state = nullptr;
  std::span<const int32_t> ids;  // new tokens (>= 1)
  bool all_logits = false;       // logits for every new token, else only the last
  // May be null. When set, resized to [ids.size(), D] and filled with the final hidden state of
  // every new token before the final norm (glm5: the mean over the hyper-connection streams; kimi:
  // the last layer's output): the MTP layer's input (MtpForward).
  std::vector<float>* hidden = nullptr;
  // Optional [ids.size(), D]: the input embeddings of the new tokens, used instead of the
  // embedding-table rows of `ids` (a multimodal prompt: the table rows with image embeddings
  // merged in, runtime/vision.h MergeImageEmbeddings). `ids` are still checked and recorded.
  std::span<const float> input_embeds;
  // Speculative (ReplaySSM): the KDA layers leave the state's conv tails and recurrent states as
  // they are and keep the tokens' KDA inputs in state->replay (every KDA layer runs the recurrent
  // form, so the outputs are those of decoding the tokens one by one); the attention rows are
  // written as usual. SequenceState::CommitReplay settles the state afterwards.
  bool speculative = false;
};

class Model {
 public:
  // Loads config.json (+ generation_config.json) and the safetensors weights of `dir`.
  // Errors carry the file / tensor / field at fault.
  static Result<std::unique_ptr<Model>> Load(const std::string& dir, const ModelOptions& opts = {});
  // Builds from an already-bound config and weights (benchmarks, tests).
  static std::unique_ptr<Model> FromWeights(ModelConfig config, ModelWeights weights, const ModelOptions& opts = {});

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  SequenceState NewSequence() const { return SequenceState(config_); }

  // Runs one step. `logits` receives, per input in order, [1 or ids.size(), vocab] rows.
  // Errors: InvalidArgument for an empty input or an id outside [0, vocab).
  Status Forward(std::span<const SeqInput> batch, std::vector<float>* logits, const CaptureFn& capture = {}) const;

  // Whether the checkpoint carries an MTP layer (config num_nextn_predict_layers == 1).
  bool has_mtp() const { return weights_.has_mtp; }
  // Runs the MTP layer (docs/engine.md "MTP layer") over one fresh sequence of T = ids.size()
  // tokens: `hidden` [T, D] holds Forward's SeqInput::hidden rows for `ids` (positions 0..T-1 of
  // the sequence). `logits` is resized to [T-1, V]; row t is the MTP's guess of ids[t+2], from
  // ids[t+1] and hidden[t], attending causally over MTP positions 0..t. T == 1 gives no rows.
  // MtpForward keeps no cache: every call starts at position 0 (MtpStep continues one).
  // Errors: InvalidArgument when the model has no MTP layer, ids is empty, an id is outside
  // [0, vocab) or hidden.size() != T·D (`logits` is untouched then).
  Status MtpForward(std::span<const int32_t> ids, std::span<const float> hidden, std::vector<float>* logits) const;
  // Floats of one MTP attention key row: [latent c (kv_lora_rank) | k_rot (qk_rope_head_dim)].
  int64_t mtp_key_floats() const { return config_.kv_lora_rank + config_.qk_rope_head_dim; }
  // The MTP layer incrementally (MTP drafts, runtime/cpu_runner.h): n = ids.size() rows at MTP
  // positions pos0 .. pos0 + n - 1, row i pairing the token ids[i] with hidden[i] (the main
  // model's hidden state of the token before it, or the MTP's own out_hidden row when drafting
  // further ahead). `keys` holds one row of mtp_key_floats() per MTP position: rows [0, pos0)
  // are read (the sequence's earlier MTP keys), rows [pos0, pos0 + n) are written. out_hidden ←
  // [n, D], each row's output before shared_head.norm; logits ← [logit_rows, V], the guesses of
  // the last logit_rows rows (0..n). MtpForward(ids, h) == MtpStep(ids[1..], h[0..T-2], 0, …, T-1)
  // (it is implemented so). Errors: InvalidArgument (no MTP layer, n == 0, pos0 < 0, logit_rows
  // outside [0, n], hidden.size() != n·D, an id outside the vocabulary), nothing written then.
  Status MtpStep(std::span<const int32_t> ids, std::span<const float> hidden, int64_t pos0, float* keys,
                 int64_t logit_rows, std::vector<float>* out_hidden, std::vector<float>* logits) const;

 private:
  Model(ModelConfig c, ModelWeights w, const ModelOptions& o);
  struct Step;  // per-call scratch (model.cc)
  void KdaLayer(Step& st, int64_t layer, const float* x, float* out) const;
  void AttnLayer(Step& st, int64_t layer, const float* x, float* out) const;
  void MlpLayer(Step& st, int64_t layer, const float* x, float* out) const;
  static Status CheckIds(std::span<const int32_t> ids, int64_t vocab);
  void MtpRows(std::span<const int32_t> ids, std::span<const float> hidden, int64_t pos0, float* keys,
               int64_t logit_rows, std::vector<float>* out_hidden, float* logits) const;

  ModelConfig config_;
  ModelWeights weights_;
  Numerics num_;
};

// Architecture summary for `gyre inspect`.
struct ModelSummary {
  int64_t num_kda = 0, num_dsa = 0, num_mla = 0, num_dense = 0, num_moe = 0;
  int64_t params_total = 0;        // text model (incl. embedding and lm_head)
  int64_t params_active = 0;       // per token: total minus unselected routed experts
  int64_t attn_cache_bytes_per_token = 0;  // DSA/MLA layers, at the engine's cache dtype (bf16)
  int64_t kda_state_bytes_per_sequence = 0;  // conv tail (bf16) + fp32 recurrent state
};
ModelSummary Summarize(const ModelConfig& c);

}  // namespace gyre
