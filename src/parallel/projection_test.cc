// Projection: per-op costs of a synthetic bench JSON combined by hand for the trivial plan, TP,
// EP and the communication bytes; the recorded H200 bench reproduces its own 45-layer projection.
#include "parallel/projection.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace gyre::parallel {
namespace {

const char* kSmallConfig = R"({"model_type": "glm5_next", "vocab_size": 1000, "hidden_size": 64,
    "num_hidden_layers": 4, "intermediate_size": 128, "moe_intermediate_size": 32,
    "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 48, "kv_lora_rank": 32,
    "qk_nope_head_dim": 16, "qk_rope_head_dim": 0, "v_head_dim": 16, "index_topk": 32, "index_kpool": 4,
    "index_n_heads": 2, "index_head_dim": 16, "linear_num_heads": 4, "linear_head_dim": 16,
    "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "hc_mult": 2})";

// Decode at batch 1 and 3; the "kda/" sums cover 3 layers, "dsa/" one.
std::string BenchJson() {
  return std::string(R"({"gpu": "test", "config_file": "small", "config": )") + kSmallConfig + R"(,
    "decode": [
      {"batch": 3, "context": 64, "eager_step_op_ms": {"kda/kda.in_proj": 6.0, "kda/norm": 0.6,
        "kda/mlp.dense": 1.2, "dsa/mla.attention": 1.0, "dsa/moe.experts": 1.6, "dsa/moe.router": 0.2,
        "embed": 0.05, "lm_head": 0.4, "head.norm": 0.01, "argmax": 0.02}},
      {"batch": 1, "context": 64, "eager_step_op_ms": {"kda/kda.in_proj": 3.0, "kda/norm": 0.3,
        "kda/mlp.dense": 0.6, "dsa/mla.attention": 0.5, "dsa/moe.experts": 0.8, "dsa/moe.router": 0.1,
        "embed": 0.05, "lm_head": 0.4, "head.norm": 0.01, "argmax": 0.02}}],
    "prefill": [
      {"prompt_tokens": 100, "last_chunk_op_ms": {"kda/kda.chunk": 30.0, "dsa/moe.experts": 8.0,
        "embed": 1.0, "lm_head": 0.4}}]})";
}

ModelConfig Small() { return *ParseModelConfig(kSmallConfig); }

MemoryPlan Plan(int64_t gpus, int64_t tp, int64_t ep) {
  PlanOptions o;
  o.num_gpus = gpus;
  o.gpu_memory_bytes = int64_t(1) << 30;
  o.tp = tp;
  o.ep = ep;
  o.max_model_len = 64;
  auto p = PlanMemory(Small(), o);
  EXPECT_TRUE(p.ok()) << p.error().message();
  return *p;
}

const LinkModel kFreeLinks{1e12, 0};

TEST(Projection, TrivialPlanIsTheSumOfPerLayerCosts) {
  auto b = ParseBenchCosts(BenchJson(), 8192);
  ASSERT_TRUE(b.ok()) << b.error().message();
  ASSERT_EQ(b->decode.front().tokens, 1);  // sorted by batch
  auto pr = Project(Small(), Plan(1, 1, 1), *b, kFreeLinks, {1, 2});
  ASSERT_TRUE(pr.ok()) << pr.error().message();
  ASSERT_EQ(pr->steps.size(), 3u);
  // b1: 3 KDA+dense layers (1.0 + 0.1 + 0.2) + DSA+MoE (0.5 + 0.8 + 0.1) + outer 0.48.
  EXPECT_NEAR(pr->steps[0].step_ms, 5.78, 1e-9);
  EXPECT_NEAR(pr->steps[0].tokens_per_s, 1e3 / 5.78, 1e-6);
  // b2 halfway between the measured batches: 3·1.95 + 2.1 + 0.48.
  EXPECT_NEAR(pr->steps[1].step_ms, 8.43, 1e-9);
  // Prefill of 100 tokens: one point, as measured: 3·10 + 8 + 1.4.
  EXPECT_EQ(pr->steps[2].phase, "prefill");
  EXPECT_NEAR(pr->steps[2].step_ms, 39.4, 1e-9);
  EXPECT_NEAR(pr->steps[2].tokens_per_s, 100 / 39.4e-3, 1e-6);
}

TEST(Projection, TensorParallelDividesHeadOpsOnly) {
  auto b = ParseBenchCosts(BenchJson(), 8192);
  auto pr = Project(Small(), Plan(2, 2, 1), *b, kFreeLinks, {1});
  ASSERT_TRUE(pr.ok()) << pr.error().message();
  // kda.in_proj, mla.attention, lm_head halve; norms, dense MLP, router, experts (ep = 1) do not.
  EXPECT_NEAR(pr->steps[0].step_ms, 3 * (0.5 + 0.1 + 0.2) + 0.25 + 0.8 + 0.1 + 0.05 + 0.2 + 0.01 + 0.02, 1e-6);
  // Bytes: per layer a ring all-reduce of [1, 64] bf16: 2·(1/2)·128 B.
  EXPECT_EQ(pr->steps[0].tp_allreduce_bytes, 4 * 128);
  EXPECT_EQ(pr->steps[0].ep_alltoall_bytes, 0);
  // Latency 10 us per collective at 1 GB/s: 4 all-reduces + the LM head's (max, id) gather.
  auto slow = Project(Small(), Plan(2, 2, 1), *b, LinkModel{1, 10}, {1});
  EXPECT_NEAR(slow->steps[0].comm_ms, 4 * (0.01 + 128e-6) + (0.01 + 8e-6), 1e-9);
}

