// Op registry. Sections: helpers (random inputs, generic check/prepare); one struct per op (inputs,
// CPU backend, reference, cost); specs (the registry table).
#include "ops/registry.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <sstream>

#include "ops/attention.h"
#include "ops/hyper_connection.h"
#include "ops/kda.h"
#include "ops/moe.h"
#include "ops/penalties.h"
#include "ops/reference.h"
#include "ops/registry_quant.h"
#include "ops/vision.h"
#ifdef GYRE_CUDA
#include "ops/cuda/elementwise_host.h"
#include "ops/cuda/mla_host.h"
#include "ops/cuda/moe_host.h"
#include "ops/cuda/ops_cuda.h"
#endif

namespace gyre::ops {

const char* BackendName(Backend b) { return b == Backend::kCpu ? "cpu" : "cuda"; }

namespace {

// ---- helpers -------------------------------------------------------------------------------------

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Rng {
  explicit Rng(uint64_t seed) : g(seed) {}
  std::vector<float> Normal(int64_t n, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(g);
    return v;
  }
  std::vector<float> Uniform(int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(g);
    return v;
  }
  std::mt19937_64 g;
};

Matrix Mat(std::vector<float> data, int64_t rows, int64_t cols) { return Matrix{std::move(data), rows, cols}; }

CheckResult CompareOut(const std::vector<float>& out, const ref::Vec& want) {
  CheckResult r;
  r.num_outputs = static_cast<int64_t>(out.size());
  for (float v : out) r.num_unwritten += std::isnan(v);
  std::vector<float> wf(want.begin(), want.end());
  r.diff = Compare(out, wf);
  return r;
}


OpShape S(std::map<std::string, int64_t> dims, double tolerance = 0) {
  return OpShape{ShapeLabel(dims), std::move(dims), tolerance};
}

// CUDA path (GYRE_CUDA builds): an op struct that has `static Status CudaRun(Inputs&,
// std::vector<float>* out)` runs on the GPU for Backend::kCuda (src/ops/cuda/ops_cuda.h: device
// copies, NaN-poisoned device outputs, copy back); every other op reports "not built" for cuda.
template <typename Op>
constexpr bool HasCuda() {
#ifdef GYRE_CUDA
  return requires(typename Op::Inputs& in, std::vector<float>* out) { Op::CudaRun(in, out); };
#else
  return false;
#endif
}

// Why a backend other than the CPU cannot run an op: the build has no CUDA, or the op no kernel.
std::string NoBackendReason(Backend b) {
#ifdef GYRE_CUDA
  if (b == Backend::kCuda) return "this op has no cuda implementation (CPU only)";
#endif
  return "backend " + std::string(BackendName(b)) + " is not built";
}

template <typename Op>
Status RunCuda([[maybe_unused]] typename Op::Inputs& in, [[maybe_unused]] std::vector<float>* out) {
  if constexpr (HasCuda<Op>()) {
    return Op::CudaRun(in, out);
  } else {
    return Status::Unimplemented("backend cuda is not built for this op");
  }
}

// Each op struct provides: Inputs Make(dims, seed); void Cpu(Inputs&, std::vector<float>* out);
// ref::Vec Ref(const Inputs&); Cost CostOf(dims); optionally CudaRun (above).
template <typename Op>
OpSpec MakeSpec(std::string name, std::string tol_class, double tol, std::vector<OpShape> shapes) {
  OpSpec s;
  s.name = std::move(name);
  s.tolerance_class = std::move(tol_class);
  s.tolerance = tol;
  s.shapes = std::move(shapes);
  s.cost = [](const OpShape& sh) { return Op::CostOf(sh.dims); };
  s.check = [](const OpShape& sh, uint64_t seed, Backend b) -> Result<CheckResult> {
    if (b != Backend::kCpu && !HasCuda<Op>())
      return Status::Unimplemented(NoBackendReason(b));
    auto in = Op::Make(sh.dims, seed);
    std::vector<float> out;
    if (b == Backend::kCuda) {
      GYRE_RETURN_IF_ERROR(RunCuda<Op>(in, &out));
    } else {
      Op::Cpu(in, &out);
    }
    CheckResult r = CompareOut(out, Op::Ref(in));
    r.note = Op::Note(in, out);
    return r;
  };
  s.prepare = [](const OpShape& sh, uint64_t seed, Backend b, int rotate) -> Result<std::function<void()>> {
    if (b != Backend::kCpu) {
      return Status::Unimplemented(HasCuda<Op>() ? "bench op: the cuda backend is timed by gyre_cuda_bench "
                                                   "(scripts/gpu_check.sh), not through host copies"
                                                 : NoBackendReason(b));
    }
    auto sets = std::make_shared<std::vector<typename Op::Inputs>>();
    for (int i = 0; i < std::max(rotate, 1); ++i) sets->push_back(Op::Make(sh.dims, seed + i));
    auto next = std::make_shared<size_t>(0);
    auto out = std::make_shared<std::vector<float>>();
    return std::function<void()>([sets, next, out] {
      Op::Cpu((*sets)[*next], out.get());
      *next = (*next + 1) % sets->size();
    });
  };
  return s;
}

struct NoNote {
  template <typename I>
  static std::string Note(const I&, const std::vector<float>&) {
    return "";
  }
};

// ---- ops -----------------------------------------------------------------------------------------

struct LinearOp : NoNote {
  struct Inputs {
    std::vector<float> x;
    Matrix w;
    int64_t n;
  };
  static Inputs Make(const std::map<std::string, int64_t>& d, uint64_t seed) {
    Rng r(seed);
    const int64_t n = d.at("N"), in = d.at("IN"), out = d.at("OUT");
    return {r.Normal(n * in), Mat(r.Normal(out * in, 1.0f / std::sqrt(float(in))), out, in), n};
  }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    out->assign(in.n * in.w.rows, kNaN);
    Linear(in.x.data(), in.n, in.w, out->data(), Numerics{});
  }
  static ref::Vec Ref(const Inputs& in) { return ref::Linear(in.x, in.n, in.w.data, in.w.rows, in.w.cols); }
#ifdef GYRE_CUDA
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    out->assign(in.n * in.w.rows, kNaN);
    return cuda::LinearF32OnDevice(in.x.data(), in.n, in.w.cols, in.w.data.data(), in.w.rows, out->data());
  }
#endif
  static Cost CostOf(const std::map<std::string, int64_t>& d) {
    const double n = d.at("N"), i = d.at("IN"), o = d.at("OUT");
    return {2 * n * i * o, 4 * (n * i + i * o + n * o)};
  }
};

struct RmsNormOp : NoNote {
  struct Inputs {
    std::vector<float> x, w;
    int64_t n, d;
  };
  static Inputs Make(const std::map<std::string, int64_t>& dm, uint64_t seed) {
    Rng r(seed);
    const int64_t n = dm.at("N"), d = dm.at("D");
    return {r.Normal(n * d, 3.0f), r.Normal(d, 1.0f), n, d};
  }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    out->assign(in.n * in.d, kNaN);
    RmsNorm(in.x.data(), in.n, in.d, in.w, 1e-5f, out->data(), Numerics{});
  }
  static ref::Vec Ref(const Inputs& in) { return ref::RmsNorm(in.x, in.n, in.d, in.w, 1e-5); }
