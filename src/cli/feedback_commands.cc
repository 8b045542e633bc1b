#include "cli/feedback_commands.h"

#include "cli/disagg_scenario.h"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "cli/bench_serve_command.h"
#include "cli/http_post.h"
#include "cli/mcp_http.h"
#include "cli/mcp_server.h"
#include "core/json_depth.h"
#include "feedback/advise.h"
#include "feedback/analyze.h"
#include "feedback/bench.h"
#include "feedback/ceilings.h"
#include "feedback/compare.h"
#include "feedback/device_trace_check.h"
#include "feedback/gate.h"
#include "feedback/length_check.h"
#include "feedback/model_diff.h"
#include "feedback/op_sweep.h"
#include "feedback/skeletons.h"
#include "feedback/trace_export.h"
#include "feedback/verify_ops.h"
#include "model/random_weights.h"
#include "parallel/verify_parallel.h"
#include "parallel/verify_tp_cuda.h"
#include "quant/kv_cache.h"
#include "runtime/cpu_runner.h"
#include "runtime/kv_policy_flags.h"
#include "runtime/model.h"
#ifdef GYRE_CUDA
#include "feedback/cuda_benchmark.h"
#include "runtime/cuda_model.h"
#include "runtime/cuda_parity.h"
#endif

namespace gyre::cli {

using feedback::Ceilings;

namespace {

int Fail(const Status& s) {
  std::fprintf(stderr, "gyre: error: %s\n", s.ToString().c_str());
  return 1;
}

// A refused command line: the message on stderr, exit status 2 (nothing was loaded or run).
int Usage(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  return 2;
}

Result<std::vector<int64_t>> ParseList(const std::string& text) {
  std::vector<int64_t> v;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      v.push_back(std::stoll(item));
    } catch (...) {
      return Status::InvalidArgument("'" + item + "' is not an integer");
    }
  }
  if (v.empty()) return Status::InvalidArgument("empty list");
  return v;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Status::NotFound("cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A model from a folder, or random weights for a config.json file (no checkpoint written).
Result<std::unique_ptr<Model>> ModelFrom(const std::string& dir, const std::string& config_file, uint64_t seed,
                                        ActDType act, nlohmann::json* meta) {
  if (!dir.empty()) {
    *meta = {{"source", dir}};
    return Model::Load(dir, ModelOptions{act});
  }
  if (config_file.empty()) return Status::InvalidArgument("give --model DIR or --config FILE");
  GYRE_ASSIGN_OR_RETURN(std::string text, ReadFile(config_file));
  GYRE_ASSIGN_OR_RETURN(ModelConfig cfg, ParseModelConfig(text));
  GYRE_ASSIGN_OR_RETURN(ModelWeights w, RandomWeights(cfg, seed));
  *meta = {{"source", config_file}, {"random_weights_seed", seed}, {"config", nlohmann::json::parse(text)}};
  return Model::FromWeights(cfg, std::move(w), ModelOptions{act});
}

Result<std::vector<int32_t>> ParseIds(const std::string& text) {
  GYRE_ASSIGN_OR_RETURN(std::vector<int64_t> v, ParseList(text));
  return std::vector<int32_t>(v.begin(), v.end());
}

Result<Ceilings> CeilingsFrom(const std::string& path) {
  if (path.empty()) return feedback::MeasureCeilings();
  GYRE_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  try {
    return Ceilings::FromJson(nlohmann::json::parse(text));
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(path + " is not valid JSON: " + e.what());
  }
}

Status WriteOut(const std::string& path, const nlohmann::json& j) {
  if (path.empty() || path == "-") {
    std::printf("%s\n", j.dump(2).c_str());
    return Status();
  }
  std::ofstream f(path);
  if (!f) return Status::Unavailable("cannot write " + path);
  f << j.dump(2) << "\n";
  return Status();
}

}  // namespace



void AddFeedbackCommands(CLI::App& app, std::function<int()>* runner) {
  // ---- verify ops ----
  auto* verify = app.add_subcommand("verify", "check ops / parallel plans against references");
  verify->require_subcommand(1);
  struct VerifyArgs {
    std::string op, backend = "cpu", shape;
    uint64_t seed = 0;
    bool json = false;
  };
  auto va = std::make_shared<VerifyArgs>();
  auto* vops = verify->add_subcommand("ops", "every op vs its fp64 reference on fresh random inputs");
  vops->add_option("--op", va->op, "only this op");
  vops->add_option("--backend", va->backend, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  vops->add_option("--seed", va->seed, "input seed (default: random, printed)");
  vops->add_option("--shape", va->shape,
                   "with --op: check this shape only, e.g. S=4,T=1048576,M=16,TOPK=2048,IH=32,ID=128 (the op's "
                   "largest shape fills unnamed dims)");
  vops->add_flag("--json", va->json);
  vops->callback([va, runner] {
    *runner = [va] {
      uint64_t seed = va->seed ? va->seed : std::random_device{}();
      if (!va->op.empty() && !ops::FindOp(va->op)) {
        std::string names;
        for (const auto& o : ops::Registry()) names += " " + o.name;
        return Fail(Status::InvalidArgument("unknown op '" + va->op + "'; ops:" + names));
      }
      std::vector<ops::OpSpec> list;  // empty: the registry
      if (!va->shape.empty()) {
        if (va->op.empty()) return Usage("gyre verify ops: --shape needs --op");
        ops::OpSpec one = *ops::FindOp(va->op);
        auto shape = ops::ParseShape(one, va->shape);
        if (!shape) return Usage("gyre verify ops: --shape: " + shape.status().message());
        shape->tolerance = 0;  // the op's tolerance class, not a calibration of another shape
        one.shapes = {*shape};
        list.push_back(std::move(one));
      }
      const auto rep = feedback::VerifyOps(list, va->op, va->backend == "cuda" ? ops::Backend::kCuda : ops::Backend::kCpu,
                                           seed);
      if (va->json) {
        std::printf("%s\n", rep.Json().dump(2).c_str());
      } else {
        std::fputs(rep.Human().c_str(), stdout);
      }
      return rep.num_failed() == 0 ? 0 : 1;
    };
  });

  struct ModelVerifyArgs {
    std::string model, backend = "cuda", trace;
    double tol = 1e-4;
    bool json = false;
  };
  auto mva = std::make_shared<ModelVerifyArgs>();
  auto* vmod = verify->add_subcommand("model", "the GPU model vs the goldens and the CPU engine (fixture folder)");
  vmod->add_option("--model", mva->model, "fixture folder with golden_fp32.safetensors")->required();
  vmod->add_option("--backend", mva->backend, "cuda")->check(CLI::IsMember({"cuda"}));
  vmod->add_option("--tol", mva->tol, "rel-L2 tolerance (default 1e-4, fp32)");
  vmod->add_flag("--json", mva->json);
  vmod->add_option("--trace", mva->trace, "write a Chrome trace of the check with the device timeline to this file");
  vmod->callback([mva, runner] {
    *runner = [mva] {
#ifdef GYRE_CUDA
      if (!mva->trace.empty()) feedback::StartTrace(/*device=*/true);
      auto rep = CheckCudaParity(mva->model, mva->tol);
      if (!mva->trace.empty()) {
        auto n = feedback::StopAndWriteTrace(mva->trace, {{"command", "verify model"}, {"model", mva->model}});
        if (!n) return Fail(n.status());
      }
      if (!rep) return Fail(rep.status());
      if (mva->json) {
        std::printf("%s\n", rep->dump(2).c_str());
      } else {
        const auto& r = *rep;
        std::printf("%s: golden logits rel-L2 %.2e, cpu logits rel-L2 %.2e, greedy %s golden / %s cpu, ragged steps "
                    "rel-L2 %.2e -> %s\n",
                    mva->model.c_str(), r["golden_logits"]["rel_l2"].get<double>(), r["cpu_logits"]["rel_l2"].get<double>(),
                    r["greedy"]["match_golden"].get<bool>() ? "==" : "!=", r["greedy"]["match_cpu"].get<bool>() ? "==" : "!=",
                    r["ragged_batch"]["worst_rel_l2"].get<double>(), r["pass"].get<bool>() ? "PASS" : "FAIL");
      }
      return (*rep)["pass"].get<bool>() ? 0 : 1;
#else
      return Fail(Status::Unimplemented("this gyre was built without CUDA (cmake --preset cuda)"));
#endif
    };
  });

  // ---- verify length (issue 22 item 2; feedback/length_check.h) ----
  struct LengthVerifyArgs {
    std::string model, config, backend = "cpu", weights = "f32", chunks = "64,17", kv_cache_dtype = "auto", out;
    int64_t tokens = 512, tail = 32, head = 16, page_tokens = 64;
    uint64_t seed = 22, weight_seed = 1;
    double tol_logits = 1e-3, tol_state = 1e-3, tol_worst = -1;
    bool json = false;
  };
  auto lva = std::make_shared<LengthVerifyArgs>();
  auto* vlen = verify->add_subcommand(
      "length", "a long prompt vs itself: chunk-size invariance of the last logits and KDA states, decode vs prefill");
  vlen->add_option("--model", lva->model, "model folder");
  vlen->add_option("--config", lva->config, "config.json: random weights");
  vlen->add_option("--backend", lva->backend, "cpu (default) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  vlen->add_option("--weights", lva->weights, "cuda: f32 (default) or bf16 weights")->check(CLI::IsMember({"f32", "bf16"}));
  vlen->add_option("--tokens", lva->tokens, "prompt tokens (random ids)")->check(CLI::Range(int64_t{2}, int64_t{1} << 31));
  vlen->add_option("--chunks", lva->chunks, "prefill piece sizes, the first the reference (default 64,17)");
  vlen->add_option("--tail", lva->tail, "last tokens decoded vs prefilled (0: skip)");
  vlen->add_option("--head", lva->head, "first tokens decoded vs prefilled (0: skip)");
  vlen->add_option("--seed", lva->seed, "prompt ids");
  vlen->add_option("--weight-seed", lva->weight_seed, "random weights (with --config)");
  vlen->add_option("--page-tokens", lva->page_tokens)->check(CLI::PositiveNumber);
  vlen->add_option("--kv-cache-dtype", lva->kv_cache_dtype, "cuda: auto (fp32), bf16, fp8, int8");
  vlen->add_option("--tol-logits", lva->tol_logits, "rel-L2 limit for logits (default 1e-3)");
  vlen->add_option("--tol-state", lva->tol_state, "rel-L2 limit for KDA states (default 1e-3)");
  vlen->add_option("--tol-worst", lva->tol_worst, "rel-L2 limit for the worst decoded row (default: --tol-logits)");
  vlen->add_option("--out", lva->out, "also write the JSON report here");
  vlen->add_flag("--json", lva->json);
  vlen->callback([lva, runner] {
    *runner = [lva] {
      const LengthVerifyArgs& a = *lva;
      feedback::LengthCheckOptions o;
      o.tokens = a.tokens;
      if (a.model.empty() == a.config.empty()) return Usage("gyre verify length: give one of --model DIR or --config FILE");
      auto chunks = ParseList(a.chunks);
      if (!chunks) return Usage("gyre verify length: --chunks: " + chunks.status().message());
      o.chunks = *chunks;
      o.tail = a.tail;
      o.head = a.head;
      o.seed = a.seed;
      o.logits_tol = a.tol_logits;
      o.state_tol = a.tol_state;
      o.worst_tol = a.tol_worst >= 0 ? a.tol_worst : a.tol_logits;
      const int64_t pt = a.page_tokens;
      const int64_t step = std::max({*std::max_element(o.chunks.begin(), o.chunks.end()), o.tail, o.head});
      auto kv = ParseKvDtype(a.kv_cache_dtype);
      if (!kv) return Usage("gyre verify length: --kv-cache-dtype: " + kv.status().message());
      if (a.backend != "cuda" && (*kv != KvDtype::kF32 || a.weights != "f32"))
        return Usage("gyre verify length: --kv-cache-dtype and --weights bf16 need --backend cuda");
      std::unique_ptr<Model> host;  // the CPU runner's model (or the host weights uploaded); outlives r
      std::unique_ptr<ModelRunner> r;
      nlohmann::json meta;
      if (a.backend == "cuda") {
#ifdef GYRE_CUDA
        CudaModelOptions co;
        co.bf16_weights = a.weights == "bf16";
        co.max_seqs = 2;
        co.max_batch_tokens = step;
        co.page_tokens = pt;
        co.kv_tokens = feedback::LengthCheckPages(o, pt) * pt;
        co.max_seq_tokens = (o.tokens + pt - 1) / pt * pt;
        co.decode_graphs = false;
        co.seed = a.weight_seed;
        Result<std::unique_ptr<CudaModel>> m = Status::Internal("unset");
        if (a.model.empty()) {
          if (a.config.empty()) return Fail(Status::InvalidArgument("give --model DIR or --config FILE"));
          auto text = ReadFile(a.config);
          if (!text) return Fail(text.status());
          auto cfg = ParseModelConfig(*text);
          if (!cfg) return Fail(cfg.status().WithContext(a.config));
          auto p = KvPolicyFromFlags(*cfg, a.kv_cache_dtype, "");
          if (!p) return Fail(p.status());
          co.kv_cache = std::move(*p);
          meta = {{"source", a.config}, {"random_weights_seed", a.weight_seed}, {"config", nlohmann::json::parse(*text)}};
          m = CudaModel::Random(*cfg, co);
        } else {
          auto loaded = Model::Load(a.model);
          if (!loaded) return Fail(loaded.status());
          host = std::move(*loaded);
          auto p = KvPolicyFromFlags(host->config(), a.kv_cache_dtype, "");
          if (!p) return Fail(p.status());
          co.kv_cache = std::move(*p);
          meta = {{"source", a.model}};
          m = CudaModel::FromHost(host->config(), host->weights(), co);
        }
        if (!m) return Fail(m.status());
        r = std::move(*m);
#else
        return Fail(Status::Unimplemented("this gyre was built without CUDA (cmake --preset cuda)"));
#endif
      } else {
        auto m = ModelFrom(a.model, a.config, a.weight_seed, ActDType::kF32, &meta);
        if (!m) return Fail(m.status());
        host = std::move(*m);
        CpuRunnerOptions ro;
        ro.page_tokens = pt;
        ro.num_pages = feedback::LengthCheckPages(o, pt);
        ro.num_slots = 2;
        ro.max_step_tokens = step;
        auto cr = CpuRunner::Create(*host, ro);
        if (!cr) return Fail(cr.status());
        r = std::move(*cr);
      }
      auto rep = feedback::CheckLength(*r, o);
      if (!rep) return Fail(rep.status());
      nlohmann::json j = rep->Json();
      j["model"] = meta;
      j["weights"] = a.backend == "cuda" ? a.weights : "f32";
      j["kv_cache_dtype"] = KvDtypeName(*kv);
      j["page_tokens"] = pt;
      if (!a.out.empty()) {
        Status s = WriteOut(a.out, j);
        if (!s.ok()) return Fail(s);
      }
      if (a.json) {
        std::printf("%s\n", j.dump(2).c_str());
      } else {
        std::fputs(rep->Human().c_str(), stdout);
      }
      return rep->pass ? 0 : 1;
    };
  });

  struct TraceVerifyArgs {
    std::string out_dir = "verify_trace";
    int launches = 2000;
    bool json = false;
  };
  auto tva = std::make_shared<TraceVerifyArgs>();
  auto* vtr = verify->add_subcommand("trace", "the GPU device timeline (CUPTI) on a workload with a known answer");
  vtr->add_option("--out-dir", tva->out_dir, "where the three checked traces are written")->capture_default_str();
  vtr->add_option("--launches", tva->launches, "empty kernel launches timed with the trace off and on")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  vtr->add_flag("--json", tva->json);
  vtr->callback([tva, runner] {
    *runner = [tva] {
      auto rep = feedback::CheckDeviceTrace(tva->out_dir, tva->launches);
      if (!rep) return Fail(rep.status());
      if (tva->json) {
        std::printf("%s\n", rep->dump(2).c_str());
      } else {
        for (const auto& ch : (*rep)["checks"])
          std::printf("  %-22s %s  %s\n", ch["name"].get<std::string>().c_str(), ch["pass"].get<bool>() ? "PASS" : "FAIL",
                      ch["detail"].get<std::string>().c_str());
        const auto& o = (*rep)["overhead"];
        std::printf("  launch cost: %.2f us off, %.2f us with the device trace on (%d empty kernels)\n",
                    o["us_per_launch_off"].get<double>(), o["us_per_launch_on"].get<double>(), tva->launches);
        std::printf("%s (CUPTI %s); traces in %s\n", (*rep)["pass"].get<bool>() ? "PASS" : "FAIL",
                    (*rep)["cupti"].get<std::string>().c_str(), tva->out_dir.c_str());
      }
      return (*rep)["pass"].get<bool>() ? 0 : 1;
    };
  });

  struct ParArgs {
    std::string plan, merge = "fp32", backend = "cpu", model, dtype = "f32", comm = "shared";
    uint64_t seed = 0;
    bool json = false, inject_fault = false, replicate_mlp = false;
  };
  auto pa = std::make_shared<ParArgs>();
  auto* vpar = verify->add_subcommand("parallel", "each op of a parallel plan sharded vs unsharded (in-process ranks)");
  vpar->add_option("--plan", pa->plan, "tp=2 | tp=4 | ep=2 | cp=2 | cp=4 (cuda: tp=N, ep=N = TP attention + experts split by expert, pp=N = layer split)")->required();
  vpar->add_option("--merge-precision", pa->merge, "CP state merge: fp32 (default), bf16, tf32")
      ->check(CLI::IsMember({"fp32", "bf16", "tf32"}));
  vpar->add_option("--seed", pa->seed, "input seed (default: random, printed)");
  vpar->add_option("--backend", pa->backend,
                   "cpu: every op of the plan on the CPU; cuda: the CUDA model under the plan (ranks as threads "
                   "sharing GPU 0) against the unsharded CUDA model, end to end")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  vpar->add_option("--model", pa->model, "cuda: the checkpoint folder (default: tests/fixtures/glm5_mini, from the working directory)");
  vpar->add_option("--dtype", pa->dtype, "cuda: weights f32 (default) or bf16")->check(CLI::IsMember({"f32", "bf16"}));
  vpar->add_flag("--replicate-mlp", pa->replicate_mlp, "cuda: keep the MLP and experts whole on every rank");
  vpar->add_option("--comm", pa->comm, "cuda: shared (ranks as threads sharing GPU 0, default) or nccl (rank r on GPU r)")
      ->check(CLI::IsMember({"shared", "nccl"}));
  vpar->add_flag("--inject-fault", pa->inject_fault,
                 "cuda: negative control, the MLP partial sums are not all-reduced (the check must fail)");
  vpar->add_flag("--json", pa->json);
  vpar->callback([pa, runner] {
    *runner = [pa] {
      const uint64_t seed = pa->seed ? pa->seed : std::random_device{}();
      if (pa->backend == "cpu") {
        if (!pa->model.empty() || pa->inject_fault || pa->replicate_mlp || pa->dtype != "f32" || pa->comm != "shared") {
          std::cerr << "gyre verify parallel: --model, --dtype, --comm, --replicate-mlp and --inject-fault need --backend "
                       "cuda\n";
          return 2;
        }
        return parallel::RunVerifyParallelCli(pa->plan, pa->merge, seed, pa->json);
      }
      int n = 0;
      const bool ep = pa->plan.rfind("ep=", 0) == 0, pp = pa->plan.rfind("pp=", 0) == 0;
      const std::string ns = pa->plan.rfind("tp=", 0) == 0 || ep || pp ? pa->plan.substr(3) : "";
      const bool digits = !ns.empty() && ns.size() <= 2 && std::all_of(ns.begin(), ns.end(), ::isdigit);
      if (digits) n = std::stoi(ns);
      if (!digits || n < 1 || n > 16) {
        std::cerr << "gyre verify parallel --backend cuda: --plan must be tp=N, ep=N or pp=N with N in [1, 16] (cp "
                     "does not run on the CUDA model yet), not '" << pa->plan << "'\n";
        return 2;
      }
      parallel::VerifyTpCudaOptions o;
      o.model_dir = pa->model.empty() ? "tests/fixtures/glm5_mini" : pa->model;
      o.size = n;
      o.bf16_weights = pa->dtype == "bf16";
      o.shard_mlp = !pa->replicate_mlp;
      o.expert_parallel = ep;
      o.pipeline = pp;
      o.nccl = pa->comm == "nccl";
      if ((ep || pp) && pa->replicate_mlp) {
        std::cerr << "gyre verify parallel: --replicate-mlp is for --plan tp=N\n";
        return 2;
      }
      o.inject_fault = pa->inject_fault;
      o.seed = seed;
      auto rep = parallel::VerifyTpCuda(o);
      if (!rep.ok()) {
        std::cerr << "gyre verify parallel: " << rep.status().ToString() << "\n";
        return rep.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
      }
      if (pa->json) {
        std::cout << rep->dump(2) << "\n";
      } else {
        const auto& r = *rep;
        std::printf("%s on %s (%s weights, seed %llu): ragged logits worst rel-L2 %.3g (tol %.0e), greedy %d "
                    "mismatches / %d near ties over %d steps: %s\n",
                    r["plan"].get<std::string>().c_str(), r["model"].get<std::string>().c_str(),
                    r["weights"].get<std::string>().c_str(), static_cast<unsigned long long>(seed),
                    r["ragged_logits"]["worst_rel_l2"].get<double>(), r["tolerance"].get<double>(),
                    r["greedy"]["mismatches"].get<int>(), r["greedy"]["near_ties"].get<int>(),
                    r["greedy"]["steps"].get<int>(), r["pass"].get<bool>() ? "PASS" : "FAIL");
      }
      return (*rep)["pass"].get<bool>() ? 0 : 1;
    };
  });

  // ---- gate / compare ----
  struct GateArgs {
    std::string file, model, config;
    int repeats = 0;
    uint64_t seed = 1;
    bool json = false;
  };
  auto ga = std::make_shared<GateArgs>();
  auto* gate = app.add_subcommand("gate", "run a scenario gate file; PASS/FAIL per predicate with evidence");
  gate->add_option("file", ga->file, "gate JSON (bench/gates/*.json)")->required();
  gate->add_option("--model", ga->model, "model folder (default: tests/fixtures/glm5_tiny)");
  gate->add_option("--config", ga->config, "config.json: random weights instead of a folder");
  gate->add_option("--repeats", ga->repeats, "override the file's repeats (>= 1)")->check(CLI::PositiveNumber);
  gate->add_option("--seed", ga->seed, "scenario order and bootstrap seed");
  gate->add_flag("--json", ga->json);
  gate->callback([ga, runner] {
    *runner = [ga] {
      nlohmann::json meta;
      const std::string dir = ga->model.empty() && ga->config.empty() ? "tests/fixtures/glm5_tiny" : ga->model;
      auto model = ModelFrom(dir, ga->config, 1, ActDType::kF32, &meta);
      if (!model) return Fail(model.status());
      const Model* m = model->get();
      feedback::ScenarioRunner run = [m](const std::string&, const nlohmann::json& spec, int repeat) {
        // (a kind that needs cli's pieces: the prefill instance's DisaggNode)
        if (spec.is_object() && spec.value("kind", "") == "disagg_prefill") return RunDisaggPrefillScenario(*m, spec, repeat);
        return feedback::RunScenario(*m, spec, repeat);
      };
      feedback::GateOptions go;
      go.repeats = ga->repeats;
      go.seed = ga->seed;
      return feedback::RunGateCli(ga->file, run, go, ga->json);
    };
  });
  struct CmpArgs {
    std::string a, b;
    double threshold = 2.0;
    bool json = false;
    std::vector<std::string> baseline_runs;
  };
  auto ca = std::make_shared<CmpArgs>();
  auto* cmp = app.add_subcommand("compare", "per-metric change between two result files with noise-aware verdicts");
  cmp->add_option("a", ca->a)->required();
  cmp->add_option("b", ca->b)->required();
  cmp->add_option("--threshold", ca->threshold, "minimum effect in percent (default 2)");
  cmp->add_option("--baseline-run", ca->baseline_runs,
                  "op sweeps only: another run of A's build (repeatable); the verdicts then test against the "
                  "variation between runs");
  cmp->add_flag("--json", ca->json);
  cmp->callback([ca, runner] {
    *runner = [ca] { return feedback::RunCompareCli(ca->a, ca->b, ca->json, ca->threshold, ca->baseline_runs); };
  });

  // ---- analyze ----
  struct AnalyzeArgs {
    std::string trace, overlap, ceilings;
    bool json = false;
    size_t top = 20;
    double gap_us = 10;
  };
  auto aa = std::make_shared<AnalyzeArgs>();
  auto* an = app.add_subcommand("analyze", "where the time went in a trace");
  an->add_option("trace", aa->trace, "Chrome trace JSON written by gyre")->required();
  an->add_option("--overlap", aa->overlap,
                 "A,B: how much of A overlaps B; A and B are a category (kernel, memcpy, collective, step, ...), "
                 "device, cpu, stream:N or name:S (spans named S, e.g. name:transfer.send)");
  an->add_option("--ceilings", aa->ceilings,
                 "ceilings JSON from `gyre bench ceilings --json` (default: measure this CPU; a trace with device "
                 "records gets no roofline without this file)");
  an->add_option("--gap-us", aa->gap_us, "device idle gaps shorter than this are not counted as gaps")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  an->add_option("--top", aa->top, "ops to list");
  an->add_flag("--json", aa->json);
  an->callback([aa, runner] {
    *runner = [aa] {
      auto ev = feedback::ReadChromeTrace(aa->trace);
      if (!ev) return Fail(ev.status());
      // CPU ceilings say nothing about GPU kernels: with device records, only a given file counts.
      const bool has_device = std::any_of(ev->begin(), ev->end(), [](const auto& e) { return e.device(); });
      std::optional<Ceilings> ceil;
      if (!aa->ceilings.empty() || !has_device) {
        auto c = CeilingsFrom(aa->ceilings);
        if (!c) return Fail(c.status());
        ceil = *c;
      }
      std::optional<std::pair<std::string, std::string>> ov;
      if (!aa->overlap.empty()) {
        const auto comma = aa->overlap.find(',');
        if (comma == std::string::npos) return Fail(Status::InvalidArgument("--overlap takes A,B"));
        ov = std::make_pair(aa->overlap.substr(0, comma), aa->overlap.substr(comma + 1));
      }
      const auto rep = feedback::Analyze(*ev, ceil, ov, aa->gap_us);
      if (aa->json) {
        std::printf("%s\n", rep.Json().dump(2).c_str());
      } else {
        std::fputs(rep.Human(aa->top).c_str(), stdout);
      }
      return 0;
    };
  });

  // ---- skeletons / advise ----
  struct SkelArgs {
    std::string op, signal, dir;
    bool json = false, prose = false;
  };
  auto ska = std::make_shared<SkelArgs>();
  auto* sk = app.add_subcommand("skeletons", "search the optimization-skeleton catalogue (docs/skeletons)");
  sk->add_option("--op", ska->op, "only skeletons that concern this op");
  sk->add_option("--signal", ska->signal, "words that must all appear (name, title, signal, transformation, prose)");
  sk->add_option("--dir", ska->dir, "catalogue folder (default: docs/skeletons)");
  sk->add_flag("--prose", ska->prose, "print each entry's prose too");
  sk->add_flag("--json", ska->json);
  sk->callback([ska, runner] {
    *runner = [ska] {
      auto all = feedback::LoadSkeletons(ska->dir.empty() ? feedback::DefaultSkeletonDir() : ska->dir);
      if (!all) return Fail(all.status());
      const auto hits = feedback::SearchSkeletons(*all, ska->op, ska->signal);
      if (ska->json) {
        nlohmann::json j = nlohmann::json::array();
        for (const auto* h : hits) j.push_back(h->Json(ska->prose));
        std::printf("%s\n", j.dump(2).c_str());
      } else {
        for (const auto* h : hits) {
          std::printf("%s (%s): %s\n  signal: %s\n  guard: %s\n", h->name.c_str(), h->backend.c_str(), h->title.c_str(),
                      h->signal.c_str(), h->guard.c_str());
          if (ska->prose) std::printf("%s\n", h->prose.c_str());
        }
        std::printf("%zu of %zu skeletons\n", hits.size(), all->size());
      }
      return 0;
    };
  });

  struct AdviseArgs {
    std::string input, dir, ceilings;
    bool json = false;
    size_t top = 15;
  };
  auto ada = std::make_shared<AdviseArgs>();
  auto* adv = app.add_subcommand("advise", "where the time goes and which skeletons apply, from a trace or a gate result");
  adv->add_option("input", ada->input, "Chrome trace written by gyre (--trace), or a gate result JSON")->required();
  adv->add_option("--skeletons", ada->dir, "catalogue folder (default: docs/skeletons)");
  adv->add_option("--ceilings", ada->ceilings, "ceilings JSON for % of roofline (as gyre analyze)");
  adv->add_option("--top", ada->top, "findings to print")->capture_default_str();
  adv->add_flag("--json", ada->json);
  adv->callback([ada, runner] {
    *runner = [ada] {
      auto cat = feedback::LoadSkeletons(ada->dir.empty() ? feedback::DefaultSkeletonDir() : ada->dir);
      if (!cat) return Fail(cat.status());
      auto text = ReadFile(ada->input);
      if (!text) return Fail(text.status());
      Result<feedback::Advice> advice = Status::Internal("unset");
      nlohmann::json j;
      try {
        if (Status d = CheckJsonDepth(*text, ada->input); !d.ok()) return Fail(d);
        j = nlohmann::json::parse(*text);
      } catch (const nlohmann::json::exception& e) {
        return Fail(Status::InvalidArgument(ada->input + " is not valid JSON: " + e.what()));
      }
      if (j.is_object() && j.contains("predicates")) {
        advice = feedback::AdviseGate(j, *cat);
      } else {
        auto ev = feedback::ReadChromeTrace(ada->input);
        if (!ev) return Fail(ev.status());
        std::optional<Ceilings> ceil;
        if (!ada->ceilings.empty()) {
          auto c = CeilingsFrom(ada->ceilings);
          if (!c) return Fail(c.status());
          ceil = *c;
        }
        const auto rep = feedback::Analyze(*ev, ceil, std::nullopt);
        advice = feedback::AdviseTrace(*ev, rep, *cat);
      }
      if (!advice) return Fail(advice.status());
      advice->source = ada->input;
      if (ada->json) {
        std::printf("%s\n", advice->Json().dump(2).c_str());
      } else {
        std::fputs(advice->Human(ada->top).c_str(), stdout);
      }
      return 0;
    };
  });

  // ---- trace-window ----
  struct WindowArgs {
    std::string url = "http://127.0.0.1:8000", api_key;
    double seconds = 5;
  };
  auto twa = std::make_shared<WindowArgs>();
  auto* tw = app.add_subcommand("trace-window", "record a trace window of a running gyre serve (POST /debug/trace)");
  tw->add_option("--url", twa->url, "the server")->capture_default_str();
  tw->add_option("--seconds", twa->seconds, "how long to record")->check(CLI::Range(0.001, 60.0))->capture_default_str();
  tw->add_option("--api-key", twa->api_key, "the server's API key (default: $GYRE_API_KEY)");
  tw->callback([twa, runner] {
    *runner = [twa] {
      std::string key = twa->api_key;
      if (key.empty())
        if (const char* e = std::getenv("GYRE_API_KEY")) key = e;
      std::vector<std::pair<std::string, std::string>> headers;
      if (!key.empty()) headers.emplace_back("Authorization", "Bearer " + key);
      auto r = cli::HttpPost(twa->url, "/debug/trace", nlohmann::json{{"seconds", twa->seconds}}.dump(), headers,
                             twa->seconds + 60);
      if (!r) return Fail(r.status());
      if (r->status != 200) {
        std::fprintf(stderr, "gyre: error: the server answered %d: %s\n", r->status, r->body.c_str());
        return 1;
      }
      std::printf("%s\n", r->body.c_str());
      return 0;
    };
  });

  // ---- mcp ----
  struct McpArgs {
    double tool_timeout = 1800;
    int http_port = -1;
    std::string host = "127.0.0.1", api_key;
  };
  auto mca = std::make_shared<McpArgs>();
  auto* mcp = app.add_subcommand("mcp", "the feedback commands as Model Context Protocol tools (stdio JSON-RPC)");
  mcp->add_option("--tool-timeout", mca->tool_timeout, "seconds before a tool call is killed")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  mcp->add_option("--http", mca->http_port, "serve the streamable HTTP transport on this port (0: any free) instead of stdio")
      ->check(CLI::Range(0, 65535));
  mcp->add_option("--host", mca->host, "--http: address to bind (loopback by default)")->capture_default_str();
  mcp->add_option("--api-key", mca->api_key, "--http: require 'Authorization: Bearer KEY' (default: $GYRE_API_KEY)");
  mcp->callback([mca, runner] {
    *runner = [mca] {
      std::error_code ec;
      const std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
      if (ec) return Fail(Status::Internal("cannot find this executable: " + ec.message()));
      cli::McpServer server(cli::GyreMcpTools(), exe, [](const std::string& s) {
        std::fwrite(s.data(), 1, s.size(), stdout);
        std::fflush(stdout);
      }, mca->tool_timeout);
      if (mca->http_port >= 0) {
        std::string key = mca->api_key;
        if (key.empty())
          if (const char* e = std::getenv("GYRE_API_KEY")) key = e;
        sigset_t sigs;
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGINT);
        sigaddset(&sigs, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &sigs, nullptr);  // before any thread starts
        auto http = cli::McpHttp::Create(&server, {mca->host, mca->http_port, key});
        if (!http) return Fail(http.status());
        if (Status st = (*http)->Start(); !st.ok()) return Fail(st);
        std::printf("gyre mcp: listening on http://%s:%d/mcp\n", mca->host.c_str(), (*http)->port());
        std::fflush(stdout);
        int sig = 0;
        sigwait(&sigs, &sig);
        (*http)->Stop();
        server.Shutdown(/*cancel=*/true);
        return 0;
      }
      std::fprintf(stderr, "gyre mcp: serving %zu tools on stdio\n", cli::GyreMcpTools().size());
      for (std::string line; std::getline(std::cin, line);) server.HandleLine(line);
      server.Shutdown(/*cancel=*/false);  // stdin closed: answer what is running, then exit
      return 0;
    };
  });

  // ---- bench ----
  auto* bench = app.add_subcommand("bench", "microbenchmarks and model benchmarks");
  bench->require_subcommand(1);
  AddBenchServeCommand(*bench, runner);
  auto cj = std::make_shared<bool>(false);
  auto* bc = bench->add_subcommand("ceilings", "measure memory bandwidth and GEMM rate");
  bc->add_flag("--json", *cj);
  bc->callback([cj, runner] {
    *runner = [cj] {
      const Ceilings c = feedback::MeasureCeilings();
      if (*cj) {
        std::printf("%s\n", nlohmann::json{{"ceilings", c.Json()}, {"machine", feedback::MachineInfo()},
                                           {"commit", feedback::GitCommit()}}
                                .dump(2)
                                .c_str());
      } else {
        std::printf("memory bandwidth %.2f GB/s, fp32 GEMM %.2f GFLOP/s (%s)\n", c.mem_bw_gbs, c.gemm_gflops,
                    c.method.c_str());
      }
      return 0;
    };
  });
  auto* bspan = bench->add_subcommand("spans", "cost of a trace span with recording off and on");
  bspan->callback([runner] {
    *runner = [] {
      const auto o = feedback::MeasureSpanOverhead();
      std::printf("%s\n", nlohmann::json{{"span_off_ns", o.off_ns}, {"span_on_ns", o.on_ns},
                                         {"loop_baseline_ns", o.baseline_ns}, {"machine", feedback::MachineInfo()},
                                         {"commit", feedback::GitCommit()}}
                              .dump(2)
                              .c_str());
      return 0;
    };
  });
  struct BenchOpArgs {
    std::string name, shape, backend = "cpu", out = "-", ceilings;
    int repeats = 10;
    double min_time = 0.5;
  };
  auto bo = std::make_shared<BenchOpArgs>();
  auto* bop = bench->add_subcommand("op", "time one op at a shape (Google Benchmark JSON)");
  bop->add_option("name", bo->name)->required();
  bop->add_option("--shape", bo->shape, "e.g. T=4096,H=4,K=64 (default: the op's largest shape)");
  bop->add_option("--backend", bo->backend)->check(CLI::IsMember({"cpu", "cuda"}));
  bop->add_option("--repeats", bo->repeats)->check(CLI::PositiveNumber);
  bop->add_option("--min-time", bo->min_time, "seconds of measurement in total");
  bop->add_option("--ceilings", bo->ceilings, "ceilings JSON (default: measure in this run)");
  bop->add_option("--out", bo->out, "output file (default stdout)");
  bop->callback([bo, runner] {
    *runner = [bo] {
      const ops::OpSpec* op = ops::FindOp(bo->name);
      if (!op) return Fail(Status::InvalidArgument("unknown op '" + bo->name + "'"));
      auto shape = bo->shape.empty() ? Result<ops::OpShape>(op->shapes.back()) : ops::ParseShape(*op, bo->shape);
      if (!shape) return Fail(shape.status());
      auto ceil = CeilingsFrom(bo->ceilings);
      if (!ceil) return Fail(ceil.status());
      feedback::BenchOpOptions o;
      o.repeats = bo->repeats;
      o.min_time_s = bo->min_time;
      auto j = feedback::BenchOp(*op, *shape, bo->backend == "cuda" ? ops::Backend::kCuda : ops::Backend::kCpu, o,
                                 *ceil);
      if (!j) return Fail(j.status());
      for (const auto& b : (*j)["benchmarks"]) {
        if (b.value("aggregate_name", "") == "median") {
          std::fprintf(stderr, "%s: median %.3f us, %.2f GFLOP/s, %.2f GB/s, %.1f%% of roofline\n",
                       b["run_name"].get<std::string>().c_str(), b["real_time"].get<double>() / 1000,
                       b["GFLOPS"].get<double>(), b["GBps"].get<double>(), b["roofline_pct"].get<double>());
        }
      }
      Status s = WriteOut(bo->out, *j);
      return s.ok() ? 0 : Fail(s);
    };
  });
  struct BenchOpsArgs {
    std::string model, config, ops, out = "-", baseline, ceilings, max_bytes = "1G";
    int64_t tokens = 512, context = 4096;
    int repeats = 10;
    double sample_time = 0.02, threshold = 10, alpha = 0.05;
    uint64_t seed = 1;
    bool no_registry = false, json = false, no_interleave = false;
    std::vector<std::string> baseline_runs;
  };
  auto bs = std::make_shared<BenchOpsArgs>();
  auto* bops = bench->add_subcommand(
      "ops", "time every registered op at its verify shapes and a model's per-layer shapes; with --baseline, "
             "name the (op, shape) pairs that got slower (exit 1)");
  bops->add_option("--model", bs->model, "model folder: add its per-layer decode and prefill shapes");
  bops->add_option("--config", bs->config, "config.json: add its per-layer shapes (no weights needed)");
  bops->add_option("--tokens", bs->tokens, "prefill tokens per step for the model shapes")
      ->capture_default_str()->check(CLI::PositiveNumber);
  bops->add_option("--context", bs->context, "decode context for the model shapes")
      ->capture_default_str()->check(CLI::PositiveNumber);
  bops->add_flag("--no-registry-shapes", bs->no_registry, "only the model's shapes");
  bops->add_option("--ops", bs->ops, "comma list of op names (default: all)");
  bops->add_option("--repeats", bs->repeats, "samples per shape")->capture_default_str()->check(CLI::Range(2, 1000));
  bops->add_option("--sample-time", bs->sample_time, "seconds per sample")->capture_default_str()
      ->check(CLI::Range(1e-4, 10.0));
  bops->add_option("--max-bytes", bs->max_bytes, "skip shapes whose inputs exceed this (e.g. 1G, 256M)")
      ->capture_default_str();
  bops->add_option("--seed", bs->seed)->capture_default_str();
  bops->add_flag("--no-interleave", bs->no_interleave,
                 "take each shape's samples back to back (default: in rounds over groups of shapes, so a "
                 "shape's samples span the run and slow machine drift does not read as a change)");
  bops->add_option("--ceilings", bs->ceilings, "ceilings JSON (default: measure in this run)");
  bops->add_option("--out", bs->out, "sweep JSON (default stdout)");
  bops->add_option("--baseline", bs->baseline, "an earlier sweep: compare, report, exit 1 if any shape got slower");
  bops->add_option("--baseline-run", bs->baseline_runs,
                   "another sweep of the baseline's build (repeatable): the comparison then tests against the "
                   "variation between runs, not within one (docs/feedback.md)");
  bops->add_option("--threshold", bs->threshold, "minimum effect in percent")->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0));
  bops->add_option("--alpha", bs->alpha, "family-wise error rate over all shapes (Holm)")->capture_default_str()
      ->check(CLI::Range(1e-6, 0.5));
  bops->add_flag("--json", bs->json, "the comparison as JSON on stdout (with --baseline)");
  bops->callback([bs, runner] {
    *runner = [bs]() -> int {
      feedback::SweepShapeOptions so;
      so.registry_shapes = !bs->no_registry;
      so.tokens = bs->tokens;
      so.context = bs->context;
      {
        const std::string& t = bs->max_bytes;
        char* end = nullptr;
        const double v = std::strtod(t.c_str(), &end);
        const std::string unit = end ? std::string(end) : "";
        const double mult = unit.empty() ? 1 : unit == "K" ? 1e3 : unit == "M" ? 1e6 : unit == "G" ? 1e9 : -1;
        if (!(v > 0) || mult < 0) {
          std::fprintf(stderr, "gyre bench ops: --max-bytes '%s' is not a size such as 512M or 2G\n", t.c_str());
          return 2;
        }
        so.max_bytes = v * mult;
      }
      if (!bs->ops.empty()) {
        std::stringstream ss(bs->ops);
        std::string item;
        while (std::getline(ss, item, ',')) {
          if (!ops::FindOp(item)) return Fail(Status::InvalidArgument("unknown op '" + item + "'"));
          so.only_ops.push_back(item);
        }
      }
      if (!bs->model.empty() && !bs->config.empty()) {
        std::fprintf(stderr, "gyre bench ops: give --model or --config, not both\n");
        return 2;
      }
      ModelConfig cfg;
      nlohmann::json meta = nlohmann::json::object();
      if (!bs->model.empty() || !bs->config.empty()) {
        auto c = bs->model.empty() ? [&]() -> Result<ModelConfig> {
          GYRE_ASSIGN_OR_RETURN(std::string text, ReadFile(bs->config));
          return ParseModelConfig(text);
        }()
                                   : LoadModelConfig(bs->model);
        if (!c) return Fail(c.status());
        cfg = *c;
        so.model = &cfg;
        meta["model"] = bs->model.empty() ? bs->config : bs->model;
        meta["tokens"] = bs->tokens;
        meta["context"] = bs->context;
      }
      if (so.model == nullptr && !so.registry_shapes) {
        std::fprintf(stderr, "gyre bench ops: --no-registry-shapes needs --model or --config\n");
        return 2;
      }
      nlohmann::json baseline;
      if (!bs->baseline.empty()) {
        auto text = ReadFile(bs->baseline);
        if (!text) return Fail(text.status());
        try {
          baseline = nlohmann::json::parse(*text);
        } catch (const nlohmann::json::exception& e) {
          return Fail(Status::InvalidArgument(bs->baseline + " is not valid JSON: " + e.what()));
        }
        if (!feedback::IsOpSweepJson(baseline)) {
          return Fail(Status::InvalidArgument(bs->baseline + " is not an op sweep (gyre bench ops --out)"));
        }
      }
      auto ceil = CeilingsFrom(bs->ceilings);
      if (!ceil) return Fail(ceil.status());
      const auto shapes = feedback::SweepShapes(ops::Registry(), so);
      feedback::SweepRunOptions ro;
      ro.repeats = bs->repeats;
      ro.sample_s = bs->sample_time;
      ro.seed = bs->seed;
      ro.progress = true;
      ro.interleave = !bs->no_interleave;
      auto sweep = feedback::RunOpSweep(shapes, ro, *ceil, meta);
      if (!sweep) return Fail(sweep.status());
      // With a baseline and no --out, stdout carries the comparison; the sweep goes to --out only.
      if (bs->baseline.empty() || bs->out != "-") {
        Status s = WriteOut(bs->out, *sweep);
        if (!s.ok()) return Fail(s);
      }
      if (bs->baseline.empty()) return 0;
      feedback::SweepCompareOptions co;
      co.threshold = bs->threshold / 100;
      co.alpha = bs->alpha;
      std::vector<nlohmann::json> runs;
      for (const std::string& f : bs->baseline_runs) {
        auto text = ReadFile(f);
        if (!text) return Fail(text.status());
        nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded() || !feedback::IsOpSweepJson(j))
          return Fail(Status::InvalidArgument(f + " is not an op sweep (gyre bench ops --out)"));
        runs.push_back(std::move(j));
      }
      for (const auto& j : runs) co.extra_baselines.push_back(&j);
      auto report = feedback::CompareOpSweeps(baseline, *sweep, co);
      if (!report) return Fail(report.status());
      if (bs->json) {
        std::printf("%s\n", report->Json().dump(2).c_str());
      } else {
        std::printf("%s", report->Human().c_str());
      }
      return report->num_slower > 0 ? 1 : 0;
    };
  });
  struct BenchModelArgs {
    std::string model, config, batches = "1,4,16", out = "-", trace, ceilings, backend = "cpu", weights = "bf16";
    std::string prompt_lens = "4096,32768", kv_cache_dtype = "auto";
    int64_t prompt_len = 256, context = 128, steps = 16, prefill_chunk = 8192, project_layers = 45;
    int repeats = 3;
    uint64_t seed = 1;
    bool random_flag = false;
  };
  auto bm = std::make_shared<BenchModelArgs>();
  auto* bmod = bench->add_subcommand("model", "prefill and decode tokens/s with an op breakdown");
  bmod->add_option("--model", bm->model, "model folder");
  bmod->add_option("--config", bm->config, "config.json: random weights, no checkpoint");
  bmod->add_flag("--random-weights", bm->random_flag, "with --config (the default for --config)");
  bmod->add_option("--prompt-len", bm->prompt_len);
  bmod->add_option("--batches", bm->batches, "decode batch sizes, e.g. 1,4,16");
  bmod->add_option("--context", bm->context, "decode context tokens");
  bmod->add_option("--steps", bm->steps, "decode steps per run");
  bmod->add_option("--repeats", bm->repeats)->check(CLI::PositiveNumber);
  bmod->add_option("--seed", bm->seed);
  bmod->add_option("--trace", bm->trace,
                   "cpu: Chrome traces PREFIX.prefill.json / PREFIX.decode.json of the last repeat; cuda: PREFIX.json "
                   "of the whole run with the device timeline (its numbers then include the tracing cost)");
  bmod->add_option("--ceilings", bm->ceilings);
  bmod->add_option("--out", bm->out, "result JSON (default stdout)");
  bmod->add_option("--backend", bm->backend, "cpu (default) or cuda (with --config: weights built on the GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  bmod->add_option("--weights", bm->weights, "cuda: bf16 (default) or f32 GEMM weights")
      ->check(CLI::IsMember({"bf16", "f32"}));
  bmod->add_option("--prompt-lens", bm->prompt_lens, "cuda: prefill prompt lengths (default 4096,32768)");
  bmod->add_option("--prefill-chunk", bm->prefill_chunk, "cuda: tokens per prefill step (default 8192)");
  bmod->add_option("--project-layers", bm->project_layers, "cuda: project the step to N layers (0: off)");
  bmod->add_option("--kv-cache-dtype", bm->kv_cache_dtype, "cuda: DSA/MLA cache rows: auto (fp32), bf16, fp8, int8");
  bmod->callback([bm, runner] {
    *runner = [bm] {
      if (bm->backend == "cuda") {
#ifdef GYRE_CUDA
        if (bm->config.empty()) return Fail(Status::InvalidArgument("--backend cuda needs --config FILE (random weights)"));
        std::ifstream f(bm->config);
        if (!f) return Fail(Status::NotFound("cannot open " + bm->config));
        std::stringstream text;
        text << f.rdbuf();
        auto cfg = ParseModelConfig(text.str());
        if (!cfg) return Fail(cfg.status().WithContext(bm->config));
        auto batches = ParseList(bm->batches);
        if (!batches) return Fail(batches.status());
        auto lens = ParseList(bm->prompt_lens);
        if (!lens) return Fail(lens.status());
        CudaBenchOptions o;
        o.batches = *batches;
        o.prompt_lens = *lens;
        o.context = bm->context;
        o.steps = bm->steps;
        o.prefill_chunk = bm->prefill_chunk;
        o.seed = bm->seed;
        o.bf16 = bm->weights == "bf16";
        o.project_layers = bm->project_layers;
        auto kv = ParseKvDtype(bm->kv_cache_dtype);
        if (!kv) return Fail(kv.status().WithContext("--kv-cache-dtype"));
        o.kv_cache = *kv;
        // --trace on the GPU: the whole run with its device timeline, in PREFIX.json.
        if (!bm->trace.empty()) feedback::StartTrace(/*device=*/true);
        auto j = BenchCudaModel(*cfg, o);
        if (!bm->trace.empty()) {
          auto n = feedback::StopAndWriteTrace(bm->trace + ".json", {{"command", "bench model"}, {"config", bm->config}});
          if (!n) return Fail(n.status());
          std::fprintf(stderr, "wrote %zu trace events to %s.json\n", *n, bm->trace.c_str());
        }
        if (!j) return Fail(j.status());
        (*j)["config_file"] = bm->config;
        (*j)["config"] = nlohmann::json::parse(text.str());
        for (const auto& p : (*j)["prefill"])
          std::fprintf(stderr, "prefill %6lld tokens: %.0f tokens/s\n", static_cast<long long>(p["prompt_tokens"].get<int64_t>()),
                       p["tokens_per_s"].get<double>());
        for (const auto& d : (*j)["decode"])
          std::fprintf(stderr, "decode batch %4lld: %.1f tokens/s, step %.3f ms, %.1f%% of the bandwidth roofline\n",
                       static_cast<long long>(d["batch"].get<int64_t>()), d["tokens_per_s"].get<double>(),
                       d["step_ms_median"].get<double>(), d["pct_of_roofline"].get<double>());
        Status s = WriteOut(bm->out, *j);
        return s.ok() ? 0 : Fail(s);
#else
        return Fail(Status::Unimplemented("this gyre was built without CUDA (cmake --preset cuda)"));
#endif
      }
      nlohmann::json meta;
      auto model = ModelFrom(bm->model, bm->config, bm->seed, ActDType::kF32, &meta);
      if (!model) return Fail(model.status());
      auto batches = ParseList(bm->batches);
      if (!batches) return Fail(batches.status());
      auto ceil = CeilingsFrom(bm->ceilings);
      if (!ceil) return Fail(ceil.status());
      feedback::BenchModelOptions o;
      o.prompt_len = bm->prompt_len;
      o.decode_batches = *batches;
      o.decode_context = bm->context;
      o.decode_steps = bm->steps;
      o.repeats = bm->repeats;
      o.seed = bm->seed;
      o.trace_path = bm->trace;
      auto j = feedback::BenchModel(**model, o, *ceil, meta);
      if (!j) return Fail(j.status());
      for (const auto& [k, v] : (*j)["metrics"].items()) {
        std::vector<double> s = v.get<std::vector<double>>();
        std::sort(s.begin(), s.end());
        std::fprintf(stderr, "%-24s median %.2f\n", k.c_str(), s[s.size() / 2]);
      }
      Status s = WriteOut(bm->out, *j);
      return s.ok() ? 0 : Fail(s);
    };
  });

  // ---- diff ----
  struct DiffArgs {
    std::string model, model_b, act_a = "f32", act_b = "f32", ids;
    int64_t chunk_a = 0, chunk_b = 0;
    double tol = 1e-3;
    bool json = false;
  };
  auto da = std::make_shared<DiffArgs>();
  auto* diff = app.add_subcommand("diff", "first layer/op where two engine configurations diverge");
  diff->add_option("--model", da->model, "model folder (configuration A)")->required();
  diff->add_option("--model-b", da->model_b, "model folder for B (default: same)");
  diff->add_option("--act-a", da->act_a)->check(CLI::IsMember({"f32", "bf16"}));
  diff->add_option("--act-b", da->act_b)->check(CLI::IsMember({"f32", "bf16"}));
  diff->add_option("--chunk-a", da->chunk_a, "prefill in pieces of N tokens (A)");
  diff->add_option("--chunk-b", da->chunk_b, "prefill in pieces of N tokens (B)");
  diff->add_option("--ids", da->ids, "prompt ids 1,2,3")->required();
  diff->add_option("--tol", da->tol, "rel-L2 tolerance");
  diff->add_flag("--json", da->json);
  diff->callback([da, runner] {
    *runner = [da] {
      auto ids = ParseIds(da->ids);
      if (!ids) return Fail(ids.status());
      auto ma = Model::Load(da->model, ModelOptions{da->act_a == "bf16" ? ActDType::kBf16 : ActDType::kF32});
      if (!ma) return Fail(ma.status());
      auto mb = Model::Load(da->model_b.empty() ? da->model : da->model_b,
                            ModelOptions{da->act_b == "bf16" ? ActDType::kBf16 : ActDType::kF32});
      if (!mb) return Fail(mb.status());
      auto label = [](const std::string& m, const std::string& act, int64_t chunk) {
        return m + " act=" + act + (chunk ? " chunk=" + std::to_string(chunk) : "");
      };
      feedback::RunConfig a{ma->get(), da->chunk_a, label(da->model, da->act_a, da->chunk_a)};
      feedback::RunConfig b{mb->get(), da->chunk_b,
                            label(da->model_b.empty() ? da->model : da->model_b, da->act_b, da->chunk_b)};
      auto rep = feedback::DiffModels(a, b, *ids, da->tol);
      if (!rep) return Fail(rep.status());
      if (da->json) {
        std::printf("%s\n", rep->Json().dump(2).c_str());
      } else {
        std::fputs(rep->Human().c_str(), stdout);
      }
      return rep->first ? 1 : 0;
    };
  });
}

}  // namespace gyre::cli
