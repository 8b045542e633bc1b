// Quantization ops for the registry. Sections: helpers; quantizers; GEMMs; specs.
#include "ops/registry_quant.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>

#include "core/dtype.h"
#include "ops/basic.h"
#include "quant/fp8.h"
#include "quant/quant.h"
#ifdef GYRE_CUDA
#include "ops/cuda/quant_host.h"
#endif

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
// The cuda backend's check (null: the op is CPU only).
using CudaCheckFn = std::function<Result<CheckResult>(const std::map<std::string, int64_t>&, uint64_t)>;
OpSpec Spec(std::string name, std::string tol_class, double tol, std::vector<OpShape> shapes,
            std::function<Cost(const std::map<std::string, int64_t>&)> cost, CheckFn check, RunFn run,
            bool has_cuda = false, [[maybe_unused]] CudaCheckFn cuda = nullptr) {
  OpSpec s;
  s.name = std::move(name);
  s.tolerance_class = std::move(tol_class);
  s.tolerance = tol;
  s.shapes = std::move(shapes);
  s.backends = {Backend::kCpu};
  if (has_cuda) s.backends.push_back(Backend::kCuda);
  s.cost = [cost](const OpShape& sh) { return cost(sh.dims); };
  s.check = [check, cuda](const OpShape& sh, uint64_t seed, Backend b) -> Result<CheckResult> {
    if (b == Backend::kCpu) return check(sh.dims, seed);
    if (cuda) return cuda(sh.dims, seed);
    return Status::Unimplemented("backend cuda is not built for this op");
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

// ---- grouped GEMMs --------------------------------------------------------------------------------

// G groups (experts) of the same [OUT, IN] shape and N rows split among them at random, with
// empty groups (every third) and one group holding most rows: the MoE grouped GEMM's operands,
// quantized as the CPU quantizers do. Group g's rows are [offsets[g], offsets[g+1]).
struct GroupedInputs {
  std::vector<QuantizedWeight> w;
  std::vector<int32_t> offsets;
  std::vector<uint8_t> qa;
  std::vector<float> sa;
  int64_t n = 0, K = 0, N = 0;
};

GroupedInputs MakeGrouped(const std::map<std::string, int64_t>& d, uint64_t seed, QuantScheme scheme) {
  std::mt19937_64 g(seed);
  GroupedInputs in;
  in.n = d.at("N");
  in.K = d.at("IN");
  in.N = d.at("OUT");
  const int64_t G = d.at("G");
  std::vector<int64_t> rows(G, 0);
  for (int64_t r = 0; r < in.n; ++r) {
    int64_t e = static_cast<int64_t>(g() % G);
    if (e % 3 == 2) e = 0;  // groups 2, 5, ... stay empty; group 0 is heavy
    ++rows[e];
  }
  in.offsets.push_back(0);
  for (int64_t e = 0; e < G; ++e) in.offsets.push_back(static_cast<int32_t>(in.offsets.back() + rows[e]));
  for (int64_t e = 0; e < G; ++e) {
    const std::vector<float> w = Normal(g, in.N * in.K, 1.0f / std::sqrt(static_cast<float>(in.K)));
    in.w.push_back(scheme == QuantScheme::kFp8Block ? QuantizeFp8Block(w.data(), in.N, in.K)
                                                    : QuantizeInt8Channel(w.data(), in.N, in.K));
  }
  const std::vector<float> x = Normal(g, in.n * in.K, 1.0f);
  in.qa.resize(in.n * in.K);
  if (scheme == QuantScheme::kFp8Block) {
    in.sa.resize(in.n * ((in.K + 127) / 128));
    QuantizeActFp8(x.data(), in.n, in.K, 128, in.qa.data(), in.sa.data());
  } else {
    in.sa.resize(in.n);
    QuantizeActInt8(x.data(), in.n, in.K, reinterpret_cast<int8_t*>(in.qa.data()), in.sa.data());
  }
  return in;
}

// fp64 product of the dequantized operands, group by group.
std::vector<double> GroupedWant(const GroupedInputs& in, QuantScheme scheme) {
  const int64_t K = in.K, N = in.N, ng = (K + 127) / 128;
  std::vector<double> want(in.n * N);
  for (size_t e = 0; e + 1 < in.offsets.size(); ++e) {
    const std::vector<float> wd = Dequantize(in.w[e]);
    for (int64_t i = in.offsets[e]; i < in.offsets[e + 1]; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t t = 0; t < K; ++t) {
          const uint8_t b = in.qa[i * K + t];
          const double a = scheme == QuantScheme::kFp8Block
                               ? static_cast<double>(F8E4M3ToF32(b)) * in.sa[i * ng + t / 128]
                               : static_cast<double>(static_cast<int8_t>(b)) * in.sa[i];
          acc += a * static_cast<double>(wd[j * K + t]);
        }
        want[i * N + j] = acc;
      }
  }
  return want;
}

// CPU: the reference GEMM of quant/quant.h on each group's rows.
void GroupedCpu(const GroupedInputs& in, QuantScheme scheme, float* y) {
  const int64_t K = in.K, N = in.N, sc = scheme == QuantScheme::kFp8Block ? (K + 127) / 128 : 1;
  for (size_t e = 0; e + 1 < in.offsets.size(); ++e) {
    const int64_t r0 = in.offsets[e], m = in.offsets[e + 1] - r0;
    if (m == 0) continue;
    if (scheme == QuantScheme::kFp8Block) {
      GemmFp8BlockRef(in.qa.data() + r0 * K, in.sa.data() + r0 * sc, m, in.w[e], y + r0 * N);
    } else {
      GemmInt8Ref(reinterpret_cast<const int8_t*>(in.qa.data()) + r0 * K, in.sa.data() + r0, m, in.w[e], y + r0 * N);
    }
  }
}

CheckResult CheckGrouped(const std::map<std::string, int64_t>& d, uint64_t seed, QuantScheme scheme) {
  const GroupedInputs in = MakeGrouped(d, seed, scheme);
  std::vector<float> out(in.n * in.N, kNaN);
  GroupedCpu(in, scheme, out.data());
  return Finish(out, GroupedWant(in, scheme));
}

RunFn RunGrouped(QuantScheme scheme) {
  return [scheme](const std::map<std::string, int64_t>& d, uint64_t seed) {
    auto in = std::make_shared<GroupedInputs>(MakeGrouped(d, seed, scheme));
    auto out = std::make_shared<std::vector<float>>(in->n * in->N);
    return std::function<void()>([in, out, scheme] { GroupedCpu(*in, scheme, out->data()); });
  };
}

Cost GroupedCost(const std::map<std::string, int64_t>& d) {
  const double n = d.at("N"), i = d.at("IN"), o = d.at("OUT"), g = d.at("G");
  return {2 * n * i * o, n * i + g * i * o + 4 * n * o};
}

// ---- routed MoE experts -----------------------------------------------------------------------------

// T tokens, each routed to K distinct experts of E (random weights), experts [I, D] gate / up and
// [D, I] down quantized: the routed part of the CPU MoE layer (runtime/model.cc MlpLayer).
struct MoeInputs {
  int64_t T = 0, D = 0, I = 0, E = 0, K = 0;
  float limit = 0;
  std::vector<float> x, wts;
  std::vector<int32_t> idx;
  std::vector<Matrix> gate, up, down;  // dequantized values + quant
};

MoeInputs MakeMoe(const std::map<std::string, int64_t>& d, uint64_t seed, QuantScheme scheme) {
  std::mt19937_64 g(seed);
  MoeInputs in;
  in.T = d.at("T");
  in.D = d.at("D");
  in.I = d.at("I");
  in.E = d.at("E");
  in.K = d.at("K");
  in.limit = d.at("LIMIT") > 0 ? static_cast<float>(d.at("LIMIT")) : 0.0f;
  in.x = Normal(g, in.T * in.D, 1.0f);
  std::uniform_real_distribution<float> u(0.1f, 1.0f);
  for (int64_t t = 0; t < in.T; ++t) {
    std::vector<int32_t> all(in.E);
    for (int64_t e = 0; e < in.E; ++e) all[e] = static_cast<int32_t>(e);
    std::shuffle(all.begin(), all.end(), g);
    for (int64_t j = 0; j < in.K; ++j) {
      in.idx.push_back(all[j]);
      in.wts.push_back(u(g));
    }
  }
  auto make = [&](int64_t rows, int64_t cols) {
    const std::vector<float> w = Normal(g, rows * cols, 2.0f / std::sqrt(static_cast<float>(cols)));
    auto q = std::make_shared<QuantizedWeight>(scheme == QuantScheme::kFp8Block ? QuantizeFp8Block(w.data(), rows, cols)
                                                                                : QuantizeInt8Channel(w.data(), rows, cols));
    Matrix m = DequantizedMatrix(*q);
    m.quant = std::move(q);
    return m;
  };
  for (int64_t e = 0; e < in.E; ++e) {
    in.gate.push_back(make(in.I, in.D));
    in.up.push_back(make(in.I, in.D));
    in.down.push_back(make(in.D, in.I));
  }
  return in;
}

// The CPU: per expert over its tokens, ops::Linear (W8A8) gate and up, ops::SwiGlu, Linear down;
// the outputs weighted and added in expert order.
void MoeCpu(const MoeInputs& in, float* out) {
  std::fill(out, out + in.T * in.D, 0.0f);
  for (int64_t e = 0; e < in.E; ++e) {
    std::vector<int64_t> rows;
    std::vector<float> wt;
    for (int64_t p = 0; p < in.T * in.K; ++p) {
      if (in.idx[p] != e) continue;
      rows.push_back(p / in.K);
      wt.push_back(in.wts[p]);
    }
    const int64_t m = static_cast<int64_t>(rows.size());
    if (m == 0) continue;
    std::vector<float> xs(m * in.D), g(m * in.I), u(m * in.I), a(m * in.I), y(m * in.D);
    for (int64_t r = 0; r < m; ++r) std::copy_n(&in.x[rows[r] * in.D], in.D, &xs[r * in.D]);
    Linear(xs.data(), m, in.gate[e], g.data(), Numerics{});
    Linear(xs.data(), m, in.up[e], u.data(), Numerics{});
    SwiGlu(g.data(), in.I, u.data(), in.I, m, in.I, in.limit, a.data(), Numerics{});
    Linear(a.data(), m, in.down[e], y.data(), Numerics{});
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < in.D; ++c) out[rows[r] * in.D + c] += y[r * in.D + c] * wt[r];
  }
}