#ifdef GYRE_CUDA
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    out->assign(in.n * in.d, kNaN);
    return cuda::RmsNormOnDevice(in.x.data(), in.n, in.d, in.w.data(), 1e-5f, out->data());
  }
#endif
  static Cost CostOf(const std::map<std::string, int64_t>& d) {
    const double n = d.at("N"), dd = d.at("D");
    return {4 * n * dd, 4 * (2 * n * dd + dd)};
  }
};

struct SwiGluOp : NoNote {
  struct Inputs {
    std::vector<float> g, u;
    int64_t n, w;
  };
  static Inputs Make(const std::map<std::string, int64_t>& d, uint64_t seed) {
    Rng r(seed);
    const int64_t n = d.at("N"), w = d.at("W");
    return {r.Normal(n * w, 8.0f), r.Normal(n * w, 8.0f), n, w};  // wide: exercises both clamps
  }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    out->assign(in.n * in.w, kNaN);
    SwiGlu(in.g.data(), in.w, in.u.data(), in.w, in.n, in.w, 10.0f, out->data(), Numerics{});
  }
  static ref::Vec Ref(const Inputs& in) { return ref::SwiGlu(in.g, in.u, 10.0); }
#ifdef GYRE_CUDA
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    out->assign(in.n * in.w, kNaN);
    return cuda::SwiGluOnDevice(in.g.data(), in.u.data(), in.n, in.w, 10.0f, out->data());
  }
#endif
  static Cost CostOf(const std::map<std::string, int64_t>& d) {
    const double e = double(d.at("N")) * d.at("W");
    return {6 * e, 12 * e};
  }
};

struct ConvOp : NoNote {
  struct Inputs {
    std::vector<float> x, w, state;
    int64_t t, ch, width;
  };
  static Inputs Make(const std::map<std::string, int64_t>& d, uint64_t seed) {
    Rng r(seed);
    const int64_t t = d.at("T"), ch = d.at("C"), w = 4;
    return {r.Normal(t * ch), r.Normal(ch * w, 0.5f), r.Normal((w - 1) * ch), t, ch, w};
  }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    out->assign(in.t * in.ch, kNaN);
    std::vector<float> st = in.state;
    CausalConv1dSilu(in.x.data(), in.t, in.ch, in.w.data(), in.width, st.data(), out->data(), Numerics{});
  }
  static ref::Vec Ref(const Inputs& in) { return ref::Conv(in.x, in.t, in.ch, in.w, in.width, in.state); }
#ifdef GYRE_CUDA
  // Ragged kernel in two calls with a padding and an empty sequence; checks the tails (elementwise_host.h).
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    out->assign(in.t * in.ch, kNaN);
    std::vector<float> st = in.state;
    return cuda::CausalConv1dSiluOnDevice(in.x.data(), in.t, in.ch, in.w.data(), in.width, st.data(), out->data());
  }
#endif
  static Cost CostOf(const std::map<std::string, int64_t>& d) {
    const double e = double(d.at("T")) * d.at("C");
    return {8 * e + 4 * e, 8 * e};
  }
};

struct GateOp : NoNote {
  struct Inputs {
    std::vector<float> f, dt, alog;
    int64_t t, h, k;
    bool softplus;
  };
  static Inputs Make(const std::map<std::string, int64_t>& d, uint64_t seed) {
    Rng r(seed);
    const int64_t t = d.at("T"), h = d.at("H"), k = d.at("K");
    Inputs in{r.Normal(t * h * k, 4.0f), r.Uniform(h * k, -2, 1), r.Uniform(h, 0, 2.7f), t, h, k, d.at("SOFTPLUS") != 0};
    in.f[0] = 25.0f;  // exercises the z > 20 branch of softplus
    return in;
  }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    out->assign(in.t * in.h * in.k, kNaN);
    KdaGate(in.f.data(), in.t, {in.h, in.k}, in.dt, in.alog, in.softplus ? std::nullopt : std::optional<float>(-5.0f),
            out->data());
  }
  static ref::Vec Ref(const Inputs& in) {
    return ref::Gate(in.f, in.t, in.h, in.k, in.dt, in.alog, in.softplus ? std::nullopt : std::optional<double>(-5.0));
  }
#ifdef GYRE_CUDA
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    out->assign(in.t * in.h * in.k, kNaN);
    return cuda::KdaGateOnDevice(in.f.data(), in.t, in.h, in.k, in.dt.data(), in.alog.data(), !in.softplus, -5.0f,
                                 out->data());
  }
#endif
  static Cost CostOf(const std::map<std::string, int64_t>& d) {
    const double e = double(d.at("T")) * d.at("H") * d.at("K");
    return {6 * e, 8 * e};
  }
};

// Shared inputs for the KDA core forms.
struct KdaInputs {
  std::vector<float> q, k, v, g, beta, state;
  int64_t t, h, dk;
};
KdaInputs MakeKda(const std::map<std::string, int64_t>& d, uint64_t seed) {
  Rng r(seed);
  const int64_t t = d.at("T"), h = d.at("H"), k = d.at("K"), P = h * k;
  KdaInputs in{r.Normal(t * P), r.Normal(t * P), r.Normal(t * P), r.Uniform(t * P, -5.0f, 0.0f),
               r.Uniform(t * h, 0.0f, 1.0f), r.Normal(h * k * k, 0.3f), t, h, k};
  return in;
}
Cost KdaCost(const std::map<std::string, int64_t>& d) {
  const double t = d.at("T"), h = d.at("H"), k = d.at("K");
  // Recurrence: ~6 K·V flops per token and head; state read + written once per call.
  return {6 * t * h * k * k, 4 * (4 * t * h * k + t * h) + 2 * 4 * h * k * k};
}

// Output rows followed by the final state, compared together.
template <bool kChunked>
struct KdaOp : NoNote {
  using Inputs = KdaInputs;
  static Inputs Make(const std::map<std::string, int64_t>& d, uint64_t seed) { return MakeKda(d, seed); }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    const int64_t P = in.h * in.dk;
    std::vector<float> st = in.state, o(in.t * P, kNaN);
    if (kChunked) {
      KdaChunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), in.t, {in.h, in.dk}, st.data(),
                 o.data());
    } else {
      KdaRecurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), in.t, {in.h, in.dk}, st.data(),
                   o.data());
    }
    *out = o;
    out->insert(out->end(), st.begin(), st.end());
  }
#ifdef GYRE_CUDA
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    std::vector<float> st = in.state, o(in.t * in.h * in.dk, kNaN);
    GYRE_RETURN_IF_ERROR(cuda::KdaOnDevice(kChunked, in.q.data(), in.k.data(), in.v.data(), in.g.data(),
                                           in.beta.data(), in.t, in.h, in.dk, st.data(), o.data()));
    *out = o;
    out->insert(out->end(), st.begin(), st.end());
    return Status::Ok();
  }
