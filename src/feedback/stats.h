// Small, dependency-free statistics for deciding whether a performance difference is real:
// order statistics (median, numpy-style quantiles, IQR), mean/stddev, the Mann–Whitney U rank
// test, the Hodges–Lehmann shift estimate, and seeded percentile-bootstrap confidence intervals.
//
// Conventions:
//   - Inputs are spans of finite doubles; no function modifies its input (they sort copies).
//   - Functions whose REQUIRES can be violated by data (empty samples, NaN) are the caller's job to
//     guard: compare.cc and gate.cc check sample counts before calling. Violations are programmer
//     errors and abort via GYRE_CHECK.
//   - Everything random is driven by SplitMix64 with an explicit seed, with our own bounded-int
//     draw, so results are bit-identical across platforms and standard libraries (std::
//     distributions are not).
//
// Thread safety: all functions are pure; Rng is a value type, not shared.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace gyre::feedback {

// REQUIRES: !x.empty().
double Mean(std::span<const double> x);
// Sample standard deviation (ddof = 1); 0 for a single sample. REQUIRES: !x.empty().
double StdDev(std::span<const double> x);

// Quantile with linear interpolation between order statistics: numpy.quantile's default
// ("linear", Hyndman–Fan type 7): h = (n-1)*q, x[floor h] + (h - floor h) * (x[floor h + 1] - x[floor h]).
// REQUIRES: !x.empty(), 0 <= q <= 1.
double Quantile(std::span<const double> x, double q);
double Median(std::span<const double> x);  // Quantile(x, 0.5)
double Iqr(std::span<const double> x);     // Quantile(x, 0.75) - Quantile(x, 0.25)

struct MannWhitneyResult {
  // U statistic of the first sample: R1 - n1(n1+1)/2 with mid-ranks for ties, i.e. the number of
  // pairs (a_i, b_j) with a_i > b_j plus half the ties. Same as scipy.stats.mannwhitneyu's statistic.
  double u = 0;
  double p_value = 1;  // two-sided
  bool exact = false;  // true: exact permutation distribution; false: normal approximation
};

enum class MannWhitneyMethod {
  kAuto,        // exact when both samples have <= kMannWhitneyExactMaxN values, else asymptotic
  kExact,       // REQUIRES: both samples have <= kMannWhitneyExactLimit values
  kAsymptotic,
};
inline constexpr int kMannWhitneyExactMaxN = 20;
inline constexpr int kMannWhitneyExactLimit = 50;

// Two-sided Mann–Whitney U test of "a and b come from the same distribution".
// Exact: the permutation distribution of U conditional on the tie pattern (without ties this is
// the classic exact table, scipy's method="exact"); two-sided p = min(1, 2 min(P(U<=u), P(U>=u))).
// Asymptotic: normal approximation with tie and continuity correction, identical to scipy's
// method="asymptotic"; p = 1 when every value is tied.
// REQUIRES: !a.empty(), !b.empty(), all values finite.
MannWhitneyResult MannWhitneyU(std::span<const double> a, std::span<const double> b,
                               MannWhitneyMethod method = MannWhitneyMethod::kAuto);

// The smallest two-sided p-value an exact test can produce for sample sizes n1, n2 without ties:
// 2 / C(n1+n2, n1). If this exceeds alpha, no data can be significant at that alpha.
double MannWhitneyMinP(int n1, int n2);

// Student's t distribution with `df` > 0 degrees of freedom: P(T <= t), through the regularized
// incomplete beta function I_x(df/2, 1/2) with x = df / (df + t²) (continued fraction, modified
// Lentz). Accurate to about 1e-12 for df in [0.5, 1e6].
double StudentTCdf(double t, double df);
// Its two-sided p-value, P(|T| >= |t|).
double StudentTTwoSidedP(double t, double df);
// The quantile: the t with StudentTCdf(t, df) = p (bisection), for p in (0, 1).
double StudentTQuantile(double p, double df);

// Hodges–Lehmann estimate of the shift from a to b: the median of all n1*n2 differences
// b_j - a_i. Positive means b tends to be larger. REQUIRES: !a.empty(), !b.empty().
double HodgesLehmannShift(std::span<const double> a, std::span<const double> b);

// Deterministic 64-bit generator (SplitMix64). Seeds that differ give unrelated streams.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform integer in [0, n) without modulo bias (Lemire's method). REQUIRES: n > 0.
  uint64_t Below(uint64_t n);

 private:
  uint64_t state_;
};

struct BootstrapOptions {
  int num_resamples = 2000;   // >= 1
  double confidence = 0.95;   // two-sided level, in (0, 1)
  uint64_t seed = 0x67797265;  // "gyre"
};

struct ConfidenceInterval {
  double estimate = 0;  // the statistic on the original samples
  double lo = 0;        // percentile-bootstrap bounds
  double hi = 0;
};

using SampleStatistic = std::function<double(std::span<const double>)>;

// Percentile-bootstrap CI of stat(x): resample x with replacement num_resamples times and take
// the (1-confidence)/2 and (1+confidence)/2 quantiles of the resampled statistic.
// Deterministic for a given seed. REQUIRES: !x.empty().
ConfidenceInterval BootstrapCi(std::span<const double> x, const SampleStatistic& stat,
                               const BootstrapOptions& options = {});

// Percentile-bootstrap CI of stat(num) / stat(den), resampling num and den independently
// (default stat: median). Resamples whose denominator statistic is 0 are skipped; if every
// resample is skipped the bounds are +-inf/NaN as IEEE division gives them.
// REQUIRES: !num.empty(), !den.empty().
ConfidenceInterval BootstrapRatioCi(std::span<const double> num, std::span<const double> den,
                                    const BootstrapOptions& options = {},
                                    const SampleStatistic& stat = nullptr);

}  // namespace gyre::feedback
