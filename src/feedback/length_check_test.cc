// The length check (feedback/length_check.h) on the CPU runner: the glm5_tiny and kimi_tiny
// fixtures pass with odd chunk sizes, a partial page at the tail's start and a tail longer than a
// page; a runner that loses a little KDA state at every piece boundary (a state-passing fault the
// check exists for) fails it, in the chunk rows and in the tail row; bad requests are refused.
#include "feedback/length_check.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "runtime/cpu_runner.h"
#include "runtime/model.h"

namespace gyre::feedback {
namespace {

std::string Fixture(const std::string& n) { return std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/" + n; }

std::unique_ptr<CpuRunner> MakeRunner(const Model& m, const LengthCheckOptions& o, int64_t pt) {
  CpuRunnerOptions ro;
  ro.page_tokens = pt;
  ro.num_pages = LengthCheckPages(o, pt);
  ro.num_slots = 2;
  ro.max_step_tokens = 320;
  auto r = CpuRunner::Create(m, ro);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(*r) : nullptr;
}

// Forwards everything; before a prefill piece that continues a sequence (start > 0, several ids)
// it scales the slot's KDA state by (1 - 1e-3): lossy state passing between pieces.
class LossyBoundaryRunner final : public ModelRunner {
 public:
  explicit LossyBoundaryRunner(ModelRunner& r) : r_(r) {}
  const ModelConfig& config() const override { return r_.config(); }
  RunnerCapacity capacity() const override { return r_.capacity(); }
  std::string backend() const override { return "lossy"; }
  Status Launch(std::span<const StepPiece> pieces, bool want_logits) override {
    for (const StepPiece& p : pieces) {
      if (p.start > 0 && p.ids.size() > 1) {
        std::vector<std::byte> b(r_.capacity().bytes_per_slot);
        GYRE_RETURN_IF_ERROR(r_.ReadSlotState(p.slot, b));
        std::vector<float> f(b.size() / sizeof(float));
        std::memcpy(f.data(), b.data(), b.size());
        for (float& x : f) x *= 0.999f;
        std::memcpy(b.data(), f.data(), b.size());
        GYRE_RETURN_IF_ERROR(r_.WriteSlotState(p.slot, b, p.start));
      }
    }
    return r_.Launch(pieces, want_logits);
  }
  Status Collect(std::vector<SampledToken>* out, std::vector<float>* logits) override { return r_.Collect(out, logits); }
  Status ReserveCheckpoints(int64_t n) override { return r_.ReserveCheckpoints(n); }
  Status SaveState(SlotId s, CheckpointId c) override { return r_.SaveState(s, c); }
  Status RestoreState(CheckpointId c, SlotId s, int64_t n) override { return r_.RestoreState(c, s, n); }
  Status ReadPages(std::span<const PageId> p, std::span<std::byte> d) override { return r_.ReadPages(p, d); }
  Status WritePages(std::span<const PageId> p, std::span<const std::byte> s) override { return r_.WritePages(p, s); }
  Status ReadSlotState(SlotId s, std::span<std::byte> d) override { return r_.ReadSlotState(s, d); }
  Status WriteSlotState(SlotId s, std::span<const std::byte> b, int64_t n) override {
    return r_.WriteSlotState(s, b, n);
  }

 private:
  ModelRunner& r_;
};

LengthCheckOptions Options() {
  LengthCheckOptions o;
  o.tokens = 300;
  o.chunks = {64, 17, 256, 300};
  o.tail = 23;  // 277 = 4 pages of 64 + 21: the partial page is copied
  o.head = 9;
  o.logits_tol = 1e-5;  // fp32 CPU: summation order only
  o.worst_tol = 1e-5;
  o.state_tol = 1e-5;
  return o;
}

TEST(LengthCheck, PassesOnBothFamilies) {
  for (const char* name : {"glm5_tiny", "kimi_tiny"}) {
    SCOPED_TRACE(name);
    auto m = Model::Load(Fixture(name));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const LengthCheckOptions o = Options();
    auto r = MakeRunner(**m, o, 64);
    ASSERT_NE(r, nullptr);
    auto rep = CheckLength(*r, o);
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    EXPECT_TRUE(rep->pass) << rep->Human();
    ASSERT_EQ(rep->chunks.size(), 4u);
    ASSERT_EQ(rep->decode.size(), 2u);
    EXPECT_GT(rep->state_floats, 0);
    EXPECT_EQ(rep->decode[0].pos0, 277);
    EXPECT_EQ(rep->decode[0].n, 23);
    EXPECT_EQ(rep->decode[0].argmax_agree, 23);
    EXPECT_EQ(rep->decode[1].argmax_agree, 9);
    for (const auto& c : rep->chunks) EXPECT_TRUE(c.argmax_same);
    EXPECT_EQ(rep->Json()["pass"], true);
  }
}

TEST(LengthCheck, LossyStatePassingFails) {
  auto m = Model::Load(Fixture("glm5_tiny"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const LengthCheckOptions o = Options();
  auto inner = MakeRunner(**m, o, 64);
  ASSERT_NE(inner, nullptr);
  LossyBoundaryRunner r(*inner);
  auto rep = CheckLength(r, o);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_FALSE(rep->pass);
  // The reference chunking (64) has boundaries too; 300 in one piece has none, so it differs.
  EXPECT_GT(rep->chunks[3].state_rel_l2, o.state_tol);
  EXPECT_GT(rep->chunks[1].state_rel_l2, o.state_tol);  // 17 tokens: more boundaries than 64
  // The tail piece continues the sequence (lossy); decoding from the checkpoint does not.
  EXPECT_GT(rep->decode[0].state_rel_l2, o.state_tol);
  EXPECT_GT(rep->decode[0].worst_rel_l2, o.logits_tol);
}

TEST(LengthCheck, RefusesWhatTheRunnerCannotHold) {
  auto m = Model::Load(Fixture("glm5_tiny"));
  ASSERT_TRUE(m.ok());
  LengthCheckOptions o = Options();
  auto r = MakeRunner(**m, o, 64);
  ASSERT_NE(r, nullptr);
  LengthCheckOptions big = o;
  big.chunks = {512};  // > max_step_tokens 320
  EXPECT_EQ(CheckLength(*r, big).status().code(), StatusCode::kInvalidArgument);
  LengthCheckOptions longer = o;
  longer.tokens = 1000;  // more pages than the runner has
  EXPECT_EQ(CheckLength(*r, longer).status().code(), StatusCode::kInvalidArgument);
  LengthCheckOptions none = o;
  none.chunks.clear();
  EXPECT_EQ(CheckLength(*r, none).status().code(), StatusCode::kInvalidArgument);
  LengthCheckOptions tail = o;
  tail.tail = o.tokens;
  EXPECT_EQ(CheckLength(*r, tail).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gyre::feedback
