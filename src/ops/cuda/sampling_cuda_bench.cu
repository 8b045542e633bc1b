// gyre_sampling_cuda_bench: self-check and microbenchmark of SampleRows (sampling_cuda.h).
//
//   gyre_sampling_cuda_bench [--out DIR] [--commit HASH] [--check-only] [--quick] [--sanitize]
//
// Sections: helpers (rng, uploads, timing, JSON); the CPU reference (the kept set and
// probabilities ops::Sampler::Sample draws from, in double); statistics (chi-square p-value);
// checks: greedy vs ops::Argmax, distributions (chi-square vs the reference, ids outside the kept
// set), determinism (reruns, cluster sizes, row positions, graph replay with new parameters);
// bench (V = 154880, rows 1/16/64/256, µs per call on a stream and in a CUDA graph). Writes
// DIR/sampling.json after every section and exits 1 if any check fails. --sanitize runs small
// shapes only (for compute-sanitizer). To add a distribution case, append to DistributionCases().
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ops/cuda/bench_common.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/elementwise_cuda.h"
#include "ops/cuda/sampling_cuda.h"
#include "ops/sampling.h"

namespace gyre::cuda {
namespace {

using namespace bench;  // CopyGbps, Median, Json, Array

constexpr int64_t kModelVocab = 154880;

// ---- helpers -------------------------------------------------------------------------------------

struct HostRng {
  uint64_t s;
  uint64_t Next() {  // splitmix64
    uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double Uniform() { return (Next() >> 11) * 0x1p-53; }
  double Normal() {
    const double u = std::max(Uniform(), 1e-300), v = Uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
};

template <typename T>
Result<DeviceBuffer> Upload(const std::vector<T>& v) {
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(std::max<size_t>(v.size() * sizeof(T), 16)));
  if (!v.empty()) GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return Result<DeviceBuffer>(std::move(b));
}

template <typename T>
Result<std::vector<T>> Download(const DeviceBuffer& b, int64_t n) {
  std::vector<T> v(n);
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

__global__ void BroadcastRow(const float* src, int64_t v, int64_t rows, float* dst) {
  const int64_t n = rows * v;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i % v];
}

// N(0, sigma) logits from a hash of (seed, index): Box-Muller on two 24-bit uniforms.
__global__ void FillNormal(float* p, int64_t n, uint64_t seed, float sigma) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ULL + uint64_t(i) * 0xD1B54A32D192ED03ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    const float u = ((z >> 40) + 0.5f) * 0x1p-24f, w = (((z >> 8) & 0xFFFFFF) + 0.5f) * 0x1p-24f;
    p[i] = sigma * sqrtf(-2.0f * logf(u)) * cospif(2.0f * w);
  }
}

Status Launched() {
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::Ok();
}

std::vector<SampleParamsDev> SameParams(int64_t rows, const ops::SamplingParams& p, uint64_t offset0) {
  std::vector<SampleParamsDev> v(rows);
  for (int64_t r = 0; r < rows; ++r)
    v[r] = {p.temperature, static_cast<int32_t>(std::min<int64_t>(p.top_k, INT32_MAX)), p.top_p, p.min_p, p.seed,
            offset0 + uint64_t(r)};
  return v;
}

// Median over `reps` of the mean time of `inner` back-to-back calls, µs per call.
template <typename F>
Result<double> TimeStreamUs(F&& fn, int reps, int inner, cudaStream_t s) {
  GYRE_ASSIGN_OR_RETURN(Event e0, Event::Create());
  GYRE_ASSIGN_OR_RETURN(Event e1, Event::Create());
  for (int i = 0; i < 3; ++i) GYRE_RETURN_IF_ERROR(fn());
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e0.get(), s));
    for (int i = 0; i < inner; ++i) GYRE_RETURN_IF_ERROR(fn());
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e1.get(), s));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e1.get()));
    float ms = 0;
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, e0.get(), e1.get()));
    t.push_back(1000.0 * ms / inner);
  }
  return Median(t);
}

// Owns a captured and instantiated graph of `inner` calls of fn on s.
class Graph {
 public:
  template <typename F>
  static Result<Graph> Capture(F&& fn, int inner, cudaStream_t s) {
    Graph g;
    GYRE_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    auto record = [&]() -> Status {
      for (int i = 0; i < inner; ++i) GYRE_RETURN_IF_ERROR(fn());
      return Status::Ok();
    };
    const Status st = record();
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    GYRE_RETURN_IF_ERROR(st);
    GYRE_CUDA_RETURN_IF_ERROR(end);
    const cudaError_t inst = cudaGraphInstantiate(&g.exec_, graph, 0);
    (void)cudaGraphDestroy(graph);
    GYRE_CUDA_RETURN_IF_ERROR(inst);
    return Result<Graph>(std::move(g));
  }
  Graph() = default;
  Graph(Graph&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  Graph& operator=(Graph&&) = delete;
  Graph(const Graph&) = delete;
  ~Graph() {
    if (exec_) (void)cudaGraphExecDestroy(exec_);
  }
  Status Launch(cudaStream_t s) const {
    GYRE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_, s));
    return Status::Ok();
  }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