// fp64 on the dequantized operands: x quantized by the CPU quantizer; gate, up, SwiGLU and down in
// fp64; the SwiGLU output quantized by the CPU quantizer from its fp32 rounding. A backend that
// lands on the other side of a rounding midpoint of that second quantization (its fp32 gate / up
// differ from fp64 in the last bits) differs there by one code: the tolerance allows for a few.
std::vector<double> MoeWant(const MoeInputs& in, QuantScheme scheme) {
  const bool fp8 = scheme == QuantScheme::kFp8Block;
  auto quant_row = [&](const float* v, int64_t k, std::vector<double>* dq) {
    dq->resize(k);
    if (fp8) {
      std::vector<uint8_t> q(k);
      std::vector<float> sc((k + 127) / 128);
      QuantizeActFp8(v, 1, k, 128, q.data(), sc.data());
      for (int64_t j = 0; j < k; ++j) (*dq)[j] = static_cast<double>(F8E4M3ToF32(q[j])) * sc[j / 128];
    } else {
      std::vector<int8_t> q(k);
      float sc = 0;
      QuantizeActInt8(v, 1, k, q.data(), &sc);
      for (int64_t j = 0; j < k; ++j) (*dq)[j] = static_cast<double>(q[j]) * sc;
    }
  };
  std::vector<double> want(in.T * in.D, 0.0);
  std::vector<double> xq, aq;
  std::vector<float> a(in.I);
  for (int64_t p = 0; p < in.T * in.K; ++p) {
    const int64_t t = p / in.K, e = in.idx[p];
    quant_row(&in.x[t * in.D], in.D, &xq);
    for (int64_t i = 0; i < in.I; ++i) {
      double gv = 0, uv = 0;
      for (int64_t c = 0; c < in.D; ++c) {
        gv += xq[c] * in.gate[e].data[i * in.D + c];
        uv += xq[c] * in.up[e].data[i * in.D + c];
      }
      if (in.limit > 0) {
        gv = std::min<double>(gv, in.limit);
        uv = std::clamp<double>(uv, -in.limit, in.limit);
      }
      a[i] = static_cast<float>(gv / (1.0 + std::exp(-gv)) * uv);
    }
    quant_row(a.data(), in.I, &aq);
    for (int64_t c = 0; c < in.D; ++c) {
      double y = 0;
      for (int64_t i = 0; i < in.I; ++i) y += aq[i] * in.down[e].data[c * in.I + i];
      want[t * in.D + c] += in.wts[p] * y;
    }
  }
  return want;
}

