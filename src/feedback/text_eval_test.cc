// gyre eval's figures (feedback/text_eval.h) against independent computations written here:
// the NLL from full-prefill logits of the CPU Model (what `gyre forward` writes) on the glm5_tiny
// fixture, the window boundaries (texts of exactly ctx+1 and ctx+2 tokens), and the MTP
// acceptance on a random-weights model with an MTP layer against a brute-force count.
#include "feedback/text_eval.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <random>

#include "runtime/cpu_runner.h"
#include "runtime/random_model_for_tests.h"

namespace gyre::feedback {
namespace {

std::string Fixture(const std::string& n) { return std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/" + n; }

const char* kText = "The quick brown fox jumps over the lazy dog. Hello 世界, 👋 again!";

std::unique_ptr<CpuRunner> MakeRunner(const Model& m) {
  CpuRunnerOptions o;
  o.page_tokens = 16;
  o.num_pages = 64;
  o.num_slots = 1;
  auto r = CpuRunner::Create(m, o);
  EXPECT_TRUE(r.ok());
  return std::move(*r);
}

// -log p(target) from one row, in long double, straight from the definition.
double RefNll(const float* row, int64_t V, int32_t target) {
  long double mx = row[0], sum = 0;
  for (int64_t i = 1; i < V; ++i) mx = std::max<long double>(mx, row[i]);
  for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<long double>(row[i]) - mx);
  return static_cast<double>(std::log(sum) + mx - row[target]);
}

int32_t RefArgmax(const float* row, int64_t V) {
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i)
    if (row[i] > row[best]) best = i;
  return static_cast<int32_t>(best);
}

// Σ NLL of ids[lo+1 .. hi) from one fresh forward over ids[lo, hi).
double RefWindowNll(const Model& m, const std::vector<int32_t>& ids, int64_t lo, int64_t hi) {
  const int64_t V = m.config().vocab_size;
  const auto logits = FullLogits(m, std::span<const int32_t>(ids).subspan(lo, hi - lo));
  double s = 0;
  for (int64_t j = lo; j + 1 < hi; ++j) s += RefNll(&logits[(j - lo) * V], V, ids[j + 1]);
  return s;
}

struct Tiny {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  std::vector<int32_t> ids;
};
Tiny LoadTiny() {
  Tiny t;
  auto m = Model::Load(Fixture("glm5_tiny"));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  t.model = std::move(*m);
  auto tok = Tokenizer::FromFile(Fixture("glm5_tiny"));
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  t.tok = std::move(*tok);
  t.ids = *t.tok->Encode(kText, false);
  return t;
}

TEST(TextEval, NllEqualsFullPrefillLogitsOnGlm5Tiny) {
  Tiny t = LoadTiny();
  const int64_t n = static_cast<int64_t>(t.ids.size()), V = t.model->config().vocab_size;
  ASSERT_GT(n, 12);
  auto runner = MakeRunner(*t.model);
  TextEvalOptions o;
  o.ctx = 1024;
  auto rep = EvaluateText(*runner, t.model.get(), *t.tok, kText, o);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  // `gyre forward --ids <all ids>`: every row but the last scores the next token.
  const auto logits = FullLogits(*t.model, t.ids);
  double ref = 0;
  for (int64_t j = 0; j + 1 < n; ++j) ref += RefNll(&logits[j * V], V, t.ids[j + 1]);
  EXPECT_EQ(rep->num_tokens_file, n);
  EXPECT_EQ(rep->num_windows, 1);
  EXPECT_EQ(rep->num_tokens_scored, n - 1);
  EXPECT_EQ(rep->num_bytes, static_cast<int64_t>(std::string(kText).size()));
  EXPECT_NEAR(rep->nll_sum, ref, 1e-5 * ref);
  EXPECT_NEAR(rep->mean_nll(), ref / (n - 1), 1e-5 * ref / (n - 1));
  EXPECT_NEAR(rep->perplexity(), std::exp(ref / (n - 1)), 1e-4 * std::exp(ref / (n - 1)));
  EXPECT_NEAR(rep->bits_per_byte(), ref / std::log(2.0) / rep->num_bytes, 1e-5);
  EXPECT_EQ(rep->backend, "cpu");
  EXPECT_FALSE(rep->has_mtp);
  EXPECT_TRUE(rep->Json()["mtp"].is_null());
  EXPECT_EQ(rep->Json()["tokens_scored"].get<int64_t>(), n - 1);

  // Several windows, each a fresh sequence: ctx 5 → [0, 6), [5, 11), [10, 16), ...
  o.ctx = 5;
  rep = EvaluateText(*runner, t.model.get(), *t.tok, kText, o);
  ASSERT_TRUE(rep.ok());
  double multi = 0;
  int64_t windows = 0;
  for (int64_t lo = 0; lo + 1 < n; lo += 5, ++windows) multi += RefWindowNll(*t.model, t.ids, lo, std::min(lo + 6, n));
  EXPECT_EQ(rep->num_windows, windows);
  EXPECT_EQ(rep->num_tokens_scored, n - 1);
  EXPECT_NEAR(rep->nll_sum, multi, 1e-5 * multi);
}

// A text of exactly ctx+1 tokens is one window; ctx+2 tokens are two, the second of 2 tokens
// (its first token is the first window's last target); ctx 1 gives n-1 windows of 2 tokens;
// max_tokens cuts the text before windowing.
TEST(TextEval, WindowBoundaries) {
  Tiny t = LoadTiny();
  const int64_t n = static_cast<int64_t>(t.ids.size());
  auto runner = MakeRunner(*t.model);
  TextEvalOptions o;
  o.ctx = n - 1;
  auto one = EvaluateText(*runner, t.model.get(), *t.tok, kText, o);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->num_windows, 1);
  EXPECT_EQ(one->num_tokens_scored, n - 1);
  const double w0 = RefWindowNll(*t.model, t.ids, 0, n);
  EXPECT_NEAR(one->nll_sum, w0, 1e-5 * w0);