TEST(Projection, ExpertParallelSharesTheStagesExpertWork) {
  auto b = ParseBenchCosts(BenchJson(), 8192);
  // 2 GPUs, tp 1: two attention replicas with one sequence each; the experts' one-GPU cost at the
  // stage's 2 tokens (1.2 ms, interpolated) is shared by 2 GPUs.
  auto pr = Project(Small(), Plan(2, 1, 2), *b, kFreeLinks, {2});
  ASSERT_TRUE(pr.ok()) << pr.error().message();
  EXPECT_NEAR(pr->steps[0].step_ms, 3.9 + 0.5 + 0.6 + 0.1 + 0.48, 1e-6);
  EXPECT_NEAR(pr->steps[0].tokens_per_s, 2 / 5.58e-3, 1e-6);
  // Each GPU dispatches 1 token × top-2 rows of 64 bf16, half of them remote, and gets them back.
  EXPECT_EQ(pr->steps[0].ep_alltoall_bytes, 2 * 128);
}

TEST(Projection, PipelineDecodeIsBoundByOnePassAtSmallBatches) {
  auto b = ParseBenchCosts(BenchJson(), 8192);
  PlanOptions o;
  o.num_gpus = 2;
  o.pp = 2;
  o.gpu_memory_bytes = int64_t(1) << 30;
  o.max_model_len = 64;
  auto plan = PlanMemory(Small(), o);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  auto pr = Project(Small(), *plan, *b, kFreeLinks, {1, 2});
  ASSERT_TRUE(pr.ok()) << pr.error().message();
  // Stage 0: layers 0-1 (2 × 1.3) + embed 0.05; stage 1: layer 2 (1.3) + DSA+MoE 1.4 + head 0.43.
  EXPECT_NEAR(pr->steps[0].step_ms, 3.13, 1e-6);
  EXPECT_NEAR(pr->steps[0].latency_ms, 5.78, 1e-6);
  EXPECT_NEAR(pr->steps[0].tokens_per_s, 1e3 / 5.78, 1e-6);      // one sequence: one pass per token
  EXPECT_NEAR(pr->steps[1].tokens_per_s, 2e3 / (2 * 3.13), 1e-6);  // two micro-batches of one
}

TEST(Projection, RefusesOtherShapesAndContextParallel) {
  auto b = ParseBenchCosts(BenchJson(), 8192);
  auto full = ParseModelConfig(R"({"model_type": "glm5_next"})");
  PlanOptions o;
  o.gpu_memory_bytes = int64_t(1) << 40;
  auto fp = PlanMemory(*full, o);
  auto pr = Project(*full, *fp, *b, kFreeLinks, {1});
  ASSERT_FALSE(pr.ok());
  EXPECT_NE(pr.error().message().find("vocab_size"), std::string::npos) << pr.error().message();
  PlanOptions cp;
  cp.num_gpus = 2;
  cp.cp = 2;
  cp.gpu_memory_bytes = int64_t(1) << 30;
  cp.max_model_len = 64;
  auto cpp = PlanMemory(Small(), cp);
  ASSERT_TRUE(cpp.ok()) << cpp.error().message();
  EXPECT_FALSE(Project(Small(), *cpp, *b, kFreeLinks, {1}).ok());
  EXPECT_FALSE(ParseBenchCosts("{\"config\": 1}", 8192).ok());
  EXPECT_FALSE(ParseBenchCosts("not json", 8192).ok());
}

// The recorded one-H200 run of the 4-layer default-shape model carries its own 45-layer
// projection (embedding + head + per-type layer times); ours, from per-op times, must agree.
TEST(Projection, RecordedH200BenchReproducesItsOwnProjection) {
  std::ifstream f(std::string(GYRE_SOURCE_DIR) + "/bench/results/gpu_model_bench_4layer_2026-12-02.json");
  ASSERT_TRUE(f) << "missing recorded bench file";
  std::stringstream ss;
  ss << f.rdbuf();
  auto b = ParseBenchCosts(ss.str(), 8192);
  ASSERT_TRUE(b.ok()) << b.error().message();
  auto full = ParseModelConfig(R"({"model_type": "glm5_next"})");
  PlanOptions o;
  o.gpu_memory_bytes = int64_t(1) << 40;
  auto p = PlanMemory(*full, o);
  ASSERT_TRUE(p.ok());
  auto pr = Project(*full, *p, *b, kFreeLinks, {1, 16, 64, 256});
  ASSERT_TRUE(pr.ok()) << pr.error().message();
  const double recorded_decode[] = {16.69257578253746, 60.21156791970134, 108.35827450826764, 176.65058831870556};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(pr->steps[i].step_ms / recorded_decode[i], 1.0, 0.02) << i;
  EXPECT_NEAR(pr->steps[4].step_ms / 624.7514554262161, 1.0, 0.02);  // prefill of 4096 tokens
}

}  // namespace
}  // namespace gyre::parallel