template <typename F>
Result<double> TimeGraphUs(F&& fn, int reps, int inner, cudaStream_t s) {
  GYRE_ASSIGN_OR_RETURN(Graph g, Graph::Capture(fn, inner, s));
  GYRE_ASSIGN_OR_RETURN(double us, TimeStreamUs([&] { return g.Launch(s); }, reps, 1, s));
  return us / inner;
}


// ---- the CPU reference ---------------------------------------------------------------------------

// What ops::Sampler::Sample draws from (ops::SamplingSupport: kept ids, probabilities over the
// kept set, distance of the cuts to their thresholds).
using RefDist = ops::SampleSupport;
RefDist Reference(std::span<const float> logits, const ops::SamplingParams& p) { return ops::SamplingSupport(logits, p); }

// ---- statistics ----------------------------------------------------------------------------------

// Regularized upper incomplete gamma Q(a, x): series below a + 1, Lentz continued fraction above.
double GammaQ(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_pre = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1) {
    double ap = a, del = 1.0 / a, sum = del;
    for (int i = 0; i < 100000 && std::fabs(del) > std::fabs(sum) * 1e-16; ++i) {
      ap += 1;
      del *= x / ap;
      sum += del;
    }
    return std::max(0.0, 1.0 - sum * std::exp(log_pre));
  }
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, dd = 1 / b, h = dd;
  for (int i = 1; i < 100000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    dd = an * dd + b;
    if (std::fabs(dd) < tiny) dd = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    dd = 1 / dd;
    const double del = dd * c;
    h *= del;
    if (std::fabs(del - 1) < 1e-16) break;
  }
  return std::exp(log_pre) * h;
}

struct Fit {
  double chi2 = 0, p = 1;
  int df = 0;
  int64_t outside = 0;  // samples not in the reference's kept set (or not a valid id)
};

// Pearson chi-square of the sample counts against the reference, adjacent kept ids (in sorted
// order) pooled until each bin expects >= 5 samples.
Fit ChiSquare(const RefDist& ref, const std::vector<int32_t>& samples, int64_t vocab) {
  Fit f;
  std::vector<int64_t> count(vocab, 0);
  for (int32_t id : samples) {
    if (id < 0 || id >= vocab) ++f.outside;
    else ++count[id];
  }
  std::vector<char> in(vocab, 0);
  for (int32_t id : ref.ids) in[id] = 1;
  for (int64_t i = 0; i < vocab; ++i)
    if (!in[i]) f.outside += count[i];
  const double n = static_cast<double>(samples.size());
  std::vector<std::pair<double, double>> bins;  // (expected, observed)
  double e = 0, o = 0;
  for (size_t i = 0; i < ref.ids.size(); ++i) {
    e += n * ref.prob[i];
    o += static_cast<double>(count[ref.ids[i]]);
    if (e >= 5.0) {
      bins.push_back({e, o});
      e = o = 0;
    }
  }
  if (bins.empty()) bins.push_back({0, 0});
  bins.back().first += e;
  bins.back().second += o;
  for (const auto& [be, bo] : bins)
    if (be > 0) f.chi2 += (bo - be) * (bo - be) / be;
  f.df = static_cast<int>(bins.size()) - 1;
  f.p = f.df > 0 ? GammaQ(0.5 * f.df, 0.5 * f.chi2) : 1.0;
  return f;
}

// ---- checks --------------------------------------------------------------------------------------

struct CheckRow {
  std::string name;
  bool pass = false;
  std::string detail;
  std::string ToJson() const {
    Json j;
    j.Str("name", name).Bool("pass", pass).Str("detail", detail);
    return j.Obj();
  }
};

