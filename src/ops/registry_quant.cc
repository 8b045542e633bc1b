// Quantization ops for the registry. Sections: helpers; quantizers; GEMMs; specs.
#include "ops/registry_quant.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>

#include "core/dtype.h"
#include "quant/fp8.h"
#include "quant/quant.h"

namespace gyre::ops {

namespace {

// ---- helpers -------------------------------------------------------------------------------------

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> Normal(std::mt19937_64& g, int64_t n, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// The finite e4m3 value nearest to `x` (fp64), ties to the even code; saturates at ±448.
double NearestE4M3(double x) {
  static const std::vector<double> grid = [] {
    std::vector<double> v;
    for (int c = 0; c <= 0x7e; ++c) v.push_back(F8E4M3ToF32(static_cast<uint8_t>(c)));
    return v;
  }();
  const double a = std::min(std::fabs(x), 448.0);
  const auto it = std::lower_bound(grid.begin(), grid.end(), a);
  size_t c = static_cast<size_t>(it - grid.begin());
  if (c == grid.size()) c = grid.size() - 1;
  if (c > 0) {
    const double lo = grid[c - 1], hi = grid[c];
    if (a - lo < hi - a || (a - lo == hi - a && ((c - 1) & 1) == 0)) c = c - 1;
  }
  return std::copysign(grid[c], x);
}

double NearestInt8(double x) { return std::clamp(std::nearbyint(x), -127.0, 127.0); }

CheckResult Finish(const std::vector<float>& out, const std::vector<double>& want, std::string note = "") {
  CheckResult r;
  r.num_outputs = static_cast<int64_t>(out.size());
  for (float v : out) r.num_unwritten += std::isnan(v);
  r.diff = Compare(out, std::vector<float>(want.begin(), want.end()));
  r.note = std::move(note);
  return r;
}

OpShape Sh(std::map<std::string, int64_t> dims) {
  std::string label;
  for (const auto& [k, v] : dims) label += (label.empty() ? "" : " ") + k + "=" + std::to_string(v);
  return OpShape{label, std::move(dims), 0};
}

// An OpSpec from check(dims, seed) -> CheckResult and run(dims, seed) -> a closure for bench op.
using CheckFn = std::function<CheckResult(const std::map<std::string, int64_t>&, uint64_t)>;
using RunFn = std::function<std::function<void()>(const std::map<std::string, int64_t>&, uint64_t)>;
OpSpec Spec(std::string name, std::string tol_class, double tol, std::vector<OpShape> shapes,
            std::function<Cost(const std::map<std::string, int64_t>&)> cost, CheckFn check, RunFn run) {
  OpSpec s;
  s.name = std::move(name);
  s.tolerance_class = std::move(tol_class);
  s.tolerance = tol;
  s.shapes = std::move(shapes);
  s.backends = {Backend::kCpu};  // TODO(quant): CUDA FP8/INT8 GEMMs (issue 14), then kCuda here.
  s.cost = [cost](const OpShape& sh) { return cost(sh.dims); };
  s.check = [check](const OpShape& sh, uint64_t seed, Backend b) -> Result<CheckResult> {
    if (b != Backend::kCpu) return Status::Unimplemented("backend cuda is not built for this op");
    return check(sh.dims, seed);
  };
  s.prepare = [run](const OpShape& sh, uint64_t seed, Backend b, int) -> Result<std::function<void()>> {
    if (b != Backend::kCpu) return Status::Unimplemented("backend cuda is not built for this op");
    return run(sh.dims, seed);
  };
  return s;
}

// ---- quantizers ----------------------------------------------------------------------------------

// x spread over e4m3's whole range (log-uniform magnitudes 2^-12 .. 448, random signs).
CheckResult CheckE4M3(const std::map<std::string, int64_t>& d, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> mag(-12.0, std::log2(448.0));
  const int64_t n = d.at("N");
  std::vector<float> x(n), out(n, kNaN);
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>((g() & 1 ? -1 : 1) * std::exp2(mag(g)));
  for (int64_t i = 0; i < n; ++i) out[i] = F8E4M3ToF32(F32ToF8E4M3(x[i]));
  for (int64_t i = 0; i < n; ++i) want[i] = NearestE4M3(x[i]);
  return Finish(out, want);
}

// Weight quantize → dequantize vs fp64: each element is the nearest grid value of w / scale
// (the fp32 quotient), times the stored fp32 scale.
CheckResult CheckWeightQuant(const std::map<std::string, int64_t>& d, uint64_t seed, QuantScheme scheme) {
  std::mt19937_64 g(seed);
  const int64_t N = d.at("OUT"), K = d.at("IN");
  const std::vector<float> w = Normal(g, N * K, 0.05f);
  const QuantizedWeight q = scheme == QuantScheme::kFp8Block ? QuantizeFp8Block(w.data(), N, K)
                                                             : QuantizeInt8Channel(w.data(), N, K);
  const std::vector<float> out = Dequantize(q);
  std::vector<double> want(N * K);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < K; ++j) {
      const double s = scheme == QuantScheme::kFp8Block ? q.scale[(i / 128) * q.scale_cols() + j / 128] : q.scale[i];
      const double v = static_cast<float>(w[i * K + j] / static_cast<float>(s));
      want[i * K + j] = (scheme == QuantScheme::kFp8Block ? NearestE4M3(v) : NearestInt8(v)) * s;
    }
  return Finish(out, want);
}

// Activation quantize → dequantize vs fp64 (FP8: per token and 128-group; INT8: per token).
CheckResult CheckActQuant(const std::map<std::string, int64_t>& d, uint64_t seed, QuantScheme scheme) {
  std::mt19937_64 g(seed);
  const int64_t n = d.at("N"), k = d.at("IN"), ng = (k + 127) / 128;
  const std::vector<float> x = Normal(g, n * k, 2.0f);
  std::vector<float> out(n * k, kNaN);
  std::vector<double> want(n * k);
  if (scheme == QuantScheme::kFp8Block) {
    std::vector<uint8_t> q(n * k);
    std::vector<float> s(n * ng);
    QuantizeActFp8(x.data(), n, k, 128, q.data(), s.data());
    for (int64_t i = 0; i < n * k; ++i) {
      const double sg = s[(i / k) * ng + (i % k) / 128];
      out[i] = F8E4M3ToF32(q[i]) * static_cast<float>(sg);
      want[i] = NearestE4M3(static_cast<float>(x[i] / static_cast<float>(sg))) * sg;
    }
  } else {
    std::vector<int8_t> q(n * k);
    std::vector<float> s(n);
    QuantizeActInt8(x.data(), n, k, q.data(), s.data());
    for (int64_t i = 0; i < n * k; ++i) {
      out[i] = q[i] * s[i / k];
      want[i] = NearestInt8(static_cast<float>(x[i] / s[i / k])) * static_cast<double>(s[i / k]);
    }
  }
  return Finish(out, want);
}

// ---- GEMMs ---------------------------------------------------------------------------------------

struct GemmInputs {
  std::vector<float> x;
  Matrix w;  // dequantized values + quant
  int64_t n;
};

GemmInputs MakeGemm(const std::map<std::string, int64_t>& d, uint64_t seed, QuantScheme scheme) {
  std::mt19937_64 g(seed);
  const int64_t n = d.at("N"), K = d.at("IN"), N = d.at("OUT");
  GemmInputs in;
  in.n = n;
  in.x = Normal(g, n * K, 1.0f);
  const std::vector<float> w = Normal(g, N * K, 1.0f / std::sqrt(static_cast<float>(K)));
  auto q = std::make_shared<QuantizedWeight>(scheme == QuantScheme::kFp8Block ? QuantizeFp8Block(w.data(), N, K)
                                                                              : QuantizeInt8Channel(w.data(), N, K));
  in.w = DequantizedMatrix(*q);
  in.w.quant = std::move(q);
  return in;
}

// ops::Linear on a quantized Matrix (the model's path) vs the fp64 product of the dequantized
// activations (quantized as Linear quantizes them) and the dequantized weights.
CheckResult CheckGemm(const std::map<std::string, int64_t>& d, uint64_t seed, QuantScheme scheme) {
  GemmInputs in = MakeGemm(d, seed, scheme);
  const int64_t n = in.n, K = in.w.cols, N = in.w.rows, ng = (K + 127) / 128;
  std::vector<float> out(n * N, kNaN);
  Linear(in.x.data(), n, in.w, out.data(), Numerics{});
  std::vector<double> xd(n * K);
  if (scheme == QuantScheme::kFp8Block) {
    std::vector<uint8_t> q(n * K);
    std::vector<float> s(n * ng);
    QuantizeActFp8(in.x.data(), n, K, 128, q.data(), s.data());
    for (int64_t i = 0; i < n * K; ++i) xd[i] = static_cast<double>(F8E4M3ToF32(q[i])) * s[(i / K) * ng + (i % K) / 128];
  } else {
    std::vector<int8_t> q(n * K);
    std::vector<float> s(n);
    QuantizeActInt8(in.x.data(), n, K, q.data(), s.data());
    for (int64_t i = 0; i < n * K; ++i) xd[i] = static_cast<double>(q[i]) * s[i / K];
  }
  std::vector<double> want(n * N);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t t = 0; t < K; ++t) acc += xd[i * K + t] * static_cast<double>(in.w.data[j * K + t]);
      want[i * N + j] = acc;
    }
  return Finish(out, want);
}

