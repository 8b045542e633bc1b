// Model-level consistency on random weights (no reference needed): prefill in pieces equals one
// shot, token-by-token decode equals the full forward, a ragged batch equals separate runs.
// Parity with transformers is tested against golden fixtures in golden_test.cc.
#include "runtime/model.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "ops/basic.h"
#include "runtime/generate.h"
#include "runtime/random_model_for_tests.h"

namespace gyre {
namespace {

const char* kGlm5Config = R"({
  "model_type": "glm5_next", "vocab_size": 97, "hidden_size": 32, "intermediate_size": 48,
  "moe_intermediate_size": 16, "num_hidden_layers": 5, "num_attention_heads": 2, "num_key_value_heads": 2,
  "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "v_head_dim": 8, "qk_rope_head_dim": 0,
  "index_n_heads": 4, "index_head_dim": 8, "index_topk": 16, "index_kpool": 4,
  "linear_num_heads": 2, "linear_head_dim": 8, "n_routed_experts": 8, "num_experts_per_tok": 2,
  "n_group": 2, "topk_group": 1,
  "layer_types": ["linear_attention","linear_attention","linear_attention","deepseek_sparse_attention","deepseek_sparse_attention"],
  "indexer_types": ["full","full","full","full","shared"],
  "eos_token_id": 96})";

const char* kKimiConfig = R"({
  "model_type": "kimi_linear", "vocab_size": 97, "hidden_size": 32, "intermediate_size": 48,
  "moe_intermediate_size": 16, "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 2,
  "q_lora_rank": null, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 8,
  "num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 1,
  "linear_attn_config": {"kda_layers": [1, 2, 4], "full_attn_layers": [3], "head_dim": 8, "num_heads": 2,
                         "short_conv_kernel_size": 4},
  "eos_token_id": 96})";

// fp32 tolerance for two exact algorithms that differ only in summation order (chunked vs
// recurrent KDA, batched vs single GEMM rows). Observed: ≤ 3e-5 rel-L2 on logits.
constexpr double kFp32Tol = 1e-4;

std::unique_ptr<Model> MakeModel(const char* cfg_json, uint64_t seed = 5) {
  return RandomModel(cfg_json, seed);
}

std::vector<int32_t> RandomIds(int64_t n, uint64_t seed, int32_t vocab = 96) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
  return ids;
}

class ModelConsistency : public ::testing::TestWithParam<const char*> {};

TEST_P(ModelConsistency, PrefillInPiecesEqualsOneShot) {
  auto m = MakeModel(GetParam());
  const int64_t V = m->config().vocab_size;
  const auto ids = RandomIds(83, 11);
  const auto full = FullLogits(*m, ids);
  SequenceState st = m->NewSequence();
  std::vector<float> got, logits;
  size_t pos = 0;
  for (size_t piece : {1, 30, 2, 50}) {
    SeqInput in{&st, std::span<const int32_t>(ids).subspan(pos, piece), true};
    ASSERT_TRUE(m->Forward(std::span<const SeqInput>(&in, 1), &logits).ok());
    got.insert(got.end(), logits.begin(), logits.end());
    pos += piece;
  }
  ASSERT_EQ(pos, ids.size());
  ASSERT_EQ(got.size(), ids.size() * V);
  const auto d = ops::Compare(got, full);
  EXPECT_LT(d.rel_l2, kFp32Tol) << "worst row " << d.worst_index / V;
}

TEST_P(ModelConsistency, DecodeStepsEqualFullForward) {
  auto m = MakeModel(GetParam());
  const int64_t V = m->config().vocab_size;
  const auto ids = RandomIds(75, 12);
  const auto full = FullLogits(*m, ids);
  SequenceState st = m->NewSequence();
  std::vector<float> logits;
  const size_t prompt = 10;
  SeqInput pre{&st, std::span<const int32_t>(ids).subspan(0, prompt), true};
  ASSERT_TRUE(m->Forward(std::span<const SeqInput>(&pre, 1), &logits).ok());
  for (size_t t = prompt; t < ids.size(); ++t) {
    SeqInput in{&st, std::span<const int32_t>(ids).subspan(t, 1), false};
    ASSERT_TRUE(m->Forward(std::span<const SeqInput>(&in, 1), &logits).ok());
    const auto d = ops::Compare(logits, std::span<const float>(&full[t * V], V));
    EXPECT_LT(d.rel_l2, kFp32Tol) << "decode step at position " << t;
  }
}

