#include "cli/eval_command.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <sys/stat.h>

#include "feedback/text_eval.h"
#include "runtime/cpu_runner.h"
#include "runtime/model.h"
#include "tokenizer/tokenizer.h"
#ifdef GYRE_CUDA
#include "runtime/cuda_model.h"
#endif

namespace gyre::cli {

namespace {

struct EvalArgs {
  std::string model, text, backend = "cpu";
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
  e->callback([a, runner] { *runner = [a] { return RunEval(*a); }; });
}

}  // namespace gyre::cli
