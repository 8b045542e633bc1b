#include "feedback/cuda_benchmark.h"

#ifdef GYRE_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>

#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_buffer.h"
#include "runtime/cuda_model.h"
#include "runtime/model.h"

namespace gyre {

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Copy bandwidth (GB/s, read + write) and bf16 GEMM rate (TFLOP/s), measured here.
Result<std::pair<double, double>> Ceilings() {
  GYRE_ASSIGN_OR_RETURN(cuda::Stream s, cuda::Stream::Create());
  GYRE_ASSIGN_OR_RETURN(cuda::Event e0, cuda::Event::Create());
  GYRE_ASSIGN_OR_RETURN(cuda::Event e1, cuda::Event::Create());
  const size_t bytes = size_t{1} << 30;
  GYRE_ASSIGN_OR_RETURN(cuda::DeviceBuffer a, cuda::DeviceBuffer::Create(bytes));
  GYRE_ASSIGN_OR_RETURN(cuda::DeviceBuffer b, cuda::DeviceBuffer::Create(bytes));
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(a.get(), 1, bytes, s.get()));
  std::vector<double> t;
  for (int i = 0; i < 12; ++i) {
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e0.get(), s.get()));
    GYRE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s.get()));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e1.get(), s.get()));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e1.get()));
    float ms = 0;
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, e0.get(), e1.get()));
    if (i >= 2) t.push_back(ms);
  }
  const double copy_gbs = 2.0 * bytes / (Median(t) * 1e-3) / 1e9;
  const int64_t n = 8192;
  GYRE_ASSIGN_OR_RETURN(auto gemm, cuda::GemmLt::Create());
  GYRE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(a.get(), 0, n * n * 2 * 2, s.get()));
  void* x = a.get();
  void* w = static_cast<char*>(a.get()) + n * n * 2;
  t.clear();
  for (int i = 0; i < 12; ++i) {
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e0.get(), s.get()));
    GYRE_RETURN_IF_ERROR(gemm->Run(cuda::GemmDType::kBf16, x, w, b.get(), n, n, n, s.get()));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventRecord(e1.get(), s.get()));
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e1.get()));
    float ms = 0;
    GYRE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, e0.get(), e1.get()));
    if (i >= 2) t.push_back(ms);
  }
  const double tflops = 2.0 * n * n * n / (Median(t) * 1e-3) / 1e12;
  return std::make_pair(copy_gbs, tflops);
}

// Bytes one decode step of `batch` sequences at `ctx` tokens must move at least (bf16 weights).
struct Roofline {
  double weights = 0, state = 0, kv = 0;
  double total() const { return weights + state + kv; }
};
Roofline DecodeBytes(const ModelConfig& c, int64_t batch, int64_t ctx, int64_t wbytes) {
  Roofline r;
  const ModelSummary s = Summarize(c);
  const int64_t D = c.hidden_size, I = c.moe_intermediate_size, E = c.n_routed_experts, k = c.num_experts_per_tok;
  const double expert = 3.0 * D * I * wbytes;
  // Everything except the routed experts and the embedding table is read once per step.
  const double routed_all = static_cast<double>(s.num_moe) * E * 3.0 * D * I;
  r.weights = (static_cast<double>(s.params_total) - routed_all - static_cast<double>(c.vocab_size) * D) * wbytes +
              batch * static_cast<double>(D) * wbytes;
  const double distinct = E * (1.0 - std::pow(1.0 - static_cast<double>(k) / E, static_cast<double>(batch)));
  r.weights += s.num_moe * distinct * expert;
  const int64_t P = c.linear_num_heads * c.linear_head_dim;
  r.state = batch * s.num_kda *
            (2.0 * c.linear_num_heads * c.linear_head_dim * c.linear_head_dim * 4 + 2.0 * (c.linear_conv_kernel_dim - 1) * 3 * P * 4);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.layer_types[l] == AttnKind::kKda) continue;
    const bool full_idx = c.layer_types[l] == AttnKind::kDsa && c.indexer_types[l] == IndexerKind::kFull;
    const bool dsa = c.layer_types[l] == AttnKind::kDsa;
    const int64_t keys = dsa ? std::min<int64_t>(ctx + 1, c.index_topk + c.index_kpool - 1) : ctx + 1;
    double per = static_cast<double>(keys) * (c.kv_lora_rank + c.qk_rope_head_dim) * 4;
    if (full_idx) per += static_cast<double>(ctx / c.index_kpool) * c.index_head_dim * 4;
    r.kv += batch * per;
  }
  return r;
}

std::string TypeKey(const ModelConfig& c, int64_t l) {
  return std::string(AttnKindName(c.layer_types[l])) + "+" + (c.mlp_layer_types[l] == MlpKind::kDense ? "dense" : "moe");
}