CheckResult CheckMoe(const std::map<std::string, int64_t>& d, uint64_t seed, QuantScheme scheme) {
  const MoeInputs in = MakeMoe(d, seed, scheme);
  std::vector<float> out(in.T * in.D, kNaN);
  MoeCpu(in, out.data());
  return Finish(out, MoeWant(in, scheme));
}

RunFn RunMoe(QuantScheme scheme) {
  return [scheme](const std::map<std::string, int64_t>& d, uint64_t seed) {
    auto in = std::make_shared<MoeInputs>(MakeMoe(d, seed, scheme));
    auto out = std::make_shared<std::vector<float>>(in->T * in->D);
    return std::function<void()>([in, out] { MoeCpu(*in, out->data()); });
  };
}

Cost MoeCost(const std::map<std::string, int64_t>& d) {
  const double t = d.at("T"), dd = d.at("D"), i = d.at("I"), e = d.at("E"), k = d.at("K");
  return {6 * t * k * dd * i, 8 * t * dd + 3 * e * dd * i};
}

// ---- the cuda backend ----------------------------------------------------------------------------
#ifdef GYRE_CUDA

// Activation quantization on the GPU: the scales and codes must equal the CPU quantizer's
// (bit for bit); the dequantized values are compared with the fp64 nearest grid value of the fp32
// quotient by the CPU's scale.
Result<CheckResult> CudaActQuant(const std::map<std::string, int64_t>& d, uint64_t seed, QuantScheme scheme) {
  std::mt19937_64 g(seed);
  const int64_t n = d.at("N"), k = d.at("IN");
  const bool fp8 = scheme == QuantScheme::kFp8Block;
  const int64_t sc = fp8 ? (k + 127) / 128 : 1;
  std::vector<float> x = Normal(g, n * k, 2.0f);
  // Exact rounding midpoints in each row's first group: its amax (first element) makes the scale
  // 0.125 exactly (56 / 448, 15.875 / 127), so x = v · 0.125 gives the quotient v exactly, with v
  // halfway between two codes (fp8: 8.5, 9.5, ... where the e4m3 step is 1; int8: 1.5, 2.5, ...).
  for (int64_t i = 0; i < n; ++i) {
    x[i * k] = fp8 ? 56.0f : 15.875f;
    for (int64_t j = 1; j < std::min<int64_t>(k, 8); ++j)
      x[i * k + j] = (fp8 ? 7.5f + j : j + 0.5f) * 0.125f * (j % 2 ? 1.0f : -1.0f);
  }
  std::vector<uint8_t> q(n * k), q_cpu(n * k);
  std::vector<float> s(n * sc), s_cpu(n * sc);
  GYRE_RETURN_IF_ERROR(cuda::QuantizeActOnDevice(fp8, x.data(), n, k, q.data(), s.data()));
  if (fp8) {
    QuantizeActFp8(x.data(), n, k, 128, q_cpu.data(), s_cpu.data());
  } else {
    QuantizeActInt8(x.data(), n, k, reinterpret_cast<int8_t*>(q_cpu.data()), s_cpu.data());
  }
  std::vector<float> out(n * k);
  std::vector<double> want(n * k);
  int64_t code_diff = 0, scale_diff = 0;
  for (int64_t i = 0; i < n * sc; ++i) scale_diff += s[i] != s_cpu[i];
  for (int64_t i = 0; i < n * k; ++i) {
    code_diff += q[i] != q_cpu[i];
    const int64_t si = fp8 ? (i / k) * sc + (i % k) / 128 : i / k;
    const double s_ref = s_cpu[si];
    const float quot = static_cast<float>(x[i] / static_cast<float>(s_ref));
    out[i] = (fp8 ? F8E4M3ToF32(q[i]) : static_cast<float>(static_cast<int8_t>(q[i]))) * s[si];
    want[i] = (fp8 ? NearestE4M3(quot) : NearestInt8(quot)) * s_ref;
  }
  CheckResult r = Finish(out, want, "codes differing from the CPU encoder: " + std::to_string(code_diff) +
                                        ", scales: " + std::to_string(scale_diff));
  if (code_diff + scale_diff > 0 && r.diff.rel_l2 == 0) r.diff.rel_l2 = 1;  // exact means bit-exact
  return r;
}

