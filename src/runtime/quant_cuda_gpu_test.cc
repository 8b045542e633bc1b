// W8A8 on the GPU (needs a GPU; ctest label gpu, scripts/gpu_check.sh step quant): the trained
// fixture tests/fixtures/glm5_mini quantized by QuantizeCheckpoint to fp8-block and to int8, run
// by the CudaModel (W8A8 projections and the W8A8 grouped MoE) and by the CPU Model on the same
// inputs.
//
// Bounds (stated in docs/quantization.md "GPU"):
//   logits of a 64-token forward, GPU vs CPU W8A8:   rel-L2 <= 1e-2, and <= half of what the
//       quantization itself costs on the CPU (W8A8 vs the unquantized model: 0.022 fp8 / 0.012
//       int8 at 96 tokens). A GPU running weight-only, or the wrong scales, lands above it.
//   greedy continuation of 16 tokens after a 32-token prompt: the first 8 ids equal the CPU's
//       (the rest are reported; an argmax near a tie may flip under fp32 reassociation).
//   bf16 kept weights (the serving default): the same forward within rel-L2 5e-2.
// The CPU and GPU differ by fp32 reassociation in every op, and for FP8 by the tensor cores'
// accumulation; a different activation code then follows where a value sits on a rounding
// midpoint. INT8 GEMMs are bit-exact with the CPU's for equal inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdlib.h>

#include "model/quantize_checkpoint.h"
#include "model/safetensors.h"
#include "ops/basic.h"
#include "ops/sampling.h"
#include "runtime/cuda_model.h"
#include "runtime/model.h"
#include "runtime/model_runner.h"
#include "runtime/parity.h"

