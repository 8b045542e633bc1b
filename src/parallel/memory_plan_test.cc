// Memory planner: byte counts against hand computations on a small config, TP / EP / PP sharding
// rules, refusals, and the capacity answers (largest context, sequences that fit).
#include "parallel/memory_plan.h"

#include <gtest/gtest.h>

#include <random>

#include "runtime/model.h"

namespace gyre::parallel {
namespace {

// 4 layers: KDA+dense ×3, then DSA (full indexer) + MoE. D = 64, V = 1000, hc_mult 2.
ModelConfig Small() {
  auto c = ParseModelConfig(R"({"model_type": "glm5_next", "vocab_size": 1000, "hidden_size": 64,
      "num_hidden_layers": 4, "intermediate_size": 128, "moe_intermediate_size": 32,
      "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 48, "kv_lora_rank": 32,
      "qk_nope_head_dim": 16, "qk_rope_head_dim": 0, "v_head_dim": 16, "index_topk": 32, "index_kpool": 4,
      "index_n_heads": 2, "index_head_dim": 16, "linear_num_heads": 4, "linear_head_dim": 16,
      "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "hc_mult": 2,
      "max_position_embeddings": 4096})");
  EXPECT_TRUE(c.ok()) << c.error().message();
  return *c;
}

ModelConfig Full() {
  auto c = ParseModelConfig(R"({"model_type": "glm5_next"})");
  EXPECT_TRUE(c.ok());
  return *c;
}

PlanOptions Opts(int64_t gpus, int64_t mem) {
  PlanOptions o;
  o.num_gpus = gpus;
  o.gpu_memory_bytes = mem;
  o.max_model_len = 256;
  o.max_batch_tokens = 8;
  o.reserve_bytes = 0;
  return o;
}

// Hand counts of Small() (elements), written out term by term:
//   KDA layer: q,k,v 3·64·64 = 12288; conv 3·64·4 = 768; f_a 16·64 = 1024; f_b 64·16 = 1024;
//     dt_bias 64; A_log 4; b_proj 4·64 = 256; g_a 1024; g_b 1024; o_norm 16; o_proj 64·64 = 4096
//     = 21588, of which replicated f_a + g_a + o_norm = 2064, per-head 19524 (4881 per head).
//   MLA: q_a 48·64 = 3072 + norm 48; q_b 4·16·48 = 3072; kv_a 32·64 = 2048 + norm 32;
//     kv_b 4·32·32 = 4096; o 64·64 = 4096 = 16464; per-head q_b + kv_b + o = 11264, replicated 5200.
//   Indexer: wq_b 2·16·48 = 1536; wk 16·64 = 1024; k_norm 32; weights_proj 2·64 = 128;
//     APE 4·16 = 64; compress_gate 16·64 = 1024 = 3808.
//   Dense MLP 3·64·128 = 24576. MoE: router 8·64 = 512; expert 3·64·32 = 6144; shared 6144.
//   Norms + hc per layer: 2·64 + 2·(8·2·64 + 8 + 3) = 2198. Embedding 64000, LM head 64000, norm 64.
TEST(MemoryPlan, SmallConfigMatchesHandCounts) {
  const ModelConfig c = Small();
  auto p = PlanMemory(c, Opts(1, int64_t(1) << 30));
  ASSERT_TRUE(p.ok()) << p.error().message();
  ASSERT_EQ(p->stages.size(), 1u);
  const StageMemory& s = p->stages[0];
  EXPECT_EQ(s.embedding, 2 * 64000);
  EXPECT_EQ(s.lm_head, 2 * 64000);
  EXPECT_EQ(s.kda, 3 * 2 * 21588);
  EXPECT_EQ(s.attention, 2 * 16464 + 2 * 3808);
  EXPECT_EQ(s.dense_mlp, 3 * 2 * 24576);
  EXPECT_EQ(s.routed_experts, 2 * 8 * 6144);
  EXPECT_EQ(s.shared_experts, 2 * 6144);
  EXPECT_EQ(s.norms_hc_router, 4 * (4 * 2198 + 512 + 64));
  // DSA cache: latent 32 in bf16; indexer key 16 and γ 16 in fp32, and the fp32 pooled key (16) once
  // per pool of 4 tokens (the CUDA model).
  EXPECT_EQ(s.cache_bytes_per_token, 2 * 32 + 4 * 32 + 4 * 16 / 4);
  // KDA state: 3 layers × fp32 (conv tail 3·3·64 + state 4·16·16).
  EXPECT_EQ(s.kda_state_bytes_per_sequence, 3 * 4 * (576 + 1024));
  // One sequence of 256 tokens (4 pages of 64).
  EXPECT_EQ(s.cache_bytes, 208 * 256);
  EXPECT_TRUE(p->fits());
}

TEST(MemoryPlan, CacheDtypes) {
  const ModelConfig c = Small();
  PlanOptions o = Opts(1, int64_t(1) << 30);
  o.kv_cache = CacheDtype::kFp8;  // the latent row: 32 codes + an fp32 scale, padded to 48 bytes
  EXPECT_EQ(PlanMemory(c, o)->stages[0].cache_bytes_per_token, 48 + 4 * 32 + 16);
  o.kv_cache = CacheDtype::kInt8;
  EXPECT_EQ(PlanMemory(c, o)->stages[0].cache_bytes_per_token, 48 + 4 * 32 + 16);
  o.page_tokens = 66;  // 4 does not divide the page: one pooled-key row per token
  EXPECT_EQ(PlanMemory(c, o)->stages[0].cache_bytes_per_token, 48 + 4 * 48);
  o.page_tokens = 64;
  o.kv_cache = CacheDtype::kFp32;  // latent, k_I, γ in fp32 + the pooled key per pool
  EXPECT_EQ(PlanMemory(c, o)->stages[0].cache_bytes_per_token, 4 * 64 + 16);
}

TEST(MemoryPlan, WeightDtypesQuantizeOnlyGemmWeights) {
  const ModelConfig c = Small();
  PlanOptions o = Opts(1, int64_t(1) << 30);
  o.weights = WeightDtype::kFp8;
  const StageMemory s = PlanMemory(c, o)->stages[0];
  EXPECT_EQ(s.embedding, 2 * 64000);                           // stays bf16
  EXPECT_EQ(s.attention, (16464 + 2 * 4) + 2 * 3808);          // MLA 1 B + two block scales; indexer bf16
  EXPECT_EQ(s.routed_experts, 8 * 6144 + 4 * 3);               // 49152 elements = 3 blocks of 128×128
  EXPECT_EQ(s.norms_hc_router, 4 * (4 * 2198 + 512 + 64));    // stays fp32
  o.weights = WeightDtype::kInt8;                               // one fp32 scale per D inputs
  EXPECT_EQ(PlanMemory(c, o)->stages[0].dense_mlp, 3 * (24576 + 4 * 24576 / 64));
}

TEST(MemoryPlan, TensorParallelHalvesHeadWeightsAndState) {
  const ModelConfig c = Small();
  PlanOptions o = Opts(2, int64_t(1) << 30);
  o.tp = 2;
  auto p = PlanMemory(c, o);
  ASSERT_TRUE(p.ok()) << p.error().message();
  const StageMemory& s = p->stages[0];
  EXPECT_EQ(p->dp, 1);
  EXPECT_EQ(s.kda, 3 * 2 * (19524 / 2 + 2064));
  EXPECT_EQ(s.attention, 2 * (11264 / 2 + 5200) + 2 * 3808);
  EXPECT_EQ(s.lm_head, 2 * 500 * 64);
  EXPECT_EQ(s.embedding, 2 * 64000);                            // replicated
  EXPECT_EQ(s.dense_mlp, 3 * 2 * 24576);                        // replicated
  EXPECT_EQ(s.cache_bytes_per_token, 2 * 32 + 4 * 32 + 16);     // the latent is replicated
  EXPECT_EQ(s.kda_state_bytes_per_sequence, 3 * 4 * (576 + 1024) / 2);
}

TEST(MemoryPlan, FullModelTpSplitsExactlyThePerHeadPart) {
  const ModelConfig c = Full();
  PlanOptions o = Opts(8, int64_t(141) << 30);
  auto one = PlanMemory(c, o);
  o.tp = 2;
  auto two = PlanMemory(c, o);
  ASSERT_TRUE(one.ok() && two.ok());
  // Replicated per KDA layer: f_a + g_a (2·128·4096) + o_norm (128); per MLA layer q_a + norm,
  // kv_a + norm: 1536·4096 + 1536 + 512·4096 + 512; indexer 7,473,408 (docs/model-glm5-next.md §1.5).
  const int64_t kda_rep = 34 * 2 * (2 * 128 * 4096 + 128);
  const int64_t mla_rep = 11 * 2 * (1536 * 4096 + 1536 + 512 * 4096 + 512 + 7473408);
  EXPECT_EQ(two->stages[0].kda - kda_rep, (one->stages[0].kda - kda_rep) / 2);
  EXPECT_EQ(two->stages[0].attention - mla_rep, (one->stages[0].attention - mla_rep) / 2);
  EXPECT_EQ(two->stages[0].routed_experts, one->stages[0].routed_experts);
}

TEST(MemoryPlan, ExpertAndPipelineSplits) {
  const ModelConfig c = Full();
  PlanOptions o = Opts(8, int64_t(141) << 30);
  o.ep = 8;
  auto p = PlanMemory(c, o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->stages[0].routed_experts, int64_t(42) * 36 * 25165824 * 2);  // 288 / 8 experts per GPU
  EXPECT_EQ(p->dp, 8);
  o.ep = 1;
  o.pp = 4;
  o.tp = 2;
  p = PlanMemory(c, o);
  ASSERT_TRUE(p.ok()) << p.error().message();
  ASSERT_EQ(p->stages.size(), 4u);
  EXPECT_EQ(p->stages[0].layer_end - p->stages[0].layer_begin, 12);  // 45 = 12 + 11 + 11 + 11
  EXPECT_GT(p->stages[0].embedding, 0);
  EXPECT_EQ(p->stages[1].embedding, 0);
  EXPECT_EQ(p->stages[2].lm_head, 0);
  EXPECT_EQ(p->stages[3].lm_head, 2 * 77440 * 4096);
  // Stage 0 holds layers 0..11: DSA layers 3, 7, 11.
  EXPECT_EQ(p->stages[0].cache_bytes_per_token, 3 * (2 * 512 + 4 * 2 * 128 + 4 * 128 / 16));
}

// Property on fresh random shapes: the bytes of every component add back to the parameter count
// of Summarize (`gyre inspect`), for any layer split.
TEST(MemoryPlan, ComponentsAddUpToSummarizeOnRandomConfigs) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t heads = pick(1, 8), layers = pick(1, 12);
    const std::string j = "{\"model_type\": \"glm5_next\", \"vocab_size\": " + std::to_string(pick(10, 500) * 8) +
                          ", \"hidden_size\": " + std::to_string(pick(1, 8) * 16) +
                          ", \"num_hidden_layers\": " + std::to_string(layers) +
                          ", \"intermediate_size\": " + std::to_string(pick(1, 200)) +
                          ", \"moe_intermediate_size\": " + std::to_string(pick(1, 64)) +
                          ", \"num_attention_heads\": " + std::to_string(heads) +
                          ", \"num_key_value_heads\": " + std::to_string(heads) +
                          ", \"q_lora_rank\": " + std::to_string(pick(1, 64)) +
                          ", \"kv_lora_rank\": " + std::to_string(pick(1, 64)) +
                          ", \"qk_nope_head_dim\": " + std::to_string(pick(1, 32)) +
                          ", \"v_head_dim\": " + std::to_string(pick(1, 32)) +
                          ", \"index_topk\": 16, \"index_kpool\": 4, \"index_n_heads\": " + std::to_string(pick(1, 4)) +
                          ", \"index_head_dim\": " + std::to_string(pick(1, 32)) +
                          ", \"linear_num_heads\": " + std::to_string(pick(1, 8)) +
                          ", \"linear_head_dim\": " + std::to_string(pick(1, 32)) +
                          ", \"n_routed_experts\": " + std::to_string(pick(2, 16)) +
                          ", \"num_experts_per_tok\": 2, \"n_shared_experts\": " + std::to_string(pick(0, 2)) +
                          ", \"hc_mult\": " + std::to_string(pick(1, 4)) + "}";
    auto c = ParseModelConfig(j);
    ASSERT_TRUE(c.ok()) << c.error().message() << " " << j;
    PlanOptions o = Opts(pick(1, std::min<int64_t>(layers, 4)), int64_t(1) << 40);
    o.pp = o.num_gpus;
    auto p = PlanMemory(*c, o);
    ASSERT_TRUE(p.ok()) << p.error().message() << " " << j;
    int64_t elems = 0;
    for (const StageMemory& s : p->stages) {
      elems += (s.embedding + s.lm_head + s.attention + s.kda + s.dense_mlp + s.routed_experts + s.shared_experts) / 2 +
               s.norms_hc_router / 4;
    }
    EXPECT_EQ(elems, Summarize(*c).params_total) << j;
  }
}

