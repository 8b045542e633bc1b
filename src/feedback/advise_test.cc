// The skeleton catalogue's parser and search, and `gyre advise` on traces whose answer is known:
// a starved transfer thread, eager decode steps, a GPU gap behind a slow host op.
#include <gtest/gtest.h>

#include "feedback/advise.h"
#include "feedback/skeletons.h"

namespace gyre::feedback {
namespace {

std::string Entry(const std::string& name, const std::string& triggers, const std::string& ops = "[]") {
  return "---\n{\"name\": \"" + name + "\", \"title\": \"T " + name +
         "\", \"backend\": \"cuda\", \"signal\": \"when the copy is exposed\", \"ops\": " + ops +
         ", \"triggers\": " + triggers +
         ", \"transformation\": \"move it\", \"evidence\": [{\"file\": \"bench/results/x.json\"}], \"guard\": \"gyre verify "
         "trace\"}\n---\nProse about overlap.\n";
}

TEST(Skeletons, ParsesAndRefusesWithTheReason) {
  auto s = ParseSkeleton(Entry("overlap-copies", R"([{"signal": "overlap", "a": "transfer", "max_ratio": 0.5}])",
                               R"(["kv.transfer"])"),
                         "docs/skeletons/overlap-copies.md");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->name, "overlap-copies");
  EXPECT_EQ(s->ops, std::vector<std::string>{"kv.transfer"});
  EXPECT_EQ(s->prose, "Prose about overlap.\n");
  auto why = [](const std::string& text, const std::string& path = "d/x.md") {
    auto r = ParseSkeleton(text, path);
    return r.ok() ? std::string("parsed") : r.status().message();
  };
  EXPECT_NE(why("no front matter").find("must start with"), std::string::npos);
  EXPECT_NE(why("---\n{\"name\": 1}\n").find("not closed"), std::string::npos);
  EXPECT_NE(why("---\n{nope}\n---\n").find("not JSON"), std::string::npos);
  EXPECT_NE(why(Entry("x", "[]"), "d/other.md").find("but the file is other.md"), std::string::npos);
  EXPECT_NE(why(Entry("x", R"([{"signal": "vibes"}])")).find("unknown trigger signal 'vibes'"), std::string::npos);
  EXPECT_NE(why(Entry("X!", "[]"), "d/X!.md").find("[a-z0-9-]+"), std::string::npos);
  std::string no_guard = Entry("x", "[]");
  no_guard.replace(no_guard.find("\"guard\""), 7, "\"gaurd\"");
  EXPECT_NE(why(no_guard).find("missing 'guard'"), std::string::npos);
}

TEST(Skeletons, SearchByOpAndWords) {
  std::vector<Skeleton> all;
  all.push_back(*ParseSkeleton(Entry("a", "[]", R"(["kda.chunk"])"), ""));
  all.push_back(*ParseSkeleton(Entry("b", "[]", R"(["moe.experts"])"), ""));
  all.back().title = "Grouped GEMM for tiny expert matrices";
  EXPECT_EQ(SearchSkeletons(all, "", "").size(), 2u);
  ASSERT_EQ(SearchSkeletons(all, "kda.chunk", "").size(), 1u);
  EXPECT_EQ(SearchSkeletons(all, "kda.chunk", "")[0]->name, "a");
  ASSERT_EQ(SearchSkeletons(all, "", "GROUPED tiny").size(), 1u);
  EXPECT_EQ(SearchSkeletons(all, "", "grouped gemm nothing").size(), 0u);
}

TEST(Skeletons, TheRepositoryCatalogueParses) {
  auto all = LoadSkeletons(std::string(GYRE_SOURCE_DIR) + "/docs/skeletons");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_GE(all->size(), 10u);
  for (const auto& s : *all) {
    EXPECT_FALSE(s.triggers.empty()) << s.name << ": a skeleton advise can never suggest";
    for (const auto& e : s.evidence) EXPECT_TRUE(e.contains("file")) << s.name;
  }
}

TraceEvent Cpu(const char* name, const char* cat, uint32_t tid, double ts, double dur, nlohmann::json args = {}) {
  return {name, cat, ts, dur, tid, args.is_null() ? nlohmann::json::object() : args, 1};
}

// The seeds' GIL case: the transfer thread only runs while the compute thread is between steps.
TEST(Advise, StarvedTransferThreadIsTheTopFinding) {
  std::vector<TraceEvent> ev;
  for (int i = 0; i < 20; ++i) {
    ev.push_back(Cpu("engine.step", "step", 0, i * 1000.0, 800));
    ev.push_back(Cpu("kv.transfer", "transfer", 1, i * 1000.0 + 800, 200));  // never under a step
  }
  std::vector<Skeleton> cat;
  cat.push_back(*ParseSkeleton(Entry("overlap-transfer", R"([{"signal": "overlap", "a": "transfer", "b": "step", "max_ratio": 0.5}])"), ""));
  cat.push_back(*ParseSkeleton(Entry("decode-graphs", R"([{"signal": "eager_decode"}])"), ""));
  const auto rep = Analyze(ev, std::nullopt, std::nullopt);
  const Advice a = AdviseTrace(ev, rep, cat);
  const Finding* top = nullptr;
  for (const auto& f : a.findings)
    if (f.signal == "overlap") top = &f;
  ASSERT_NE(top, nullptr) << a.Human();
  EXPECT_EQ(top->where, "transfer vs step");
  EXPECT_DOUBLE_EQ(top->numbers["ratio"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(top->at_stake_us, 4000.0);  // 20 x 200 us exposed
  EXPECT_EQ(top->skeletons, std::vector<std::string>{"overlap-transfer"});
  // The same trace with the transfers under the steps: no overlap finding.
  for (auto& e : ev)
    if (e.cat == "transfer") e.ts_us -= 500;
  const Advice b = AdviseTrace(ev, Analyze(ev, std::nullopt, std::nullopt), cat);
  for (const auto& f : b.findings) EXPECT_NE(f.signal, "overlap") << f.evidence;
}

TEST(Advise, EagerDecodeAndTheHostGapAreNamed) {
  std::vector<TraceEvent> ev;
  for (int i = 0; i < 10; ++i) {
    ev.push_back(Cpu("cuda.launch", "step", 0, i * 1000.0, 300));
    ev.push_back(Cpu("gpu.busy", "gpu", 65535, i * 1000.0 + 100, 600, {{"tokens", 4}, {"detail", "pieces=4 eager"}}));
  }
  // A prefill step (tokens > pieces) does not count as decode.
  ev.push_back(Cpu("gpu.busy", "gpu", 65535, 20000, 600, {{"tokens", 64}, {"detail", "pieces=1 eager"}}));
  // GPU: kernels with a 5 ms hole while the CPU sat in kda.in_proj.
  ev.push_back(Cpu("kda.in_proj", "op", 0, 30000, 5200));
  ev.push_back({"Gemm", "kernel", 29000, 900, 7, {{"span", "kda.in_proj"}}, 100});
  ev.push_back({"Gemm", "kernel", 35000, 900, 7, {{"span", "kda.in_proj"}}, 100});
  std::vector<Skeleton> cat;
  cat.push_back(*ParseSkeleton(Entry("decode-graphs", R"([{"signal": "eager_decode"}])"), ""));
  cat.push_back(*ParseSkeleton(Entry("warm-up", R"([{"signal": "gap_cpu", "span": "kda.in_proj", "min_us": 1000}])"), ""));
  cat.push_back(*ParseSkeleton(Entry("other-span", R"([{"signal": "gap_cpu", "span": "moe.router", "min_us": 1}])"), ""));
  const Advice a = AdviseTrace(ev, Analyze(ev, std::nullopt, std::nullopt), cat);
  std::map<std::string, const Finding*> by;
  for (const auto& f : a.findings) by.emplace(f.signal, &f);
  ASSERT_TRUE(by.count("eager_decode")) << a.Human();
  EXPECT_EQ(by["eager_decode"]->numbers["eager"], 10);
  EXPECT_EQ(by["eager_decode"]->numbers["decode"], 10);
  EXPECT_DOUBLE_EQ(by["eager_decode"]->at_stake_us, 3000);  // 10 steps x 300 us of host launch
  EXPECT_EQ(by["eager_decode"]->skeletons, std::vector<std::string>{"decode-graphs"});
  ASSERT_TRUE(by.count("gap_cpu")) << a.Human();
  EXPECT_DOUBLE_EQ(by["gap_cpu"]->numbers["gap_us"].get<double>(), 5100);
  EXPECT_EQ(by["gap_cpu"]->where, "kda.in_proj");
  EXPECT_EQ(by["gap_cpu"]->skeletons, std::vector<std::string>{"warm-up"});
  // Ranked by time at stake.
  for (size_t i = 1; i < a.findings.size(); ++i) EXPECT_GE(a.findings[i - 1].at_stake_us, a.findings[i].at_stake_us);
}

TEST(Advise, GateFailuresAreListed) {
  const nlohmann::json gate = {{"predicates",
                                {{{"id", "p1"}, {"expr", "ttft_p99 < 200ms"}, {"verdict", "FAIL"}, {"reason", "CI above"}},
                                 {{"id", "p2"}, {"expr", "tok_s > 10"}, {"verdict", "PASS"}, {"reason", ""}}}}};
  std::vector<Skeleton> cat;
  cat.push_back(*ParseSkeleton(Entry("ttft", R"([{"signal": "gate_fail", "predicate": "ttft"}])"), ""));
  auto a = AdviseGate(gate, cat);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->findings.size(), 1u);
  EXPECT_EQ(a->findings[0].where, "p1");
  EXPECT_EQ(a->findings[0].skeletons, std::vector<std::string>{"ttft"});
  EXPECT_FALSE(AdviseGate(nlohmann::json::array(), cat).ok());
}

}  // namespace
}  // namespace gyre::feedback
