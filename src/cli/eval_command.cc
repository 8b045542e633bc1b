#include "cli/eval_command.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "feedback/text_eval.h"
#include "quant/kv_cache.h"
#include "quant/kv_policy_search.h"
#include "runtime/kv_policy_flags.h"
#include "runtime/cpu_runner.h"
#include "runtime/model.h"
#include "runtime/model_runner.h"
#include "tokenizer/tokenizer.h"
#ifdef GYRE_CUDA
#include "runtime/cuda_model.h"
#endif

namespace gyre::cli {

namespace {

struct EvalArgs {
  std::string model, text, backend = "cpu", kv_cache_dtype = "auto", kv_cache_policy;
  int64_t ctx = 1024, max_tokens = 0;
  bool json = false;
};

int Fail(const Status& s) {
  std::fprintf(stderr, "gyre: error: %s\n", s.ToString().c_str());
  return 1;
}

Result<std::string> ReadText(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return Status::NotFound("cannot open --text " + path);
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::NotFound("cannot open --text " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  if (ss.str().empty()) return Status::InvalidArgument("--text " + path + " is empty");
  return ss.str();
}

int RunEval(const EvalArgs& a) {
  if (a.ctx < 1) return Fail(Status::InvalidArgument("--ctx must be >= 1 (got " + std::to_string(a.ctx) + ")"));
  auto kv = ParseKvDtype(a.kv_cache_dtype);
  if (!kv) return Fail(kv.error().WithContext("--kv-cache-dtype"));
  if (a.backend != "cuda" && (*kv != KvDtype::kF32 || !a.kv_cache_policy.empty()))
    return Fail(Status::InvalidArgument("--kv-cache-dtype / --kv-cache-policy: quantized KV caches run on --backend cuda"));
#ifndef GYRE_CUDA
  if (a.backend == "cuda") return Fail(Status::Unimplemented("this gyre was built without CUDA (cmake --preset cuda)"));
#endif
  auto text = ReadText(a.text);
  if (!text) return Fail(text.error());
  auto model = Model::Load(a.model);
  if (!model) return Fail(model.error());
  struct stat st;
  if (::stat((a.model + "/tokenizer.json").c_str(), &st) != 0) {
    return Fail(Status::NotFound("eval needs the model's tokenizer: no tokenizer.json in " + a.model));
  }
  auto tok = Tokenizer::FromFile(a.model);
  if (!tok) return Fail(tok.error());
  feedback::TextEvalOptions o;
  o.ctx = a.ctx;
  o.max_tokens = a.max_tokens;
  o.step_tokens = std::min(o.step_tokens, a.ctx);
  constexpr int64_t kPageTokens = 64;
  Result<feedback::TextEvalReport> rep = Status::Internal("no backend");
  if (a.backend == "cuda") {
#ifdef GYRE_CUDA
    CudaModelOptions co;
    co.max_seqs = 1;
    co.max_batch_tokens = o.step_tokens;
    co.page_tokens = kPageTokens;
    co.kv_tokens = (a.ctx + kPageTokens - 1) / kPageTokens * kPageTokens;
    co.decode_graphs = false;
    auto p = KvPolicyFromFlags((*model)->config(), a.kv_cache_dtype, a.kv_cache_policy);
    if (!p) return Fail(p.error());
    co.kv_cache = std::move(*p);
    auto gpu = CudaModel::FromHost((*model)->config(), (*model)->weights(), co);
    if (!gpu) return Fail(gpu.error());
    rep = feedback::EvaluateText(**gpu, nullptr, **tok, *text, o);
    if (rep && (*model)->has_mtp()) {
      rep->has_mtp = true;
      rep->mtp_note = "MTP acceptance is CPU-only for now (run with --backend cpu)";
    }
#endif
  } else {
    CpuRunnerOptions ro;
    ro.page_tokens = kPageTokens;
    ro.num_pages = (a.ctx + kPageTokens - 1) / kPageTokens;
    ro.num_slots = 1;
    ro.max_step_tokens = o.step_tokens;
    auto runner = CpuRunner::Create(**model, ro);
    if (!runner) return Fail(runner.error());
    rep = feedback::EvaluateText(**runner, model->get(), **tok, *text, o);
  }
  if (!rep) return Fail(rep.error());
  if (a.json) {
    std::printf("%s\n", rep->Json().dump(2).c_str());
  } else {
    std::fputs(rep->Human().c_str(), stdout);
  }
  return 0;
}

struct KvSearchArgs {
  std::string model, text, out, report, candidates = "int8,fp8", base = "bf16", weights = "f32";
  int64_t max_tokens = 512;
  double max_kl = 1e-5;
};

// gyre kv-policy-search: quant/kv_policy_search.h over the CUDA model on the text's first
// max_tokens tokens (one sequence, all logits), reference = fp32 cache.
int RunKvSearch(const KvSearchArgs& a) {
#ifndef GYRE_CUDA
  (void)a;
  return Fail(Status::Unimplemented("kv-policy-search runs the CUDA model: this gyre was built without CUDA"));
#else
  KvPolicySearchOptions o;
  o.max_kl = a.max_kl;
  auto base = ParseKvDtype(a.base);
  if (!base) return Fail(base.error().WithContext("--base"));
  o.base = *base;
  o.candidates.clear();
  std::stringstream cs(a.candidates);
  for (std::string c; std::getline(cs, c, ',');) {
    auto d = ParseKvDtype(c);
    if (!d) return Fail(d.error().WithContext("--candidates"));
    o.candidates.push_back(*d);
  }
  auto text = ReadText(a.text);
  if (!text) return Fail(text.error());
  auto model = Model::Load(a.model);
  if (!model) return Fail(model.error());
  auto tok = Tokenizer::FromFile(a.model);
  if (!tok) return Fail(tok.error());
  auto enc = (*tok)->Encode(*text, /*parse_special=*/false);
  if (!enc) return Fail(enc.error());
  std::vector<int32_t> ids = std::move(*enc);
  if (static_cast<int64_t>(ids.size()) > a.max_tokens) ids.resize(static_cast<size_t>(a.max_tokens));
  if (ids.size() < 2) return Fail(Status::InvalidArgument("--text has fewer than 2 tokens"));
  const ModelConfig& c = (*model)->config();
  constexpr int64_t kPageTokens = 64, kStep = 256;
  auto run = [&](const KvCachePolicy& p) -> Result<std::vector<float>> {
    CudaModelOptions co;
    co.bf16_weights = a.weights == "bf16";
    co.max_seqs = 1;
    co.max_batch_tokens = kStep;
    co.page_tokens = kPageTokens;
    co.kv_tokens = (static_cast<int64_t>(ids.size()) + kPageTokens - 1) / kPageTokens * kPageTokens;
    co.decode_graphs = false;
    co.kv_cache = p;
    GYRE_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> g, CudaModel::FromHost(c, (*model)->weights(), co));
    RunnerSession sess(*g);
    GYRE_ASSIGN_OR_RETURN(int s, sess.NewSequence());
    std::vector<float> all, part;
    for (size_t i = 0; i < ids.size(); i += kStep) {
      const size_t n = std::min<size_t>(kStep, ids.size() - i);
      RunnerSession::Input in{s, std::span<const int32_t>(ids.data() + i, n), {}, true};
      GYRE_RETURN_IF_ERROR(sess.Step(std::span<const RunnerSession::Input>(&in, 1), nullptr, &part));
      all.insert(all.end(), part.begin(), part.end());
    }
    sess.Release(s);
    return all;
  };
  const std::vector<bool> attn = AttentionLayerMask(c);
  auto r = SearchKvPolicy(attn, c.vocab_size, run, o);
  if (!r) return Fail(r.error());
  auto bytes = [&](const KvCachePolicy& p) {
    int64_t b = 0;
    for (size_t l = 0; l < attn.size(); ++l)
      if (attn[l]) b += KvRowBytes(p.layers[l], c.kv_lora_rank) +
                        (c.qk_rope_head_dim > 0 ? KvRowBytes(p.layers[l], c.qk_rope_head_dim) : 0);
    return b;
  };
  KvCachePolicy base_policy = UniformKvPolicy(c.num_hidden_layers, o.base);
  nlohmann::json rep = r->Report(bytes(base_policy), bytes(r->policy));
  rep["model"] = a.model;
  rep["text"] = a.text;
  rep["tokens"] = ids.size();
  rep["weights"] = a.weights;
  rep["max_kl"] = a.max_kl;
  rep["note"] = "cache bytes per token: the latent / k_rot rows of every attention layer (the indexer rows, fp32 "
                "in every policy, not counted)";
  std::ofstream(a.out) << r->PolicyJson();
  if (!a.report.empty()) std::ofstream(a.report) << rep.dump(2) << "\n";
  std::fprintf(stderr, "kv-policy-search: %lld runs; moved layers", static_cast<long long>(r->runs));
  for (int64_t l : r->moved) std::fprintf(stderr, " %lld(%s)", static_cast<long long>(l), KvDtypeName(r->policy.layers[l]));
  std::fprintf(stderr, "; rejected");
  for (int64_t l : r->rejected) std::fprintf(stderr, " %lld", static_cast<long long>(l));
  std::fprintf(stderr, "; KL %.3g (budget %.3g), top-1 %.4f; latent bytes/token %lld -> %lld; wrote %s\n",
               r->final_cost.mean_kl, a.max_kl, r->final_cost.top1, static_cast<long long>(bytes(base_policy)),
               static_cast<long long>(bytes(r->policy)), a.out.c_str());
  std::printf("%s", r->PolicyJson().c_str());
  return 0;
#endif
}

}  // namespace

void AddEvalCommand(CLI::App& app, std::function<int()>* runner) {
  auto a = std::make_shared<EvalArgs>();
  auto* e = app.add_subcommand("eval", "perplexity (and MTP acceptance) of a model on a text file");
  e->add_option("--model", a->model, "model folder (with tokenizer.json)")->required();
  e->add_option("--text", a->text, "UTF-8 text file, tokenized whole without special tokens")->required();
  e->add_option("--ctx", a->ctx, "context tokens per window (default 1024)");
  e->add_option("--backend", a->backend, "cpu (default) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  e->add_option("--max-tokens", a->max_tokens, "evaluate only the text's first N tokens (default: all)")
      ->check(CLI::NonNegativeNumber);
  e->add_flag("--json", a->json, "print one JSON object");
  e->add_option("--kv-cache-dtype", a->kv_cache_dtype, "cuda: DSA/MLA latent rows: auto (fp32), bf16, fp8, int8");
  e->add_option("--kv-cache-policy", a->kv_cache_policy, "cuda: per-layer KV dtype file (docs/quantization.md)");
  e->callback([a, runner] { *runner = [a] { return RunEval(*a); }; });

  auto k = std::make_shared<KvSearchArgs>();
  auto* ks = app.add_subcommand("kv-policy-search",
                                "cuda: measure each attention layer's KV cache in 8 bits, propose a mixed policy");
  ks->add_option("--model", k->model, "model folder (with tokenizer.json)")->required();
  ks->add_option("--text", k->text, "UTF-8 evaluation text")->required();
  ks->add_option("--out", k->out, "the proposed policy (a --kv-cache-policy file)")->required();
  ks->add_option("--report", k->report, "JSON: every measurement behind the proposal");
  ks->add_option("--max-tokens", k->max_tokens, "evaluate the text's first N tokens (default 512)")
      ->check(CLI::PositiveNumber);
  ks->add_option("--candidates", k->candidates, "8-bit dtypes to try per layer (default int8,fp8)");
  ks->add_option("--base", k->base, "dtype of the layers not moved (default bf16)");
  ks->add_option("--max-kl", k->max_kl, "budget: mean KL per position vs the fp32 cache (default 1e-5)");
  ks->add_option("--weights", k->weights, "f32 (default) or bf16 GEMM weights")->check(CLI::IsMember({"f32", "bf16"}));
  ks->callback([k, runner] { *runner = [k] { return RunKvSearch(*k); }; });
}

}  // namespace gyre::cli