TEST(MemoryPlan, ActivationFormulaByHand) {
  const ModelConfig c = Small();
  const PlanOptions o = Opts(1, int64_t(1) << 30);
  // Floats per token: streams + temporaries (2+7)·64 = 576; KDA 11·64 = 704; MLA q + out 4·32 +
  // latent 32 + q residual 48 = 208, absorbed 2·4·32 = 256; indexer 2·16 + 2·16 + 2 = 66; SwiGLU
  // 3·128 = 384; MoE router 8 + 2·2 + gathered 2·(64 + 96) = 332. Sum 2526.
  // Bytes: 4·8·2526 + pool scores 4·8·(64/4) + logits 4·1·1000.
  EXPECT_EQ(ActivationBytes(c, o, 0, 4, 8, 64, 1), 4 * 8 * 2526 + 4 * 8 * 16 + 4 * 1000);
  // A stage without the last layer has no logits; one of KDA+dense layers has no MLA or MoE term.
  EXPECT_EQ(ActivationBytes(c, o, 0, 3, 8, 64, 1), 4 * 8 * (576 + 704 + 384));
}

TEST(MemoryPlan, CapacityAnswersAreTight) {
  const ModelConfig c = Small();
  PlanOptions o = Opts(4, 4 << 20);  // 4 MiB per GPU
  o.tp = 2;                          // dp = 2
  auto p = PlanMemory(c, o);
  ASSERT_TRUE(p.ok()) << p.error().message();
  ASSERT_TRUE(p->fits());
  ASSERT_GT(p->max_seqs_at_max_model_len, 0);
  ASSERT_EQ(p->max_seqs_at_max_model_len % p->dp, 0);
  o.max_num_seqs = p->max_seqs_at_max_model_len;
  EXPECT_TRUE(PlanMemory(c, o)->fits());
  o.max_num_seqs += p->dp;
  EXPECT_FALSE(PlanMemory(c, o)->fits());
  o.max_num_seqs = 1;
  o.max_model_len = p->max_context_per_request;
  EXPECT_TRUE(PlanMemory(c, o)->fits());
  o.max_model_len += o.page_tokens;
  auto over = PlanMemory(c, o);
  EXPECT_FALSE(over->fits());
  EXPECT_NE(over->refusal.find("not one sequence of that length fits"), std::string::npos) << over->refusal;
}

