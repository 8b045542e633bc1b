// The unchanged engine driving a DisaggRunner (prefill on one CPU runner, decode on another, the
// cache moved between them over TCP loopback by the transfer protocol) gives exactly the greedy
// outputs of the engine on one runner — with chunked prefills, prompts ending on page boundaries,
// several requests at once and overlapped steps. A dead link ends requests with a clear error,
// never a wrong token, and the engine's pools return to zero. Speculative decoding across the
// hand-off (n-gram drafts; MTP drafts, whose cache travels in the images) gives the colocated
// engine's outputs and, for MTP, the same drafts.
#include "transfer/disagg_runner.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "runtime/cpu_runner.h"
#include "runtime/model.h"
#include "transfer/faulty_connection.h"
#include "transfer/tcp_pair_for_tests.h"

namespace gyre::transfer {
namespace {

using std::chrono::milliseconds;

std::string Fixture(const std::string& n) { return std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/" + n; }

class Sink : public RequestSink {
 public:
  void OnToken(const TokenEvent& ev) override {
    std::lock_guard<std::mutex> l(mu);
    ids.push_back(ev.id);
  }
  void OnFinish(FinishReason r, const Status& s, const Usage&) override {
    std::lock_guard<std::mutex> l(mu);
    reason = r;
    status = s;
    done = true;
    cv.notify_all();
  }
  bool Wait() {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::seconds(120), [&] { return done; });
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> ids;
  FinishReason reason = FinishReason::kError;
  Status status;
  bool done = false;
};

EngineOptions Options() {
  EngineOptions eo;
  eo.max_num_seqs = 3;
  eo.kv_page_tokens = 16;
  eo.kv_memory_bytes = 8 << 20;
  eo.max_num_batched_tokens = 24;  // prompts longer than this are prefilled in chunks
  return eo;
}

std::unique_ptr<CpuRunner> MakeRunner(const Model& m, const EngineOptions& eo) {
  CpuRunnerOptions o;
  o.num_slots = eo.max_num_seqs;
  o.page_tokens = eo.kv_page_tokens;
  const bool mtp = eo.speculative.method == "mtp";
  o.mtp_drafts = mtp ? eo.speculative.num_speculative_tokens : 0;
  o.num_pages = CpuRunner::PagesForBytes(m.config(), eo.kv_page_tokens, eo.kv_memory_bytes, mtp);
  return std::move(CpuRunner::Create(m, o).value());
}

std::vector<std::vector<int32_t>> Prompts(const Model& m) {
  std::vector<std::vector<int32_t>> ps;
  std::mt19937_64 rng(17);
  for (int64_t n : {37, 48, 16, 70, 5, 32}) {  // mid-page, page boundaries, chunked (> 24)
    std::vector<int32_t> p(n);
    for (auto& id : p) id = static_cast<int32_t>(rng() % std::min<int64_t>(m.config().vocab_size, 1000));
    ps.push_back(std::move(p));
  }
  return ps;
}

// Runs every prompt through an engine on `runner` at once; the sinks, in prompt order.
std::vector<std::shared_ptr<Sink>> RunAll(ModelRunner& runner, const EngineOptions& eo,
                                          const std::vector<std::vector<int32_t>>& prompts, EngineStats* stats,
                                          int64_t max_tokens = 9) {
  std::vector<std::shared_ptr<Sink>> sinks;
  auto engine = Engine::Create(runner, eo);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return sinks;
  EXPECT_TRUE((*engine)->Start().ok());
  for (const auto& prompt : prompts) {
    RequestParams p;
    p.prompt = prompt;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    sinks.push_back(std::make_shared<Sink>());
    EXPECT_TRUE((*engine)->Submit(p, sinks.back()).ok());
  }
  for (auto& s : sinks) EXPECT_TRUE(s->Wait());
  // The engine frees a finished request's ids on its own thread, after the sink's last call.
  for (int i = 0; i < 200; ++i) {
    *stats = (*engine)->Stats();
    if (stats->kv_pages_used == 0 && stats->kda_slots_used == 0) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  (*engine)->Stop();
  return sinks;
}

class DisaggRunnerEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = Model::Load(Fixture("glm5_tiny"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    prompts_ = Prompts(*model_);
  }
  // The colocated engine's outputs (one runner).
  std::vector<std::shared_ptr<Sink>> Colocated() {
    EngineStats stats;
    auto runner = MakeRunner(*model_, eo_);
    return RunAll(*runner, eo_, prompts_, &stats);
  }
  std::unique_ptr<Model> model_;
  const EngineOptions eo_ = Options();
  std::vector<std::vector<int32_t>> prompts_;
};

TEST_F(DisaggRunnerEngine, OutputsEqualTheColocatedEngine) {
  const Model& model = *model_;
  const EngineOptions& eo = eo_;
  const auto& prompts = prompts_;
  EngineStats dis_stats;
  auto want = Colocated();

  auto prefill = MakeRunner(model, eo), decode = MakeRunner(model, eo);
  auto [tx, rx] = TcpPair();
  ASSERT_TRUE(tx && rx);
  auto dis = DisaggRunner::Create(*prefill, *decode, *tx, *rx, {});
  ASSERT_TRUE(dis.ok()) << dis.status().ToString();
  auto got = RunAll(**dis, eo, prompts, &dis_stats);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i]->reason, FinishReason::kLength) << got[i]->status.ToString();
    EXPECT_EQ(got[i]->ids.size(), 9u);
    EXPECT_EQ(got[i]->ids, want[i]->ids) << "prompt " << i << " (" << prompts[i].size() << " tokens)";
  }
  const DisaggRunnerStats st = (*dis)->stats();
  EXPECT_EQ(st.transfers, static_cast<int64_t>(prompts.size()));
  EXPECT_EQ(st.transfer_failures, 0);
  EXPECT_GT(st.decode_steps, 0);
  EXPECT_EQ((*dis)->sender_stats().completed, static_cast<int64_t>(prompts.size()));
  EXPECT_EQ((*dis)->receiver_held_bytes(), 0);
  EXPECT_EQ(dis_stats.kv_pages_used, 0);
  EXPECT_EQ(dis_stats.kda_slots_used, 0);
}

// Faults on the link (retried by the protocol): with kFailStep every request ends either with
// the colocated tokens or with an error naming the transfer; with kDecodeOnPrefill every request
// ends with the colocated tokens. Never other tokens.
TEST_F(DisaggRunnerEngine, UnderLinkFaultsEachRequestIsExactOrAnError) {
  const Model& model = *model_;
  const EngineOptions& eo = eo_;
  const auto& prompts = prompts_;
  EngineStats stats;
  auto want = Colocated();
  int64_t exact = 0, errors = 0, failures = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const bool fail_step = seed <= 3;
    auto prefill = MakeRunner(model, eo), decode = MakeRunner(model, eo);
    auto [a, b] = TcpPair();
    ASSERT_TRUE(a && b);
    FaultPolicy p;
    p.seed = seed;
    p.drop = p.corrupt = p.truncate = 0.04;
    p.duplicate = p.reorder = 0.05;
    FaultyConnection tx(std::move(a), p);
    DisaggRunnerOptions o;
    o.on_transfer_failure = fail_step ? DisaggRunnerOptions::OnTransferFailure::kFailStep
                                      : DisaggRunnerOptions::OnTransferFailure::kDecodeOnPrefill;
    o.sender.ack_timeout = milliseconds(150);
    o.sender.max_attempts = 2;
    o.receiver.staging_timeout = milliseconds(300);
    auto dis = DisaggRunner::Create(*prefill, *decode, tx, *b, o);
    ASSERT_TRUE(dis.ok());
    auto got = RunAll(**dis, eo, prompts, &stats);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i]->reason == FinishReason::kLength) {
        ++exact;
        EXPECT_EQ(got[i]->ids, want[i]->ids) << "seed " << seed << " prompt " << i;
      } else {
        ++errors;
        EXPECT_TRUE(fail_step) << "kDecodeOnPrefill ended a request: " << got[i]->status.ToString();
        EXPECT_EQ(got[i]->reason, FinishReason::kError);
        EXPECT_NE(got[i]->status.message().find("transfer"), std::string::npos) << got[i]->status.ToString();
      }
    }
    EXPECT_GT(tx.counts().dropped + tx.counts().corrupted + tx.counts().truncated, 0);
    failures += (*dis)->stats().transfer_failures;
    EXPECT_EQ(stats.kv_pages_used, 0);
    EXPECT_EQ(stats.kda_slots_used, 0);
  }
  EXPECT_GT(exact, 0);
  std::printf("under faults: %lld exact, %lld errors, %lld failed transfers\n", static_cast<long long>(exact),
              static_cast<long long>(errors), static_cast<long long>(failures));
}