#endif
  static ref::Vec Ref(const Inputs& in) {
    ref::Vec st(in.state.begin(), in.state.end());
    ref::Vec o = ref::Kda(in.q, in.k, in.v, in.g, in.beta, in.t, in.h, in.dk, &st);
    o.insert(o.end(), st.begin(), st.end());
    return o;
  }
  static Cost CostOf(const std::map<std::string, int64_t>& d) { return KdaCost(d); }
};

// ReplaySSM (speculative decoding): the state after folding T kept inputs (KdaFold) against the
// state the plain recurrence leaves over the same tokens (KdaRecurrent, fp32): equal bit for bit,
// so the tolerance is 0. CPU only for now (the CUDA fold is not written).
struct ReplayFoldOp : NoNote {
  using Inputs = KdaInputs;
  static Inputs Make(const std::map<std::string, int64_t>& d, uint64_t seed) { return MakeKda(d, seed); }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    *out = in.state;
    KdaFold(in.k.data(), in.v.data(), in.g.data(), in.beta.data(), in.t, {in.h, in.dk}, out->data());
  }
  static ref::Vec Ref(const Inputs& in) {
    std::vector<float> st = in.state, o(in.t * in.h * in.dk);
    KdaRecurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), in.t, {in.h, in.dk}, st.data(),
                 o.data());
    return ref::Vec(st.begin(), st.end());
  }
#ifdef GYRE_CUDA
  // The speculative launch (state kept), then the fold; each checked bit for bit against the plain
  // recurrent kernel on the device (ops_cuda.h), the folded state compared with the CPU reference.
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    *out = in.state;
    return cuda::KdaReplayFoldOnDevice(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), in.t, in.h,
                                       in.dk, out->data());
  }
#endif
  static Cost CostOf(const std::map<std::string, int64_t>& d) { return KdaCost(d); }
};

struct GatedNormOp : NoNote {
  struct Inputs {
    std::vector<float> o, z, w;
    int64_t t, h, v;
  };
  static Inputs Make(const std::map<std::string, int64_t>& d, uint64_t seed) {
    Rng r(seed);
    const int64_t t = d.at("T"), h = d.at("H"), v = d.at("K");
    return {r.Normal(t * h * v), r.Normal(t * h * v, 2.0f), r.Normal(v), t, h, v};
  }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    out->assign(in.t * in.h * in.v, kNaN);
    GatedRmsNorm(in.o.data(), in.z.data(), in.t, {in.h, in.v}, in.w, 1e-5f, out->data(), Numerics{});
  }
  static ref::Vec Ref(const Inputs& in) { return ref::GatedNorm(in.o, in.z, in.t * in.h, in.v, in.w, 1e-5); }
#ifdef GYRE_CUDA
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    out->assign(in.t * in.h * in.v, kNaN);
    return cuda::GatedRmsNormOnDevice(in.o.data(), in.z.data(), in.t, in.h, in.v, in.w.data(), 1e-5f, out->data());
  }
#endif
  static Cost CostOf(const std::map<std::string, int64_t>& d) {
    const double e = double(d.at("T")) * d.at("H") * d.at("K");
    return {8 * e, 12 * e};
  }
};

struct HcPreOp : NoNote {
  struct Inputs {
    std::vector<float> x, base, scale;
    Matrix fn;
    int64_t t, n, d;
  };
  static Inputs Make(const std::map<std::string, int64_t>& dm, uint64_t seed) {
    Rng r(seed);
    const int64_t t = dm.at("T"), n = 4, d = dm.at("D"), mix = (2 + n) * n;
    return {r.Normal(t * n * d), r.Normal(mix, 0.5f), r.Normal(3, 0.5f), Mat(r.Normal(mix * n * d, 0.02f), mix, n * d),
            t, n, d};
  }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    const int64_t t = in.t, n = in.n;
    std::vector<float> post(t * n, kNaN), comb(t * n * n, kNaN), y(t * in.d, kNaN);
    HcParams p{n, in.d, 1e-5f, 1e-6f, 20};
    HcPre(in.x.data(), t, in.fn, in.base, in.scale, p, post.data(), comb.data(), y.data(), Numerics{});
    *out = post;
    out->insert(out->end(), comb.begin(), comb.end());
    out->insert(out->end(), y.begin(), y.end());
  }
  static ref::Vec Ref(const Inputs& in) {
    return ref::HcPre(in.x, in.t, in.n, in.d, in.fn.data, in.base, in.scale, 1e-5, 1e-6, 20);
  }
#ifdef GYRE_CUDA
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    const int64_t t = in.t, n = in.n;
    std::vector<float> post(t * n, kNaN), comb(t * n * n, kNaN), y(t * in.d, kNaN);
    GYRE_RETURN_IF_ERROR(cuda::HcPreOnDevice(in.x.data(), t, n, in.d, in.fn.data.data(), in.base.data(),
                                             in.scale.data(), 1e-5f, 1e-6f, 20, post.data(), comb.data(), y.data()));
    *out = post;
    out->insert(out->end(), comb.begin(), comb.end());
    out->insert(out->end(), y.begin(), y.end());
    return Status::Ok();
  }
#endif
  static Cost CostOf(const std::map<std::string, int64_t>& d) {
    const double t = d.at("T"), nd = 4.0 * d.at("D");
    return {2 * t * nd * 24 + 6 * t * nd, 4 * (t * nd + 24 * nd + t * d.at("D"))};
  }
};

// In place on the streams; post and comb drawn like HcPre's outputs (post in (0, 2), comb near
// doubly stochastic).
struct HcPostOp : NoNote {
  struct Inputs {
    std::vector<float> x, a, post, comb;
    int64_t t, n, d;
  };
  static Inputs Make(const std::map<std::string, int64_t>& dm, uint64_t seed) {
    Rng r(seed);
    const int64_t t = dm.at("T"), n = 4, d = dm.at("D");
    return {r.Normal(t * n * d), r.Normal(t * d), r.Uniform(t * n, 0.0f, 2.0f), r.Uniform(t * n * n, 0.0f, 0.5f),
            t, n, d};
  }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    *out = in.x;
    const HcParams p{in.n, in.d, 1e-5f, 1e-6f, 20};
    HcPost(out->data(), in.t, in.a.data(), in.post.data(), in.comb.data(), p, Numerics{});
  }
  static ref::Vec Ref(const Inputs& in) { return ref::HcPost(in.x, in.t, in.n, in.d, in.a, in.post, in.comb); }
#ifdef GYRE_CUDA
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    *out = in.x;
    return cuda::HcPostOnDevice(out->data(), in.t, in.n, in.d, in.a.data(), in.post.data(), in.comb.data());
  }
#endif
  static Cost CostOf(const std::map<std::string, int64_t>& d) {
    const double t = d.at("T"), dd = d.at("D"), n = 4;
    return {t * n * dd * (2 * n + 2), 4 * (2 * t * n * dd + t * dd + t * n * (n + 1))};
  }
};

// An optional dimension (absent from the registry's own shapes, settable by a sweep shape).
int64_t DimOr(const std::map<std::string, int64_t>& d, const char* name, int64_t fallback) {
  const auto it = d.find(name);
  return it == d.end() ? fallback : it->second;
}

