#include "serve/metrics.h"

#include <gtest/gtest.h>

#include <ctime>
#include <regex>
#include <sstream>

#include "serve/process_metrics.h"

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
  st.prefix_cache_queried_tokens = 90;
  st.prefix_cache_hit_tokens = 64;
  st.spec_draft_tokens = 12;
  st.spec_accepted_tokens = 7;
  st.kda_checkpoint_bytes = 4096;
  st.prefix_cache_block_evictions = 6;
  st.kda_checkpoint_evictions = 2;
  st.prefill_tokens_computed = 26;
  const std::string text = m.Render(st);

  // Every non-comment line is `name{labels} value`; every metric has HELP and TYPE lines.
  const std::regex sample(R"(^[a-zA-Z_][a-zA-Z0-9_]*(\{[^}]*\})? [-+0-9.eInf]+$)");
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
  EXPECT_TRUE(has("# TYPE gyre_time_to_first_token_seconds histogram\n"));
  EXPECT_TRUE(has("gyre_time_to_first_token_seconds_bucket{" + L + ",le=\"0.001\"} 0\n"));
  EXPECT_TRUE(has("gyre_time_to_first_token_seconds_bucket{" + L + ",le=\"0.005\"} 1\n"));
  EXPECT_TRUE(has("gyre_time_to_first_token_seconds_bucket{" + L + ",le=\"+Inf\"} 1\n"));
  EXPECT_TRUE(has("gyre_time_to_first_token_seconds_count{" + L + "} 1\n"));
  EXPECT_TRUE(has("# TYPE gyre_inter_token_latency_seconds histogram\n"));
  EXPECT_TRUE(has("# TYPE gyre_e2e_request_latency_seconds histogram\n"));
  EXPECT_TRUE(has("gyre_request_success_total{" + L + ",finished_reason=\"stop\"} 2\n"));
  EXPECT_TRUE(has("gyre_request_success_total{" + L + ",finished_reason=\"abort\"} 1\n"));
  EXPECT_TRUE(has("gyre_request_success_total{" + L + ",finished_reason=\"length\"} 0\n"));
  EXPECT_TRUE(has("# TYPE gyre_prompt_tokens_total counter\n"));
  EXPECT_TRUE(has("gyre_prompt_tokens_total{" + L + "} 100\n"));
  EXPECT_TRUE(has("gyre_generation_tokens_total{" + L + "} 50\n"));
  EXPECT_TRUE(has("gyre_num_preemptions_total{" + L + "} 3\n"));
  EXPECT_TRUE(has("# TYPE gyre_num_requests_running gauge\n"));
  EXPECT_TRUE(has("gyre_num_requests_running{" + L + "} 2\n"));
  EXPECT_TRUE(has("gyre_num_requests_waiting{" + L + "} 1\n"));
  EXPECT_TRUE(has("gyre_kv_cache_usage_perc{" + L + "} 0.5\n"));
  EXPECT_TRUE(has("gyre_kda_state_slots_used{" + L + "} 2\n"));
  EXPECT_TRUE(has("gyre_kda_state_slots_capacity{" + L + "} 4\n"));
  EXPECT_TRUE(has("# TYPE gyre_prefix_cache_hits_total counter\n"));
  EXPECT_TRUE(has("gyre_prefix_cache_queries_total{" + L + "} 90\n"));
  EXPECT_TRUE(has("gyre_prefix_cache_hits_total{" + L + "} 64\n"));
  EXPECT_TRUE(has("gyre_kda_checkpoint_bytes{" + L + "} 4096\n"));
  EXPECT_TRUE(has("gyre_prefix_cache_block_evictions_total{" + L + "} 6\n"));
  EXPECT_TRUE(has("gyre_kda_checkpoint_evictions_total{" + L + "} 2\n"));
  EXPECT_TRUE(has("gyre_prefill_tokens_computed_total{" + L + "} 26\n"));
  EXPECT_TRUE(has("gyre_spec_decode_num_draft_tokens_total{" + L + "} 12\n"));
  EXPECT_TRUE(has("gyre_spec_decode_num_accepted_tokens_total{" + L + "} 7\n"));
}

TEST(ServeMetrics, EmptyPoolsGiveZeroUsage) {
  ServeMetrics m("x");
  const std::string text = m.Render(EngineStats{});
  EXPECT_NE(text.find("gyre_kv_cache_usage_perc{model_name=\"x\"} 0\n"), std::string::npos);
}