// The dense GEMM on the GPU from the CPU quantizers' operands vs the fp64 product of the
// dequantized operands.
Result<CheckResult> CudaGemm(const std::map<std::string, int64_t>& d, uint64_t seed, QuantScheme scheme) {
  std::map<std::string, int64_t> dims = d;
  dims["G"] = 1;
  const GroupedInputs in = MakeGrouped(dims, seed, scheme);
  const std::vector<float> ws = ScalesPerRow(in.w[0]);
  std::vector<float> out(in.n * in.N, kNaN);
  GYRE_RETURN_IF_ERROR(cuda::GemmW8A8OnDevice(scheme == QuantScheme::kFp8Block, in.qa.data(), in.sa.data(), in.n,
                                              in.w[0].q.data(), ws.data(), in.N, in.K, 1, {}, out.data()));
  return Finish(out, GroupedWant(in, scheme));
}

// The grouped GEMM on the GPU (both tile heights, which must agree bit for bit) vs fp64.
Result<CheckResult> CudaGrouped(const std::map<std::string, int64_t>& d, uint64_t seed, QuantScheme scheme) {
  const GroupedInputs in = MakeGrouped(d, seed, scheme);
  std::vector<uint8_t> wq;
  std::vector<float> ws;
  for (const QuantizedWeight& w : in.w) {
    wq.insert(wq.end(), w.q.begin(), w.q.end());
    const std::vector<float> s = ScalesPerRow(w);
    ws.insert(ws.end(), s.begin(), s.end());
  }
  std::vector<float> out(in.n * in.N, kNaN);
  GYRE_RETURN_IF_ERROR(cuda::GemmW8A8OnDevice(scheme == QuantScheme::kFp8Block, in.qa.data(), in.sa.data(), in.n,
                                              wq.data(), ws.data(), in.N, in.K,
                                              static_cast<int64_t>(in.w.size()), in.offsets, out.data()));
  return Finish(out, GroupedWant(in, scheme));
}