struct MlaOp {
  struct Inputs {
    std::vector<float> q, latent, krot;
    Matrix kvb;
    int64_t s, t, h, nope, rope, v, lora;
    Selection sel;
    std::vector<std::vector<int32_t>> sel_lists;
    int64_t shift = 0;  // SHIFT: the device cache holds the keys pos_shift positions later (MTP keys)
  };
  static Inputs Make(const std::map<std::string, int64_t>& d, uint64_t seed) {
    Rng r(seed);
    const int64_t s = d.at("S"), t = d.at("T"), h = d.at("H"), rope = d.at("ROPE");
    const int64_t nope = DimOr(d, "NOPE", 16), v = DimOr(d, "V", 16), L = DimOr(d, "L", 32);
    Inputs in{r.Normal(s * h * (nope + rope)), r.Normal(t * L), r.Normal(t * rope),
              Mat(r.Normal(h * (nope + v) * L, 0.2f), h * (nope + v), L), s, t, h, nope, rope, v, L, {}, {}};
    in.shift = DimOr(d, "SHIFT", 0);
    const int64_t pos0 = t - s;
    const bool sparse = d.at("SPARSE") != 0;
    in.sel.causal = !sparse;
    in.sel.offsets.push_back(0);
    std::uniform_int_distribution<int> coin(0, 2);
    for (int64_t i = 0; i < s; ++i) {
      std::vector<int32_t> keys;
      for (int64_t j = 0; j <= pos0 + i; ++j)
        if (!sparse || coin(r.g) == 0 || j == pos0 + i) keys.push_back(static_cast<int32_t>(j));
      in.sel_lists.push_back(keys);
      if (sparse) {
        in.sel.indices.insert(in.sel.indices.end(), keys.begin(), keys.end());
        in.sel.offsets.push_back(static_cast<int64_t>(in.sel.indices.size()));
      }
    }
    return in;
  }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    out->assign(in.s * in.h * in.v, kNaN);
    const RowView lat{in.latent.data(), nullptr, 1, in.lora, 0}, kr{in.krot.data(), nullptr, 1, in.rope, 0};
    MlaShape sh{in.h, in.nope, in.rope, in.v, in.lora, 1.0f / std::sqrt(float(in.nope + in.rope))};
    MlaAttention(in.q.data(), in.s, in.t - in.s, lat, kr, in.kvb, sh, in.sel, out->data(), Numerics{});
  }
#ifdef GYRE_CUDA
  // Paged cache (4-token pages, shuffled table), a padding token in front (mla_host.h).
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    out->assign(in.s * in.h * in.v, kNaN);
    cuda::MlaHostArgs a;
    a.q = in.q.data(), a.latent = in.latent.data(), a.krot = in.krot.data(), a.kv_b = in.kvb.data.data();
    a.s = in.s, a.t = in.t, a.heads = in.h, a.nope = in.nope, a.rope = in.rope, a.v = in.v, a.kv_lora = in.lora;
    a.scale = 1.0f / std::sqrt(float(in.nope + in.rope));
    if (!in.sel.causal) a.sel_offsets = in.sel.offsets.data(), a.sel_indices = in.sel.indices.data();
    a.pos_shift = in.shift;
    return cuda::MlaAttentionOnDevice(a, out->data());
  }
#endif
  static ref::Vec Ref(const Inputs& in) {
    return ref::Mla(in.q, in.s, in.latent, in.krot, in.kvb.data, in.h, in.nope, in.rope, in.v, in.lora,
                    1.0 / std::sqrt(double(in.nope + in.rope)), in.sel_lists);
  }
  static std::string Note(const Inputs&, const std::vector<float>&) { return ""; }
  static Cost CostOf(const std::map<std::string, int64_t>& d) {
    const double s = d.at("S"), t = d.at("T"), h = d.at("H"), rope = d.at("ROPE");
    const double nope = DimOr(d, "NOPE", 16), v = DimOr(d, "V", 16), L = DimOr(d, "L", 32);
    // q·W_uk absorbed (2·nope·L), scores and weighted sum over t keys of width L + rope, W_uv out.
    return {s * h * (2 * nope * L + 2 * t * (2 * L + rope) + 2 * L * v),
            4 * (t * (L + rope) + s * h * (nope + rope + v) + h * (nope + v) * L)};
  }
};

struct PoolKeyOp : NoNote {
  struct Inputs {
    std::vector<float> k, gamma, ape;
    int64_t m, d;
  };
  static Inputs Make(const std::map<std::string, int64_t>& dm, uint64_t seed) {
    Rng r(seed);
    const int64_t m = dm.at("M"), d = dm.at("D");
    return {r.Normal(m * d), r.Normal(m * d, 2.0f), r.Normal(m * d, 0.5f), m, d};
  }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    out->assign(in.d, kNaN);
    PoolKey(in.k.data(), in.gamma.data(), in.ape.data(), in.m, in.d, out->data(), Numerics{});
  }
#ifdef GYRE_CUDA
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    out->assign(in.d, kNaN);
    return cuda::PoolKeyOnDevice(in.k.data(), in.gamma.data(), in.ape.data(), in.m, in.d, out->data());
  }
#endif
  static ref::Vec Ref(const Inputs& in) { return ref::PoolKey(in.k, in.gamma, in.ape, in.m, in.d); }
  static Cost CostOf(const std::map<std::string, int64_t>& d) {
    const double e = double(d.at("M")) * d.at("D");
    return {5 * e, 12 * e};
  }
};

// Selection compared as a 0/1 membership matrix [S, T] (exact op: tolerance 0).
struct IndexerOp {
  struct Inputs {
    std::vector<float> q, w, pk;
    int64_t s, t, p, heads, d, m, topk;
  };
  static Inputs Make(const std::map<std::string, int64_t>& dm, uint64_t seed) {
    Rng r(seed);
    const int64_t t = dm.at("T"), m = dm.at("M"), p = t / m, s = dm.at("S");
    const int64_t heads = DimOr(dm, "IH", 4), d = DimOr(dm, "ID", 16);
    Inputs in{r.Normal(s * heads * d), r.Normal(s * heads), r.Normal(p * d), s, t, p, heads, d, m, dm.at("TOPK")};
    // TIES=1: pool p gets the key of pool p mod 3, so the scores fall into three classes of
    // bit-identical values and the tie rule (equal scores: lower pool first) decides which pools
    // of a class are chosen: the rule is exercised on every run, not by chance.
    if (dm.count("TIES") && dm.at("TIES") != 0) {
      for (int64_t i = 3; i < p; ++i) std::copy_n(in.pk.begin() + (i % 3) * d, d, in.pk.begin() + i * d);
    }
    return in;
  }
  static std::vector<float> Membership(const std::vector<std::vector<int32_t>>& rows, int64_t t) {
    std::vector<float> mem(rows.size() * t, 0.0f);
    for (size_t i = 0; i < rows.size(); ++i)
      for (int32_t j : rows[i]) mem[i * t + j] += 1.0f;  // duplicates would show as 2
    return mem;
  }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    Selection sel;
    IndexerSelect(in.q.data(), in.w.data(), in.s, in.t - in.s, in.pk.data(), in.p, {in.heads, in.d, in.m, in.topk, true},
                  &sel);
    std::vector<std::vector<int32_t>> rows(in.s);
    for (int64_t i = 0; i < in.s; ++i) rows[i].assign(sel.indices.begin() + sel.offsets[i], sel.indices.begin() + sel.offsets[i + 1]);
    *out = Membership(rows, in.t);
  }