struct DistRow {
  std::string name;
  int64_t vocab = 0, draws = 0, kept = 0;
  ops::SamplingParams params;
  int cluster = 0;
  Fit fit;
  double margin = INFINITY;
  int64_t cpu_outside = 0;  // ops::Sampler draws outside the reference set (a reference bug)
  // Speculative sampling (SampleParamsDev::draft): the draft id (-1: none), its probability in the
  // reference and the fraction of draws that returned it (the target distribution is unchanged).
  int32_t draft = -1;
  double draft_p = 0, draft_frac = 0;
  bool pass() const { return fit.outside == 0 && cpu_outside == 0 && fit.p >= 1e-4; }
  std::string ToJson() const {
    Json j;
    j.Str("name", name).Num("vocab", double(vocab)).Num("draws", double(draws)).Num("temperature", params.temperature);
    j.Num("top_k", double(params.top_k)).Num("top_p", params.top_p).Num("min_p", params.min_p);
    j.Num("cluster", cluster).Num("kept", double(kept)).Num("chi2", fit.chi2).Num("df", fit.df);
    j.Num("p_value", fit.p).Num("outside_kept_set", double(fit.outside)).Num("cpu_sampler_outside", double(cpu_outside));
    j.Num("cut_margin", margin).Num("draft", draft).Num("draft_p", draft_p).Num("draft_frac", draft_frac);
    j.Bool("pass", pass());
    return j.Obj();
  }
};

// Row kinds for the greedy check: ties, ±0, ±inf, NaN; the expected id is ops::Argmax.
std::vector<float> GreedyRow(int64_t v, int kind, HostRng& rng) {
  std::vector<float> x(v);
  for (auto& e : x) e = static_cast<float>(rng.Normal() * 3);
  switch (kind) {
    case 1:  // integers: many ties, ties at the max
      for (auto& e : x) e = std::round(e);
      break;
    case 2:  // all equal → 0
      std::fill(x.begin(), x.end(), 0.5f);
      break;
    case 3:  // NaN and −inf sprinkled (not at 0)
      for (int64_t i = 1; i < v; i += 7) x[i] = (i % 2) ? NAN : -INFINITY;
      break;
    case 4:  // NaN at 0 → 0
      x[0] = NAN;
      break;
    case 5:  // max is ±0, −0 first: −0 and +0 tie, the lower id wins
      for (auto& e : x) e = -1.0f - std::fabs(e);
      if (v > 2) x[v / 2] = -0.0f, x[v - 1] = 0.0f;
      break;
    case 6:  // two +inf
      if (v > 3) x[v - 1] = INFINITY, x[v / 3] = INFINITY;
      break;
    case 7:  // all −inf → 0
      std::fill(x.begin(), x.end(), -INFINITY);
      break;
    default:
      break;
  }
  return x;
}

Status CheckGreedy(int64_t v, int64_t rows, int cluster, std::vector<CheckRow>* out, cudaStream_t s) {
  HostRng rng{uint64_t(v * 131 + rows + cluster)};
  std::vector<float> logits;
  std::vector<SampleParamsDev> params(rows);
  std::vector<int32_t> want(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> x = GreedyRow(v, static_cast<int>(r % 8), rng);
    logits.insert(logits.end(), x.begin(), x.end());
    want[r] = ops::Argmax(x);
    params[r].temperature = r % 3 == 0 ? 0.0f : (r % 3 == 1 ? -1.0f : NAN);
    params[r].top_k = 3;
    params[r].seed = uint64_t(r);
  }
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dl, Upload(logits));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dp, Upload(params));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer di, DeviceBuffer::Create(rows * 4));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(di.get(), 0xFF, rows * 4, s));
  GYRE_RETURN_IF_ERROR(SampleRows(dl.get<float>(), rows, v, dp.get<SampleParamsDev>(), di.get<int32_t>(), s, {cluster}));
  GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  GYRE_ASSIGN_OR_RETURN(std::vector<int32_t> got, Download<int32_t>(di, rows));
  int64_t bad = 0;
  std::string first;
  for (int64_t r = 0; r < rows; ++r)
    if (got[r] != want[r]) {
      if (!bad) first = "row " + std::to_string(r) + " (kind " + std::to_string(r % 8) + "): got " +
                        std::to_string(got[r]) + ", want " + std::to_string(want[r]);
      ++bad;
    }
  out->push_back({"greedy V=" + std::to_string(v) + " rows=" + std::to_string(rows) +
                      " cluster=" + std::to_string(cluster ? cluster : SampleClusterSize(rows, v)),
                  bad == 0, std::to_string(bad) + " mismatches vs ops::Argmax " + first});
  return Status::Ok();
}

struct DistCase {
  std::string logits;  // "halves": N(0, 1.5) rounded to 0.5 (ties); "peaked": N(0, 1) + 24 tokens near 7; "flat": all 0
  int64_t vocab;
  ops::SamplingParams params;
  int cluster;
  // Speculative sampling: -1 none; r >= 0 the draft is the r-th most likely kept id (clamped to
  // the last); kDraftOutside an id outside the kept set (none when every id is kept).
  int draft_rank = -1;
};
constexpr int kDraftOutside = 1 << 20;