TEST(ServeMetrics, PhaseAndTokenHistogramsAndRejections) {
  ServeMetrics m("x");
  m.ObserveEngineFinish(Usage{.prompt_tokens = 7, .completion_tokens = 3, .queue_s = 0.002, .prefill_s = 0.2,
                              .decode_s = 1.2});
  m.CountRejected(400);
  m.CountRejected(400);
  m.CountRejected(418);
  m.CountRejected(200);  // not an error: not counted
  const std::string text = m.Render(EngineStats{});
  auto has = [&](const std::string& s) { return text.find(s) != std::string::npos; };
  const std::string L = "model_name=\"x\"";
  for (const std::string& line : std::initializer_list<std::string>{
       "# TYPE gyre_request_queue_time_seconds histogram\n",
       "gyre_request_queue_time_seconds_bucket{" + L + ",le=\"0.001\"} 0\n",
       "gyre_request_queue_time_seconds_bucket{" + L + ",le=\"0.005\"} 1\n",
       "gyre_request_prefill_time_seconds_bucket{" + L + ",le=\"0.1\"} 0\n",
       "gyre_request_prefill_time_seconds_bucket{" + L + ",le=\"0.3\"} 1\n",
       "gyre_request_decode_time_seconds_bucket{" + L + ",le=\"1\"} 0\n",
       "gyre_request_decode_time_seconds_bucket{" + L + ",le=\"1.5\"} 1\n",
       "gyre_request_decode_time_seconds_sum{" + L + "} 1.2\n",
       "gyre_request_prompt_tokens_bucket{" + L + ",le=\"5\"} 0\n",
       "gyre_request_prompt_tokens_bucket{" + L + ",le=\"10\"} 1\n",
       "gyre_request_prompt_tokens_bucket{" + L + ",le=\"1000000\"} 1\n",
       "gyre_request_generation_tokens_bucket{" + L + ",le=\"2\"} 0\n",
       "gyre_request_generation_tokens_bucket{" + L + ",le=\"5\"} 1\n",
       "gyre_request_generation_tokens_count{" + L + "} 1\n",
       "# TYPE gyre_request_rejected_total counter\n",
       "gyre_request_rejected_total{" + L + ",status=\"400\"} 2\n",
       "gyre_request_rejected_total{" + L + ",status=\"418\"} 1\n",
       "gyre_request_rejected_total{" + L + ",status=\"404\"} 0\n",  // present before the first
       }) {
    EXPECT_TRUE(has(line)) << line;
  }
  EXPECT_FALSE(has("status=\"200\""));
}

// Counters end in _total and nothing else does (a gauge named *_total reads as a counter to
// Prometheus tooling); every family has its HELP line right before its TYPE line.
TEST(ServeMetrics, OnlyCountersEndInTotal) {
  ServeMetrics m("x");
  const std::string text = m.Render(EngineStats{});
  std::istringstream in(text);
  std::string line;
  int families = 0;
  std::string last_help;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) last_help = line.substr(7, line.find(' ', 7) - 7);
    if (line.rfind("# TYPE ", 0) != 0) continue;
    std::istringstream t(line.substr(7));
    std::string name, type;
    t >> name >> type;
    ++families;
    EXPECT_EQ(last_help, name) << "no HELP line right before TYPE " << name;
    const bool total = name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0;
    EXPECT_EQ(total, type == "counter") << name << " is a " << type;
  }
  EXPECT_GT(families, 20);
}

TEST(ProcessMetrics, ParsesProcStat) {
  // The command name may hold spaces and ')'; fields 14/15 utime/stime, 22 starttime, 23 vsize, 24 rss.
  const std::string stat =
      "1234 (a b) c) S 1 2 3 4 5 6 7 8 9 10 100 50 0 0 20 0 1 0 5000 123456789 300 18446744073709551615\n";
  ProcessStats p;
  ASSERT_TRUE(ParseProcStat(stat, 100, 4096, 1000, &p).ok());
  EXPECT_DOUBLE_EQ(p.cpu_seconds, 1.5);
  EXPECT_DOUBLE_EQ(p.start_time_seconds, 1050.0);
  EXPECT_EQ(p.virtual_memory_bytes, 123456789);
  EXPECT_EQ(p.resident_memory_bytes, 300 * 4096);
  EXPECT_FALSE(ParseProcStat("1234 (x) S 1 2", 100, 4096, 1000, &p).ok());
  EXPECT_FALSE(ParseProcStat("no parenthesis", 100, 4096, 1000, &p).ok());
}

TEST(ProcessMetrics, ThisProcessIsExported) {
  auto p = ReadProcessStats();
  ASSERT_TRUE(p.ok()) << p.status().ToString();  // the tests run on Linux
  EXPECT_GT(p->resident_memory_bytes, 0);
  EXPECT_GE(p->virtual_memory_bytes, p->resident_memory_bytes);
  EXPECT_GE(p->open_fds, 3);  // stdin, stdout, stderr
  EXPECT_GE(p->max_fds, p->open_fds);
  // btime has whole seconds and the boot clock drifts from the wall clock: allow a few seconds.
  EXPECT_LE(p->start_time_seconds, static_cast<double>(std::time(nullptr)) + 5);
  EXPECT_GT(p->start_time_seconds, 1.5e9);
  const std::string text = ServeMetrics("x").Render(EngineStats{});
  for (const char* name : {"process_cpu_seconds_total ", "process_resident_memory_bytes ", "process_open_fds ",
                           "process_start_time_seconds ", "# TYPE process_cpu_seconds_total counter\n",
                           "# TYPE process_resident_memory_bytes gauge\n"}) {
    EXPECT_NE(text.find(std::string("\n") + name), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace gyre::serve
