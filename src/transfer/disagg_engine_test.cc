// The engine's request-level hand-off of disaggregated serving (engine.h: export_prefilled,
// RequestSink::OnPrefilled, ReleaseExported, SubmitImported), as `gyre serve --role prefill` and
// `--role decode` use it: engine A prefills and exports each request's cache and holds its pages
// and slot until released; engine B imports the images and decodes. B's greedy tokens equal a
// colocated engine's, with chunked prefills, prompts ending on page boundaries, prefix caching on
// or off, B preempting imported requests (a recompute), and speculative decoding; A's pools hold the exports until
// ReleaseExported and return to zero after it, an error release ends the request with that
// error, and a corrupted KDA state makes B's tokens differ (so the comparison can fail).
#include <gtest/gtest.h>

#include <chrono>
#include <ostream>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/test_collector.h"
#include "runtime/cpu_runner.h"
#include "runtime/model.h"
#include "transfer/sequence_image.h"

namespace gyre::transfer {
namespace {

std::string Fixture(const std::string& n) { return std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/" + n; }

// Records the exported image of a prefilled request.
class ExportCollector : public gyre::testing::Collector {
 public:
  Status OnPrefilled(int64_t id, const PrefilledSequence& seq) override {
    auto im = ExportSequence(*seq.runner, seq.slot, seq.pages, seq.num_tokens, seq.first_token);
    if (!im.ok()) return im.error();
    std::lock_guard<std::mutex> l(mu);
    image = std::move(*im);
    engine_id = id;
    exported = true;
    cv.notify_all();
    return Status::Ok();
  }
  bool WaitExported() {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::seconds(300), [&] { return exported || num_finish > 0; }) && exported;
  }
  SequenceImage image;
  RequestId engine_id = -1;
  bool exported = false;
};

struct Setup {
  bool prefix_caching = false;
  int64_t decode_pages = 0;  // > 0: B's page pool (small: B preempts)
  bool speculative = false;  // n-gram speculative decoding on every engine
};
void PrintTo(const Setup& s, std::ostream* os) {
  *os << "prefix_caching=" << s.prefix_caching << " decode_pages=" << s.decode_pages << " speculative=" << s.speculative;
}

class DisaggEngineHandOff : public ::testing::TestWithParam<Setup> {
 protected:
  void SetUp() override {
    auto m = Model::Load(Fixture("glm5_tiny"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    eo_.max_num_seqs = 3;
    eo_.kv_page_tokens = 16;
    eo_.kv_memory_bytes = 8 << 20;
    eo_.max_num_batched_tokens = 24;  // prompts longer than this are prefilled in chunks
    eo_.enable_prefix_caching = GetParam().prefix_caching;
    if (GetParam().speculative) eo_.speculative.method = "ngram";
    std::mt19937_64 rng(23);
    for (int64_t n : {37, 48, 16, 70, 5, 32}) {  // mid-page, page boundaries, chunked (> 24)
      std::vector<int32_t> p(n);
      for (auto& id : p) id = static_cast<int32_t>(rng() % std::min<int64_t>(model_->config().vocab_size, 1000));
      prompts_.push_back(std::move(p));
    }
    prompts_.push_back(prompts_[3]);  // the same prompt again: a prefix-cache hit on A when caching
  }
  std::unique_ptr<CpuRunner> Runner(int64_t pages = 0, int64_t slots = 0) {
    CpuRunnerOptions o;
    o.num_slots = slots > 0 ? slots : eo_.max_num_seqs;
    o.page_tokens = eo_.kv_page_tokens;
    o.num_pages = pages > 0 ? pages : CpuRunner::PagesForBytes(model_->config(), eo_.kv_page_tokens, eo_.kv_memory_bytes);
    return std::move(CpuRunner::Create(*model_, o).value());
  }
  RequestParams Params(const std::vector<int32_t>& prompt) const {
    RequestParams p;
    p.prompt = prompt;
    p.max_tokens = 20;  // (decodes cross page boundaries: a small pool preempts)
    p.ignore_eos = true;
    return p;
  }
  static EngineStats Settled(Engine& e, bool want_zero) {
    EngineStats st;
    for (int i = 0; i < 500; ++i) {  // the engine publishes its stats after each loop
      st = e.Stats();
      if (!want_zero || (st.kv_pages_used == 0 && st.kda_slots_used == 0 && st.num_exported_held == 0)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return st;
  }
  // The colocated engine's tokens per prompt.
  std::vector<std::vector<int32_t>> Colocated() {
    auto runner = Runner();
    auto engine = Engine::Create(*runner, eo_).value();
    EXPECT_TRUE(engine->Start().ok());
    std::vector<std::shared_ptr<gyre::testing::Collector>> sinks;
    for (const auto& p : prompts_) {
      sinks.push_back(std::make_shared<gyre::testing::Collector>());
      EXPECT_TRUE(engine->Submit(Params(p), sinks.back()).ok());
    }
    std::vector<std::vector<int32_t>> out;
    for (auto& s : sinks) {
      s->Wait();
      out.push_back(s->ids);
    }
    engine->Stop();
    return out;
  }
  // Prefills every prompt on A (held), imports each into B (the KDA state zeroed when
  // `corrupt`), releases A's holds, and returns B's tokens. Checks A's pools on the way.
  std::vector<std::vector<int32_t>> HandOff(bool corrupt) {
    // A holds every prompt's export at once (a slot each); B has 3 slots (and a small page pool
    // when preempting).
    EngineOptions eoa = eo_;
    eoa.max_num_seqs = static_cast<int64_t>(prompts_.size());
    auto ra = Runner(0, eoa.max_num_seqs), rb = Runner(GetParam().decode_pages);
    auto a = Engine::Create(*ra, eoa).value();
    auto b = Engine::Create(*rb, eo_).value();
    EXPECT_TRUE(a->Start().ok());
    EXPECT_TRUE(b->Start().ok());
    std::vector<std::shared_ptr<ExportCollector>> pre;
    for (const auto& p : prompts_) {
      pre.push_back(std::make_shared<ExportCollector>());
      RequestParams q = Params(p);
      q.export_prefilled = true;
      EXPECT_TRUE(a->Submit(q, pre.back()).ok());
    }
    for (auto& s : pre) EXPECT_TRUE(s->WaitExported()) << s->status.ToString();
    EngineStats held;
    for (int i = 0; i < 500 && held.num_exported_held < static_cast<int64_t>(prompts_.size()); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // (stats are published after each loop)
      held = a->Stats();
    }
    EXPECT_EQ(held.num_exported_held, static_cast<int64_t>(prompts_.size()));
    EXPECT_GT(held.kv_pages_used, 0);
    EXPECT_EQ(held.kda_slots_used, static_cast<int64_t>(prompts_.size()));
    for (auto& s : pre) EXPECT_EQ(s->num_finish, 0);  // held: not finished before the release
    std::vector<std::shared_ptr<gyre::testing::Collector>> dec;
    for (size_t i = 0; i < prompts_.size(); ++i) {
      auto image = std::make_shared<SequenceImage>(pre[i]->image);
      if (corrupt) std::fill(image->state.begin(), image->state.end(), std::byte{0});
      ImportedSequence seq;
      seq.num_tokens = image->num_tokens;
      seq.first.id = image->next_token;
      seq.write = [image](ModelRunner& r, int32_t slot, std::span<const int32_t> pages) {
        return ImportSequence(r, *image, slot, pages);
      };
      dec.push_back(std::make_shared<gyre::testing::Collector>());
      EXPECT_TRUE(b->SubmitImported(Params(prompts_[i]), std::move(seq), dec.back()).ok());
    }
    for (auto& s : pre) a->ReleaseExported(s->engine_id, Status::Ok());
    std::vector<std::vector<int32_t>> out;
    for (size_t i = 0; i < prompts_.size(); ++i) {
      pre[i]->Wait();
      EXPECT_EQ(pre[i]->reason, FinishReason::kLength);
      EXPECT_EQ(pre[i]->ids.size(), 1u);  // the prefill instance samples the first token only
      dec[i]->Wait();
      EXPECT_TRUE(dec[i]->status.ok()) << dec[i]->status.ToString();
      out.push_back(dec[i]->ids);
    }
    const EngineStats sa = Settled(*a, true), sb = Settled(*b, true);
    EXPECT_EQ(sa.kv_pages_used, 0);
    EXPECT_EQ(sa.kda_slots_used, 0);
    EXPECT_EQ(sa.num_exported_held, 0);
    EXPECT_EQ(sb.kv_pages_used, 0);
    EXPECT_EQ(sb.kda_slots_used, 0);
    if (GetParam().decode_pages > 0 && !corrupt) EXPECT_GT(sb.num_preemptions, 0);
    a->Stop();
    b->Stop();
    return out;
  }

  std::unique_ptr<Model> model_;
  EngineOptions eo_;
  std::vector<std::vector<int32_t>> prompts_;
};

TEST_P(DisaggEngineHandOff, DecodeEqualsColocated) {
  const auto want = Colocated();
  const auto got = HandOff(/*corrupt=*/false);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].size(), 20u);
    EXPECT_EQ(got[i], want[i]) << "prompt " << i << " (" << prompts_[i].size() << " tokens)";
  }
}

TEST_P(DisaggEngineHandOff, ZeroedStateDecodesDifferently) {
  const auto want = Colocated();
  const auto got = HandOff(/*corrupt=*/true);
  int differ = 0;
  for (size_t i = 0; i < want.size(); ++i) differ += got[i] != want[i];
  EXPECT_GT(differ, 0);  // the equality above can fail: the KDA state matters
}

TEST_P(DisaggEngineHandOff, FailedReleaseEndsWithTheError) {
  auto ra = Runner();
  auto a = Engine::Create(*ra, eo_).value();
  ASSERT_TRUE(a->Start().ok());
  auto s = std::make_shared<ExportCollector>();
  RequestParams q = Params(prompts_[0]);
  q.export_prefilled = true;
  ASSERT_TRUE(a->Submit(q, s).ok());
  ASSERT_TRUE(s->WaitExported());
  a->ReleaseExported(s->engine_id, Status::Unavailable("the transfer failed"));
  a->ReleaseExported(s->engine_id, Status::Ok());  // a second release is ignored
  s->Wait();
  EXPECT_EQ(s->reason, FinishReason::kError);
  EXPECT_EQ(s->status.message(), "the transfer failed");
  EXPECT_EQ(s->num_finish, 1);
  const EngineStats st = Settled(*a, true);
  EXPECT_EQ(st.kv_pages_used, 0);
  EXPECT_EQ(st.num_exported_held, 0);
  // A held export at Stop ends cancelled.
  auto t = std::make_shared<ExportCollector>();
  ASSERT_TRUE(a->Submit(q, t).ok());
  ASSERT_TRUE(t->WaitExported());
  a->Stop();
  EXPECT_EQ(t->reason, FinishReason::kCancelled);
}

TEST_P(DisaggEngineHandOff, SubmitImportedRefusesAMismatchedPrompt) {
  auto rb = Runner();
  auto b = Engine::Create(*rb, eo_).value();
  ASSERT_TRUE(b->Start().ok());
  ImportedSequence seq;
  seq.num_tokens = static_cast<int64_t>(prompts_[0].size()) + 1;
  seq.first.id = 1;
  seq.write = [](ModelRunner&, int32_t, std::span<const int32_t>) { return Status::Ok(); };
  auto r = b->SubmitImported(Params(prompts_[0]), seq, std::make_shared<gyre::testing::Collector>());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  // A writer that fails ends the request with its error and no token.
  seq.num_tokens = static_cast<int64_t>(prompts_[0].size());
  seq.write = [](ModelRunner&, int32_t, std::span<const int32_t>) { return Status::DataLoss("bad image"); };
  auto c = std::make_shared<gyre::testing::Collector>();
  ASSERT_TRUE(b->SubmitImported(Params(prompts_[0]), seq, c).ok());
  c->Wait();
  EXPECT_EQ(c->reason, FinishReason::kError);
  EXPECT_TRUE(c->ids.empty());
  const EngineStats st = Settled(*b, true);
  EXPECT_EQ(st.kv_pages_used, 0);
  EXPECT_EQ(st.kda_slots_used, 0);
  b->Stop();
}

INSTANTIATE_TEST_SUITE_P(Setups, DisaggEngineHandOff,
                         ::testing::Values(Setup{false, 0}, Setup{true, 0}, Setup{false, 7}, Setup{false, 0, true}),
                         [](const ::testing::TestParamInfo<Setup>& i) {
                           return std::string(i.param.prefix_caching ? "PrefixCache" : "NoCache") +
                                  (i.param.decode_pages > 0 ? "Preempting" : "") +
                                  (i.param.speculative ? "Speculative" : "");
                         });

}  // namespace
}  // namespace gyre::transfer