std::vector<DistCase> DistributionCases(bool sanitize) {
  std::vector<DistCase> cases;
  int idx = 0;
  const int clusters[4] = {0, 8, 2, 4};
  for (int64_t v : {16, 50, 1000})
    for (float t : {0.7f, 1.0f, 1.5f})
      for (int64_t k : {0, 1, 5})
        for (float tp : {1.0f, 0.9f, 0.5f})
          for (float mp : {0.0f, 0.1f}) {
            ops::SamplingParams p{t, k, tp, mp, uint64_t(1000 + idx)};
            cases.push_back({"halves", v, p, clusters[idx % 4]});
            ++idx;
          }
  // Speculative sampling against a draft (the distribution must stay the reference's): the most
  // likely id, a middle one, the least likely kept one, one outside the kept set.
  {
    std::vector<DistCase> spec;
    const int picks[] = {4, 37, 95, 130, 160};
    for (int i = 0; i < 5; ++i)
      for (int rank : {0, 2, 1000, kDraftOutside}) {
        DistCase d = cases[picks[i]];
        d.draft_rank = rank;
        d.params.seed += 7 * static_cast<uint64_t>(rank % 97 + 1);
        spec.push_back(d);
      }
    if (sanitize) {
      cases.push_back(spec[1]);
      cases.push_back(spec[6]);
    } else {
      cases.insert(cases.end(), spec.begin(), spec.end());
    }
  }
  if (sanitize) {
    std::vector<DistCase> few = {cases[5], cases[60], cases[125], cases[cases.size() - 2], cases.back()};
    few.push_back({"flat", 4096, {1.0f, 3000, 0.45f, 0.0f, 7}, 8});
    return few;
  }
  // The model's vocabulary: several CTAs per row, partial ties at a top-k / top-p cut, pooled
  // tails. NOTE: 'flat' cuts avoid top_p·V integral (0.5·V), where the CPU's running double sum
  // and the GPU's exact one may differ by a token.
  cases.push_back({"peaked", kModelVocab, {1.0f, 0, 0.9f, 0.0f, 11}, 0});
  cases.push_back({"peaked", kModelVocab, {0.8f, 50, 0.95f, 0.0f, 12}, 8});
  cases.push_back({"peaked", kModelVocab, {1.0f, 0, 1.0f, 0.05f, 13}, 4});
  cases.push_back({"flat", kModelVocab, {1.0f, 0, 0.45f, 0.0f, 14}, 0});
  cases.push_back({"flat", kModelVocab, {0.7f, 1000, 1.0f, 0.0f, 15}, 8});
  return cases;
}

std::vector<float> CaseLogits(const DistCase& c, uint64_t seed) {
  HostRng rng{seed};
  std::vector<float> x(c.vocab, 0.0f);
  if (c.logits == "halves") {
    for (auto& e : x) e = static_cast<float>(std::round(rng.Normal() * 3.0) * 0.5);
  } else if (c.logits == "peaked") {
    for (auto& e : x) e = static_cast<float>(rng.Normal());
    for (int i = 0; i < 24; ++i) x[rng.Next() % c.vocab] = 7.0f + 0.25f * static_cast<float>(rng.Next() % 8);
  }
  return x;
}