TEST_F(DisaggRunnerEngine, ADeadLinkEndsRequestsWithAnErrorAndFreesEverything) {
  const Model& model = *model_;
  const EngineOptions& eo = eo_;
  const auto& prompts = prompts_;
  auto prefill = MakeRunner(model, eo), decode = MakeRunner(model, eo);
  auto [a, b] = MakeLoopbackPair();
  FaultPolicy p;
  p.kill_after = 0;
  FaultyConnection tx(std::move(a), p);
  DisaggRunnerOptions o;
  o.on_transfer_failure = DisaggRunnerOptions::OnTransferFailure::kFailStep;
  o.sender.ack_timeout = milliseconds(200);
  auto dis = DisaggRunner::Create(*prefill, *decode, tx, *b, o);
  ASSERT_TRUE(dis.ok());
  EngineStats stats;
  auto got = RunAll(**dis, eo, prompts, &stats);
  for (const auto& s : got) {
    EXPECT_EQ(s->reason, FinishReason::kError);
    EXPECT_NE(s->status.message().find("transfer"), std::string::npos) << s->status.ToString();
    EXPECT_TRUE(s->ids.empty() || s->ids.size() == 1) << "tokens decoded after a failed transfer";
  }
  EXPECT_GT((*dis)->stats().transfer_failures, 0);
  EXPECT_EQ(stats.kv_pages_used, 0);
  EXPECT_EQ(stats.kda_slots_used, 0);
}

