#include "feedback/quant_eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace gyre::feedback {

namespace {

// log-softmax of one row in double.
void LogSoftmax(std::span<const float> row, std::vector<double>* out) {
  out->resize(row.size());
  double mx = -INFINITY;
  for (float v : row) mx = std::max<double>(mx, v);
  double sum = 0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  for (size_t i = 0; i < row.size(); ++i) (*out)[i] = static_cast<double>(row[i]) - lse;
}

int64_t Argmax(std::span<const float> row) {
  int64_t best = 0;
  for (size_t i = 1; i < row.size(); ++i)
    if (row[i] > row[best]) best = static_cast<int64_t>(i);
  return best;
}

Result<std::vector<float>> WindowLogits(const Model& m, std::span<const int32_t> tokens) {
  SequenceState st = m.NewSequence();
  std::vector<float> logits;
  const SeqInput in{&st, tokens, /*all_logits=*/true};
  GYRE_RETURN_IF_ERROR(m.Forward(std::span<const SeqInput>(&in, 1), &logits));
  return logits;
}

}  // namespace

double LogitCompareReport::ppl_ref() const { return num_positions ? std::exp(nll_ref / num_positions) : 0; }
double LogitCompareReport::ppl_test() const { return num_positions ? std::exp(nll_test / num_positions) : 0; }
double LogitCompareReport::mean_kl() const { return num_positions ? kl_sum / num_positions : 0; }
double LogitCompareReport::top1_agreement() const {
  return num_positions ? static_cast<double>(num_top1_agree) / num_positions : 0;
}

nlohmann::json LogitCompareReport::Json() const {
  nlohmann::json b = nlohmann::json::array();
  for (const PositionBucket& k : buckets) {
    if (k.num_positions == 0) continue;
    b.push_back({{"positions", std::to_string(k.lo) + "-" + (k.hi < 0 ? std::string("") : std::to_string(k.hi - 1))},
                 {"num_positions", k.num_positions},
                 {"mean_kl", k.kl_sum / k.num_positions},
                 {"top1_agreement", static_cast<double>(k.num_top1_agree) / k.num_positions}});
  }
  return {{"num_positions", num_positions},
          {"num_windows", num_windows},
          {"perplexity_ref", ppl_ref()},
          {"perplexity", ppl_test()},
          {"perplexity_ratio", ppl_ref() > 0 ? ppl_test() / ppl_ref() : 0},
          {"mean_nll_ref", num_positions ? nll_ref / num_positions : 0},
          {"mean_nll", num_positions ? nll_test / num_positions : 0},
          {"mean_kl", mean_kl()},
          {"max_kl", kl_max},
          {"top1_agreement", top1_agreement()},
          {"by_position", b},
          {"wall_s", wall_s}};
}

namespace {

// Adds the positions of one window (logits [L-1, V] of both models) to `r`.
void ScoreWindow(std::span<const int32_t> win, const std::vector<float>& a, const std::vector<float>& b, int64_t V,
                 LogitCompareReport* r) {
  std::vector<double> lr, lt;
  const int64_t L = static_cast<int64_t>(win.size());
  for (int64_t t = 0; t + 1 < L; ++t) {
    const std::span<const float> ra(a.data() + t * V, V), rb(b.data() + t * V, V);
    LogSoftmax(ra, &lr);
    LogSoftmax(rb, &lt);
    double kl = 0;
    for (int64_t v = 0; v < V; ++v) kl += std::exp(lr[v]) * (lr[v] - lt[v]);
    kl = std::max(kl, 0.0);  // rounding can leave a tiny negative sum
    const bool agree = Argmax(ra) == Argmax(rb);
    r->nll_ref -= lr[win[t + 1]];
    r->nll_test -= lt[win[t + 1]];
    r->kl_sum += kl;
    r->kl_max = std::max(r->kl_max, kl);
    r->num_top1_agree += agree;
    ++r->num_positions;
    for (PositionBucket& k : r->buckets) {
      if (t >= k.lo && (k.hi < 0 || t < k.hi)) {
        ++k.num_positions;
        k.num_top1_agree += agree;
        k.kl_sum += kl;
      }
    }
  }
}

}  // namespace

Result<std::vector<LogitCompareReport>> CompareLogits(const Model& ref, std::span<const Model* const> tests,
                                                      std::span<const int32_t> ids, const LogitCompareOptions& o) {
  const int64_t V = ref.config().vocab_size;
  if (o.ctx < 1) return Status::InvalidArgument("ctx must be >= 1");
  for (const Model* m : tests)
    if (m->config().vocab_size != V) return Status::InvalidArgument("the models' vocabularies differ");
  if (o.max_tokens > 0 && static_cast<int64_t>(ids.size()) > o.max_tokens) ids = ids.first(o.max_tokens);
  if (ids.size() < 2) return Status::InvalidArgument("need at least 2 tokens to compare");
  for (int32_t id : ids)
    if (id < 0 || id >= V) return Status::InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary");
  constexpr int64_t kEdges[] = {0, 16, 64, 256, 1024};
  constexpr size_t kNumEdges = sizeof(kEdges) / sizeof(kEdges[0]);
  std::vector<LogitCompareReport> reps(tests.size());
  for (LogitCompareReport& r : reps)
    for (size_t i = 0; i < kNumEdges; ++i) r.buckets.push_back({kEdges[i], i + 1 < kNumEdges ? kEdges[i + 1] : -1});
  std::vector<double> wall(tests.size(), 0.0);
  const int64_t n = static_cast<int64_t>(ids.size());
  for (int64_t start = 0; start + 1 < n; start += o.ctx) {
    const int64_t L = std::min(o.ctx + 1, n - start);
    const std::span<const int32_t> win = ids.subspan(start, L);
    GYRE_ASSIGN_OR_RETURN(std::vector<float> a, WindowLogits(ref, win.first(L - 1)));
    for (size_t m = 0; m < tests.size(); ++m) {
      const auto t0 = std::chrono::steady_clock::now();
      GYRE_ASSIGN_OR_RETURN(std::vector<float> b, WindowLogits(*tests[m], win.first(L - 1)));
      wall[m] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ++reps[m].num_windows;
      ScoreWindow(win, a, b, V, &reps[m]);
    }
  }
  for (size_t m = 0; m < tests.size(); ++m) reps[m].wall_s = wall[m];
  return reps;
}

}  // namespace gyre::feedback