RunFn RunGemm(QuantScheme scheme) {
  return [scheme](const std::map<std::string, int64_t>& d, uint64_t seed) {
    auto in = std::make_shared<GemmInputs>(MakeGemm(d, seed, scheme));
    auto out = std::make_shared<std::vector<float>>(in->n * in->w.rows);
    return std::function<void()>([in, out] { Linear(in->x.data(), in->n, in->w, out->data(), Numerics{}); });
  };
}

Cost GemmCost(const std::map<std::string, int64_t>& d) {
  const double n = d.at("N"), i = d.at("IN"), o = d.at("OUT");
  return {2 * n * i * o, 4 * n * i + i * o + 4 * n * o};  // 1-byte weights
}

}  // namespace

// ---- specs ---------------------------------------------------------------------------------------

std::vector<OpSpec> QuantOpSpecs() {
  std::vector<OpSpec> r;
  const std::vector<OpShape> weights = {Sh({{"OUT", 1}, {"IN", 1}}), Sh({{"OUT", 200}, {"IN", 300}}),
                                        Sh({{"OUT", 256}, {"IN", 512}})};
  const std::vector<OpShape> acts = {Sh({{"N", 1}, {"IN", 128}}), Sh({{"N", 7}, {"IN", 300}}),
                                     Sh({{"N", 64}, {"IN", 1024}})};
  const std::vector<OpShape> gemms = {Sh({{"N", 1}, {"IN", 128}, {"OUT", 64}}),
                                      Sh({{"N", 7}, {"IN", 300}, {"OUT", 200}}),
                                      Sh({{"N", 33}, {"IN", 512}, {"OUT", 384}})};
  auto quant_cost = [](const std::map<std::string, int64_t>& d) {
    double e = 1;
    for (const auto& [k, v] : d) e *= v;
    return Cost{3 * e, 5 * e};
  };
  auto no_run = [](auto check) {
    return [check](const std::map<std::string, int64_t>& d, uint64_t seed) {
      return std::function<void()>([d, seed, check] { check(d, seed); });
    };
  };
  r.push_back(Spec("quant.e4m3", "exact", 0.0, {Sh({{"N", 1}}), Sh({{"N", 4096}})}, quant_cost, CheckE4M3,
                   no_run(CheckE4M3)));
  using Dims = std::map<std::string, int64_t>;
  const CheckFn fp8_w = [](const Dims& d, uint64_t s) { return CheckWeightQuant(d, s, QuantScheme::kFp8Block); };
  const CheckFn int8_w = [](const Dims& d, uint64_t s) { return CheckWeightQuant(d, s, QuantScheme::kInt8Channel); };
  const CheckFn fp8_a = [](const Dims& d, uint64_t s) { return CheckActQuant(d, s, QuantScheme::kFp8Block); };
  const CheckFn int8_a = [](const Dims& d, uint64_t s) { return CheckActQuant(d, s, QuantScheme::kInt8Channel); };
  // NOTE: the quotient x / scale is taken in fp32, as the format (and torch's reference cast,
  // `(x / s).to(float8_e4m3fn)`) defines it; the exact quotient can sit on the other side of a
  // rounding midpoint (INT8: ~2^-17 per element, seen at 64x1024). Rounding is then checked
  // exactly against the fp64 nearest-even grid value.
  r.push_back(Spec("quant.fp8_block_weight", "exact (fp32 quotient)", 0.0, weights, quant_cost, fp8_w, no_run(fp8_w)));
  r.push_back(Spec("quant.int8_channel_weight", "exact (fp32 quotient)", 0.0, weights, quant_cost, int8_w,
                   no_run(int8_w)));
  r.push_back(Spec("quant.fp8_act", "exact (fp32 quotient)", 0.0, acts, quant_cost, fp8_a, no_run(fp8_a)));
  r.push_back(Spec("quant.int8_act", "exact (fp32 quotient)", 0.0, acts, quant_cost, int8_a, no_run(int8_a)));
  r.push_back(Spec("gemm.fp8_block", "fp32-reassociation", 1e-5, gemms, GemmCost,
                   [](const Dims& d, uint64_t s) { return CheckGemm(d, s, QuantScheme::kFp8Block); },
                   RunGemm(QuantScheme::kFp8Block)));
  r.push_back(Spec("gemm.int8", "fp32-reassociation", 1e-5, gemms, GemmCost,
                   [](const Dims& d, uint64_t s) { return CheckGemm(d, s, QuantScheme::kInt8Channel); },
                   RunGemm(QuantScheme::kInt8Channel)));
  return r;
}

}  // namespace gyre::ops