// The routed experts on the GPU (MoeExpertsW8A8: sort, gather + quantize, grouped gate_up,
// SwiGLU + quantize, grouped down, combine) vs the same fp64 reference as the CPU.
Result<CheckResult> CudaMoe(const std::map<std::string, int64_t>& d, uint64_t seed, QuantScheme scheme) {
  const MoeInputs in = MakeMoe(d, seed, scheme);
  std::vector<uint8_t> guq, dnq;
  std::vector<float> gus, dns;
  auto add = [](const Matrix& m, std::vector<uint8_t>* q, std::vector<float>* sc) {
    q->insert(q->end(), m.quant->q.begin(), m.quant->q.end());
    const std::vector<float> s = ScalesPerRow(*m.quant);
    sc->insert(sc->end(), s.begin(), s.end());
  };
  for (int64_t e = 0; e < in.E; ++e) {
    add(in.gate[e], &guq, &gus);
    add(in.up[e], &guq, &gus);
    add(in.down[e], &dnq, &dns);
  }
  std::vector<float> out(in.T * in.D, kNaN);
  GYRE_RETURN_IF_ERROR(cuda::MoeW8A8OnDevice(scheme == QuantScheme::kFp8Block, in.x.data(), in.T, in.idx.data(),
                                             in.wts.data(), in.K, guq.data(), gus.data(), dnq.data(), dns.data(), in.E,
                                             in.D, in.I, in.limit, out.data()));
  return Finish(out, MoeWant(in, scheme));
}