TEST_F(DisaggRunnerEngine, ADeadLinkFallsBackToDecodingOnThePrefillRunner) {
  const Model& model = *model_;
  const EngineOptions& eo = eo_;
  const auto& prompts = prompts_;
  EngineStats stats;
  auto want = Colocated();
  auto prefill = MakeRunner(model, eo), decode = MakeRunner(model, eo);
  auto [a, b] = MakeLoopbackPair();
  FaultPolicy p;
  p.kill_after = 0;
  FaultyConnection tx(std::move(a), p);
  auto dis = DisaggRunner::Create(*prefill, *decode, tx, *b, {});
  ASSERT_TRUE(dis.ok());
  auto got = RunAll(**dis, eo, prompts, &stats);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]->reason, FinishReason::kLength) << got[i]->status.ToString();
    EXPECT_EQ(got[i]->ids, want[i]->ids) << "prompt " << i;
  }
  EXPECT_EQ((*dis)->stats().transfer_failures, static_cast<int64_t>(prompts.size()));
  EXPECT_EQ((*dis)->stats().transfers, 0);
  EXPECT_EQ(stats.kv_pages_used, 0);
}

TEST_F(DisaggRunnerEngine, RefusesRunnersThatDiffer) {
  EngineOptions eo = eo_;
  auto prefill = MakeRunner(*model_, eo);
  eo.max_num_seqs = 2;
  auto decode = MakeRunner(*model_, eo);
  auto [a, b] = MakeLoopbackPair();
  EXPECT_EQ(DisaggRunner::Create(*prefill, *decode, *a, *b, {}).status().code(), StatusCode::kInvalidArgument);
}