// Projection of one step to `layers` layers of the default glm5_next pattern for this config.
nlohmann::json Project(const ModelConfig& c, const CudaModelStats& st, int64_t layers) {
  std::map<std::string, std::vector<double>> by;
  for (int64_t l = 0; l < c.num_hidden_layers && l < static_cast<int64_t>(st.layer_ms.size()); ++l)
    by[TypeKey(c, l)].push_back(st.layer_ms[l]);
  ModelConfig full = c;
  full.num_hidden_layers = layers;
  full.layer_types.clear();
  full.mlp_layer_types.clear();
  full.indexer_types.clear();
  for (int64_t i = 0; i < layers; ++i) {
    full.layer_types.push_back(i % 4 == 3 ? AttnKind::kDsa : AttnKind::kKda);
    full.mlp_layer_types.push_back(i < 3 ? MlpKind::kDense : MlpKind::kMoe);
  }
  nlohmann::json per_type = nlohmann::json::object();
  for (auto& [k, v] : by) {
    double m = 0;
    for (double x : v) m += x;
    per_type[k] = m / v.size();
  }
  double total = st.embed_ms + st.head_ms;
  std::map<std::string, int64_t> counts;
  bool complete = true;
  for (int64_t i = 0; i < layers; ++i) {
    const std::string k = std::string(AttnKindName(full.layer_types[i])) + "+" +
                          (full.mlp_layer_types[i] == MlpKind::kDense ? "dense" : "moe");
    counts[k]++;
    if (per_type.contains(k)) total += per_type[k].get<double>();
    else complete = false;
  }
  return {{"layers", layers}, {"per_type_ms", per_type}, {"counts", counts}, {"step_ms", total},
          {"complete", complete}, {"note", "embedding + head + sum of per-type layer costs measured in this step"}};
}

}  // namespace