TEST_P(ModelConsistency, RaggedBatchEqualsSeparateRuns) {
  auto m = MakeModel(GetParam());
  const int64_t V = m->config().vocab_size;
  const auto a = RandomIds(70, 21), b = RandomIds(5, 22), c = RandomIds(1, 23), d0 = RandomIds(9, 24);
  // Sequence d is already decoding: prefill 8 tokens alone first.
  SequenceState sa = m->NewSequence(), sb = m->NewSequence(), sc = m->NewSequence(), sd = m->NewSequence();
  std::vector<float> logits;
  SeqInput pre{&sd, std::span<const int32_t>(d0).subspan(0, 8), false};
  ASSERT_TRUE(m->Forward(std::span<const SeqInput>(&pre, 1), &logits).ok());
  std::vector<SeqInput> batch = {{&sa, a, false}, {&sb, b, true}, {&sc, c, false},
                                 {&sd, std::span<const int32_t>(d0).subspan(8, 1), false}};
  ASSERT_TRUE(m->Forward(batch, &logits).ok());
  ASSERT_EQ(logits.size(), (1 + 5 + 1 + 1) * V);
  const auto fa = FullLogits(*m, a), fb = FullLogits(*m, b), fc = FullLogits(*m, c), fd = FullLogits(*m, d0);
  EXPECT_LT(ops::Compare(std::span<const float>(&logits[0], V), std::span<const float>(&fa[69 * V], V)).rel_l2, kFp32Tol);
  EXPECT_LT(ops::Compare(std::span<const float>(&logits[V], 5 * V), fb).rel_l2, kFp32Tol);
  EXPECT_LT(ops::Compare(std::span<const float>(&logits[6 * V], V), fc).rel_l2, kFp32Tol);
  EXPECT_LT(ops::Compare(std::span<const float>(&logits[7 * V], V), std::span<const float>(&fd[8 * V], V)).rel_l2,
            kFp32Tol);
}

TEST_P(ModelConsistency, GenerateBatchEqualsSingleAndChunkedPrefill) {
  auto m = MakeModel(GetParam());
  GenerateOptions o;
  o.max_tokens = 12;
  o.ignore_eos = true;
  const std::vector<std::vector<int32_t>> prompts = {RandomIds(40, 31), RandomIds(7, 32)};
  auto batch = Generate(*m, prompts, o);
  ASSERT_TRUE(batch.ok());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto single = Generate(*m, {prompts[i]}, o);
    ASSERT_TRUE(single.ok());
    EXPECT_EQ((*single)[0].ids, (*batch)[i].ids);
    GenerateOptions oc = o;
    oc.prefill_chunk = 3;
    auto chunked = Generate(*m, {prompts[i]}, oc);
    ASSERT_TRUE(chunked.ok());
    EXPECT_EQ((*chunked)[0].ids, (*batch)[i].ids);
    EXPECT_EQ((*batch)[i].finish_reason, "length");
    EXPECT_EQ((*batch)[i].ids.size(), 12u);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ModelConsistency, ::testing::Values(kGlm5Config, kKimiConfig));

TEST(ModelErrors, BadIdsAndEmptyInputs) {
  auto m = MakeModel(kGlm5Config);
  SequenceState st = m->NewSequence();
  std::vector<int32_t> bad = {1, 97};
  SeqInput in{&st, bad, false};
  std::vector<float> logits;
  Status s = m->Forward(std::span<const SeqInput>(&in, 1), &logits);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("97"), std::string::npos);
  EXPECT_EQ(st.num_tokens, 0);  // nothing consumed
  EXPECT_EQ(Generate(*m, {{}}, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Generate(*m, {{-1}}, {}).status().code(), StatusCode::kInvalidArgument);
}

TEST(Generate, StopsOnStopIdAndEos) {
  auto m = MakeModel(kGlm5Config);
  GenerateOptions o;
  o.max_tokens = 20;
  o.ignore_eos = true;
  auto free_run = Generate(*m, {RandomIds(6, 41)}, o);
  ASSERT_TRUE(free_run.ok());
  const int32_t third = (*free_run)[0].ids[2];
  o.stop_ids = {third};
  auto stopped = Generate(*m, {RandomIds(6, 41)}, o);
  ASSERT_TRUE(stopped.ok());
  const auto& ids = (*stopped)[0].ids;
  EXPECT_EQ((*stopped)[0].finish_reason, "stop");
  EXPECT_EQ(ids.back(), third);
  EXPECT_LE(ids.size(), 3u);
}

}  // namespace
}  // namespace gyre

namespace gyre {
namespace {
TEST(Summarize, DefaultGlm5MatchesDocumentedCounts) {
  // docs/model-glm5-next.md §1.5: 313,326,816,766 text parameters, 17,376,726,526 active per token;
  // DSA cache 1538 B/token/layer reference packing minus the flag = 1536; KDA 4 MiB state per layer.
  auto c = ParseModelConfig(R"({"model_type": "glm5_next"})");
  ASSERT_TRUE(c.ok());
  const ModelSummary s = Summarize(*c);
  EXPECT_EQ(s.params_total, 313326816766);
  EXPECT_EQ(s.params_active, 17376726526);
  EXPECT_EQ(s.attn_cache_bytes_per_token, 11 * 1536);
  EXPECT_EQ(s.kda_state_bytes_per_sequence, 34 * (4 * 1024 * 1024 + 3 * 24576 * 2));
}

// Found by config_fuzz (UBSan): a config at ParseModelConfig's bounds overflowed the int64 sum.
TEST(Summarize, HugeConfigSaturatesInsteadOfOverflowing) {
  auto c = ParseModelConfig(R"({"model_type": "glm5_next", "num_hidden_layers": 4096, "hidden_size": 131072,
                                "moe_intermediate_size": 1048576, "n_routed_experts": 65536})");
  ASSERT_TRUE(c.ok()) << c.error().message();
  const ModelSummary s = Summarize(*c);
  EXPECT_EQ(s.params_total, std::numeric_limits<int64_t>::max());
  EXPECT_GT(s.params_active, 0);
}
}  // namespace
}  // namespace gyre
