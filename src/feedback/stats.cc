#include "feedback/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/status.h"

namespace gyre::feedback {
namespace {

std::vector<double> Sorted(std::span<const double> x) {
  std::vector<double> s(x.begin(), x.end());
  std::sort(s.begin(), s.end());
  return s;
}

double QuantileOfSorted(const std::vector<double>& s, double q) {
  const double h = (static_cast<double>(s.size()) - 1) * q;
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (h - static_cast<double>(lo)) * (s[hi] - s[lo]);
}

double NormalSf(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

// Mid-ranks (1-based) of the pooled sample, doubled so they are integers; also returns the tie
// correction term sum(t^3 - t) over tie groups.
struct PooledRanks {
  std::vector<int64_t> doubled_rank;  // [n1 + n2], a's values first
  double tie_term = 0;
};

PooledRanks RankPooled(std::span<const double> a, std::span<const double> b) {
  const size_t n = a.size() + b.size();
  std::vector<std::pair<double, size_t>> v;
  v.reserve(n);
  for (size_t i = 0; i < a.size(); ++i) v.push_back({a[i], i});
  for (size_t j = 0; j < b.size(); ++j) v.push_back({b[j], a.size() + j});
  std::sort(v.begin(), v.end());
  PooledRanks r;
  r.doubled_rank.resize(n);
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && v[j + 1].first == v[i].first) ++j;
    // Positions i..j (0-based) share mid-rank ((i+1) + (j+1)) / 2; doubled: i + j + 2.
    for (size_t k = i; k <= j; ++k) r.doubled_rank[v[k].second] = static_cast<int64_t>(i + j + 2);
    const double t = static_cast<double>(j - i + 1);
    r.tie_term += t * t * t - t;
    i = j + 1;
  }
  return r;
}

// Exact two-sided p-value: distribution of the doubled rank sum of n1 items drawn from the pooled
// doubled ranks, by subset-sum counting. Counts stay below C(40, 20) ~ 1.4e11 (exact in a double)
// in kAuto; up to kMannWhitneyExactLimit per side they are rounded but the ratio stays accurate.
double ExactP(const std::vector<int64_t>& doubled_rank, size_t n1, int64_t observed_sum) {
  int64_t total = 0;
  for (int64_t r : doubled_rank) total += r;
  const size_t width = static_cast<size_t>(total) + 1;
  std::vector<double> ways((n1 + 1) * width, 0.0);  // ways[j * width + s]
  ways[0] = 1;
  for (int64_t r : doubled_rank) {
    for (size_t j = n1; j >= 1; --j) {
      double* dst = &ways[j * width];
      const double* src = &ways[(j - 1) * width];
      for (size_t s = width; s-- > static_cast<size_t>(r);) dst[s] += src[s - r];
    }
  }
  double le = 0, ge = 0, all = 0;
  const double* row = &ways[n1 * width];
  for (size_t s = 0; s < width; ++s) {
    all += row[s];
    if (static_cast<int64_t>(s) <= observed_sum) le += row[s];
    if (static_cast<int64_t>(s) >= observed_sum) ge += row[s];
  }
  return std::min(1.0, 2.0 * std::min(le, ge) / all);
}

}  // namespace

double Mean(std::span<const double> x) {
  GYRE_CHECK(!x.empty());
  double s = 0;
  for (double v : x) s += v;
  return s / static_cast<double>(x.size());
}

double StdDev(std::span<const double> x) {
  GYRE_CHECK(!x.empty());
  if (x.size() == 1) return 0;
  const double m = Mean(x);
  double ss = 0;
  for (double v : x) ss += (v - m) * (v - m);
  return std::sqrt(ss / static_cast<double>(x.size() - 1));
}

double Quantile(std::span<const double> x, double q) {
  GYRE_CHECK(!x.empty());
  GYRE_CHECK(q >= 0 && q <= 1);
  return QuantileOfSorted(Sorted(x), q);
}

double Median(std::span<const double> x) { return Quantile(x, 0.5); }

double Iqr(std::span<const double> x) {
  GYRE_CHECK(!x.empty());
  const std::vector<double> s = Sorted(x);
  return QuantileOfSorted(s, 0.75) - QuantileOfSorted(s, 0.25);
}

MannWhitneyResult MannWhitneyU(std::span<const double> a, std::span<const double> b,
                               MannWhitneyMethod method) {
  GYRE_CHECK(!a.empty() && !b.empty());
  const PooledRanks ranks = RankPooled(a, b);
  const size_t n1 = a.size(), n2 = b.size();
  int64_t doubled_r1 = 0;
  for (size_t i = 0; i < n1; ++i) doubled_r1 += ranks.doubled_rank[i];
  const double n1d = static_cast<double>(n1), n2d = static_cast<double>(n2);

  MannWhitneyResult out;
  out.u = static_cast<double>(doubled_r1) / 2 - n1d * (n1d + 1) / 2;
  const bool small = n1 <= kMannWhitneyExactMaxN && n2 <= kMannWhitneyExactMaxN;
  if (method == MannWhitneyMethod::kExact) {
    GYRE_CHECK(n1 <= kMannWhitneyExactLimit && n2 <= kMannWhitneyExactLimit);
  }
  if (method == MannWhitneyMethod::kExact || (method == MannWhitneyMethod::kAuto && small)) {
    out.exact = true;
    out.p_value = ExactP(ranks.doubled_rank, n1, doubled_r1);
    return out;
  }
  const double n = n1d + n2d;
  const double mu = n1d * n2d / 2;
  const double var = n1d * n2d / 12 * ((n + 1) - ranks.tie_term / (n * (n - 1)));
  if (var <= 0) {  // every value tied: no evidence of a difference
    out.p_value = 1;
    return out;
  }
  const double u_big = std::max(out.u, n1d * n2d - out.u);
  const double z = (u_big - mu - 0.5) / std::sqrt(var);
  out.p_value = std::clamp(2 * NormalSf(z), 0.0, 1.0);
  return out;
}

