// GET /metrics of a running server: rejections counted by status, the engine's phase times in
// their histograms, and the whole exposition clean under `promtool check metrics` (Debian's
// prometheus package ships promtool; scripts/install-deps.sh installs it).
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "serve/server_test_fixture.h"

namespace gyre::serve {
namespace {

using testing::FakeEngineOptions;
using testing::ServerTest;
using testing::WaitFor;

TEST_F(ServerTest, MetricsCountRejectionsAndPhases) {
  FakeEngineOptions eo;
  eo.queue_s = 0.003;
  eo.prefill_s = 0.2;
  eo.decode_s = 2.0;
  Start(eo);
  ASSERT_EQ(Post("/v1/chat/completions", Chat()).status, 200);
  ASSERT_EQ(Post("/v1/chat/completions", Chat({{"temperature", 9}})).status, 400);
  ASSERT_EQ(Post("/tokenize", {{"prompt", 1}}).status, 400);
  ASSERT_EQ(Do("GET", "/nope").status, 404);
  ASSERT_EQ(Do("POST", "/v1/models", "{}").status, 405);
  const std::string L = "model_name=\"tiny\"";
  auto has = [&](const std::string& s) { return Do("GET", "/metrics").body.find(s) != std::string::npos; };
  EXPECT_TRUE(WaitFor([&] { return has("gyre_request_rejected_total{" + L + ",status=\"400\"} 2\n"); }));
  const std::string text = Do("GET", "/metrics").body;
  for (const std::string& line : std::initializer_list<std::string>{
           "gyre_request_rejected_total{" + L + ",status=\"404\"} 1\n",
           "gyre_request_rejected_total{" + L + ",status=\"405\"} 1\n",
           "gyre_request_queue_time_seconds_bucket{" + L + ",le=\"0.001\"} 0\n",
           "gyre_request_queue_time_seconds_bucket{" + L + ",le=\"0.005\"} 1\n",
           "gyre_request_prefill_time_seconds_bucket{" + L + ",le=\"0.3\"} 1\n",
           "gyre_request_decode_time_seconds_bucket{" + L + ",le=\"1.5\"} 0\n",
           "gyre_request_decode_time_seconds_bucket{" + L + ",le=\"2\"} 1\n",
           "gyre_request_generation_tokens_bucket{" + L + ",le=\"5\"} 1\n",
           "gyre_request_generation_tokens_bucket{" + L + ",le=\"2\"} 0\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line;
  }
}

TEST_F(ServerTest, PromtoolChecksTheMetricsClean) {
  if (std::system("command -v promtool > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool is not on PATH (Debian package prometheus; scripts/install-deps.sh installs it)";
  }
  // With a vision tower and its embedding cache, so that the cache's series are checked too.
  ImageInputOptions io;
  io.cache_bytes = int64_t{1} << 20;
  auto enc = LoadImageEncoder(std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/glm5_tiny", io);
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  images_ = *enc;
  Start();
  ASSERT_EQ(Post("/v1/chat/completions", Chat()).status, 200);  // every histogram has a sample
  ASSERT_EQ(Post("/v1/chat/completions", Chat({{"temperature", 9}})).status, 400);
  const testing::Reply m = Do("GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.headers.at("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  const std::string path = ::testing::TempDir() + "gyre_metrics.txt";
  std::ofstream(path) << m.body;
  FILE* p = ::popen(("promtool check metrics < " + path + " 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = ::pclose(p);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "") << out;  // no lint problem at all
  for (const char* series : {"gyre_image_cache_hits_total{", "gyre_image_cache_misses_total{",
                             "gyre_image_cache_evictions_total{", "gyre_image_cache_bytes{", "gyre_image_cache_entries{",
                             "gyre_image_cache_capacity_bytes{"})
    EXPECT_NE(m.body.find(series), std::string::npos) << series;
}

}  // namespace
}  // namespace gyre::serve