#ifdef GYRE_CUDA
  // Runs the shared- and global-memory select paths and checks they agree (mla_host.h).
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    cuda::IndexerHostArgs a;
    a.q_idx = in.q.data(), a.w = in.w.data(), a.pool_keys = in.pk.data();
    a.s = in.s, a.pos0 = in.t - in.s, a.num_pools = in.p;
    a.heads = in.heads, a.head_dim = in.d, a.kpool = in.m, a.topk = in.topk, a.tail = true;
    std::vector<std::vector<int32_t>> rows;
    GYRE_RETURN_IF_ERROR(cuda::IndexerSelectOnDevice(a, &rows));
    *out = Membership(rows, in.t);
    return Status::Ok();
  }
#endif
  static ref::Vec Ref(const Inputs& in) {
    auto rows = ref::IndexerSelect(in.q, in.w, in.s, in.t - in.s, in.pk, in.p, in.heads, in.d, in.m, in.topk, true);
    auto mem = Membership(rows, in.t);
    return ref::Vec(mem.begin(), mem.end());
  }
  static std::string Note(const Inputs& in, const std::vector<float>& out) {
    return "selects up to " + std::to_string(in.topk / in.m) + " of " + std::to_string(in.p) + " pools + tail";
  }
  static Cost CostOf(const std::map<std::string, int64_t>& d) {
    const double s = d.at("S"), p = double(d.at("T")) / d.at("M"), ih = DimOr(d, "IH", 4), id = DimOr(d, "ID", 16);
    return {s * p * ih * id * 2, 4 * (s * ih * id + p * id)};
  }
};

struct RouteOp {
  struct Inputs {
    std::vector<float> logits, bias;
    int64_t n, e, k, groups, topk_group;
  };
  static Inputs Make(const std::map<std::string, int64_t>& d, uint64_t seed) {
    Rng r(seed);
    const int64_t n = d.at("N"), e = d.at("E"), k = d.at("K"), g = d.at("G");
    Inputs in{r.Normal(n * e, 2.0f), r.Normal(e, 0.05f), n, e, k, g, g > 1 ? g / 2 : 1};
    if (d.at("HOT") != 0) in.bias[0] = 10.0f;  // one expert hit by every token
    // TIES=1: logits from {0, 0.5, 1, 1.5} and no bias, so many experts (and groups) have equal
    // scores and the tie rule (equal: lower index first) picks them. Non-negative levels keep the
    // group sums of distinct pairs apart (>= 0.0139), unlike σ(x) + σ(-x) = 1, which rounding
    // could split differently in fp32 and fp64.
    if (d.count("TIES") && d.at("TIES") != 0) {
      std::uniform_int_distribution<int> level(0, 3);
      for (float& x : in.logits) x = 0.5f * static_cast<float>(level(r.g));
      std::fill(in.bias.begin(), in.bias.end(), 0.0f);
    }
    return in;
  }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    std::vector<int32_t> idx(in.n * in.k, -1);
    std::vector<float> w(in.n * in.k, kNaN);
    Route(in.logits.data(), in.n, in.bias, {in.e, in.k, in.groups, in.topk_group, true, 2.5f}, idx.data(), w.data());
    out->assign(idx.begin(), idx.end());
    out->insert(out->end(), w.begin(), w.end());
  }
#ifdef GYRE_CUDA
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    std::vector<int32_t> idx(in.n * in.k, -1);
    std::vector<float> w(in.n * in.k, kNaN);
    GYRE_RETURN_IF_ERROR(cuda::MoeRouteOnDevice(in.logits.data(), in.n, in.bias.data(),
                                                {in.e, in.k, in.groups, in.topk_group, true, 2.5f}, idx.data(),
                                                w.data()));
    out->assign(idx.begin(), idx.end());
    out->insert(out->end(), w.begin(), w.end());
    return Status::Ok();
  }
#endif
  static ref::Vec Ref(const Inputs& in) {
    return ref::Route(in.logits, in.n, in.e, in.bias, in.k, in.groups, in.topk_group, true, 2.5);
  }
  static std::string Note(const Inputs&, const std::vector<float>&) { return "ids and weights"; }
  static Cost CostOf(const std::map<std::string, int64_t>& d) {
    const double n = d.at("N"), e = d.at("E");
    return {n * e * 8, 4 * n * e};
  }
};

// Routed experts (runtime/model.cc MlpLayer without the shared expert), fp32 weights: idx/w come
// from random logits through Route; x is wide enough that both SwiGLU clamps trigger; when T > 1
// the last slot of the last token is -1, a padding entry that must contribute nothing.
struct MoeExpertsOp : NoNote {
  struct Inputs {
    std::vector<float> x, w, gate_up, down;
    std::vector<int32_t> idx;
    int64_t t, k;
    ExpertDims d;
  };
  static Inputs Make(const std::map<std::string, int64_t>& dm, uint64_t seed) {
    Rng r(seed);
    const int64_t t = dm.at("T"), e = dm.at("E"), k = dm.at("K"), d = dm.at("D"), i = dm.at("I");
    Inputs in{r.Normal(t * d, 4.0f), {}, r.Normal(e * 2 * i * d, 1.0f / std::sqrt(float(d))),
              r.Normal(e * d * i, 1.0f / std::sqrt(float(i))), {}, t, k, {e, d, i}};
    const std::vector<float> logits = r.Normal(t * e, 2.0f);
    in.idx.resize(t * k);
    in.w.resize(t * k);
    Route(logits.data(), t, {}, {e, k, 1, 1, true, 2.5f}, in.idx.data(), in.w.data());
    if (t > 1) in.idx[t * k - 1] = -1;
    return in;
  }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    out->assign(in.t * in.d.hidden, kNaN);
    MoeExperts(in.x.data(), in.t, in.idx.data(), in.w.data(), in.k, in.gate_up.data(), in.down.data(), in.d, 10.0f,
               out->data());
  }
#ifdef GYRE_CUDA
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    out->assign(in.t * in.d.hidden, kNaN);
    return cuda::MoeExpertsOnDevice(in.x.data(), in.t, in.idx.data(), in.w.data(), in.k, in.gate_up.data(),
                                    in.down.data(), in.d, /*bf16_weights=*/false, 10.0f, out->data());
  }
#endif
  static ref::Vec Ref(const Inputs& in) {
    return ref::MoeExperts(in.x, in.t, in.idx, in.w, in.k, in.gate_up, in.down, in.d.num_experts, in.d.hidden,
                           in.d.inter, 10.0);
  }
  static Cost CostOf(const std::map<std::string, int64_t>& d) {
    const double t = d.at("T"), e = d.at("E"), k = d.at("K"), dd = d.at("D"), i = d.at("I");
    return {6 * t * k * dd * i, 4 * (2 * t * dd + 2 * t * k + e * 3 * dd * i)};
  }
};