namespace {
// Continued fraction of the regularized incomplete beta (modified Lentz), for x < (a+1)/(a+b+2).
double BetaContinuedFraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300, kEps = 1e-15;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::abs(d) < kTiny) d = kTiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 10000; ++m) {
    const double m2 = 2.0 * m;
    double num = m * (b - m) * x / ((a + m2 - 1) * (a + m2));  // even step
    d = 1 + num * d;
    c = 1 + num / c;
    if (std::abs(d) < kTiny) d = kTiny;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1 / d;
    h *= d * c;
    num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));  // odd step
    d = 1 + num * d;
    c = 1 + num / c;
    if (std::abs(d) < kTiny) d = kTiny;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1) < kEps) break;
  }
  return h;
}

// I_x(a, b), the regularized incomplete beta function.
double RegularizedBeta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double log_front = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  if (x < (a + 1) / (a + b + 2)) return std::exp(log_front) * BetaContinuedFraction(a, b, x) / a;
  return 1 - std::exp(log_front) * BetaContinuedFraction(b, a, 1 - x) / b;
}
}  // namespace

double StudentTCdf(double t, double df) {
  if (std::isinf(t)) return t > 0 ? 1 : 0;
  const double tail = 0.5 * RegularizedBeta(df / 2, 0.5, df / (df + t * t));  // P(T >= |t|)
  return t >= 0 ? 1 - tail : tail;
}

double StudentTTwoSidedP(double t, double df) {
  return std::min(1.0, RegularizedBeta(df / 2, 0.5, df / (df + t * t)));
}

double StudentTQuantile(double p, double df) {
  double lo = -1e6, hi = 1e6;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (StudentTCdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double MannWhitneyMinP(int n1, int n2) {
  // C(n1+n2, n1) computed incrementally in double; exact well beyond the sizes we use.
  double c = 1;
  for (int k = 1; k <= n1; ++k) c = c * (n2 + k) / k;
  return std::min(1.0, 2.0 / c);
}

double HodgesLehmannShift(std::span<const double> a, std::span<const double> b) {
  GYRE_CHECK(!a.empty() && !b.empty());
  std::vector<double> d;
  d.reserve(a.size() * b.size());
  for (double y : b)
    for (double x : a) d.push_back(y - x);
  return Median(d);
}

uint64_t Rng::Next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Rng::Below(uint64_t n) {
  GYRE_CHECK(n > 0);
  unsigned __int128 m = static_cast<unsigned __int128>(Next()) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(Next()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

namespace {

void Resample(std::span<const double> x, Rng& rng, std::vector<double>& out) {
  out.resize(x.size());
  for (double& v : out) v = x[rng.Below(x.size())];
}

ConfidenceInterval PercentileInterval(double estimate, std::vector<double> stats,
                                      double confidence) {
  ConfidenceInterval ci;
  ci.estimate = estimate;
  if (stats.empty()) {
    ci.lo = ci.hi = std::numeric_limits<double>::quiet_NaN();
    return ci;
  }
  std::sort(stats.begin(), stats.end());
  ci.lo = QuantileOfSorted(stats, (1 - confidence) / 2);
  ci.hi = QuantileOfSorted(stats, (1 + confidence) / 2);
  return ci;
}

}  // namespace

ConfidenceInterval BootstrapCi(std::span<const double> x, const SampleStatistic& stat,
                               const BootstrapOptions& options) {
  GYRE_CHECK(!x.empty());
  GYRE_CHECK(options.num_resamples >= 1);
  GYRE_CHECK(options.confidence > 0 && options.confidence < 1);
  Rng rng(options.seed);
  std::vector<double> stats, buf;
  stats.reserve(options.num_resamples);
  for (int i = 0; i < options.num_resamples; ++i) {
    Resample(x, rng, buf);
    stats.push_back(stat(buf));
  }
  return PercentileInterval(stat(x), std::move(stats), options.confidence);
}

ConfidenceInterval BootstrapRatioCi(std::span<const double> num, std::span<const double> den,
                                    const BootstrapOptions& options,
                                    const SampleStatistic& stat) {
  GYRE_CHECK(!num.empty() && !den.empty());
  GYRE_CHECK(options.num_resamples >= 1);
  GYRE_CHECK(options.confidence > 0 && options.confidence < 1);
  const SampleStatistic& f = stat ? stat : SampleStatistic(Median);
  Rng rng(options.seed);
  std::vector<double> stats, bn, bd;
  stats.reserve(options.num_resamples);
  for (int i = 0; i < options.num_resamples; ++i) {
    Resample(num, rng, bn);
    Resample(den, rng, bd);
    const double d = f(bd);
    if (d != 0) stats.push_back(f(bn) / d);
  }
  return PercentileInterval(f(num) / f(den), std::move(stats), options.confidence);
}

}  // namespace gyre::feedback