Status CheckDistribution(const DistCase& c, int64_t draws, std::vector<DistRow>* out, cudaStream_t s) {
  const std::vector<float> x = CaseLogits(c, c.params.seed * 7919 + uint64_t(c.vocab));
  const RefDist ref = Reference(x, c.params);
  int32_t draft = -1;
  double draft_p = 0;
  if (c.draft_rank >= 0 && c.draft_rank < kDraftOutside && !ref.ids.empty()) {
    // ref.ids is in sorted order (logit descending): rank r is the r-th most likely.
    const size_t r = std::min<size_t>(static_cast<size_t>(c.draft_rank), ref.ids.size() - 1);
    draft = ref.ids[r];
    draft_p = ref.prob[r];
  } else if (c.draft_rank == kDraftOutside) {
    std::vector<char> kept(c.vocab, 0);
    for (int32_t id : ref.ids) kept[id] = 1;
    for (int64_t i = c.vocab - 1; i >= 0 && draft < 0; --i)
      if (!kept[i]) draft = static_cast<int32_t>(i);
  }
  // Draws go in batches of the same row, each with its own offset.
  const int64_t batch = std::min<int64_t>(draws, std::max<int64_t>(1, (int64_t(1) << 28) / c.vocab));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer row, Upload(x));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dl, DeviceBuffer::Create(batch * c.vocab * 4));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer di, DeviceBuffer::Create(batch * 4));
  BroadcastRow<<<1024, 256, 0, s>>>(row.get<float>(), c.vocab, batch, dl.get<float>());
  GYRE_RETURN_IF_ERROR(Launched());
  std::vector<int32_t> samples;
  for (int64_t done = 0; done < draws; done += batch) {
    const int64_t n = std::min(batch, draws - done);
    std::vector<SampleParamsDev> prm = SameParams(n, c.params, uint64_t(done));
    for (SampleParamsDev& q : prm) q.draft = draft;
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer dp, Upload(prm));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(di.get(), 0xFF, n * 4, s));
    GYRE_RETURN_IF_ERROR(
        SampleRows(dl.get<float>(), n, c.vocab, dp.get<SampleParamsDev>(), di.get<int32_t>(), s, {c.cluster}));
    GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    GYRE_ASSIGN_OR_RETURN(std::vector<int32_t> got, Download<int32_t>(di, n));
    samples.insert(samples.end(), got.begin(), got.end());
  }
  DistRow row_out;
  row_out.vocab = c.vocab;
  row_out.draws = draws;
  row_out.params = c.params;
  row_out.cluster = c.cluster ? c.cluster : SampleClusterSize(batch, c.vocab);
  row_out.kept = static_cast<int64_t>(ref.ids.size());
  row_out.margin = ref.margin;
  row_out.fit = ChiSquare(ref, samples, c.vocab);
  row_out.draft = draft;
  row_out.draft_p = draft_p;
  if (draft >= 0)
    row_out.draft_frac = static_cast<double>(std::count(samples.begin(), samples.end(), draft)) / double(samples.size());
  // The reference must be the set ops::Sampler really draws from.
  std::vector<char> in(c.vocab, 0);
  for (int32_t id : ref.ids) in[id] = 1;
  ops::Sampler cpu(c.params.seed);
  const int cpu_draws = c.vocab > 10000 ? 20 : 200;
  for (int i = 0; i < cpu_draws; ++i) row_out.cpu_outside += !in[cpu.Sample(x, c.params)];
  char name[160];
  std::snprintf(name, sizeof name, "%s V=%lld T=%g k=%lld p=%g min_p=%g%s", c.logits.c_str(),
                static_cast<long long>(c.vocab), c.params.temperature, static_cast<long long>(c.params.top_k),
                c.params.top_p, c.params.min_p,
                c.draft_rank < 0 ? "" : (" draft=" + std::to_string(draft)).c_str());
  row_out.name = name;
  out->push_back(row_out);
  return Status::Ok();
}

// Reruns, cluster sizes, row positions and a graph replayed with new parameters all give the
// same ids for the same (row, params).
Status CheckDeterminism(int64_t v, int64_t rows, std::vector<CheckRow>* out, cudaStream_t s) {
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dl, DeviceBuffer::Create(rows * v * 4));
  FillNormal<<<1024, 256, 0, s>>>(dl.get<float>(), rows * v, 99 + v, 2.0f);
  GYRE_RETURN_IF_ERROR(Launched());
  std::vector<SampleParamsDev> params(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const int kind = static_cast<int>(r % 4);
    params[r] = {kind == 3 ? 0.0f : 0.8f + 0.1f * kind, kind == 0 ? 50 : 0, kind == 2 ? 1.0f : 0.95f,
                 kind == 2 ? 0.02f : 0.0f, uint64_t(r * 977), uint64_t(r)};
  }
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dp, Upload(params));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer di, DeviceBuffer::Create(rows * 4));
  auto run = [&](int cluster, const DeviceBuffer& logits, const DeviceBuffer& prm) -> Result<std::vector<int32_t>> {
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(di.get(), 0xFF, rows * 4, s));
    GYRE_RETURN_IF_ERROR(
        SampleRows(logits.get<float>(), rows, v, prm.get<SampleParamsDev>(), di.get<int32_t>(), s, {cluster}));
    GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    return Download<int32_t>(di, rows);
  };
  const std::string shape = " V=" + std::to_string(v) + " rows=" + std::to_string(rows);
  GYRE_ASSIGN_OR_RETURN(std::vector<int32_t> a, run(0, dl, dp));
  GYRE_ASSIGN_OR_RETURN(std::vector<int32_t> b, run(0, dl, dp));
  out->push_back({"rerun" + shape, a == b, "same call twice"});
  for (int c : {1, 2, 4, 8}) {
    auto got = run(c, dl, dp);
    if (!got.ok()) {
      out->push_back({"cluster " + std::to_string(c) + shape, true, "not supported: " + got.error().message()});
      continue;
    }
    out->push_back({"cluster " + std::to_string(c) + shape, *got == a, "same ids as the heuristic's cluster size"});
  }
  // Rows reversed: same ids, reversed.
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer rl, DeviceBuffer::Create(rows * v * 4));
  for (int64_t r = 0; r < rows; ++r)
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(rl.get<float>() + (rows - 1 - r) * v, dl.get<float>() + r * v, v * 4,
                                              cudaMemcpyDeviceToDevice, s));
  std::vector<SampleParamsDev> rparams(params.rbegin(), params.rend());
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer rp, Upload(rparams));
  GYRE_ASSIGN_OR_RETURN(std::vector<int32_t> c, run(0, rl, rp));
  std::reverse(c.begin(), c.end());
  out->push_back({"rows reversed" + shape, c == a, "same ids at other positions and batch composition"});
  // A sampling row gives different ids for different offsets (the draw is random at all).
  int64_t differ = 0, sampled = 0;
  {
    std::vector<SampleParamsDev> p2 = params;
    for (auto& p : p2) p.offset += 1000003;
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer dp2, Upload(p2));
    GYRE_ASSIGN_OR_RETURN(std::vector<int32_t> d, run(0, dl, dp2));
    for (int64_t r = 0; r < rows; ++r)
      if (params[r].temperature > 0 && params[r].top_k == 0) ++sampled, differ += d[r] != a[r];
    // Graph: captured with params, replayed after the device params change to p2.
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(di.get(), 0xFF, rows * 4, s));
    GYRE_ASSIGN_OR_RETURN(Graph g, Graph::Capture(
                                       [&] {
                                         return SampleRows(dl.get<float>(), rows, v, dp.get<SampleParamsDev>(),
                                                           di.get<int32_t>(), s);
                                       },
                                       1, s));
    GYRE_RETURN_IF_ERROR(g.Launch(s));
    GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    GYRE_ASSIGN_OR_RETURN(std::vector<int32_t> g1, Download<int32_t>(di, rows));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpy(dp.get(), p2.data(), rows * sizeof(SampleParamsDev), cudaMemcpyHostToDevice));
    GYRE_RETURN_IF_ERROR(g.Launch(s));
    GYRE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    GYRE_ASSIGN_OR_RETURN(std::vector<int32_t> g2, Download<int32_t>(di, rows));
    out->push_back({"graph replay" + shape, g1 == a && g2 == d, "captured once; replayed with the old and new params"});
  }
  out->push_back({"offsets matter" + shape, differ > sampled / 2,
                  std::to_string(differ) + " of " + std::to_string(sampled) + " top-p rows changed with the offset"});
  return Status::Ok();
}

