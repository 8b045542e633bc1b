// verify parallel end to end: every plan passes in fp32; a deliberately broken plan fails and
// names its op; a bf16 CP merge fails with an error that grows with the sequence length.
#include "parallel/verify_parallel.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace gyre::parallel {
namespace {

constexpr uint64_t kSeed = 20240611;

ParallelReport Verify(const std::string& plan, VerifyParallelOptions o = {}) {
  if (o.seed == 0) o.seed = kSeed;
  auto r = VerifyParallel(plan, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ParallelReport{};
}

const OpCheck* Find(const ParallelReport& r, const std::string& op, int64_t tokens = -1) {
  for (const auto& c : r.checks)
    if (c.op == op && (tokens < 0 || c.tokens == tokens)) return &c;
  return nullptr;
}

class Fp32Plans : public ::testing::TestWithParam<const char*> {};

TEST_P(Fp32Plans, EveryOpWithinTolerance) {
  const ParallelReport r = Verify(GetParam());
  EXPECT_TRUE(r.pass) << ReportToText(r);
  EXPECT_FALSE(r.checks.empty());
}

// n = 3 splits heads, experts and tokens unevenly.
INSTANTIATE_TEST_SUITE_P(Plans, Fp32Plans,
                         ::testing::Values("tp=2", "tp=4", "tp=3", "ep=2", "ep=4", "ep=3", "cp=2", "cp=4"));

TEST(VerifyParallel, ExpectedOpsAreChecked) {
  const ParallelReport tp = Verify("tp=2");
  for (const char* op : {"kda.proj", "kda.conv", "kda.core", "kda.out", "engine.kda_layer", "mla.proj",
                         "mla.indexer", "mla.attn", "mla.out", "engine.mla_layer", "lm_head.logits",
                         "lm_head.argmax", "engine.logits"})
    EXPECT_NE(Find(tp, op), nullptr) << op;
  const ParallelReport ep = Verify("ep=2");
  for (const char* op : {"moe.route", "moe.dispatch", "moe.experts", "moe.combine", "engine.moe_layer"})
    EXPECT_NE(Find(ep, op), nullptr) << op;
  // Sharding never changes discrete results or moved data.
  EXPECT_TRUE(Find(tp, "lm_head.argmax")->bitwise);
  EXPECT_TRUE(Find(tp, "mla.indexer")->bitwise);
  EXPECT_TRUE(Find(ep, "moe.dispatch")->bitwise);
}

struct FaultCase {
  const char* plan;
  const char* op;
};
class BrokenPlan : public ::testing::TestWithParam<FaultCase> {};

TEST_P(BrokenPlan, FailsAndNamesTheOp) {
  VerifyParallelOptions o;
  o.fault = InjectedFault::kShardOffset;
  o.cp_lengths = {256};
  const ParallelReport r = Verify(GetParam().plan, o);
  EXPECT_FALSE(r.pass);
  ASSERT_NE(r.FirstFailure(), nullptr);
  EXPECT_EQ(r.FirstFailure()->op, GetParam().op) << ReportToText(r);
  EXPECT_GT(r.FirstFailure()->rel_l2, 1e-2);
  // Ops upstream of the fault still pass: the failure is localised, not smeared.
  for (const auto& c : r.checks) {
    if (&c == r.FirstFailure()) break;
    EXPECT_TRUE(c.pass) << c.op;
  }
}

INSTANTIATE_TEST_SUITE_P(Faults, BrokenPlan,
                         ::testing::Values(FaultCase{"tp=2", "kda.conv"}, FaultCase{"tp=4", "kda.conv"},
                                           FaultCase{"ep=2", "moe.experts"}, FaultCase{"cp=2", "kda.conv"}));

TEST(VerifyParallel, Bf16MergeErrorGrowsWithLengthAndFails) {
  VerifyParallelOptions o;
  o.merge_precision = MergePrecision::kBf16;
  const ParallelReport bf16 = Verify("cp=4", o);
  const ParallelReport fp32 = Verify("cp=4");
  ASSERT_TRUE(fp32.pass) << ReportToText(fp32);
  EXPECT_FALSE(bf16.pass);
  ASSERT_NE(bf16.FirstFailure(), nullptr);
  EXPECT_EQ(bf16.FirstFailure()->op, "kda.cp_merge") << ReportToText(bf16);
  const OpCheck* shortest = Find(bf16, "kda.cp_merge", 256);
  const OpCheck* longest = Find(bf16, "kda.cp_merge", 4096);
  ASSERT_TRUE(shortest && longest);
  EXPECT_GT(shortest->rel_l2, shortest->tolerance);
  EXPECT_GT(longest->rel_l2, 1.5 * shortest->rel_l2) << ReportToText(bf16);
  for (int64_t t : {256, 1024, 4096}) EXPECT_LT(Find(fp32, "kda.cp_merge", t)->rel_l2, 1e-5);
  EXPECT_EQ(bf16.WorstFailure()->op, "kda.cp_merge");
  EXPECT_EQ(bf16.WorstFailure()->tokens, 4096);
}

// Negative result the docs rely on: when the state forgets within a few hundred tokens, the bf16
// merge still fails the tolerance but its error no longer grows with the length.
TEST(VerifyParallel, Bf16MergeErrorStaysFlatWhenTheStateForgets) {
  VerifyParallelOptions o;
  o.merge_precision = MergePrecision::kBf16;
  o.cp_regime = CpRegime::kShortMemory;
  const ParallelReport r = Verify("cp=4", o);
  EXPECT_FALSE(r.pass);
  const double shortest = Find(r, "kda.cp_merge", 256)->rel_l2, longest = Find(r, "kda.cp_merge", 4096)->rel_l2;
  EXPECT_GT(shortest, 1e-4);
  EXPECT_LT(longest, 1.3 * shortest) << ReportToText(r);
}

TEST(VerifyParallel, SameSeedSameNumbers) {
  const ParallelReport a = Verify("cp=2"), b = Verify("cp=2");
  const ParallelReport c = Verify("ep=4"), d = Verify("ep=4");
  ASSERT_EQ(a.checks.size(), b.checks.size());
  for (size_t i = 0; i < a.checks.size(); ++i) EXPECT_EQ(a.checks[i].rel_l2, b.checks[i].rel_l2) << a.checks[i].op;
  ASSERT_EQ(c.checks.size(), d.checks.size());
  for (size_t i = 0; i < c.checks.size(); ++i) EXPECT_EQ(c.checks[i].rel_l2, d.checks[i].rel_l2) << c.checks[i].op;
}

TEST(VerifyParallel, FreshSeedIsRecorded) {
  VerifyParallelOptions o;
  o.seed = 0;
  auto r = VerifyParallel("ep=2", o);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->seed, 0u);
}

TEST(VerifyParallel, MalformedPlansAreRejected) {
  VerifyParallelOptions bf16;
  bf16.merge_precision = MergePrecision::kBf16;
  EXPECT_EQ(VerifyParallel("tp=2", bf16).status().code(), StatusCode::kInvalidArgument);
  for (const char* p : {"tp", "tp=0", "tp=9", "xx=2", "tp=2x", "=2", ""}) {
    auto r = VerifyParallel(p, {});
    EXPECT_FALSE(r.ok()) << p;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << p;
    }
  }
}