  o.ctx = n - 2;
  auto two = EvaluateText(*runner, t.model.get(), *t.tok, kText, o);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->num_windows, 2);
  EXPECT_EQ(two->num_tokens_scored, n - 1);
  const double w01 = RefWindowNll(*t.model, t.ids, 0, n - 1) + RefWindowNll(*t.model, t.ids, n - 2, n);
  EXPECT_NEAR(two->nll_sum, w01, 1e-5 * w01);

  o.ctx = 1;
  auto pairs = EvaluateText(*runner, t.model.get(), *t.tok, kText, o);
  ASSERT_TRUE(pairs.ok());
  EXPECT_EQ(pairs->num_windows, n - 1);
  EXPECT_EQ(pairs->num_tokens_scored, n - 1);

  o.ctx = 2;
  o.max_tokens = 4;  // [0, 3), [2, 4)
  auto cut = EvaluateText(*runner, t.model.get(), *t.tok, kText, o);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->num_tokens_file, n);
  EXPECT_EQ(cut->num_tokens_used, 4);
  EXPECT_EQ(cut->num_windows, 2);
  EXPECT_EQ(cut->num_tokens_scored, 3);
  int64_t bytes = 0;
  for (int i = 0; i < 4; ++i) bytes += static_cast<int64_t>(t.tok->TokenBytes(t.ids[i]).size());
  EXPECT_EQ(cut->num_bytes, bytes);
  const double w = RefWindowNll(*t.model, t.ids, 0, 3) + RefWindowNll(*t.model, t.ids, 2, 4);
  EXPECT_NEAR(cut->nll_sum, w, 1e-5 * w);
}

TEST(TextEval, BadInputIsInvalidArgument) {
  Tiny t = LoadTiny();
  auto runner = MakeRunner(*t.model);
  TextEvalOptions o;
  EXPECT_EQ(EvaluateText(*runner, t.model.get(), *t.tok, "", o).status().code(), StatusCode::kInvalidArgument);
  o.max_tokens = 1;
  auto one = EvaluateText(*runner, t.model.get(), *t.tok, kText, o);
  EXPECT_EQ(one.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(one.status().message().find("at least 2"), std::string::npos) << one.status().message();
  o.max_tokens = 0;
  o.ctx = 0;
  EXPECT_EQ(EvaluateText(*runner, t.model.get(), *t.tok, kText, o).status().code(), StatusCode::kInvalidArgument);
  o.ctx = 8;
  const std::vector<int32_t> bad = {1, 2, 5000};
  auto r = EvaluateIds(*runner, nullptr, bad, 3, o);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("5000"), std::string::npos);
}

// A tiny vocabulary so that the MTP's and the main head's argmaxes agree at some positions and
// not at others.
const char* kMtpConfig = R"({
  "model_type": "glm5_next", "vocab_size": 8, "hidden_size": 32, "intermediate_size": 40,
  "moe_intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
  "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 12, "v_head_dim": 8, "qk_rope_head_dim": 0,
  "index_n_heads": 2, "index_head_dim": 8, "index_topk": 8, "index_kpool": 4,
  "linear_num_heads": 2, "linear_head_dim": 8, "hc_mult": 2,
  "layer_types": ["linear_attention", "deepseek_sparse_attention"], "mlp_layer_types": ["dense", "dense"],
  "num_nextn_predict_layers": 1})";

