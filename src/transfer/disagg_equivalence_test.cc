// Proof of equivalence on the CPU: a prompt prefilled on runner A, its cache (pages + KDA state)
// exported, sent over TCP loopback through the transfer protocol, imported into runner B at
// other ids, and decoded greedily there gives exactly the tokens of decoding on A alone —
// including a prompt that ends on a page boundary and chunked prefills. A control shows the test
// can fail: the same transfer without the KDA state decodes differently.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "engine/test_backends.h"
#include "runtime/model.h"
#include "transfer/faulty_connection.h"
#include "transfer/tcp_pair_for_tests.h"
#include "transfer/transfer_engine.h"

namespace gyre::transfer {
namespace {

using std::chrono::milliseconds;

std::string Fixture(const std::string& n) { return std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/" + n; }

constexpr int64_t kPageTokens = 16;

// One sequence on a raw runner with its own id bookkeeping (what the engine does).
struct Seq {
  SlotId slot = -1;
  std::vector<PageId> pages;
  int64_t num_tokens = 0;
};

// A runner with its own id bookkeeping: one instance (prefill, decode, or both).
class Instance {
 public:
  Instance(const Model& m, const testing::Backend& backend) : pages_(64, "pages"), slots_(2, "slots") {
    auto r = backend.make(m, 2, kPageTokens, 64);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) runner_ = std::move(*r);
  }
  bool ok() const { return runner_ != nullptr; }
  ModelRunner& runner() { return *runner_; }
  IdPool& pages() { return pages_; }

  Result<Seq> NewSeq() {
    Seq s;
    GYRE_ASSIGN_OR_RETURN(s.slot, slots_.AllocateOne());
    return s;
  }
  // Pages for `total` tokens.
  Status Reserve(Seq& s, int64_t total) {
    const int64_t need = (total + kPageTokens - 1) / kPageTokens - static_cast<int64_t>(s.pages.size());
    if (need <= 0) return Status::Ok();
    GYRE_ASSIGN_OR_RETURN(std::vector<int32_t> more, pages_.Allocate(need));
    s.pages.insert(s.pages.end(), more.begin(), more.end());
    return Status::Ok();
  }
  // Feeds `ids` to the sequence; returns the greedy token after them (or -1 when !sample).
  Result<int32_t> Feed(Seq& s, std::span<const int32_t> ids, bool sample, uint64_t offset) {
    GYRE_RETURN_IF_ERROR(Reserve(s, s.num_tokens + static_cast<int64_t>(ids.size())));
    StepPiece p;
    p.slot = s.slot;
    p.pages = s.pages;
    p.start = s.num_tokens;
    p.ids = ids;
    p.sample.enabled = sample;
    p.sample.offset = offset;
    std::vector<SampledToken> out;
    GYRE_RETURN_IF_ERROR(runner_->Step(std::span<const StepPiece>(&p, 1), &out));
    s.num_tokens += static_cast<int64_t>(ids.size());
    return out[0].id;
  }
  // Prefill in chunks (sizes summing to the prompt); the first sampled token.
  Result<int32_t> Prefill(Seq& s, const std::vector<int32_t>& prompt, const std::vector<int64_t>& chunks) {
    int64_t pos = 0;
    int32_t tok = -1;
    for (size_t i = 0; i < chunks.size(); ++i) {
      GYRE_ASSIGN_OR_RETURN(tok, Feed(s, std::span(prompt).subspan(pos, chunks[i]), i + 1 == chunks.size(), 0));
      pos += chunks[i];
    }
    if (pos != static_cast<int64_t>(prompt.size())) return Status::InvalidArgument("chunks do not cover the prompt");
    return tok;
  }
  // `n` greedy tokens after `first` (which is not yet in the cache).
  Result<std::vector<int32_t>> Decode(Seq& s, int32_t first, int n) {
    std::vector<int32_t> out = {first};
    while (static_cast<int>(out.size()) < n) {
      const int32_t last = out.back();
      GYRE_ASSIGN_OR_RETURN(int32_t t, Feed(s, std::span<const int32_t>(&last, 1), true, out.size()));
      out.push_back(t);
    }
    return out;
  }
  void Release(Seq& s) {
    pages_.Release(s.pages);
    slots_.Release(s.slot);
    s = Seq{};
  }
  int64_t used() const { return pages_.num_used() + slots_.num_used(); }

 private:
  std::unique_ptr<ModelRunner> runner_;
  IdPool pages_, slots_;
};

struct PromptCase {
  testing::Backend backend;
  std::string fixture;
  int64_t length;
  std::vector<int64_t> chunks;
  std::string name;
};

void PrintTo(const PromptCase& c, std::ostream* os) {
  *os << c.backend.name << "/" << c.fixture << "/" << c.name << " (" << c.length << " tokens)";
}

class DisaggEquivalence : public ::testing::TestWithParam<PromptCase> {};

constexpr int kDecodeTokens = 12;

TEST_P(DisaggEquivalence, DecodeOnAnotherRunnerAfterTcpTransferMatchesColocated) {
  const PromptCase& pc = GetParam();
  auto model = Model::Load(Fixture(pc.fixture));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::mt19937_64 rng(pc.length * 131 + pc.chunks.size());
  std::vector<int32_t> prompt(pc.length);
  for (auto& id : prompt) id = static_cast<int32_t>(rng() % std::min<int64_t>((*model)->config().vocab_size, 1000));

  // Colocated: prefill and decode on one runner.
  Instance colo(**model, pc.backend);
  ASSERT_TRUE(colo.ok());
  auto cs = colo.NewSeq();
  ASSERT_TRUE(cs.ok());
  auto first = colo.Prefill(*cs, prompt, pc.chunks);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto want = colo.Decode(*cs, *first, kDecodeTokens);
  ASSERT_TRUE(want.ok()) << want.status().ToString();

  // Disaggregated: prefill on A, transfer over TCP, decode on B.
  Instance a(**model, pc.backend), b(**model, pc.backend);
  ASSERT_TRUE(a.ok() && b.ok());
  auto [client, server] = TcpPair();
  ASSERT_TRUE(client && server);
  TransferSender sender(*client, {});
  TransferReceiver receiver(*server, {});

  auto as = a.NewSeq();
  ASSERT_TRUE(as.ok());
  auto a_first = a.Prefill(*as, prompt, pc.chunks);
  ASSERT_TRUE(a_first.ok());
  EXPECT_EQ(*a_first, *first);
  auto image = ExportSequence(a.runner(), as->slot, as->pages, as->num_tokens, *a_first);
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(static_cast<int64_t>(image->pages.size()), (pc.length + kPageTokens - 1) / kPageTokens);
  ASSERT_TRUE(sender.Send(1, *image).ok());
  a.Release(*as);  // only after the receiver's acknowledgement
  EXPECT_EQ(a.used(), 0);

  auto got = receiver.Take(1, milliseconds(5000));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  // B's ids differ from A's: occupy some pages and a slot first.
  auto busy = b.NewSeq();
  ASSERT_TRUE(busy.ok() && b.Reserve(*busy, 3 * kPageTokens).ok());
  auto bs = b.NewSeq();
  ASSERT_TRUE(bs.ok());
  ASSERT_TRUE(b.Reserve(*bs, got->num_tokens).ok());
  ASSERT_NE(bs->pages.front(), 0);
  ASSERT_TRUE(ImportSequence(b.runner(), *got, bs->slot, bs->pages).ok());
  bs->num_tokens = got->num_tokens;
  auto disagg = b.Decode(*bs, got->next_token, kDecodeTokens);
  ASSERT_TRUE(disagg.ok()) << disagg.status().ToString();
  EXPECT_EQ(*disagg, *want);

  // Control: the same pages without the KDA state decode differently (the state matters).
  SequenceImage no_state = *got;
  std::fill(no_state.state.begin(), no_state.state.end(), std::byte{0});
  if (!no_state.state.empty() && pc.length >= kPageTokens) {
    b.Release(*bs);
    auto bs2 = b.NewSeq();
    ASSERT_TRUE(bs2.ok() && b.Reserve(*bs2, got->num_tokens).ok());
    ASSERT_TRUE(ImportSequence(b.runner(), no_state, bs2->slot, bs2->pages).ok());
    bs2->num_tokens = got->num_tokens;
    auto wrong = b.Decode(*bs2, got->next_token, kDecodeTokens);
    ASSERT_TRUE(wrong.ok());
    EXPECT_NE(*wrong, *want) << "decoding ignores the KDA state: the test cannot fail";
    *bs = *bs2;
  }
  b.Release(*bs);
  b.Release(*busy);
  EXPECT_EQ(b.used(), 0);
  EXPECT_EQ(receiver.held_bytes(), 0);
}

// Off the engine thread: a finished sequence read on another thread while a step of another
// sequence is in flight gives the engine-thread export byte for byte (the CUDA model: its own
// stream and pinned buffer). A runner that reads only on the engine thread says so.
TEST_P(DisaggEquivalence, ConcurrentExportEqualsTheEngineThreadExport) {
  const PromptCase& pc = GetParam();
  auto model = Model::Load(Fixture(pc.fixture));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::mt19937_64 rng(pc.length * 7 + 1);
  std::vector<int32_t> prompt(pc.length);
  for (auto& id : prompt) id = static_cast<int32_t>(rng() % std::min<int64_t>((*model)->config().vocab_size, 1000));
  Instance a(**model, pc.backend);
  ASSERT_TRUE(a.ok());
  auto s = a.NewSeq();
  ASSERT_TRUE(s.ok());
  auto first = a.Prefill(*s, prompt, pc.chunks);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto want = ExportSequence(a.runner(), s->slot, s->pages, s->num_tokens, *first);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  if (!a.runner().ReadsFinishedConcurrently()) {
    EXPECT_EQ(ExportFinishedSequence(a.runner(), s->slot, s->pages, s->num_tokens, *first).status().code(),
              StatusCode::kUnimplemented);
    return;
  }
  // Another sequence's 64-token prefill launched and not collected while the other thread reads.
  auto o = a.NewSeq();
  ASSERT_TRUE(o.ok() && a.Reserve(*o, 64).ok());
  std::vector<int32_t> other(64);
  for (auto& id : other) id = static_cast<int32_t>(rng() % 500);
  StepPiece p;
  p.slot = o->slot;
  p.pages = o->pages;
  p.start = 0;
  p.ids = other;
  p.sample.enabled = true;
  ASSERT_TRUE(a.runner().Launch(std::span<const StepPiece>(&p, 1), false).ok());
  Result<SequenceImage> got = Status::Internal("not run");
  std::thread reader([&] { got = ExportFinishedSequence(a.runner(), s->slot, s->pages, s->num_tokens, *first); });
  std::vector<SampledToken> out;
  const Status collected = a.runner().Collect(&out, nullptr);
  reader.join();
  ASSERT_TRUE(collected.ok()) << collected.ToString();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, *want);
  // Bad ids are refused as ReadPages refuses them.
  std::vector<PageId> bad = s->pages;
  bad.front() = 1 << 30;
  EXPECT_EQ(ExportFinishedSequence(a.runner(), s->slot, bad, s->num_tokens, *first).status().code(),
            StatusCode::kInvalidArgument);
}

std::vector<PromptCase> Cases() {
  std::vector<PromptCase> c;
  for (const testing::Backend& b : testing::Backends()) {
    for (const char* f : {"glm5_tiny", "kimi_tiny"}) {
      c.push_back({b, f, 37, {37}, "mid_page"});
      c.push_back({b, f, 48, {48}, "page_boundary"});
      c.push_back({b, f, 50, {20, 30}, "chunked"});
      c.push_back({b, f, 64, {16, 16, 32}, "chunked_on_boundaries"});
      c.push_back({b, f, 1, {1}, "one_token"});
    }
  }
  return c;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DisaggEquivalence, ::testing::ValuesIn(Cases()),
                         [](const auto& info) {
                           return info.param.backend.name + "_" + info.param.fixture + "_" + info.param.name;
                         });

// The invariant end to end, under faults on the TCP link: a request either completes on
// B with the colocated tokens, or its transfer fails with a Status while A still holds the
// sequence (and decodes it there: the fallback gives the same tokens); both instances' pools and
// the receiver's held bytes return to zero.
TEST(DisaggUnderFaults, CompletesIdenticalOrFailsAndPoolsReturnToZero) {
  auto model = Model::Load(Fixture("glm5_tiny"));
  ASSERT_TRUE(model.ok());
  const testing::Backend cpu = testing::Backends().front();
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 53 + 7) % 900);
  Instance colo(**model, cpu);
  auto cs = colo.NewSeq();
  ASSERT_TRUE(cs.ok());
  auto first = colo.Prefill(*cs, prompt, {24, 16});
  ASSERT_TRUE(first.ok());
  auto want = colo.Decode(*cs, *first, kDecodeTokens);
  ASSERT_TRUE(want.ok());

  int completed = 0, failed = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    Instance a(**model, cpu), b(**model, cpu);
    auto [client, server] = TcpPair();
    ASSERT_TRUE(client && server);
    FaultPolicy p;
    p.seed = seed;
    p.drop = p.corrupt = p.truncate = 0.08;
    p.duplicate = p.reorder = 0.1;
    if (seed == 8) p.kill_after = 3;
    FaultyConnection tx(std::move(client), p);
    SenderOptions so;
    so.ack_timeout = milliseconds(200);
    TransferSender sender(tx, so);
    ReceiverOptions ro;
    ro.staging_timeout = milliseconds(300);
    TransferReceiver receiver(*server, ro);

    auto as = a.NewSeq();
    ASSERT_TRUE(as.ok());
    auto a_first = a.Prefill(*as, prompt, {24, 16});
    ASSERT_TRUE(a_first.ok());
    auto image = ExportSequence(a.runner(), as->slot, as->pages, as->num_tokens, *a_first);
    ASSERT_TRUE(image.ok());
    const Status sent = sender.Send(seed, *image);
    std::vector<int32_t> got_tokens;
    if (sent.ok()) {
      ++completed;
      a.Release(*as);
      auto got = receiver.Take(seed, milliseconds(5000));
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      auto bs = b.NewSeq();
      ASSERT_TRUE(bs.ok() && b.Reserve(*bs, got->num_tokens).ok());
      ASSERT_TRUE(ImportSequence(b.runner(), *got, bs->slot, bs->pages).ok());
      bs->num_tokens = got->num_tokens;
      auto d = b.Decode(*bs, got->next_token, kDecodeTokens);
      ASSERT_TRUE(d.ok());
      got_tokens = *d;
      b.Release(*bs);
    } else {
      ++failed;
      EXPECT_FALSE(sent.message().empty());
      if (seed == 8) EXPECT_EQ(sent.code(), StatusCode::kUnavailable) << sent.ToString();
      auto d = a.Decode(*as, *a_first, kDecodeTokens);  // the sender kept everything
      ASSERT_TRUE(d.ok());
      got_tokens = *d;
      a.Release(*as);
    }
    EXPECT_EQ(got_tokens, *want) << "seed " << seed << " " << sent.ToString();
    for (int i = 0; i < 300 && receiver.held_bytes() != 0; ++i) std::this_thread::sleep_for(milliseconds(10));
    EXPECT_EQ(receiver.held_bytes(), 0) << "seed " << seed;
    EXPECT_EQ(a.used(), 0);
    EXPECT_EQ(b.used(), 0);
  }
  EXPECT_GT(completed, 0);
  EXPECT_GT(failed, 0);  // at least the killed link
}