// Logit processing (ops/penalties.h): R rows of V logits, each with its own penalties, biases
// (one id repeated), stop ids masked on odd rows (min_tokens not reached) and random counts.
// Masked stops (−inf) are written as kMasked on every side, so Compare sees a finite value that
// no unmasked logit reaches (|logit| < 500 here: |bias| <= 200, repetition >= 0.5).
struct PenaltiesOp : NoNote {
  static constexpr float kMasked = -1000.0f;
  static void Unmask(std::span<float> v) {
    for (float& x : v)
      if (std::isinf(x) && x < 0) x = kMasked;
  }
  struct Inputs {
    std::vector<float> logits;
    int64_t rows, vocab;
    std::vector<SamplingParams> params;
    std::vector<std::vector<LogitBias>> bias;
    std::vector<std::vector<int32_t>> stops;
    std::vector<TokenCounts> counts;
  };
  static Inputs Make(const std::map<std::string, int64_t>& dm, uint64_t seed) {
    Rng r(seed);
    const int64_t rows = dm.at("R"), v = dm.at("V");
    Inputs in{r.Normal(rows * v, 3.0f), rows, v, {}, {}, {}, {}};
    for (int64_t i = 0; i < rows; ++i) {
      const std::vector<float> u = r.Uniform(4, -1.0f, 1.0f);
      SamplingParams p;
      p.presence_penalty = 2.0f * u[0];
      p.frequency_penalty = 2.0f * u[1];
      p.repetition_penalty = 1.0f + 0.5f * u[2];
      p.min_tokens = i % 2 ? 1 : 0;  // num_generated is 0: odd rows mask their stops
      in.params.push_back(p);
      std::vector<LogitBias> b;
      for (int k = 0; k < 4; ++k) b.push_back({static_cast<int32_t>(r.g() % v), 100.0f * u[3] / (k + 1)});
      b.push_back(b.front());
      in.bias.push_back(b);
      in.stops.push_back({static_cast<int32_t>(r.g() % v)});
      TokenCounts c;
      c.Reset(v);
      for (int64_t t = 0; t < v; ++t) {
        if (r.g() % 3 == 0) c.output[t] = static_cast<int32_t>(1 + r.g() % 5);
        if (r.g() % 4 == 0) c.prompt[t] = 1;
      }
      in.counts.push_back(std::move(c));
    }
    return in;
  }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    *out = in.logits;
    for (int64_t i = 0; i < in.rows; ++i)
      ApplyPenalties(std::span<float>(out->data() + i * in.vocab, in.vocab), in.params[i], in.bias[i], in.stops[i], 0,
                     &in.counts[i]);
    Unmask(*out);
  }
  // Row i's parameters as the reference takes them (num_generated is 0).
  static ref::PenaltyRow RowOf(const Inputs& in, int64_t i) {
    ref::PenaltyRow row;
    for (const LogitBias& b : in.bias[i]) row.bias.emplace_back(b.id, b.bias);
    row.stop_ids = in.stops[i];
    row.mask_stops = 0 < in.params[i].min_tokens;
    row.output_counts = in.counts[i].output;
    row.in_prompt = in.counts[i].prompt;
    row.presence = in.params[i].presence_penalty;
    row.frequency = in.params[i].frequency_penalty;
    row.repetition = in.params[i].repetition_penalty;
    return row;
  }
  static ref::Vec Ref(const Inputs& in) {
    ref::Vec y;
    for (int64_t i = 0; i < in.rows; ++i) {
      const ref::PenaltyRow row = RowOf(in, i);
      const std::vector<float> x(in.logits.begin() + i * in.vocab, in.logits.begin() + (i + 1) * in.vocab);
      const ref::Vec yi = ref::Penalties(x, row);
      y.insert(y.end(), yi.begin(), yi.end());
    }
    for (double& v : y)
      if (std::isinf(v) && v < 0) v = kMasked;
    return y;
  }
#ifdef GYRE_CUDA
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    *out = in.logits;
    cuda::PenaltyRowsHost h;
    std::vector<int32_t> counts;
    std::vector<uint8_t> prompt;
    for (int64_t i = 0; i < in.rows; ++i) {
      const ref::PenaltyRow r = RowOf(in, i);
      cuda::PenaltyRowsHost::Row row;
      for (const auto& [id, b] : r.bias) row.bias.emplace_back(id, static_cast<float>(b));
      row.stop_ids = r.stop_ids;
      row.mask_stops = r.mask_stops;
      row.presence = in.params[i].presence_penalty;
      row.frequency = in.params[i].frequency_penalty;
      row.repetition = in.params[i].repetition_penalty;
      h.rows.push_back(std::move(row));
      counts.insert(counts.end(), in.counts[i].output.begin(), in.counts[i].output.end());
      prompt.insert(prompt.end(), in.counts[i].prompt.begin(), in.counts[i].prompt.end());
    }
    h.output_counts = counts.data();
    h.in_prompt = prompt.data();
    GYRE_RETURN_IF_ERROR(cuda::PenaltiesOnDevice(out->data(), in.rows, in.vocab, h));
    Unmask(*out);
    return Status::Ok();
  }
#endif
  static Cost CostOf(const std::map<std::string, int64_t>& d) {
    const double r = d.at("R"), v = d.at("V");
    return {4 * r * v, r * v * (4 + 4 + 1 + 4)};
  }
};

struct VisionRopeOp : NoNote {
  struct Inputs {
    std::vector<float> x;
    std::vector<std::pair<int32_t, int32_t>> pos;
    int64_t n, heads, hd;
  };
  static Inputs Make(const std::map<std::string, int64_t>& d, uint64_t seed) {
    Rng r(seed);
    const int64_t n = d.at("N"), heads = d.at("H"), hd = d.at("HD");
    Inputs in{r.Normal(n * heads * hd), {}, n, heads, hd};
    std::uniform_int_distribution<int32_t> coord(0, 63);
    for (int64_t i = 0; i < n; ++i) in.pos.emplace_back(coord(r.g), coord(r.g));
    return in;
  }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    std::vector<float> cos, sin;
    VisionRopeTables(in.pos, in.hd, 10000.0f, &cos, &sin);
    *out = in.x;
    ApplyVisionRope(out->data(), in.heads * in.hd, in.n, in.heads, in.hd, cos, sin);
  }
  static ref::Vec Ref(const Inputs& in) { return ref::VisionRope(in.x, in.n, in.heads, in.hd, in.pos, 10000.0); }
#ifdef GYRE_CUDA
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    std::vector<float> cos, sin;
    VisionRopeTables(in.pos, in.hd, 10000.0f, &cos, &sin);
    out->assign(in.n * in.heads * in.hd, kNaN);
    return cuda::VisionRopeOnDevice(in.x.data(), in.n, in.heads, in.hd, cos.data(), sin.data(), out->data());
  }
