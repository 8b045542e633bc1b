#include "cli/quantize_command.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "feedback/model_diff.h"
#include "feedback/quant_eval.h"
#include "model/quantize_checkpoint.h"
#include "runtime/model.h"
#include "tokenizer/tokenizer.h"

namespace gyre::cli {

namespace {

using json = nlohmann::json;

int Fail(const Status& s) {
  std::fprintf(stderr, "gyre: error: %s\n", s.ToString().c_str());
  return 1;
}

struct QuantizeArgs {
  std::string model, out, scheme;
  int64_t block = 128;
  std::vector<std::string> keep;
  bool json = false;
};

int RunQuantize(const QuantizeArgs& a) {
  QuantizeOptions o;
  o.scheme = a.scheme == "fp8-block" ? QuantScheme::kFp8Block : QuantScheme::kInt8Channel;
  o.block_n = o.block_k = a.block;
  o.keep = a.keep;
  auto rep = QuantizeCheckpoint(a.model, a.out, o);
  if (!rep) return Fail(rep.error());
  if (a.json) {
    std::printf("%s\n", json{{"scheme", a.scheme},
                             {"out", a.out},
                             {"num_tensors", rep->num_tensors},
                             {"num_quantized", rep->num_quantized},
                             {"num_kept", rep->num_kept},
                             {"bytes_in", rep->bytes_in},
                             {"bytes_out", rep->bytes_out}}
                            .dump(2)
                            .c_str());
  } else {
    std::printf("%s: quantized %lld of %lld tensors (%s; %lld kept by --keep); tensor bytes %lld -> %lld\n",
                a.out.c_str(), (long long)rep->num_quantized, (long long)rep->num_tensors, a.scheme.c_str(),
                (long long)rep->num_kept, (long long)rep->bytes_in, (long long)rep->bytes_out);
  }
  return 0;
}

struct QuantEvalArgs {
  std::string model, text;
  std::vector<std::string> quantized;
  int64_t ctx = 256, max_tokens = 0, diff_tokens = 64;
  bool json = false, weight_only = false;
};

Result<std::string> ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::NotFound("cannot open --text " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  if (ss.str().empty()) return Status::InvalidArgument("--text " + path + " is empty");
  return ss.str();
}

// Per-layer divergence ("layers.{i}" outputs) of one prompt, and the layer whose relative error
// grows most over the previous one.
Result<json> LayerDivergence(const Model& ref, const Model& test, const std::vector<int32_t>& ids) {
  feedback::RunConfig a{&ref, 0, "reference"}, b{&test, 0, "quantized"};
  GYRE_ASSIGN_OR_RETURN(feedback::ModelDiffReport d, feedback::DiffModels(a, b, ids, 1e-3));
  json layers = json::array(), ops = json::array();
  double prev = 0, best_jump = -1;
  std::string worst;
  for (const feedback::DiffEntry& e : d.entries) {
    ops.push_back({{"name", e.name}, {"rel_l2", e.rel_l2}, {"max_abs", e.max_abs}});
    const bool layer_out = e.name.rfind("layers.", 0) == 0 && e.name.find('.', 7) == std::string::npos;
    if (!layer_out && e.name != "logits") continue;
    layers.push_back({{"name", e.name}, {"rel_l2", e.rel_l2}, {"max_abs", e.max_abs}});
    if (e.rel_l2 - prev > best_jump) {
      best_jump = e.rel_l2 - prev;
      worst = e.name;
    }
    prev = e.rel_l2;
  }
  // "outputs": each layer's output and the logits; "ops": every named intermediate in order.
  json r = {{"tokens", ids.size()}, {"outputs", layers}, {"ops", ops}, {"largest_growth", worst},
            {"largest_growth_rel_l2", best_jump}};
  if (d.first) r["first_over_1e-3"] = d.entries[*d.first].name;
  return r;
}

int RunQuantEval(const QuantEvalArgs& a) {
  auto text = ReadText(a.text);
  if (!text) return Fail(text.error());
  auto ref = Model::Load(a.model);
  if (!ref) return Fail(ref.error());
  auto tok = Tokenizer::FromFile(a.model);
  if (!tok) return Fail(tok.error());
  auto ids = (*tok)->Encode(*text, /*parse_special=*/false);
  if (!ids) return Fail(ids.error());
  feedback::LogitCompareOptions o;
  o.ctx = a.ctx;
  o.max_tokens = a.max_tokens;
  json out = {{"reference", a.model}, {"text", a.text}, {"ctx", a.ctx}, {"results", json::array()}};
  std::vector<std::unique_ptr<Model>> models;
  std::vector<const Model*> tests;
  std::vector<std::string> labels;
  for (const std::string& dir : a.quantized) {
    auto q = Model::Load(dir);
    if (!q) return Fail(q.error());
    models.push_back(std::move(*q));
    tests.push_back(models.back().get());
    labels.push_back(dir);
    if (a.weight_only) {  // the same weights without activation quantization
      ModelWeights w = models.back()->weights();
      DropQuantizedStorage(&w);
      models.push_back(Model::FromWeights(models.back()->config(), std::move(w)));
      tests.push_back(models.back().get());
      labels.push_back(dir + " (weight-only)");
    }
  }
  auto reps = feedback::CompareLogits(**ref, tests, *ids, o);
  if (!reps) return Fail(reps.error());
  for (size_t m = 0; m < tests.size(); ++m) {
    const std::string& dir = labels[m];
    const Model* q = tests[m];
    const feedback::LogitCompareReport* rep = &(*reps)[m];
    json r = rep->Json();
    r["model"] = dir;
    r["scheme"] = QuantSchemeName(q->config().quant.scheme);
    r["quant_method"] = q->config().quant.quant_method;
    r["weight_only"] = dir.ends_with("(weight-only)");
    if (a.diff_tokens > 0) {
      std::vector<int32_t> head(ids->begin(), ids->begin() + std::min<size_t>(ids->size(), a.diff_tokens));
      auto div = LayerDivergence(**ref, *q, head);
      if (!div) return Fail(div.error().WithContext(dir));
      r["layer_divergence"] = *div;
    }
    if (!a.json) {
      std::printf("%-40s %-9s ppl %.4f (ref %.4f, x%.4f)  mean KL %.3e  max KL %.3e  top-1 %.4f  (%lld positions)\n",
                  dir.c_str(), r["scheme"].get<std::string>().c_str(), rep->ppl_test(), rep->ppl_ref(),
                  rep->ppl_test() / rep->ppl_ref(), rep->mean_kl(), rep->kl_max, rep->top1_agreement(),
                  (long long)rep->num_positions);
      if (r.contains("layer_divergence")) {
        std::printf("  per-layer rel-L2 on the first %lld tokens:", (long long)a.diff_tokens);
        for (const auto& l : r["layer_divergence"]["outputs"]) std::printf(" %.2e", l["rel_l2"].get<double>());
        std::printf("\n  largest growth at %s\n", r["layer_divergence"]["largest_growth"].get<std::string>().c_str());
      }
    }
    out["results"].push_back(r);
  }
  if (a.json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace

void AddQuantizeCommands(CLI::App& app, std::function<int()>* runner) {
  auto q = std::make_shared<QuantizeArgs>();
  auto* c = app.add_subcommand("quantize", "write a W8A8 quantized checkpoint (fp8-block or int8)");
  c->add_option("--model", q->model, "input model folder (unquantized)")->required();
  c->add_option("--out", q->out, "output folder (created)")->required();
  c->add_option("--scheme", q->scheme, "fp8-block (DeepSeek-V3 / GLM-4.5-FP8 layout) or int8 (gyre-int8)")
      ->required()
      ->check(CLI::IsMember({"fp8-block", "int8"}));
  c->add_option("--block", q->block, "fp8-block: weight block size N for [N, N] blocks (default 128)")
      ->check(CLI::PositiveNumber);
  c->add_option("--keep", q->keep,
                 "regex (searched in the full tensor name) of weights to keep unquantized; repeatable");
  c->add_flag("--json", q->json, "print one JSON object");
  c->callback([q, runner] { *runner = [q] { return RunQuantize(*q); }; });

  auto e = std::make_shared<QuantEvalArgs>();
  auto* ev = app.add_subcommand("quantize-eval", "accuracy of quantized checkpoints vs their reference on a text");
  ev->add_option("--model", e->model, "reference (unquantized) model folder, with tokenizer.json")->required();
  ev->add_option("--quantized", e->quantized, "quantized model folder (repeatable)")->required();
  ev->add_option("--text", e->text, "UTF-8 text file (tokenized whole, no special tokens)")->required();
  ev->add_option("--ctx", e->ctx, "context tokens per window (default 256)")->check(CLI::PositiveNumber);
  ev->add_option("--max-tokens", e->max_tokens, "compare only the text's first N tokens (default: all)")
      ->check(CLI::NonNegativeNumber);
  ev->add_option("--diff-tokens", e->diff_tokens, "tokens of the per-layer divergence prompt (0: skip)")
      ->check(CLI::NonNegativeNumber);
  ev->add_flag("--weight-only", e->weight_only,
               "also run each quantized model without activation quantization (weights dequantized)");
  ev->add_flag("--json", e->json, "print one JSON object");
  ev->callback([e, runner] { *runner = [e] { return RunQuantEval(*e); }; });
}

}  // namespace gyre::cli
