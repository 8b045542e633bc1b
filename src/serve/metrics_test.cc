#include "serve/metrics.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>

namespace gyre::serve {
namespace {

TEST(Histogram, CumulativeBucketsWithLeSemantics) {
  Histogram h({1.0, 2.0});
  h.Observe(0.5);
  h.Observe(1.0);  // le="1" includes 1.0
  h.Observe(1.5);
  h.Observe(9.0);
  const auto s = h.Get();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.sum, 12.0);
}

TEST(ServeMetrics, ExpositionFormat) {
  ServeMetrics m("tiny \"model\"");
  m.ObserveTtft(0.003);
  m.ObserveItl(0.02);
  m.ObserveE2e(0.4);
  m.CountFinished("stop");
  m.CountFinished("stop");
  m.CountFinished("abort");
  EngineStats st;
  st.num_running = 2;
  st.num_waiting = 1;
  st.kv_pages_total = 10;
  st.kv_pages_used = 5;
  st.kda_slots_total = 4;
  st.kda_slots_used = 2;
  st.num_preemptions = 3;
  st.prompt_tokens_total = 100;
  st.generation_tokens_total = 50;
  const std::string text = m.Render(st);

  // Every non-comment line is `name{labels} value`; every metric has HELP and TYPE lines.
  const std::regex sample(R"(^[a-zA-Z_:][a-zA-Z0-9_:]*\{[^}]*\} [-+0-9.eInf]+$)");
  std::istringstream in(text);
  std::string line;
  int samples = 0;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
    ++samples;
  }
  EXPECT_GT(samples, 40);
  auto has = [&](const std::string& s) { return text.find(s) != std::string::npos; };
  const std::string L = "model_name=\"tiny \\\"model\\\"\"";
  EXPECT_TRUE(has("# TYPE gyre:time_to_first_token_seconds histogram\n"));
  EXPECT_TRUE(has("gyre:time_to_first_token_seconds_bucket{" + L + ",le=\"0.001\"} 0\n"));
  EXPECT_TRUE(has("gyre:time_to_first_token_seconds_bucket{" + L + ",le=\"0.005\"} 1\n"));
  EXPECT_TRUE(has("gyre:time_to_first_token_seconds_bucket{" + L + ",le=\"+Inf\"} 1\n"));
  EXPECT_TRUE(has("gyre:time_to_first_token_seconds_count{" + L + "} 1\n"));
  EXPECT_TRUE(has("# TYPE gyre:inter_token_latency_seconds histogram\n"));
  EXPECT_TRUE(has("# TYPE gyre:e2e_request_latency_seconds histogram\n"));
  EXPECT_TRUE(has("gyre:request_success_total{" + L + ",finished_reason=\"stop\"} 2\n"));
  EXPECT_TRUE(has("gyre:request_success_total{" + L + ",finished_reason=\"abort\"} 1\n"));
  EXPECT_TRUE(has("gyre:request_success_total{" + L + ",finished_reason=\"length\"} 0\n"));
  EXPECT_TRUE(has("# TYPE gyre:prompt_tokens_total counter\n"));
  EXPECT_TRUE(has("gyre:prompt_tokens_total{" + L + "} 100\n"));
  EXPECT_TRUE(has("gyre:generation_tokens_total{" + L + "} 50\n"));
  EXPECT_TRUE(has("gyre:num_preemptions_total{" + L + "} 3\n"));
  EXPECT_TRUE(has("# TYPE gyre:num_requests_running gauge\n"));
  EXPECT_TRUE(has("gyre:num_requests_running{" + L + "} 2\n"));
  EXPECT_TRUE(has("gyre:num_requests_waiting{" + L + "} 1\n"));
  EXPECT_TRUE(has("gyre:kv_cache_usage_perc{" + L + "} 0.5\n"));
  EXPECT_TRUE(has("gyre:kda_state_slots_used{" + L + "} 2\n"));
  EXPECT_TRUE(has("gyre:kda_state_slots_total{" + L + "} 4\n"));
}

TEST(ServeMetrics, EmptyPoolsGiveZeroUsage) {
  ServeMetrics m("x");
  const std::string text = m.Render(EngineStats{});
  EXPECT_NE(text.find("gyre:kv_cache_usage_perc{model_name=\"x\"} 0\n"), std::string::npos);
}

}  // namespace
}  // namespace gyre::serve