#endif
  static Cost CostOf(const std::map<std::string, int64_t>& d) {
    const double e = double(d.at("N")) * d.at("H") * d.at("HD");
    return {3 * e, 4 * (2 * e + 2.0 * d.at("N") * d.at("HD"))};
  }
};

struct VisionAttentionOp : NoNote {
  struct Inputs {
    std::vector<float> q, k, v;
    std::vector<int64_t> segments;
    int64_t n, heads, hd;
  };
  static Inputs Make(const std::map<std::string, int64_t>& d, uint64_t seed) {
    Rng r(seed);
    const int64_t n = d.at("N"), heads = d.at("H"), hd = d.at("HD"), segs = d.at("SEGS");
    Inputs in{r.Normal(n * heads * hd), r.Normal(n * heads * hd), r.Normal(n * heads * hd), {}, n, heads, hd};
    // Unequal segment lengths (the last takes the rest), each >= 1.
    int64_t left = n;
    for (int64_t s = 0; s + 1 < segs; ++s) {
      std::uniform_int_distribution<int64_t> len(1, std::max<int64_t>(1, left - (segs - s - 1)));
      const int64_t l = std::min(len(r.g), left - (segs - s - 1));
      in.segments.push_back(l);
      left -= l;
    }
    in.segments.push_back(left);
    return in;
  }
  static void Cpu(Inputs& in, std::vector<float>* out) {
    out->assign(in.n * in.heads * in.hd, kNaN);
    VisionAttention(in.q.data(), in.k.data(), in.v.data(), in.heads * in.hd, in.segments, in.heads, in.hd,
                    out->data());
  }
  static ref::Vec Ref(const Inputs& in) {
    return ref::VisionAttention(in.q, in.k, in.v, in.n, in.heads, in.hd, in.segments);
  }
#ifdef GYRE_CUDA
  static Status CudaRun(Inputs& in, std::vector<float>* out) {
    out->assign(in.n * in.heads * in.hd, kNaN);
    return cuda::VisionAttentionOnDevice(in.q.data(), in.k.data(), in.v.data(), in.n, in.segments, in.heads, in.hd,
                                         out->data());
  }
#endif
  static Cost CostOf(const std::map<std::string, int64_t>& d) {
    // Upper bound: one segment of N rows.
    const double n = d.at("N"), e = double(d.at("H")) * d.at("HD");
    return {4 * n * n * e, 4 * 4 * n * e};
  }
};

// ---- specs ---------------------------------------------------------------------------------------