TEST(TextEval, MtpAcceptanceEqualsBruteForce) {
  auto m = RandomModel(kMtpConfig, 17);
  ASSERT_TRUE(m && m->has_mtp());
  const int64_t V = m->config().vocab_size, ctx = 10;
  auto runner = MakeRunner(*m);
  // Lengths whose last window has 2 tokens (no MTP position), 3 tokens (one) and 7.
  for (int64_t n : {42, 43, 47}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::mt19937_64 rng(n);
    std::vector<int32_t> ids(n);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % V);
    TextEvalOptions o;
    o.ctx = ctx;
    o.step_tokens = 4;  // several pieces per window
    auto rep = EvaluateIds(*runner, m.get(), ids, n, o);
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    ASSERT_TRUE(rep->mtp_evaluated);
    int64_t positions = 0, accepted = 0;
    double mtp_nll = 0, main_nll = 0;
    for (int64_t lo = 0; lo + 1 < n; lo += ctx) {
      const int64_t L = std::min(ctx + 1, n - lo);
      const std::span<const int32_t> prefill = std::span<const int32_t>(ids).subspan(lo, L - 1);
      std::vector<float> hidden, mtp;
      const auto main = FullLogits(*m, prefill, &hidden);
      for (int64_t j = 0; j + 1 < L; ++j) main_nll += RefNll(&main[j * V], V, ids[lo + j + 1]);
      ASSERT_TRUE(m->MtpForward(prefill, hidden, &mtp).ok());
      for (int64_t t = 0; t + 2 < L; ++t) {
        ++positions;
        accepted += RefArgmax(&mtp[t * V], V) == RefArgmax(&main[(t + 1) * V], V);
        mtp_nll += RefNll(&mtp[t * V], V, ids[lo + t + 2]);
      }
    }
    EXPECT_EQ(rep->mtp.num_positions, positions);
    EXPECT_EQ(rep->mtp.num_accepted, accepted);
    EXPECT_GT(accepted, 0);
    EXPECT_LT(accepted, positions);
    EXPECT_NEAR(rep->mtp.nll_sum, mtp_nll, 1e-6 * mtp_nll);
    EXPECT_NEAR(rep->nll_sum, main_nll, 1e-5 * main_nll);
    const auto j = rep->Json()["mtp"];
    EXPECT_TRUE(j["evaluated"].get<bool>());
    EXPECT_EQ(j["positions"].get<int64_t>(), positions);
    EXPECT_DOUBLE_EQ(j["acceptance"].get<double>(), static_cast<double>(accepted) / positions);
  }
}

// The trained model (tests/fixtures/glm5_mini): gyre eval on the first 4097 held-out tokens (4
// windows of 1024) against transformers' figures on the same windows (eval_reference.json, fp32
// reference, written by tools/train/glm5_mini.py eval). Tokenization agrees exactly (same count),
// the NLL to 1e-5 relative (fp32 logits), MTP acceptance to one position in 4092.
TEST(TextEval, TrainedModelAgreesWithTransformers) {
  const std::string dir = Fixture("glm5_mini");
  auto model = Model::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto tok = Tokenizer::FromFile(dir);
  ASSERT_TRUE(tok.ok()) << tok.error().ToString();
  std::ifstream rf(dir + "/eval_reference.json"), tf(dir + "/heldout_eval.txt", std::ios::binary);
  const nlohmann::json ref = nlohmann::json::parse(rf);
  const std::string text((std::istreambuf_iterator<char>(tf)), std::istreambuf_iterator<char>());
  CpuRunnerOptions ro;
  ro.page_tokens = 16;
  ro.num_pages = 1024 / 16 + 1;
  ro.num_slots = 1;
  auto runner = CpuRunner::Create(**model, ro);
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  TextEvalOptions o;
  o.ctx = 1024;
  o.max_tokens = ref.at("tokens_in_file").get<int64_t>();
  auto rep = EvaluateText(**runner, model->get(), **tok, text, o);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->num_tokens_scored, ref.at("tokens_scored").get<int64_t>());
  const double want = ref.at("mean_nll").get<double>();
  EXPECT_NEAR(rep->mean_nll(), want, 1e-5 * want);
  ASSERT_TRUE(rep->mtp_evaluated);
  EXPECT_EQ(rep->mtp.num_positions, ref.at("mtp_positions").get<int64_t>());
  EXPECT_NEAR(rep->mtp.acceptance(), ref.at("mtp_acceptance").get<double>(), 1.0 / rep->mtp.num_positions + 1e-12);
  EXPECT_NEAR(rep->mtp.mean_nll(), ref.at("mtp_mean_nll").get<double>(), 1e-5 * want);
}

}  // namespace
}  // namespace gyre::feedback