// Speculative decoding over the pair: verify pieces and commits run on the runner that holds the
// sequence. n-gram drafts on repetitive prompts (glm5_tiny) and MTP drafts (the trained glm5_mini,
// k = 2): the outputs are the colocated engine's, and with MTP the drafts too — the same number
// proposed and accepted — which they would not be if the MTP keys or hidden state were lost in
// the hand-off (the first drafts after it would come from a cold MTP cache).
TEST(DisaggSpeculation, OutputsAndDraftsEqualTheColocatedEngine) {
  for (const char* method : {"ngram", "mtp"}) {
    SCOPED_TRACE(method);
    const bool mtp = std::string(method) == "mtp";
    auto m = Model::Load(Fixture(mtp ? "glm5_mini" : "glm5_tiny"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EngineOptions eo = Options();
    eo.kv_memory_bytes = 32 << 20;
    eo.speculative.method = method;
    eo.speculative.num_speculative_tokens = mtp ? 2 : 3;
    if (!mtp) eo.speculative.prompt_lookup_min = 1;
    std::vector<std::vector<int32_t>> prompts;
    for (int32_t base : {5, 300, 777}) {  // an 8-token unit 5 times and its first 3 again (n-gram drafts)
      std::vector<int32_t> p;
      for (int r = 0; r < 5; ++r)
        for (int32_t t = 0; t < 8; ++t) p.push_back(base + t * 3);
      for (int32_t t = 0; t < 3; ++t) p.push_back(base + t * 3);
      prompts.push_back(p);
    }
    if (!mtp) {  // "echo" prompts X Y X, Y the model's greedy continuation of X: the lookup proposes Y
      EngineOptions plain = eo;
      plain.speculative = {};
      auto r = MakeRunner(**m, plain);
      EngineStats st;
      const auto cont = RunAll(*r, plain, prompts, &st, 24);
      ASSERT_EQ(cont.size(), prompts.size());
      for (size_t i = 0; i < prompts.size(); ++i) {
        const std::vector<int32_t> x = prompts[i];
        prompts[i].insert(prompts[i].end(), cont[i]->ids.begin(), cont[i]->ids.end());
        prompts[i].insert(prompts[i].end(), x.begin(), x.end());
      }
    }
    EngineStats col_stats, dis_stats;
    auto colocated = MakeRunner(**m, eo);
    const auto want = RunAll(*colocated, eo, prompts, &col_stats, 24);
    auto prefill = MakeRunner(**m, eo), decode = MakeRunner(**m, eo);
    auto [tx, rx] = TcpPair();
    ASSERT_TRUE(tx && rx);
    auto dis = DisaggRunner::Create(*prefill, *decode, *tx, *rx, {});
    ASSERT_TRUE(dis.ok()) << dis.status().ToString();
    EXPECT_TRUE((*dis)->capacity().speculative);
    EXPECT_EQ((*dis)->capacity().mtp_drafts, mtp ? 2 : 0);
    const auto got = RunAll(**dis, eo, prompts, &dis_stats, 24);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i]->reason, FinishReason::kLength) << got[i]->status.ToString();
      EXPECT_EQ(got[i]->ids, want[i]->ids) << "prompt " << i;
    }
    EXPECT_EQ((*dis)->stats().transfers, static_cast<int64_t>(prompts.size()));
    EXPECT_GT(dis_stats.spec_verify_pieces, 0);
    if (mtp) EXPECT_GT(dis_stats.spec_accepted_tokens, 0);  // (glm5_tiny's random weights reject n-gram drafts)
    EXPECT_EQ(dis_stats.spec_draft_tokens, col_stats.spec_draft_tokens);
    EXPECT_EQ(dis_stats.spec_accepted_tokens, col_stats.spec_accepted_tokens);
    EXPECT_EQ(dis_stats.kv_pages_used, 0);
    EXPECT_EQ(dis_stats.kda_slots_used, 0);
    std::printf("[ disagg spec ] %s: %lld verify pieces, %lld/%lld drafts accepted (colocated %lld/%lld)\n", method,
                static_cast<long long>(dis_stats.spec_verify_pieces),
                static_cast<long long>(dis_stats.spec_accepted_tokens),
                static_cast<long long>(dis_stats.spec_draft_tokens),
                static_cast<long long>(col_stats.spec_accepted_tokens),
                static_cast<long long>(col_stats.spec_draft_tokens));
  }
}

}  // namespace
}  // namespace gyre::transfer