std::vector<OpSpec> BuildRegistry() {
  std::vector<OpSpec> r;
  // Shapes with a second argument carry a calibrated bound (OpShape::tolerance): 4x the worst
  // CPU error over 400 seeds; a bf16-rounded reduction must exceed it (verify_ops_test.cc).
  r.push_back(MakeSpec<LinearOp>("linear", "fp32-reassociation", 1e-5,
                                 {S({{"N", 1}, {"IN", 64}, {"OUT", 96}}, 4.4e-7),
                                  S({{"N", 37}, {"IN", 129}, {"OUT", 65}}, 8.0e-7),
                                  S({{"N", 128}, {"IN", 256}, {"OUT", 512}}, 1.1e-6)}));
  r.push_back(MakeSpec<RmsNormOp>("rmsnorm", "fp32-reassociation", 1e-5,
                                  {S({{"N", 1}, {"D", 64}}), S({{"N", 3}, {"D", 37}}), S({{"N", 33}, {"D", 4096}})}));
  r.push_back(MakeSpec<SwiGluOp>("swiglu", "fp32-reassociation", 1e-5,
                                 {S({{"N", 1}, {"W", 32}}), S({{"N", 3}, {"W", 37}}), S({{"N", 17}, {"W", 2048}})}));
  r.push_back(MakeSpec<ConvOp>("kda.conv", "fp32-reassociation", 1e-5,
                               {S({{"T", 1}, {"C", 48}}), S({{"T", 2}, {"C", 48}}), S({{"T", 70}, {"C", 384}})}));
  r.push_back(MakeSpec<GateOp>("kda.gate", "fp32-reassociation", 1e-5,
                               {S({{"T", 5}, {"H", 2}, {"K", 16}, {"SOFTPLUS", 0}}),
                                S({{"T", 5}, {"H", 2}, {"K", 16}, {"SOFTPLUS", 1}}),
                                S({{"T", 3}, {"H", 3}, {"K", 7}, {"SOFTPLUS", 1}})}));
  const std::vector<OpShape> kda_shapes = {S({{"T", 1}, {"H", 2}, {"K", 16}}), S({{"T", 63}, {"H", 2}, {"K", 16}}),
                                           S({{"T", 65}, {"H", 2}, {"K", 16}}), S({{"T", 200}, {"H", 3}, {"K", 32}})};
  r.push_back(MakeSpec<KdaOp<true>>("kda.chunk", "fp32-iterative", 1e-4,
                                    {S({{"T", 1}, {"H", 2}, {"K", 16}}, 5.4e-7), S({{"T", 63}, {"H", 2}, {"K", 16}}, 1.8e-5),
                                     S({{"T", 65}, {"H", 2}, {"K", 16}}, 1.24e-5),
                                     S({{"T", 200}, {"H", 3}, {"K", 32}}, 2.6e-6)}));
  r.push_back(MakeSpec<KdaOp<false>>("kda.recurrent", "fp32-iterative", 1e-4, kda_shapes));
  {
    // ReplaySSM's fold (the CPU engine's ops::KdaFold; the CUDA model's keep + fold launches).
    OpSpec fold = MakeSpec<ReplayFoldOp>("kda.replay_fold", "exact (fp32 bits of kda.recurrent's state)", 0,
                                         {S({{"T", 0}, {"H", 2}, {"K", 16}}), S({{"T", 1}, {"H", 2}, {"K", 16}}),
                                          S({{"T", 4}, {"H", 3}, {"K", 32}}), S({{"T", 5}, {"H", 3}, {"K", 20}}),
                                          S({{"T", 4}, {"H", 2}, {"K", 128}})});
    // On the GPU: bit for bit against the device's own recurrence (inside CudaRun), and within
    // kda.recurrent's class against the CPU reference (expf and fma differ from the CPU's).
    fold.cuda_tolerance = 1e-5;
    fold.cuda_tolerance_class = "fp32-iterative (bits vs the device recurrence checked in the run)";
    r.push_back(std::move(fold));
  }
  r.push_back(MakeSpec<GatedNormOp>("kda.gated_norm", "fp32-reassociation", 1e-5,
                                    {S({{"T", 3}, {"H", 4}, {"K", 16}}), S({{"T", 3}, {"H", 3}, {"K", 17}}),
                                     S({{"T", 64}, {"H", 8}, {"K", 128}})}));
  r.push_back(MakeSpec<HcPreOp>("hc.pre", "fp32-iterative", 1e-5,
                                {S({{"T", 1}, {"D", 32}}), S({{"T", 2}, {"D", 37}}), S({{"T", 9}, {"D", 256}})}));
  r.push_back(MakeSpec<HcPostOp>("hc.post", "fp32-reassociation", 1e-5,
                                 {S({{"T", 1}, {"D", 32}}), S({{"T", 2}, {"D", 37}}), S({{"T", 9}, {"D", 256}})}));
  r.push_back(MakeSpec<MlaOp>("mla.attention", "fp32-reassociation", 1e-5,
                              {S({{"S", 1}, {"T", 1}, {"H", 2}, {"ROPE", 0}, {"SPARSE", 0}}, 7.2e-7),
                               S({{"S", 5}, {"T", 40}, {"H", 3}, {"ROPE", 8}, {"SPARSE", 0}}, 1.6e-6),
                               S({{"S", 7}, {"T", 90}, {"H", 2}, {"ROPE", 0}, {"SPARSE", 1}}, 1.66e-6),
                               // The MTP layer's keys: cache rows one position later (PagedBatch::pos_shift).
                               S({{"S", 3}, {"T", 23}, {"H", 3}, {"ROPE", 8}, {"SPARSE", 0}, {"SHIFT", 1}}, 1.6e-6),
                               S({{"S", 7}, {"T", 90}, {"H", 2}, {"ROPE", 0}, {"SPARSE", 1}, {"SHIFT", 3}}, 1.66e-6)}));
  r.push_back(MakeSpec<PoolKeyOp>("dsa.pool_key", "fp32-reassociation", 1e-5,
                                  {S({{"M", 4}, {"D", 16}}), S({{"M", 16}, {"D", 128}})}));
  // TIES=1 shapes construct exact ties, so the discrete tie rules are checked on every run.
  r.push_back(MakeSpec<IndexerOp>("dsa.select", "exact", 0.0,
                                  {S({{"S", 1}, {"T", 1}, {"M", 4}, {"TOPK", 8}, {"TIES", 0}}),
                                   S({{"S", 30}, {"T", 30}, {"M", 4}, {"TOPK", 8}, {"TIES", 0}}),
                                   S({{"S", 20}, {"T", 200}, {"M", 4}, {"TOPK", 16}, {"TIES", 1}}),
                                   S({{"S", 10}, {"T", 300}, {"M", 16}, {"TOPK", 64}, {"TIES", 0}, {"IH", 4}, {"ID", 16}})}));
  r.push_back(MakeSpec<RouteOp>("moe.route", "exact ids, fp32 weights", 1e-6,
                                {S({{"N", 1}, {"E", 16}, {"K", 4}, {"G", 1}, {"HOT", 0}, {"TIES", 0}}),
                                 S({{"N", 64}, {"E", 288}, {"K", 8}, {"G", 1}, {"HOT", 0}, {"TIES", 0}}),
                                 S({{"N", 32}, {"E", 64}, {"K", 6}, {"G", 8}, {"HOT", 0}, {"TIES", 0}}),
                                 S({{"N", 32}, {"E", 64}, {"K", 6}, {"G", 8}, {"HOT", 0}, {"TIES", 1}}),
                                 S({{"N", 32}, {"E", 32}, {"K", 8}, {"G", 1}, {"HOT", 0}, {"TIES", 1}}),
                                 S({{"N", 32}, {"E", 16}, {"K", 4}, {"G", 1}, {"HOT", 1}, {"TIES", 0}})}));
  r.push_back(MakeSpec<MoeExpertsOp>("moe.experts", "fp32-reassociation", 1e-5,
                                     {S({{"T", 1}, {"E", 8}, {"K", 2}, {"D", 64}, {"I", 32}}),
                                      S({{"T", 5}, {"E", 8}, {"K", 2}, {"D", 64}, {"I", 32}}),
                                      S({{"T", 33}, {"E", 16}, {"K", 4}, {"D", 128}, {"I", 64}}),
                                      S({{"T", 70}, {"E", 8}, {"K", 2}, {"D", 70}, {"I", 40}})}));
  r.push_back(MakeSpec<PenaltiesOp>("sample.penalties", "fp32-reassociation", 1e-6,
                                    {S({{"R", 1}, {"V", 1}}), S({{"R", 3}, {"V", 97}}), S({{"R", 8}, {"V", 4099}})}));
  // Vision tower (ops/vision.h; on cuda ops/cuda/vision_cuda.h). The odd shapes (HD 18, 40 rows in
  // 3 segments) are not the tower's; the last ones are GLM-5.3's head size.
  for (OpSpec vs : {MakeSpec<VisionRopeOp>("vision.rope", "fp32-reassociation", 1e-5,
                                           {S({{"N", 1}, {"H", 1}, {"HD", 8}}), S({{"N", 37}, {"H", 3}, {"HD", 16}}),
                                            S({{"N", 21}, {"H", 5}, {"HD", 20}}),
                                            S({{"N", 128}, {"H", 16}, {"HD", 64}})}),
                    MakeSpec<VisionAttentionOp>("vision.attention", "fp32-reassociation", 1e-5,
                                                {S({{"N", 1}, {"SEGS", 1}, {"H", 1}, {"HD", 8}}),
                                                 S({{"N", 40}, {"SEGS", 3}, {"H", 2}, {"HD", 16}}),
                                                 S({{"N", 33}, {"SEGS", 2}, {"H", 3}, {"HD", 18}}),
                                                 S({{"N", 200}, {"SEGS", 2}, {"H", 4}, {"HD", 64}})})}) {
    r.push_back(std::move(vs));
  }
  // W8A8 quantizers and GEMMs (ops/registry_quant.cc).
  for (OpSpec& q : QuantOpSpecs()) r.push_back(std::move(q));
  return r;
}

}  // namespace

std::string ShapeLabel(const std::map<std::string, int64_t>& dims) {
  std::ostringstream ss;
  bool first = true;
  for (const auto& [k, v] : dims) {
    ss << (first ? "" : " ") << k << "=" << v;
    first = false;
  }
  return ss.str();
}

const std::vector<OpSpec>& Registry() {
  static const std::vector<OpSpec>* r = new std::vector<OpSpec>(BuildRegistry());
  return *r;
}

const OpSpec* FindOp(const std::string& name) {
  for (const auto& op : Registry())
    if (op.name == name) return &op;
  return nullptr;
}

Result<OpShape> ParseShape(const OpSpec& op, const std::string& text) {
  if (op.shapes.empty()) return Status::InvalidArgument("op " + op.name + " has no shapes");
  std::map<std::string, int64_t> dims = op.shapes.back().dims;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) return Status::InvalidArgument("shape entry '" + item + "' is not NAME=VALUE");
    const std::string k = item.substr(0, eq);
    if (!dims.count(k)) {
      std::string names;
      for (const auto& [n, v] : dims) names += (names.empty() ? "" : ", ") + n;
      return Status::InvalidArgument("op " + op.name + " has no dimension '" + k + "' (has: " + names + ")");
    }
    try {
      dims[k] = std::stoll(item.substr(eq + 1));
    } catch (...) {
      return Status::InvalidArgument("shape entry '" + item + "' has a non-integer value");
    }
    if (dims[k] < 1) return Status::InvalidArgument("shape entry '" + item + "' must be >= 1");
  }
  return OpShape{ShapeLabel(dims), dims};
}

}  // namespace gyre::ops