// ---- bench ---------------------------------------------------------------------------------------

struct BenchRow {
  std::string set;
  int64_t rows = 0;
  int cluster = 0;
  bool heuristic = false;
  double us = NAN, us_graph = NAN, us_floor = NAN, us_argmax = NAN;
  std::string ToJson() const {
    Json j;
    j.Str("params", set).Num("rows", double(rows)).Num("cluster", cluster).Bool("heuristic", heuristic);
    j.Num("us", us).Num("us_graph", us_graph).Num("us_read_floor", us_floor).Num("us_argmax_kernel", us_argmax);
    j.Num("pct_of_read_floor", 100.0 * us_floor / std::min(us, std::isfinite(us_graph) ? us_graph : us));
    return j.Obj();
  }
};

Status Bench(double copy_gbps, bool quick, std::vector<BenchRow>* out, cudaStream_t s) {
  const int64_t v = kModelVocab, max_rows = 256;
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer dl, DeviceBuffer::Create(max_rows * v * 4));
  FillNormal<<<2048, 256, 0, s>>>(dl.get<float>(), max_rows * v, 2026, 2.0f);
  GYRE_RETURN_IF_ERROR(Launched());
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer flat, DeviceBuffer::Create(64 * v * 4));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flat.get(), 0, 64 * v * 4, s));
  GYRE_ASSIGN_OR_RETURN(DeviceBuffer di, DeviceBuffer::Create(max_rows * 4));
  struct Set {
    const char* name;
    ops::SamplingParams p;
  };
  const Set sets[] = {{"typical T=0.8 top_k=50 top_p=0.95", {0.8f, 50, 0.95f, 0.0f, 1}},
                      {"top_p=0.95 only (T=1)", {1.0f, 0, 0.95f, 0.0f, 2}},
                      {"greedy (T=0)", {0.0f, 0, 1.0f, 0.0f, 3}}};
  const int reps = quick ? 5 : 20, inner = 20;
  for (const Set& set : sets)
    for (int64_t rows : {1, 16, 64, 256}) {
      GYRE_ASSIGN_OR_RETURN(DeviceBuffer dp, Upload(SameParams(rows, set.p, 0)));
      const int heur = SampleClusterSize(rows, v);
      std::vector<int> clusters = {heur};
      if (std::string(set.name).rfind("greedy", 0) != 0)
        for (int c : {4, 8})
          if (c != heur) clusters.push_back(c);
      for (int c : clusters) {
        BenchRow b;
        b.set = set.name;
        b.rows = rows;
        b.cluster = c;
        b.heuristic = c == heur;
        auto fn = [&] {
          return SampleRows(dl.get<float>(), rows, v, dp.get<SampleParamsDev>(), di.get<int32_t>(), s, {c});
        };
        GYRE_ASSIGN_OR_RETURN(b.us, TimeStreamUs(fn, reps, inner, s));
        GYRE_ASSIGN_OR_RETURN(b.us_graph, TimeGraphUs(fn, reps, inner, s));
        b.us_floor = rows * v * 4.0 / (copy_gbps * 1e9) * 1e6;
        auto am = [&] { return Argmax(dl.get<float>(), rows, v, di.get<int32_t>(), s); };
        GYRE_ASSIGN_OR_RETURN(b.us_argmax, TimeStreamUs(am, reps, inner, s));
        out->push_back(b);
      }
    }
  // Worst case for the histograms: every logit tied (one bin per level, id descents).
  {
    const int64_t rows = 64;
    GYRE_ASSIGN_OR_RETURN(DeviceBuffer dp, Upload(SameParams(rows, {1.0f, 0, 0.9f, 0.0f, 4}, 0)));
    BenchRow b;
    b.set = "all logits tied, top_p=0.9";
    b.rows = rows;
    b.cluster = SampleClusterSize(rows, v);
    b.heuristic = true;
    auto fn = [&] { return SampleRows(flat.get<float>(), rows, v, dp.get<SampleParamsDev>(), di.get<int32_t>(), s); };
    GYRE_ASSIGN_OR_RETURN(b.us, TimeStreamUs(fn, reps, 5, s));
    b.us_floor = rows * v * 4.0 / (copy_gbps * 1e9) * 1e6;
    out->push_back(b);
  }
  return Status::Ok();
}