constexpr bool kCudaBuilt = true;
#else
constexpr bool kCudaBuilt = false;
#endif

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
  // The cuda backend of the activation quantizers, GEMMs and grouped GEMMs (ops/cuda/quant_cuda.h).
  CudaCheckFn cuda_fp8_a, cuda_int8_a, cuda_fp8_g, cuda_int8_g, cuda_fp8_gg, cuda_int8_gg, cuda_fp8_m, cuda_int8_m;
#ifdef GYRE_CUDA
  cuda_fp8_a = [](const Dims& d, uint64_t s) { return CudaActQuant(d, s, QuantScheme::kFp8Block); };
  cuda_int8_a = [](const Dims& d, uint64_t s) { return CudaActQuant(d, s, QuantScheme::kInt8Channel); };
  cuda_fp8_g = [](const Dims& d, uint64_t s) { return CudaGemm(d, s, QuantScheme::kFp8Block); };
  cuda_int8_g = [](const Dims& d, uint64_t s) { return CudaGemm(d, s, QuantScheme::kInt8Channel); };
  cuda_fp8_gg = [](const Dims& d, uint64_t s) { return CudaGrouped(d, s, QuantScheme::kFp8Block); };
  cuda_int8_gg = [](const Dims& d, uint64_t s) { return CudaGrouped(d, s, QuantScheme::kInt8Channel); };
  cuda_fp8_m = [](const Dims& d, uint64_t s) { return CudaMoe(d, s, QuantScheme::kFp8Block); };
  cuda_int8_m = [](const Dims& d, uint64_t s) { return CudaMoe(d, s, QuantScheme::kInt8Channel); };