namespace gyre {
namespace {

// The fixture under the working directory when there (a packed binary run from another checkout's
// root, as scripts/gpu_check.sh does), else under the source tree it was built from.
const std::string kDir = std::filesystem::exists("tests/fixtures/glm5_mini/config.json")
                             ? std::string("tests/fixtures/glm5_mini")
                             : std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/glm5_mini";

std::vector<int32_t> GoldenIds(size_t n) {
  auto f = SafetensorsFile::Open(kDir + "/golden_long.safetensors");
  EXPECT_TRUE(f.ok());
  std::vector<int32_t> ids;
  if (!f.ok()) return ids;
  for (float v : TensorToF32((*f)->tensors().at("input_ids"))) ids.push_back(static_cast<int32_t>(v));
  ids.resize(std::min(ids.size(), n));
  return ids;
}

std::vector<float> CpuLogits(const Model& m, std::span<const int32_t> ids) {
  SequenceState st = m.NewSequence();
  std::vector<float> logits;
  const SeqInput in{&st, ids, /*all_logits=*/true};
  EXPECT_TRUE(m.Forward(std::span<const SeqInput>(&in, 1), &logits).ok());
  return logits;
}

Result<std::vector<float>> GpuLogits(RunnerSession& gpu, std::span<const int32_t> ids) {
  GYRE_ASSIGN_OR_RETURN(int s, gpu.NewSequence());
  RunnerSession::Input in{s, ids, {}, true};
  std::vector<float> got;
  GYRE_RETURN_IF_ERROR(gpu.Step(std::span<const RunnerSession::Input>(&in, 1), nullptr, &got));
  gpu.Release(s);
  return got;
}

int32_t ArgmaxLast(const std::vector<float>& logits, int64_t V) {
  return ops::Argmax(std::span<const float>(logits.data() + logits.size() - V, V));
}

CudaModelOptions Options(bool bf16) {
  CudaModelOptions o;
  o.bf16_weights = bf16;
  o.max_seqs = 4;
  o.max_batch_tokens = 128;
  o.kv_tokens = 1024;
  o.page_tokens = 16;
  return o;
}

class QuantCudaParity : public ::testing::TestWithParam<QuantScheme> {};

TEST_P(QuantCudaParity, LogitsAndGreedyMatchTheCpu) {
  const QuantScheme scheme = GetParam();
  char tmpl[] = "/tmp/gyre_qcuda_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  QuantizeOptions qo;
  qo.scheme = scheme;
  ASSERT_TRUE(QuantizeCheckpoint(kDir, tmpl, qo).ok());
  auto ref = Model::Load(kDir);
  auto cpu = Model::Load(tmpl);
  ASSERT_TRUE(ref.ok() && cpu.ok());
  std::filesystem::remove_all(tmpl);
  const ModelConfig& c = (*cpu)->config();
  const int64_t V = c.vocab_size;
  const std::vector<int32_t> ids = GoldenIds(64);
  ASSERT_EQ(ids.size(), 64u);

  const std::vector<float> want = CpuLogits(**cpu, ids), unq = CpuLogits(**ref, ids);
  const double quant_cost = ops::Compare(want, unq).rel_l2;

  auto gm = CudaModel::FromHost(c, (*cpu)->weights(), Options(false));
  ASSERT_TRUE(gm.ok()) << gm.error().ToString();
  RunnerSession gpu(**gm);
  auto got = GpuLogits(gpu, ids);
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  const double rel = ops::Compare(*got, want).rel_l2;
  std::printf("[%s] logits rel-L2 GPU vs CPU W8A8 %.3e; CPU W8A8 vs unquantized %.3e\n", QuantSchemeName(scheme), rel,
              quant_cost);
  EXPECT_LE(rel, 1e-2);
  EXPECT_LE(rel, 0.5 * quant_cost);

  // Greedy: GPU decode steps (CUDA graphs) vs the CPU, each feeding its own token back.
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 32);
  SampleSpec greedy;
  greedy.enabled = true;
  std::vector<SampledToken> sampled;
  auto s = gpu.NewSequence();
  ASSERT_TRUE(s.ok());
  SequenceState st = (*cpu)->NewSequence();
  std::vector<int32_t> g_ids, c_ids;
  std::vector<float> lg;
  RunnerSession::Input in{*s, prompt, greedy};
  ASSERT_TRUE(gpu.Step(std::span<const RunnerSession::Input>(&in, 1), &sampled).ok());
  SeqInput ci{&st, prompt, false};
  ASSERT_TRUE((*cpu)->Forward(std::span<const SeqInput>(&ci, 1), &lg).ok());
  for (int i = 0; i < 16; ++i) {
    g_ids.push_back(sampled[0].id);
    c_ids.push_back(ArgmaxLast(lg, V));
    if (i == 15) break;
    const int32_t gi = g_ids.back(), cn = c_ids.back();
    RunnerSession::Input d{*s, std::span<const int32_t>(&gi, 1), greedy};
    ASSERT_TRUE(gpu.Step(std::span<const RunnerSession::Input>(&d, 1), &sampled).ok());
    SeqInput cd{&st, std::span<const int32_t>(&cn, 1), false};
    ASSERT_TRUE((*cpu)->Forward(std::span<const SeqInput>(&cd, 1), &lg).ok());
  }
  gpu.Release(*s);
  size_t same = 0;
  while (same < g_ids.size() && g_ids[same] == c_ids[same]) ++same;
  std::printf("[%s] greedy: %zu of 16 leading ids equal\n", QuantSchemeName(scheme), same);
  EXPECT_GE(same, 8u);

  // bf16 kept weights (embedding, head, router, gates, norms-adjacent projections) with W8A8.
  auto gb = CudaModel::FromHost(c, (*cpu)->weights(), Options(true));
  ASSERT_TRUE(gb.ok()) << gb.error().ToString();
  RunnerSession gpu_bf16(**gb);
  auto got_bf16 = GpuLogits(gpu_bf16, ids);
  ASSERT_TRUE(got_bf16.ok()) << got_bf16.error().ToString();
  const double rel_bf16 = ops::Compare(*got_bf16, want).rel_l2;
  std::printf("[%s] bf16 kept weights: logits rel-L2 GPU vs CPU W8A8 %.3e\n", QuantSchemeName(scheme), rel_bf16);
  EXPECT_LE(rel_bf16, 5e-2);
}

INSTANTIATE_TEST_SUITE_P(Schemes, QuantCudaParity,
                         ::testing::Values(QuantScheme::kFp8Block, QuantScheme::kInt8Channel),
                         [](const auto& info) { return std::string(info.param == QuantScheme::kFp8Block ? "fp8" : "int8"); });

}  // namespace
}  // namespace gyre