// ---- main ----------------------------------------------------------------------------------------

struct Report {
  std::string path, commit, device_json = "null", error;
  bool quick = false, check_only = false, sanitize = false;
  double copy_gbps = NAN;
  std::vector<CheckRow> checks;
  std::vector<DistRow> dists;
  std::vector<BenchRow> bench;

  bool AllPass() const {
    bool ok = error.empty() && !checks.empty();
    for (const auto& c : checks) ok = ok && c.pass;
    for (const auto& d : dists) ok = ok && (sanitize ? d.fit.outside == 0 && d.cpu_outside == 0 : d.pass());
    return ok;
  }
  void Write() const {
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    std::vector<std::string> cs, ds, bs;
    for (const auto& c : checks) cs.push_back(c.ToJson());
    for (const auto& d : dists) ds.push_back(d.ToJson());
    for (const auto& b : bench) bs.push_back(b.ToJson());
    Json root;
    root.Str("date_utc", date).Str("commit", commit).Bool("quick", quick).Bool("check_only", check_only);
    root.Bool("sanitize", sanitize).Raw("device", device_json);
    root.Str("config",
             "SampleRows (src/ops/cuda/sampling_cuda.h), fp32 logits. Distributions: 20000 draws per case (one row "
             "repeated, offsets 0..N-1), Pearson chi-square vs the double-precision reference of ops::Sampler::Sample "
             "with adjacent ids pooled to >= 5 expected, fail if p < 1e-4 or any id outside the reference's kept set. "
             "'halves' = N(0,1.5) rounded to 0.5 (ties), 'peaked' = N(0,1) + 24 tokens in [7,9), 'flat' = all equal. "
             "Bench: V=154880, logits N(0,2) per row, median over reps of 20 calls; us_read_floor = rows*V*4 bytes at "
             "the measured device-copy rate; us_argmax_kernel = cuda::Argmax (one pass, one block per row)");
    root.Num("copy_gbps", copy_gbps).Bool("all_pass", AllPass()).Raw("checks", Array(cs));
    root.Raw("distributions", Array(ds)).Raw("bench", Array(bs)).Str("error", error);
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      std::fputs((root.Obj() + "\n").c_str(), f);
      std::fclose(f);
    }
  }
};

