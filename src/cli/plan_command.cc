#include "cli/plan_command.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/serve_command.h"
#include "parallel/memory_plan.h"
#include "parallel/projection.h"
#include "runtime/model.h"

namespace gyre::cli {

namespace {

using json = nlohmann::json;
using parallel::CacheDtype;
using parallel::MemoryPlan;
using parallel::StageMemory;
using parallel::WeightDtype;

struct PlanArgs {
  std::string config, model, gpu_memory, reserve = "3G";
  int64_t gpus = 0, tp = 1, ep = 1, pp = 1, cp = 1;
  std::string weights = "bf16", kv_cache_dtype = "bf16";
  int64_t max_num_seqs = 1, max_model_len = 0, max_batch_tokens = 8192;
  bool json = false;
  std::string project;
  int64_t bench_prefill_chunk = 8192;
  double link_gbs = 450, link_latency_us = 10;
  std::vector<int64_t> decode_batches = {1, 16, 64, 256, 1024};
};

int Usage(const std::string& m) {
  std::fprintf(stderr, "gyre plan: %s\n", m.c_str());
  return 2;
}

int Fail(const Status& s) {
  std::fprintf(stderr, "gyre: error: %s\n", s.ToString().c_str());
  return 1;
}

Result<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::NotFound(std::string("cannot open ") + what + " " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string Gib(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%9.2f GiB", static_cast<double>(b) / (1 << 30));
  return buf;
}

json StageJson(const StageMemory& s) {
  return {{"stage", s.stage},
          {"layers", {s.layer_begin, s.layer_end}},
          {"weights",
           {{"embedding", s.embedding}, {"lm_head", s.lm_head}, {"attention_mla_dsa", s.attention}, {"kda", s.kda},
            {"dense_mlp", s.dense_mlp}, {"routed_experts", s.routed_experts}, {"shared_experts", s.shared_experts},
            {"norms_hc_router", s.norms_hc_router}, {"total", s.weights()}}},
          {"dsa_cache_bytes_per_token", s.cache_bytes_per_token},
          {"dsa_cache_bytes", s.cache_bytes},
          {"kda_state_bytes_per_sequence", s.kda_state_bytes_per_sequence},
          {"kda_state_bytes", s.kda_state_bytes},
          {"activation_bytes", s.activation_bytes},
          {"reserve_bytes", s.reserve_bytes},
          {"used_bytes", s.used()},
          {"headroom_bytes", s.headroom_bytes}};
}

json ProjectionJson(const parallel::Projection& p, const parallel::LinkModel& link) {
  json steps = json::array();
  for (const auto& s : p.steps) {
    steps.push_back({{"phase", s.phase}, {"batch", s.batch}, {"context", s.context}, {"compute_ms", s.compute_ms},
                     {"comm_ms", s.comm_ms}, {"step_ms", s.step_ms}, {"latency_ms", s.latency_ms},
                     {"tokens_per_s", s.tokens_per_s}, {"tp_allreduce_bytes_per_gpu", s.tp_allreduce_bytes},
                     {"ep_alltoall_bytes_per_gpu", s.ep_alltoall_bytes}, {"pp_send_bytes_per_gpu", s.pp_send_bytes}});
  }
  return {{"source", p.source},
          {"assumptions", {{"link_gbs_per_direction", link.link_gbs}, {"collective_latency_us", link.latency_us},
                           {"overlap", "none"}, {"routing", "uniform"}}},
          {"note", "projection from one-GPU per-op costs; not measured on several GPUs"},
          {"steps", steps}};
}

void PrintText(const ModelConfig& c, const MemoryPlan& p) {
  const ModelSummary sum = Summarize(c);
  const parallel::PlanOptions& o = p.options;
  std::printf("model    %s: %lld layers (%lld KDA, %lld DSA, %lld MLA; %lld dense MLP, %lld MoE), %lld parameters\n",
              c.model_type_name.c_str(), (long long)c.num_hidden_layers, (long long)sum.num_kda, (long long)sum.num_dsa,
              (long long)sum.num_mla, (long long)sum.num_dense, (long long)sum.num_moe, (long long)sum.params_total);
  std::printf("plan     %lld GPUs x %.2f GiB: tp=%lld ep=%lld pp=%lld cp=%lld -> %lld stage(s) of %lld GPUs, %lld "
              "attention replica(s) per stage\n",
              (long long)o.num_gpus, o.gpu_memory_bytes / double(1 << 30), (long long)o.tp, (long long)o.ep,
              (long long)o.pp, (long long)o.cp, (long long)o.pp, (long long)p.gpus_per_stage, (long long)p.dp);
  std::printf("dtypes   weights %s, DSA cache %s, KDA state fp32, activations fp32\n",
              parallel::WeightDtypeName(o.weights), parallel::CacheDtypeName(o.kv_cache));
  std::printf("load     %lld sequences x %lld tokens (%lld per replica), %lld tokens per step\n\n",
              (long long)o.max_num_seqs, (long long)o.max_model_len, (long long)p.seqs_per_replica,
              (long long)o.max_batch_tokens);
  std::printf("%-34s", "per GPU");
  for (const auto& s : p.stages) {
    char h[48];
    std::snprintf(h, sizeof h, "stage %lld [%lld,%lld)", (long long)s.stage, (long long)s.layer_begin,
                  (long long)s.layer_end);
    std::printf(" %16s", h);
  }
  std::printf("\n");
  auto row = [&](const char* name, auto field) {
    std::printf("%-34s", name);
    for (const auto& s : p.stages) std::printf(" %16s", Gib(field(s)).c_str());
    std::printf("\n");
  };
  row("  embedding", [](const StageMemory& s) { return s.embedding; });
  row("  LM head", [](const StageMemory& s) { return s.lm_head; });
  row("  attention (MLA/DSA + indexer)", [](const StageMemory& s) { return s.attention; });
  row("  KDA", [](const StageMemory& s) { return s.kda; });
  row("  dense MLP", [](const StageMemory& s) { return s.dense_mlp; });
  row("  routed experts", [](const StageMemory& s) { return s.routed_experts; });
  row("  shared experts", [](const StageMemory& s) { return s.shared_experts; });
  row("  norms, hc, router", [](const StageMemory& s) { return s.norms_hc_router; });
  row("weights", [](const StageMemory& s) { return s.weights(); });
  row("DSA cache", [](const StageMemory& s) { return s.cache_bytes; });
  row("KDA state", [](const StageMemory& s) { return s.kda_state_bytes; });
  row("activations (estimate)", [](const StageMemory& s) { return s.activation_bytes; });
  row("reserve (CUDA, NCCL, slack)", [](const StageMemory& s) { return s.reserve_bytes; });
  row("used", [](const StageMemory& s) { return s.used(); });
  row("headroom", [](const StageMemory& s) { return s.headroom_bytes; });
  std::printf("%-34s", "DSA cache bytes per token");
  for (const auto& s : p.stages) std::printf(" %16lld", (long long)s.cache_bytes_per_token);
  std::printf("\n%-34s", "KDA state bytes per sequence");
  for (const auto& s : p.stages) std::printf(" %16lld", (long long)s.kda_state_bytes_per_sequence);
  std::printf("\n\nlongest single request        %lld tokens\n", (long long)p.max_context_per_request);
  std::printf("sequences of %lld tokens that fit   %lld\n", (long long)o.max_model_len,
              (long long)p.max_seqs_at_max_model_len);
  std::printf("verdict                       %s\n", p.fits() ? "fits" : "does NOT fit");
}

void PrintProjection(const parallel::Projection& pr, const parallel::LinkModel& link) {
  std::printf("\nprojection (NOT measured on several GPUs): one-GPU per-op costs from %s;\n", pr.source.c_str());
  std::printf("links %.0f GB/s per direction, %.0f us per collective, no compute/communication overlap\n",
              link.link_gbs, link.latency_us);
  std::printf("%-8s %8s %8s %10s %10s %10s %10s %12s %14s %14s\n", "phase", "batch", "context", "compute_ms",
              "comm_ms", "step_ms", "latency_ms", "tokens/s", "TP AR B/GPU", "EP A2A B/GPU");
  for (const auto& s : pr.steps) {
    std::printf("%-8s %8lld %8lld %10.3f %10.3f %10.3f %10.3f %12.0f %14lld %14lld\n", s.phase.c_str(),
                (long long)s.batch, (long long)s.context, s.compute_ms, s.comm_ms, s.step_ms, s.latency_ms,
                s.tokens_per_s, (long long)s.tp_allreduce_bytes, (long long)s.ep_alltoall_bytes);
  }
}

int RunPlan(const PlanArgs& a) {
  if (a.config.empty() == a.model.empty()) return Usage("give exactly one of --config FILE or --model DIR");
  const auto mem = ParseByteSize(a.gpu_memory);
  if (!mem || *mem <= 0) return Usage("--gpu-memory '" + a.gpu_memory + "' is not a byte size (e.g. 141G, 80G)");
  const auto reserve = ParseByteSize(a.reserve);
  if (!reserve) return Usage("--reserve '" + a.reserve + "' is not a byte size");
  Result<ModelConfig> cfg = Status::Internal("unset");
  if (!a.config.empty()) {
    auto text = ReadFile(a.config, "--config");
    if (!text) return Fail(text.error());
    cfg = ParseModelConfig(*text);
    if (!cfg) return Fail(cfg.error().WithContext(a.config));
  } else {
    cfg = LoadModelConfig(a.model);
    if (!cfg) return Fail(cfg.error());
  }
  const ModelConfig& c = *cfg;
  parallel::PlanOptions o;
  o.num_gpus = a.gpus;
  o.gpu_memory_bytes = *mem;
  o.tp = a.tp, o.ep = a.ep, o.pp = a.pp, o.cp = a.cp;
  o.weights = a.weights == "fp8" ? WeightDtype::kFp8 : a.weights == "int8" ? WeightDtype::kInt8 : WeightDtype::kBf16;
  o.kv_cache = a.kv_cache_dtype == "fp8"    ? CacheDtype::kFp8
               : a.kv_cache_dtype == "int8" ? CacheDtype::kInt8
               : a.kv_cache_dtype == "fp32" ? CacheDtype::kFp32
                                            : CacheDtype::kBf16;
  o.max_num_seqs = a.max_num_seqs;
  o.max_model_len = a.max_model_len > 0 ? a.max_model_len
                    : c.max_position_embeddings > 0 ? c.max_position_embeddings
                                                    : 4096;
  o.max_batch_tokens = a.max_batch_tokens;
  o.reserve_bytes = *reserve;
  auto plan = parallel::PlanMemory(c, o);
  if (!plan) return Fail(plan.error());
  json out = {{"model_type", c.model_type_name},
              {"params_total", Summarize(c).params_total},
              {"num_gpus", o.num_gpus},
              {"gpu_memory_bytes", o.gpu_memory_bytes},
              {"tp", o.tp}, {"ep", o.ep}, {"pp", o.pp}, {"cp", o.cp},
              {"gpus_per_stage", plan->gpus_per_stage},
              {"attention_replicas_per_stage", plan->dp},
              {"weights_dtype", parallel::WeightDtypeName(o.weights)},
              {"kv_cache_dtype", parallel::CacheDtypeName(o.kv_cache)},
              {"max_num_seqs", o.max_num_seqs},
              {"max_model_len", o.max_model_len},
              {"max_batch_tokens", o.max_batch_tokens},
              {"seqs_per_replica", plan->seqs_per_replica},
              {"stages", json::array()},
              {"worst_stage", plan->worst_stage},
              {"max_context_per_request", plan->max_context_per_request},
              {"max_seqs_at_max_model_len", plan->max_seqs_at_max_model_len},
              {"fits", plan->fits()}};
  for (const auto& s : plan->stages) out["stages"].push_back(StageJson(s));
  if (!plan->fits()) out["refusal"] = plan->refusal;
  parallel::LinkModel link{a.link_gbs, a.link_latency_us};
  std::optional<parallel::Projection> projection;
  if (!a.project.empty()) {
    auto text = ReadFile(a.project, "--project");
    if (!text) return Fail(text.error());
    auto costs = parallel::ParseBenchCosts(*text, a.bench_prefill_chunk);
    if (!costs) return Fail(costs.error().WithContext(a.project));
    auto pr = parallel::Project(c, *plan, *costs, link, a.decode_batches);
    if (!pr) return Fail(pr.error());
    projection = std::move(*pr);
    out["projection"] = ProjectionJson(*projection, link);
  }
  if (a.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    PrintText(c, *plan);
    if (projection) PrintProjection(*projection, link);
  }
  if (!plan->fits()) {
    std::fprintf(stderr, "gyre plan: refused: %s\n", plan->refusal.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

void AddPlanCommand(CLI::App& app, std::function<int()>* runner) {
  auto a = std::make_shared<PlanArgs>();
  auto* s = app.add_subcommand("plan", "per-GPU memory plan (and throughput projection) of a model on N GPUs");
  s->add_option("--config", a->config, "config.json of the model (HF form)");
  s->add_option("--model", a->model, "model folder (its config.json)");
  s->add_option("--gpus", a->gpus, "number of GPUs")->required()->check(CLI::PositiveNumber);
  s->add_option("--gpu-memory", a->gpu_memory, "memory of one GPU (141G, 80G, 143771MiB; K/M/G/T = powers of 1024)")
      ->required();
  s->add_option("--tp", a->tp, "tensor parallel ranks: KDA heads, MLA heads, LM-head vocabulary")
      ->check(CLI::PositiveNumber);
  s->add_option("--ep", a->ep, "expert parallel ranks: routed experts")->check(CLI::PositiveNumber);
  s->add_option("--pp", a->pp, "pipeline stages: contiguous layer ranges")->check(CLI::PositiveNumber);
  s->add_option("--cp", a->cp, "context parallel ranks: KDA prefill over the sequence")->check(CLI::PositiveNumber);
  s->add_option("--weights", a->weights, "weight storage")->check(CLI::IsMember({"bf16", "fp8", "int8"}));
  s->add_option("--kv-cache-dtype", a->kv_cache_dtype, "DSA/MLA cache storage as the CUDA model keeps it: latent and k_rot in this dtype, indexer rows fp32")
      ->check(CLI::IsMember({"bf16", "fp8", "int8", "fp32"}));
  s->add_option("--max-num-seqs", a->max_num_seqs, "concurrent sequences (all replicas)")->check(CLI::PositiveNumber);
  s->add_option("--max-model-len", a->max_model_len,
                "tokens per sequence (default: config max_position_embeddings, else 4096)")
      ->check(CLI::PositiveNumber);
  s->add_option("--max-batch-tokens", a->max_batch_tokens, "new tokens per step and attention replica")
      ->check(CLI::PositiveNumber);
  s->add_option("--reserve", a->reserve, "per-GPU reserve for the CUDA context, library workspaces, NCCL, slack");
  s->add_flag("--json", a->json, "print one JSON object");
  s->add_option("--project", a->project, "project tokens/s from this `gyre bench model --backend cuda` JSON");
  s->add_option("--bench-prefill-chunk", a->bench_prefill_chunk, "--prefill-chunk of that bench run")
      ->check(CLI::PositiveNumber);
  s->add_option("--link-gbs", a->link_gbs, "GPU-to-GPU bandwidth per direction, GB/s (assumed)")
      ->check(CLI::PositiveNumber);
  s->add_option("--link-latency-us", a->link_latency_us, "latency of one collective, us (assumed)")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--decode-batches", a->decode_batches, "decode batches to project (sequences over all GPUs)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  s->callback([a, runner] { *runner = [a] { return RunPlan(*a); }; });
}

}  // namespace gyre::cli