#endif
  (void)kCudaBuilt;
  r.push_back(Spec("quant.fp8_act", "exact (fp32 quotient)", 0.0, acts, quant_cost, fp8_a, no_run(fp8_a), true,
                   cuda_fp8_a));
  r.push_back(Spec("quant.int8_act", "exact (fp32 quotient)", 0.0, acts, quant_cost, int8_a, no_run(int8_a), true,
                   cuda_int8_a));
  // FP8 on the GPU: Hopper's FP8 tensor cores add into the fp32 accumulator with fewer mantissa
  // bits (DeepSeek-V3 reports ~14) than an fp32 sum; partial sums are promoted every 128 of K (one
  // scale group), which bounds the error at ~1e-4 rel-L2. A wrong fragment, scale index or
  // group gives O(1). INT8: exact int32 sums; the two fp32 scale products round once each.
  auto cuda_bounds = [](OpSpec s, double tol, std::string cls) {
    s.cuda_tolerance = tol;
    s.cuda_tolerance_class = std::move(cls);
    return s;
  };
  r.push_back(cuda_bounds(Spec("gemm.fp8_block", "fp32-reassociation", 1e-5, gemms, GemmCost,
                               [](const Dims& d, uint64_t s) { return CheckGemm(d, s, QuantScheme::kFp8Block); },
                               RunGemm(QuantScheme::kFp8Block), true, cuda_fp8_g),
                          2e-3, "fp8 tensor-core accumulation"));
  r.push_back(cuda_bounds(Spec("gemm.int8", "fp32-reassociation", 1e-5, gemms, GemmCost,
                               [](const Dims& d, uint64_t s) { return CheckGemm(d, s, QuantScheme::kInt8Channel); },
                               RunGemm(QuantScheme::kInt8Channel), true, cuda_int8_g),
                          1e-6, "exact int32 sum, two fp32 products"));
  const std::vector<OpShape> grouped = {Sh({{"N", 1}, {"IN", 128}, {"OUT", 64}, {"G", 4}}),
                                        Sh({{"N", 37}, {"IN", 300}, {"OUT", 200}, {"G", 6}}),
                                        Sh({{"N", 160}, {"IN", 512}, {"OUT", 384}, {"G", 8}})};
  r.push_back(cuda_bounds(Spec("gemm.fp8_block_grouped", "fp32-reassociation", 1e-5, grouped, GroupedCost,
                               [](const Dims& d, uint64_t s) { return CheckGrouped(d, s, QuantScheme::kFp8Block); },
                               RunGrouped(QuantScheme::kFp8Block), true, cuda_fp8_gg),
                          2e-3, "fp8 tensor-core accumulation"));
  r.push_back(cuda_bounds(Spec("gemm.int8_grouped", "fp32-reassociation", 1e-5, grouped, GroupedCost,
                               [](const Dims& d, uint64_t s) { return CheckGrouped(d, s, QuantScheme::kInt8Channel); },
                               RunGrouped(QuantScheme::kInt8Channel), true, cuda_int8_gg),
                          1e-6, "exact int32 sum, two fp32 products"));
  // The routed experts: fp32 sums (and FP8 tensor-core sums) against fp64 move a few SwiGLU
  // outputs across a rounding midpoint of the second activation quantization (one e4m3 step is
  // 6-12 %, one int8 step 1/127 of the row's amax); an error in the sort, gather, scales or combine
  // is O(1). Measured on the CPU over seeds 1-8: <= 2.6e-4 (fp8), <= 1.5e-7 (int8); the GPU's FP8
  // sums are ~1e-4 off fp64, which flips ~1000x more codes (rel-L2 ~ sqrt(count)), hence 2e-2.
  const std::vector<OpShape> moe = {Sh({{"T", 1}, {"D", 128}, {"I", 128}, {"E", 4}, {"K", 2}, {"LIMIT", 0}}),
                                    Sh({{"T", 37}, {"D", 256}, {"I", 384}, {"E", 8}, {"K", 3}, {"LIMIT", 7}}),
                                    Sh({{"T", 50}, {"D", 300}, {"I", 200}, {"E", 6}, {"K", 2}, {"LIMIT", 0}})};
  r.push_back(cuda_bounds(Spec("moe.experts_fp8", "fp32 + requantization flips", 2e-2, moe, MoeCost,
                               [](const Dims& d, uint64_t s) { return CheckMoe(d, s, QuantScheme::kFp8Block); },
                               RunMoe(QuantScheme::kFp8Block), true, cuda_fp8_m),
                          2e-2, "fp8 tensor cores + requantization flips"));
  r.push_back(cuda_bounds(Spec("moe.experts_int8", "fp32 + requantization flips", 5e-3, moe, MoeCost,
                               [](const Dims& d, uint64_t s) { return CheckMoe(d, s, QuantScheme::kInt8Channel); },
                               RunMoe(QuantScheme::kInt8Channel), true, cuda_int8_m),
                          5e-3, "fp32 + requantization flips"));
  return r;
}

}  // namespace gyre::ops