Result<nlohmann::json> BenchCudaModel(const ModelConfig& c, const CudaBenchOptions& o) {
  nlohmann::json out;
  cudaDeviceProp prop{};
  GYRE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, 0));
  int driver = 0;
  GYRE_CUDA_RETURN_IF_ERROR(cudaDriverGetVersion(&driver));
  out["gpu"] = prop.name;
  out["driver_api"] = driver;
  GYRE_ASSIGN_OR_RETURN(auto ceil, Ceilings());
  out["ceilings"] = {{"copy_gbs", ceil.first}, {"bf16_gemm_tflops", ceil.second}};
  const int64_t max_b = o.batches.empty() ? 1 : *std::max_element(o.batches.begin(), o.batches.end());
  const int64_t max_p = o.prompt_lens.empty() ? 0 : *std::max_element(o.prompt_lens.begin(), o.prompt_lens.end());
  if (o.context > std::max(o.prefill_chunk, max_b))
    return Status::InvalidArgument("bench model: --context " + std::to_string(o.context) +
                                   " must fit one prefill step (--prefill-chunk " + std::to_string(o.prefill_chunk) +
                                   "): the decode contexts are prefilled whole");
  CudaModelOptions mo;
  mo.bf16_weights = o.bf16;
  mo.max_seqs = std::max<int64_t>(max_b, 2);
  mo.max_batch_tokens = std::max(o.prefill_chunk, max_b);
  mo.page_tokens = 64;
  // Room for the largest prompt and, at the same time, the largest decode batch (whole pages each).
  mo.kv_tokens = max_p + 2 * mo.page_tokens + max_b * ((o.context + o.steps + 8) / mo.page_tokens + 2) * mo.page_tokens;
  mo.seed = o.seed;
  mo.profile_layers = true;
  mo.kv_cache = UniformKvPolicy(c.num_hidden_layers, o.kv_cache);
  const auto t0 = std::chrono::steady_clock::now();
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> m, CudaModel::Random(c, mo));
  RunnerSession sess(*m);  // the bookkeeping of pages and slots, as the engine keeps it
  const CudaModelStats st0 = m->stats();
  out["model"] = {{"weight_bytes", st0.weight_bytes}, {"kv_bytes", st0.kv_bytes}, {"state_bytes", st0.state_bytes},
                  {"scratch_bytes", st0.scratch_bytes}, {"bf16_weights", o.bf16},
                  {"kv_cache_dtype", KvDtypeName(o.kv_cache)},
                  {"build_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()}};
  std::mt19937 rng(static_cast<uint32_t>(o.seed) + 7);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size) - 1);
  auto prefill = [&](int seq, int64_t len) -> Status {
    std::vector<int32_t> ids(len);
    for (auto& v : ids) v = tok(rng);
    for (int64_t p = 0; p < len; p += o.prefill_chunk) {
      const int64_t n = std::min(o.prefill_chunk, len - p);
      RunnerSession::Input in{seq, std::span<const int32_t>(ids.data() + p, n), {}};
      GYRE_RETURN_IF_ERROR(sess.Step(std::span<const RunnerSession::Input>(&in, 1), nullptr));
    }
    return Status::Ok();
  };
  // Warm-up: plans and workspaces.
  {
    GYRE_ASSIGN_OR_RETURN(int s, sess.NewSequence());
    GYRE_RETURN_IF_ERROR(prefill(s, std::min<int64_t>(o.prefill_chunk, 4096)));
    sess.Release(s);
  }
  nlohmann::json pre = nlohmann::json::array();
  for (int64_t len : o.prompt_lens) {
    GYRE_ASSIGN_OR_RETURN(int s, sess.NewSequence());
    const auto a = std::chrono::steady_clock::now();
    GYRE_RETURN_IF_ERROR(prefill(s, len));
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
    const CudaModelStats st = m->stats();
    sess.Release(s);
    nlohmann::json r = {{"prompt_tokens", len}, {"seconds", sec}, {"tokens_per_s", len / sec},
                        {"last_chunk_layer_ms", st.layer_ms}, {"last_chunk_head_ms", st.head_ms},
                        {"last_chunk_op_ms", st.op_ms}};
    if (o.project_layers > 0) r["projection_last_chunk"] = Project(c, st, o.project_layers);
    pre.push_back(r);
  }
  out["prefill"] = pre;
  nlohmann::json dec = nlohmann::json::array();
  for (int64_t B : o.batches) {
    std::vector<int> seqs;
    for (int64_t i = 0; i < B; ++i) {
      GYRE_ASSIGN_OR_RETURN(int s, sess.NewSequence());
      seqs.push_back(s);
    }
    // Prefill the contexts, several sequences per step.
    for (size_t i = 0; i < seqs.size();) {
      std::vector<std::vector<int32_t>> ids;
      std::vector<RunnerSession::Input> batch;
      int64_t used = 0;
      while (i < seqs.size() && used + o.context <= mo.max_batch_tokens) {
        ids.emplace_back(o.context);
        for (auto& v : ids.back()) v = tok(rng);
        used += o.context;
        ++i;
      }
      for (size_t j = 0; j < ids.size(); ++j) batch.push_back({seqs[i - ids.size() + j], ids[j], {}});
      GYRE_RETURN_IF_ERROR(sess.Step(batch, nullptr));
    }
    std::vector<int32_t> next(B, 1);
    std::vector<SampledToken> got;
    SampleSpec greedy;
    greedy.enabled = true;  // temperature 0: the device argmax, ids back only
    auto step = [&]() -> Status {
      std::vector<RunnerSession::Input> batch;
      for (int64_t i = 0; i < B; ++i) batch.push_back({seqs[i], std::span<const int32_t>(&next[i], 1), greedy});
      GYRE_RETURN_IF_ERROR(sess.Step(batch, &got));
      for (int64_t i = 0; i < B; ++i) next[i] = got[i].id;
      return Status::Ok();
    };
    for (int i = 0; i < 2; ++i) GYRE_RETURN_IF_ERROR(step());
    std::vector<double> times;
    for (int64_t i = 0; i < o.steps; ++i) {
      const auto a = std::chrono::steady_clock::now();
      GYRE_RETURN_IF_ERROR(step());
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
    // The same steps without graphs: the launch overhead graphs save, and a per-layer profile.
    m->SetDecodeGraphs(false);
    std::vector<double> eager;
    for (int i = 0; i < 4; ++i) {
      const auto a = std::chrono::steady_clock::now();
      GYRE_RETURN_IF_ERROR(step());
      eager.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
    m->SetDecodeGraphs(true);
    const CudaModelStats st = m->stats();
    for (int s : seqs) sess.Release(s);
    const double step_s = Median(times);
    const Roofline rf = DecodeBytes(c, B, o.context + o.steps / 2, o.bf16 ? 2 : 4);
    const double roof_s = rf.total() / (ceil.first * 1e9);
    double gpu_ms = st.embed_ms + st.head_ms;
    for (double x : st.layer_ms) gpu_ms += x;
    nlohmann::json r = {{"batch", B},
                        {"context", o.context},
                        {"step_ms_median", step_s * 1e3},
                        {"eager_step_ms_median", Median(eager) * 1e3},
                        {"graphs", st.graphs},
                        {"tokens_per_s", B / step_s},
                        {"eager_gpu_step_ms_last", gpu_ms},
                        {"roofline_bytes", {{"weights", rf.weights}, {"state", rf.state}, {"kv", rf.kv}}},
                        {"roofline_ms", roof_s * 1e3},
                        {"pct_of_roofline", 100.0 * roof_s / step_s},
                        {"last_step_layer_ms", st.layer_ms},
                        {"last_step_head_ms", st.head_ms},
                        {"eager_step_op_ms", st.op_ms}};
    if (o.project_layers > 0) r["projection"] = Project(c, st, o.project_layers);
    dec.push_back(r);
  }
  out["decode"] = dec;
  return out;
}

}  // namespace gyre

#endif  // GYRE_CUDA
