#include "serve/loadgen.h"

#include <gtest/gtest.h>

#include "serve/server.h"
#include "serve/server_fake_engine.h"

namespace gyre::serve {
namespace {

TEST(Percentile, LinearInterpolationLikeNumpy) {
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 100), 4);
  EXPECT_NEAR(Percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90), 9.1, 1e-12);
}

RequestResult Ok(double ttft, double e2e, int64_t out, std::vector<double> itl = {}) {
  RequestResult r;
  r.ok = true;
  r.ttft_s = ttft;
  r.e2e_s = e2e;
  r.output_tokens = out;
  r.prompt_tokens = 10;
  r.itl_s = std::move(itl);
  return r;
}

TEST(Summarize, MetricsAndGoodput) {
  std::vector<RequestResult> rs = {Ok(0.1, 1.1, 11, {0.1, 0.1}), Ok(0.3, 0.3, 1), RequestResult{}};
  const auto m = Summarize(rs, 2.0, /*slo_ttft_ms=*/200, /*slo_tpot_ms=*/0);
  EXPECT_EQ(m.at("completed"), 2);
  EXPECT_EQ(m.at("failed"), 1);
  EXPECT_EQ(m.at("total_output_tokens"), 12);
  EXPECT_EQ(m.at("total_input_tokens"), 20);
  EXPECT_DOUBLE_EQ(m.at("request_throughput"), 1.0);
  EXPECT_DOUBLE_EQ(m.at("output_throughput"), 6.0);
  EXPECT_DOUBLE_EQ(m.at("ttft_ms_mean"), 200);
  EXPECT_DOUBLE_EQ(m.at("ttft_ms_p50"), 200);
  EXPECT_DOUBLE_EQ(m.at("tpot_ms_mean"), 100);  // (1.1 - 0.1) / 10; one-token requests have no TPOT
  EXPECT_DOUBLE_EQ(m.at("itl_ms_p50"), 100);
  EXPECT_DOUBLE_EQ(m.at("e2e_ms_p99"), 300 + (1100 - 300) * 0.99);
  EXPECT_DOUBLE_EQ(m.at("goodput"), 0.5);  // only the first meets TTFT <= 200 ms
  EXPECT_DOUBLE_EQ(m.at("goodput_ratio"), 1.0 / 3);
  EXPECT_EQ(Summarize(rs, 2.0, 0, 0).count("goodput"), 0u);
}

class LoadgenServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = Tokenizer::FromFile(std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/glm5_tiny");
    ASSERT_TRUE(t.ok());
    tok_ = std::move(*t);
    testing::FakeEngineOptions eo;
    eo.tick_ms = 2;
    eo.script = *tok_->Encode("Hello world, this is a test.");
    engine_ = std::make_unique<testing::FakeEngine>(eo);
    ASSERT_TRUE(engine_->Start().ok());
    ServerOptions so;
    so.http.port = 0;
    so.served_model_name = "tiny";
    ServerDeps d;
    d.engine = engine_.get();
    d.tokenizer = tok_.get();
    auto s = Server::Create(std::move(d), so);
    ASSERT_TRUE(s.ok()) << s.error().ToString();
    server_ = std::move(*s);
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override { server_->Stop(500); }

  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<testing::FakeEngine> engine_;
  std::unique_ptr<Server> server_;
};

TEST_F(LoadgenServerTest, RunsAgainstTheServer) {
  LoadgenOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(server_->port()) + "/v1";
  o.num_prompts = 12;
  o.request_rate = 200;
  o.max_concurrency = 4;
  o.input_len = 8;
  o.output_len = 5;
  std::vector<std::string> progress;
  o.progress = [&progress](const std::string& line) { progress.push_back(line); };
  auto r = RunLoad(o);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  ASSERT_EQ(r->requests.size(), 12u);
  // One progress line per finished request here (12 / 10 rounds down to steps of 1), the last one
  // for all of them.
  ASSERT_EQ(progress.size(), 12u);
  EXPECT_EQ(progress.back().rfind("bench serve: 12/12 requests done (0 failed), ", 0), 0u) << progress.back();
  for (const auto& q : r->requests) {
    EXPECT_TRUE(q.ok) << q.error;
    EXPECT_EQ(q.output_tokens, 5);
    EXPECT_EQ(q.prompt_tokens, 8);
    EXPECT_GT(q.ttft_s, 0);
    EXPECT_GE(q.e2e_s, q.ttft_s);
  }
  EXPECT_EQ(r->metrics.at("completed"), 12);
  EXPECT_EQ(r->metrics.at("total_output_tokens"), 60);
  EXPECT_GT(r->metrics.at("output_throughput"), 0);
  // The server saw the benchmark's extensions and the discovered model name.
  const auto sent = engine_->submitted();
  ASSERT_EQ(sent.size(), 12u);
  EXPECT_TRUE(sent[0].ignore_eos);
  EXPECT_EQ(sent[0].max_tokens, 5);
  const Json j = ReportJson(o, *r);
  EXPECT_EQ(j["metrics"]["completed"], 12);
  EXPECT_TRUE(j["meta"].contains("commit"));
  EXPECT_EQ(j["meta"]["config"]["num_prompts"], 12);
  EXPECT_EQ(j["directions"]["ttft_ms_p99"], "lower");
  EXPECT_EQ(j["directions"]["output_throughput"], "higher");
  EXPECT_EQ(j["samples"]["ttft_ms"].size(), 12u);
  // One record per request, with what `gyre compare` needs to bootstrap it.
  ASSERT_EQ(j["requests"].size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    const Json& q = j["requests"][i];
    EXPECT_TRUE(q["ok"].get<bool>());
    EXPECT_DOUBLE_EQ(q["ttft_ms"].get<double>(), r->requests[i].ttft_s * 1e3);
    EXPECT_DOUBLE_EQ(q["start_ms"].get<double>(), r->requests[i].start_s * 1e3);
    EXPECT_EQ(q["itl_ms"].size(), r->requests[i].itl_s.size());
    EXPECT_EQ(q["output_tokens"], 5);
  }
  EXPECT_EQ(j["meta"]["config"]["token_id_range"], 1000);
  EXPECT_NE(ReportText(*r).find("Successful requests:"), std::string::npos);
}

TEST_F(LoadgenServerTest, ErrorsAreCountedNotFatal) {
  LoadgenOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(server_->port());
  o.model = "wrong-model";
  o.num_prompts = 3;
  auto r = RunLoad(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->metrics.at("failed"), 3);
  EXPECT_NE(r->requests[0].error.find("HTTP 404"), std::string::npos) << r->requests[0].error;
}

TEST(Loadgen, UnreachableServerIsUnavailable) {
  LoadgenOptions o;
  o.url = "http://127.0.0.1:1";
  o.num_prompts = 2;
  auto r = RunLoad(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), StatusCode::kUnavailable);
  o.url = "ftp://x";
  EXPECT_EQ(RunLoad(o).error().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gyre::serve