TEST(VerifyParallel, JsonNamesEveryCheckAndTheFailure) {
  VerifyParallelOptions o;
  o.merge_precision = MergePrecision::kBf16;
  o.cp_lengths = {256};
  const ParallelReport r = Verify("cp=2", o);
  const nlohmann::json j = ReportToJson(r);
  EXPECT_EQ(j["plan"], "cp=2");
  EXPECT_EQ(j["seed"], kSeed);
  EXPECT_EQ(j["merge_precision"], "bf16");
  EXPECT_EQ(j["pass"], false);
  EXPECT_EQ(j["first_failure"]["op"], "kda.cp_merge");
  ASSERT_EQ(j["checks"].size(), r.checks.size());
  EXPECT_EQ(j["checks"][0]["op"], "kda.conv");
  EXPECT_TRUE(j["checks"][1].contains("rel_l2"));
}

TEST(VerifyParallel, CliExitCodes) {
  testing::internal::CaptureStdout();
  EXPECT_EQ(RunVerifyParallelCli("ep=2", "fp32", kSeed, false), 0);
  const std::string pass_text = testing::internal::GetCapturedStdout();
  EXPECT_NE(pass_text.find("PASS"), std::string::npos) << pass_text;
  testing::internal::CaptureStdout();
  EXPECT_EQ(RunVerifyParallelCli("cp=2", "bf16", kSeed, false), 1);
  const std::string fail_text = testing::internal::GetCapturedStdout();
  EXPECT_NE(fail_text.find("FAIL: kda.cp_merge"), std::string::npos) << fail_text;
  testing::internal::CaptureStdout();
  EXPECT_EQ(RunVerifyParallelCli("ep=2", "fp32", kSeed, true), 0);
  const std::string js = testing::internal::GetCapturedStdout();
  EXPECT_EQ(nlohmann::json::parse(js)["plan"], "ep=2");
  EXPECT_EQ(RunVerifyParallelCli("cp=2", "fp16", kSeed, false), 2);
  EXPECT_EQ(RunVerifyParallelCli("tq=2", "fp32", kSeed, false), 2);
}

}  // namespace
}  // namespace gyre::parallel