TEST(MemoryPlan, RefusesWhatDoesNotFitWithTheReason) {
  PlanOptions o = Opts(1, int64_t(80) << 30);
  auto p = PlanMemory(Full(), o);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->fits());
  EXPECT_NE(p->refusal.find("before any cache"), std::string::npos) << p->refusal;
  EXPECT_LT(p->stages[0].headroom_bytes, 0);
  EXPECT_EQ(p->max_context_per_request, 0);
}

TEST(MemoryPlan, RejectsInconsistentShapes) {
  const ModelConfig c = Full();
  auto reason = [&](PlanOptions o) {
    auto p = PlanMemory(c, o);
    EXPECT_FALSE(p.ok());
    return p.ok() ? std::string() : p.error().message();
  };
  PlanOptions o = Opts(8, int64_t(141) << 30);
  o.tp = 3;
  EXPECT_NE(reason(o).find("not a multiple of tp"), std::string::npos);
  o = Opts(8, int64_t(141) << 30);
  o.pp = 3;
  EXPECT_NE(reason(o).find("equal stages"), std::string::npos);
  o = Opts(8, int64_t(141) << 30);
  o.ep = 16;
  EXPECT_NE(reason(o).find("does not divide"), std::string::npos);
  o = Opts(128, int64_t(141) << 30);
  o.tp = 128;
  EXPECT_NE(reason(o).find("KDA heads"), std::string::npos);
  o = Opts(8, 0);
  EXPECT_NE(reason(o).find("--gpu-memory"), std::string::npos);
  ModelConfig odd = Small();
  odd.vocab_size = 1001;
  auto p = PlanMemory(odd, [] { PlanOptions x = Opts(2, int64_t(1) << 30); x.tp = 2; return x; }());
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message().find("not divisible by tp"), std::string::npos);
}

}  // namespace
}  // namespace gyre::parallel