Status Run(Report& rep) {
  GYRE_CUDA_RETURN_IF_ERROR(cudaSetDevice(0));
  cudaDeviceProp prop{};
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  GYRE_CUDA_RETURN_IF_ERROR(cudaDriverGetVersion(&driver));
  GYRE_CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&runtime));
  Json dev;
  dev.Str("name", prop.name).Num("sms", prop.multiProcessorCount).Num("l2_mib", prop.l2CacheSize >> 20);
  dev.Num("smem_per_block_optin_kib", prop.sharedMemPerBlockOptin / 1024.0).Num("driver_version", driver);
  dev.Num("runtime_version", runtime).Num("max_vocab", double(SampleMaxVocab()));
  rep.device_json = dev.Obj();
  std::printf("device: %s, %d SMs, max vocab %lld\n", prop.name, prop.multiProcessorCount,
              static_cast<long long>(SampleMaxVocab()));
  GYRE_ASSIGN_OR_RETURN(Stream stream, Stream::Create());
  const cudaStream_t s = stream.get();
  auto print_checks = [&](size_t from) {
    for (size_t i = from; i < rep.checks.size(); ++i)
      std::printf("  %s %-52s %s\n", rep.checks[i].pass ? "ok  " : "FAIL", rep.checks[i].name.c_str(),
                  rep.checks[i].detail.c_str());
  };

  // ---- greedy ----
  std::printf("greedy vs ops::Argmax:\n");
  size_t mark = rep.checks.size();
  const int64_t big = rep.sanitize ? 4096 : kModelVocab;
  for (auto [v, rows, c] : std::vector<std::array<int64_t, 3>>{
           {16, 64, 0}, {1000, 64, 0}, {1001, 64, 0}, {1000, 16, 8}, {big, 16, 0}, {big + 1, 16, 0}, {big, 16, 4}, {big, 16, 8}})
    GYRE_RETURN_IF_ERROR(CheckGreedy(v, rows, static_cast<int>(c), &rep.checks, s));
  print_checks(mark);
  rep.Write();

  // ---- distributions ----
  std::printf("distributions (chi-square p-value; kept; draws outside the CPU's kept set):\n");
  const int64_t draws = rep.sanitize ? 64 : 20000;
  for (const DistCase& c : DistributionCases(rep.sanitize)) {
    GYRE_RETURN_IF_ERROR(CheckDistribution(c, draws, &rep.dists, s));
    const DistRow& d = rep.dists.back();
    std::printf("  %s %-58s C=%d kept %-6lld chi2 %8.1f df %-5d p %.4f outside %lld%s\n", d.pass() ? "ok  " : "FAIL",
                d.name.c_str(), d.cluster, static_cast<long long>(d.kept), d.fit.chi2, d.fit.df, d.fit.p,
                static_cast<long long>(d.fit.outside), d.cpu_outside ? " (reference disagrees with ops::Sampler)" : "");
  }
  rep.Write();

  // ---- determinism ----
  std::printf("determinism:\n");
  mark = rep.checks.size();
  GYRE_RETURN_IF_ERROR(CheckDeterminism(1000, 64, &rep.checks, s));
  GYRE_RETURN_IF_ERROR(CheckDeterminism(big, rep.sanitize ? 4 : 64, &rep.checks, s));
  print_checks(mark);
  rep.Write();
  if (rep.check_only || rep.sanitize) return Status::Ok();

  // ---- bench ----
  GYRE_ASSIGN_OR_RETURN(rep.copy_gbps, CopyGbps(s));
  std::printf("bench V=%lld (device copy %.0f GB/s): us per call, stream | graph; read floor; argmax kernel\n",
              static_cast<long long>(kModelVocab), rep.copy_gbps);
  GYRE_RETURN_IF_ERROR(Bench(rep.copy_gbps, rep.quick, &rep.bench, s));
  for (const auto& b : rep.bench)
    std::printf("  %-36s rows %-4lld C=%d%s %8.1f | %8.1f us  floor %6.1f  argmax %6.1f\n", b.set.c_str(),
                static_cast<long long>(b.rows), b.cluster, b.heuristic ? "*" : " ", b.us, b.us_graph, b.us_floor,
                b.us_argmax);
  rep.Write();
  return Status::Ok();
}

}  // namespace
}  // namespace gyre::cuda

int main(int argc, char** argv) {
  gyre::cuda::Report rep;
  std::string out = ".";
  rep.commit = "unknown";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) {
      out = argv[++i];
    } else if (!std::strcmp(argv[i], "--commit") && i + 1 < argc) {
      rep.commit = argv[++i];
    } else if (!std::strcmp(argv[i], "--quick")) {
      rep.quick = true;
    } else if (!std::strcmp(argv[i], "--check-only")) {
      rep.check_only = true;
    } else if (!std::strcmp(argv[i], "--sanitize")) {
      rep.sanitize = true;
    } else {
      std::fprintf(stderr, "usage: gyre_sampling_cuda_bench [--out DIR] [--commit HASH] [--check-only] [--quick] "
                           "[--sanitize]\n");
      return 2;
    }
  }
  rep.path = out + "/sampling.json";
  const gyre::Status st = gyre::cuda::Run(rep);
  if (!st.ok()) {
    rep.error = st.ToString();
    std::fprintf(stderr, "error: %s\n", rep.error.c_str());
  }
  rep.Write();
  const bool pass = rep.AllPass();
  std::printf("sampling self-check: %s; wrote %s\n", pass ? "all pass" : "FAILURES", rep.path.c_str());
  return pass ? 0 : 1;
}