TEST(DisaggImport, RefusesAnImageOfAnotherFormat) {
  auto model = Model::Load(Fixture("glm5_tiny"));
  ASSERT_TRUE(model.ok());
  Instance a(**model, testing::Backends().front());
  ASSERT_TRUE(a.ok());
  auto s = a.NewSeq();
  ASSERT_TRUE(s.ok());
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  ASSERT_TRUE(a.Prefill(*s, prompt, {5}).ok());
  auto im = ExportSequence(a.runner(), s->slot, s->pages, s->num_tokens, 0);
  ASSERT_TRUE(im.ok());
  SequenceImage other = *im;
  other.format.model_fingerprint ^= 1;
  EXPECT_EQ(ImportSequence(a.runner(), other, s->slot, s->pages).code(), StatusCode::kInvalidArgument);
  other = *im;
  other.pages.front().pop_back();
  EXPECT_EQ(ImportSequence(a.runner(), other, s->slot, s->pages).code(), StatusCode::kInvalidArgument);
  // A short block table on export.
  EXPECT_FALSE(ExportSequence(a.runner(), s->slot, {}, s->num_tokens, 0).ok());
  // Same page sizes, another cache layout (the CUDA model's fp8 vs int8 pages): refused by name.
  class OtherLayout final : public ModelRunner {
   public:
    explicit OtherLayout(ModelRunner& r) : r_(r) {}
    const ModelConfig& config() const override { return r_.config(); }
    RunnerCapacity capacity() const override {
      RunnerCapacity c = r_.capacity();
      c.cache_layout = 7;
      return c;
    }
    std::string backend() const override { return r_.backend(); }
    Status Launch(std::span<const StepPiece> p, bool w) override { return r_.Launch(p, w); }
    Status Collect(std::vector<SampledToken>* o, std::vector<float>* l) override { return r_.Collect(o, l); }
    Status ReserveCheckpoints(int64_t n) override { return r_.ReserveCheckpoints(n); }
    Status SaveState(SlotId s, CheckpointId c) override { return r_.SaveState(s, c); }
    Status RestoreState(CheckpointId c, SlotId s, int64_t n) override { return r_.RestoreState(c, s, n); }
    Status ReadPages(std::span<const PageId> p, std::span<std::byte> d) override { return r_.ReadPages(p, d); }
    Status WritePages(std::span<const PageId> p, std::span<const std::byte> b) override { return r_.WritePages(p, b); }
    Status ReadSlotState(SlotId s, std::span<std::byte> d) override { return r_.ReadSlotState(s, d); }
    Status WriteSlotState(SlotId s, std::span<const std::byte> b, int64_t n) override {
      return r_.WriteSlotState(s, b, n);
    }

   private:
    ModelRunner& r_;
  } other_layout(a.runner());
  const Status refused = ImportSequence(other_layout, *im, s->slot, s->pages);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.ToString();
  EXPECT_TRUE(ImportSequence(a.runner(), *im, s->slot, s->pages).ok());
}

// The runner ops alone: an export read back into other ids of the same runner is byte-exact.
TEST(DisaggImport, ExportImportExportIsIdentity) {
  auto model = Model::Load(Fixture("kimi_tiny"));
  ASSERT_TRUE(model.ok());
  Instance a(**model, testing::Backends().front());
  ASSERT_TRUE(a.ok());
  auto s = a.NewSeq();
  ASSERT_TRUE(s.ok());
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 11) % 500);
  ASSERT_TRUE(a.Prefill(*s, prompt, {40}).ok());
  auto im = ExportSequence(a.runner(), s->slot, s->pages, s->num_tokens, 3);
  ASSERT_TRUE(im.ok());
  bool nonzero = false;
  for (std::byte x : im->state) nonzero |= x != std::byte{0};
  EXPECT_TRUE(nonzero) << "a prefilled KDA state is not all zeros";
  auto t = a.NewSeq();
  ASSERT_TRUE(t.ok() && a.Reserve(*t, 40).ok());
  ASSERT_TRUE(ImportSequence(a.runner(), *im, t->slot, t->pages).ok());
  auto back = ExportSequence(a.runner(), t->slot, t->pages, 40, 3);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *im);
}

}  // namespace
}  // namespace gyre::transfer
