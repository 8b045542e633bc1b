// W8A8 on the GPU (needs a GPU; ctest label gpu, scripts/gpu_check.sh step quant): the trained
// fixture tests/fixtures/glm5_mini quantized by QuantizeCheckpoint to fp8-block and to int8, run
// by the CudaModel (W8A8 projections and the W8A8 grouped MoE) and by the CPU Model on the same
// inputs.
//
// Bounds (stated in docs/quantization.md "GPU"):
//   logits of a 64-token forward, GPU vs CPU W8A8:   rel-L2 <= 1e-2, and <= half of what the
//       quantization itself costs on the CPU (W8A8 vs the unquantized model: 0.022 fp8 / 0.012
//       int8 at 96 tokens). A GPU running weight-only, or the wrong scales, lands above it.
//   greedy decode of 16 tokens after a 32-token prompt, both sides fed the CPU's ids (teacher
//       forcing): every GPU id equals the CPU's argmax, except where the CPU's top-2 margin is
//       under 0.1 standard deviations of that step's logits (a near tie). Until 2026-12-05 this
//       bound was "the first 8 of 16 free-running ids equal": set before any GPU run, it failed
//       for fp8 at 7 of 16 (logits rel-L2 7.9e-3, inside the bound above), and a free-running
//       count turns one near-tie flip into a comparison of two different texts.
//   bf16 kept weights (the serving default): the same forward within rel-L2 5e-2.
// The CPU and GPU differ by fp32 reassociation in every op, and for FP8 by the tensor cores'
// accumulation; a different activation code then follows where a value sits on a rounding
// midpoint. INT8 GEMMs are bit-exact with the CPU's for equal inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdlib.h>

#include "model/quantize_checkpoint.h"
#include "model/safetensors.h"
#include "ops/basic.h"
#include "ops/sampling.h"
#include "runtime/cuda_model.h"
#include "runtime/gpu_fixture_for_tests.h"
#include "runtime/model.h"
#include "runtime/model_runner.h"
#include "runtime/parity.h"

namespace gyre {
namespace {

const std::string kDir = Glm5MiniDir();
std::vector<int32_t> GoldenIds(size_t n) { return gyre::GoldenIds(kDir, n); }

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

CudaModelOptions Options(bool bf16) { return SmallCudaOptions(bf16); }

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

  // Greedy decode steps (CUDA graphs), teacher-forced: both sides are fed the CPU's greedy id, so
  // one flip does not turn every later step into a comparison of different texts. At each step
  // the GPU's greedy id must equal the CPU's argmax unless the CPU's top-2 margin is under
  // kNearTie standard deviations of that step's logits (a near tie, where an error inside the
  // logits bound above may legitimately flip the choice).
  constexpr double kNearTie = 0.1;
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 32);
  SampleSpec greedy;
  greedy.enabled = true;
  std::vector<SampledToken> sampled;
  auto s = gpu.NewSequence();
  ASSERT_TRUE(s.ok());
  SequenceState st = (*cpu)->NewSequence();
  std::vector<float> lg;
  RunnerSession::Input in{*s, prompt, greedy};
  ASSERT_TRUE(gpu.Step(std::span<const RunnerSession::Input>(&in, 1), &sampled).ok());
  SeqInput ci{&st, prompt, false};
  ASSERT_TRUE((*cpu)->Forward(std::span<const SeqInput>(&ci, 1), &lg).ok());
  int equal = 0, near_tie_flips = 0;
  for (int i = 0; i < 16; ++i) {
    ASSERT_EQ(sampled.size(), 1u);
    const std::span<const float> last(lg.data() + lg.size() - V, V);
    const int32_t want_id = ops::Argmax(last);
    double mean = 0, var = 0;
    float top2 = -INFINITY;
    for (int64_t v = 0; v < V; ++v) mean += last[v];
    mean /= static_cast<double>(V);
    for (int64_t v = 0; v < V; ++v) {
      var += (last[v] - mean) * (last[v] - mean);
      if (v != want_id) top2 = std::max(top2, last[v]);
    }
    const double margin = last[want_id] - top2, tie = kNearTie * std::sqrt(var / static_cast<double>(V));
    if (sampled[0].id == want_id) {
      ++equal;
    } else {
      std::printf("[%s] step %d: GPU %d, CPU %d; CPU top-2 margin %.4g (near tie below %.4g)\n",
                  QuantSchemeName(scheme), i, sampled[0].id, want_id, margin, tie);
      EXPECT_LT(margin, tie) << "step " << i << ": the GPU's greedy id differs where the CPU's choice is clear";
      ++near_tie_flips;
    }
    if (i == 15) break;
    RunnerSession::Input d{*s, std::span<const int32_t>(&want_id, 1), greedy};
    ASSERT_TRUE(gpu.Step(std::span<const RunnerSession::Input>(&d, 1), &sampled).ok());
    SeqInput cd{&st, std::span<const int32_t>(&want_id, 1), false};
    ASSERT_TRUE((*cpu)->Forward(std::span<const SeqInput>(&cd, 1), &lg).ok());
  }
  gpu.Release(*s);
  std::printf("[%s] greedy (teacher-forced): %d of 16 ids equal, %d near-tie flips\n", QuantSchemeName(scheme),
              equal, near_tie_flips);

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
