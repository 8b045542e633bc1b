// The disagg_prefill gate scenario (cli/disagg_scenario.h) on the glm5_tiny fixture: with the
// transfer on, every request's cache goes through the real prefill DisaggNode and is
// acknowledged, the pools come back, and the overlap figure is a share; with it off nothing is
// sent; bad fields are named; the gate file that uses it parses and names only its metrics. Only
// counts are asserted here; the throughput ratio is the gate's (bench/gates/cpu_disagg_prefill.json).
#include "cli/disagg_scenario.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "feedback/gate_spec.h"
#include "runtime/fixture_for_tests.h"

namespace gyre::cli {
namespace {

const Model& Tiny() { return FixtureModel("glm5_tiny"); }

TEST(DisaggPrefillScenario, EveryCacheIsSentAcknowledgedAndReleased) {
  const nlohmann::json spec = {{"kind", "disagg_prefill"}, {"prompts", 6}, {"prompt_len", 40},
                               {"max_num_batched_tokens", 64}, {"max_num_seqs", 4}, {"kv_page_tokens", 16},
                               {"link_bytes_per_s", 5e7}};
  auto r = RunDisaggPrefillScenario(Tiny(), spec, 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& m = *r;
  EXPECT_EQ(m.at("completed"), 6);
  EXPECT_EQ(m.at("errors"), 0);
  EXPECT_EQ(m.at("transfers"), 6);
  EXPECT_EQ(m.at("transfer_failures"), 0);
  EXPECT_GT(m.at("transfer_bytes"), 6 * 40 * 1.0);  // pages of 40 tokens and a KDA state, each
  EXPECT_EQ(m.at("leaked_pages"), 0);
  EXPECT_EQ(m.at("leaked_slots"), 0);
  EXPECT_GE(m.at("send_overlap"), 0.0);
  EXPECT_LE(m.at("send_overlap"), 1.0);
  EXPECT_GE(m.at("exposed_send_share"), 0.0);
  EXPECT_GT(m.at("engine_export_ms"), 0.0);
  EXPECT_GT(m.at("transfer_send_ms"), 0.0);
  EXPECT_GT(m.at("wall_ms"), 0.0);  // (the CPU runner copies the image on the engine thread)
  EXPECT_GT(m.at("tok_s"), 0);
  EXPECT_GE(m.at("tok_s"), m.at("done_tok_s"));  // the first tokens come before the releases
}

// A slow link backs the sends up: the second transfer thread opens its own link instead of
// waiting for the first one's (transfers to one decode instance go in parallel).
TEST(DisaggPrefillScenario, BackedUpSendsUseASecondLink) {
  const nlohmann::json spec = {{"kind", "disagg_prefill"}, {"prompts", 6}, {"prompt_len", 40},
                               {"max_num_batched_tokens", 256}, {"kv_page_tokens", 16}, {"link_bytes_per_s", 1e6}};
  auto r = RunDisaggPrefillScenario(Tiny(), spec, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->at("transfers"), 6);
  EXPECT_EQ(r->at("transfer_links"), 2);
  EXPECT_EQ(r->at("leaked_pages"), 0);
}

TEST(DisaggPrefillScenario, WithTheTransferOffNothingIsSent) {
  const nlohmann::json spec = {{"kind", "disagg_prefill"}, {"transfer", false}, {"prompts", 4}, {"prompt_len", 24}};
  auto r = RunDisaggPrefillScenario(Tiny(), spec, 1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->at("completed"), 4);
  EXPECT_EQ(r->at("transfers"), 0);
  EXPECT_EQ(r->at("transfer_bytes"), 0);
  EXPECT_EQ(r->at("leaked_pages"), 0);
}

TEST(DisaggPrefillScenario, BadFieldsAreNamed) {
  for (const nlohmann::json& bad :
       {nlohmann::json{{"kind", "disagg_prefill"}, {"prompts", 0}},
        nlohmann::json{{"kind", "disagg_prefill"}, {"link_bytes_per_s", -1}},
        nlohmann::json{{"kind", "disagg_prefill"}, {"backend", "tpu"}},
        nlohmann::json{{"kind", "disagg_prefill"}, {"prompt_len", "long"}}}) {
    auto r = RunDisaggPrefillScenario(Tiny(), bad, 0);
    ASSERT_FALSE(r.ok()) << bad.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad.dump();
    EXPECT_NE(r.status().message().find("disagg_prefill"), std::string::npos) << r.status().message();
  }
}

TEST(DisaggPrefillScenario, TheGateFileParsesAndNamesOnlyItsMetrics) {
  auto file = feedback::ReadGateFile(std::string(GYRE_SOURCE_DIR) + "/bench/gates/cpu_disagg_prefill.json");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto gate = feedback::ParseGate(*file);
  ASSERT_TRUE(gate.ok()) << gate.status().ToString();
  const std::set<std::string> metrics = {"tok_s", "done_tok_s", "ttft_ms_p50", "e2e_ms_p50", "transfers",
                                         "transfer_failures", "transfer_bytes", "transfer_links", "send_overlap",
                                         "exposed_send_share", "engine_export_ms", "transfer_read_ms", "transfer_send_ms", "wall_ms", "completed", "errors", "leaked_pages", "leaked_slots"};
  for (const auto& p : gate->predicates) {
    EXPECT_TRUE(metrics.count(p.a.metric)) << p.id << ": " << p.a.metric;
    if (p.kind == feedback::PredicateKind::kRatio) {
      EXPECT_TRUE(metrics.count(p.b.metric)) << p.id;
    }
  }
  for (const auto& [name, s] : gate->scenarios) EXPECT_EQ(s.at("kind"), "disagg_prefill") << name;
}

}  // namespace
}  // namespace gyre::cli
