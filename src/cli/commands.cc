// The `gyre` CLI. Contracts (other tools depend on them; keep them stable):
//   gyre generate --model DIR (--prompt TEXT | --ids 1,2,3) [--max-tokens N] [--temperature T]
//                 [--top-p P] [--top-k K] [--min-p P] [--seed S] [--json]
//       streams text to stdout; --json prints {"ids": [...], "text": "...", "finish_reason": "..."}
//       ("text" only when the model folder has a tokenizer).
//   gyre forward --model DIR --ids 1,2,3 --logits-out FILE
//       float32 little-endian row-major [T, vocab] logits of one prefill.
//   gyre tokenize --tokenizer PATH [--decode]
//       stdin UTF-8 → {"ids": [...]}; with --decode stdin {"ids": [...]} → {"text": "..."}.
//   gyre inspect (--model DIR | --config FILE) [--json]
//       architecture, parameters, cache sizes; with --model the quantization scheme with tensor
//       bytes per layer (quantized weights + scales vs high precision). --config: the architecture
//       from a config.json alone (no weights are read or checked).
//   gyre plan (--config FILE | --model DIR) --gpus N --gpu-memory BYTES [...]; see cli/plan_command.h.
//   gyre quantize --model DIR --out DIR --scheme fp8-block|int8   (cli/quantize_command.h)
//   gyre eval --model DIR --text FILE [--ctx N] [--backend cpu|cuda] [--max-tokens N] [--json]
//       perplexity / bits per byte over ctx windows (+ MTP acceptance); see cli/eval_command.h.
// Exit codes: 0 success, 1 failure (bad input data, missing files, ...), 2 usage error.
#include "cli/commands.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <optional>
#include <iostream>
#include <sstream>
#include <sys/stat.h>

#include "cli/eval_command.h"
#include "cli/quantize_command.h"
#include "cli/feedback_commands.h"
#include "cli/plan_command.h"
#include "cli/router_command.h"
#include "cli/serve_command.h"
#include "core/json_depth.h"
#include "core/trace.h"
#include "core/version.h"
#include "feedback/trace_export.h"
#include "model/quantize_checkpoint.h"
#include "runtime/generate.h"
#include "serve/image_inputs.h"
#include "serve/openai_protocol.h"
#include "runtime/model.h"
#include "tokenizer/tokenizer.h"
#ifdef GYRE_CUDA
#include "runtime/cuda_model.h"
#include "runtime/cuda_vision.h"
#endif

namespace gyre::cli {

namespace {

using json = nlohmann::json;

int Fail(const Status& s) {
  std::fprintf(stderr, "gyre: error: %s\n", s.ToString().c_str());
  return 1;
}

Result<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    if (a == std::string::npos) return Status::InvalidArgument("--ids has an empty entry");
    item = item.substr(a, b - a + 1);
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (*end != '\0' || errno != 0 || v < INT32_MIN || v > INT32_MAX) {
      return Status::InvalidArgument("--ids entry '" + item + "' is not an integer");
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) return Status::InvalidArgument("--ids is empty");
  return ids;
}

bool FileExists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

std::string ReadAll(std::istream& in) {
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct GenerateArgs {
  std::string model, prompt, ids;
  std::vector<std::string> images;  // --image FILE (repeatable): PNG / JPEG before the prompt
  int64_t max_tokens = 32;
  float temperature = 0.0f, top_p = 1.0f, min_p = 0.0f;
  int64_t top_k = 0;
  uint64_t seed = 0;
  int64_t prefill_chunk = 0;
  std::string act = "f32";
  std::string trace;  // Chrome trace output (+ .events.jsonl)
  std::string backend = "cpu", weights = "f32";  // cuda: the model on the GPU (fp32 or bf16 GEMM weights)
  bool json = false;
};

Result<ModelOptions> ParseAct(const std::string& act) {
  ModelOptions o;
  if (act == "f32") o.act = ActDType::kF32;
  else if (act == "bf16") o.act = ActDType::kBf16;
  else return Status::InvalidArgument("--act must be f32 or bf16");
  return o;
}

// --image: each image's placeholder block (image start, image tokens, image end) before the
// prompt's ids, and the vision tower's rows for them (docs/vision.md): the CPU tower, or with
// --backend cuda the CUDA tower.
Result<serve::ImagePrompt> ImagePromptForGenerate(const GenerateArgs& a, const std::vector<int32_t>& prompt) {
  serve::ImageInputOptions io;
#ifdef GYRE_CUDA
  if (a.backend == "cuda") {
    io.tower_backend = "cuda";
    io.make_tower = [](const VisionConfig& c, const VisionWeights& w) { return CudaVisionTowerFn(c, w); };
  }
#endif
  GYRE_ASSIGN_OR_RETURN(auto enc, serve::LoadImageEncoder(a.model, io));
  std::vector<serve::EncodedImage> encoded;
  std::string text;
  for (const std::string& path : a.images) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return Status::NotFound("--image " + path + ": cannot open");
    const std::string s = ReadAll(f);
    GYRE_ASSIGN_OR_RETURN(serve::EncodedImage e,
                          serve::EncodeImage(*enc, std::vector<uint8_t>(s.begin(), s.end()), "--image " + path));
    encoded.push_back(std::move(e));
    text += serve::kImageSentinel;
  }
  // The images' blocks have no text around them: the prompt's ids follow.
  GYRE_ASSIGN_OR_RETURN(serve::ImagePrompt ip,
                        serve::BuildImagePrompt(text, encoded, enc->config, [](const std::string&, bool) {
                          return Result<std::vector<int32_t>>(std::vector<int32_t>{});
                        }));
  ip.ids.insert(ip.ids.end(), prompt.begin(), prompt.end());
  return ip;
}

int RunGenerate(const GenerateArgs& a) {
  auto opts = ParseAct(a.act);
  if (!opts) return Fail(opts.error());
  auto model = Model::Load(a.model, *opts);
  if (!model) return Fail(model.error());
  std::unique_ptr<Tokenizer> tok;
  if (FileExists(a.model + "/tokenizer.json")) {
    auto t = Tokenizer::FromFile(a.model);
    if (!t) return Fail(t.error());
    tok = std::move(*t);
  }
  std::vector<int32_t> prompt;
  if (!a.ids.empty()) {
    auto ids = ParseIds(a.ids);
    if (!ids) return Fail(ids.error());
    prompt = *ids;
  } else {
    if (!tok) return Fail(Status::InvalidArgument("--prompt needs a tokenizer.json in " + a.model + " (use --ids)"));
    if (a.prompt.empty()) return Fail(Status::InvalidArgument("the prompt is empty"));
    auto ids = tok->Encode(a.prompt);
    if (!ids) return Fail(ids.error());
    prompt = *ids;
  }
  GenerateOptions go;
  if (!a.images.empty()) {
    auto ip = ImagePromptForGenerate(a, prompt);
    if (!ip) return Fail(ip.error());
    prompt = std::move(ip->ids);
    go.prompt_embeds.push_back(std::move(ip->embeds));
  }
  go.max_tokens = a.max_tokens;
  go.sampling = {a.temperature, a.top_k, a.top_p, a.min_p, a.seed};
  go.prefill_chunk = a.prefill_chunk;
  std::unique_ptr<StreamDecoder> stream;
  if (tok && !a.json) stream = std::make_unique<StreamDecoder>(*tok);
  if (!a.trace.empty()) feedback::StartTrace(/*device=*/a.backend == "cuda");
  auto on_token = [&](size_t, int32_t id) {
    if (a.json) return;
    if (stream) {
      std::fputs(stream->Push(id).c_str(), stdout);
    } else {
      std::printf("%d ", id);
    }
    std::fflush(stdout);
  };
  Result<std::vector<GenerateResult>> res = Status::Internal("no backend");
  if (a.backend == "cuda") {
#ifdef GYRE_CUDA
    CudaModelOptions co;
    co.bf16_weights = a.weights == "bf16";
    co.max_seqs = 2;
    co.max_batch_tokens = std::max<int64_t>(static_cast<int64_t>(prompt.size()), 1);
    co.kv_tokens = static_cast<int64_t>(prompt.size()) + a.max_tokens + 64;
    co.page_tokens = 64;
    auto gpu = CudaModel::FromHost((*model)->config(), (*model)->weights(), co);
    if (!gpu) return Fail(gpu.error());
    res = Generate(**gpu, {prompt}, go, on_token);  // sampling on the device, ids back only
#else
    return Fail(Status::Unimplemented("this gyre was built without CUDA (cmake --preset cuda)"));
#endif
  } else {
    res = Generate(**model, {prompt}, go, on_token);
  }
  if (!a.trace.empty()) {
    auto n = feedback::StopAndWriteTrace(a.trace, {{"command", "generate"}, {"model", a.model}});
    if (!n.ok()) return Fail(n.error());
  }
  if (!res) return Fail(res.error());
  const GenerateResult& r = (*res)[0];
  if (a.json) {
    json out;
    out["ids"] = r.ids;
    if (tok) {
      auto text = tok->Decode(r.ids);
      if (!text) return Fail(text.error());
      out["text"] = *text;
    }
    out["finish_reason"] = r.finish_reason;
    std::printf("%s\n", out.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    if (stream) std::fputs(stream->Flush().c_str(), stdout);
    std::printf("\n");
  }
  return 0;
}

int RunForward(const std::string& model_dir, const std::string& ids_text, const std::string& out_path,
               const std::string& act) {
  auto opts = ParseAct(act);
  if (!opts) return Fail(opts.error());
  auto ids = ParseIds(ids_text);
  if (!ids) return Fail(ids.error());
  auto model = Model::Load(model_dir, *opts);
  if (!model) return Fail(model.error());
  SequenceState st = (*model)->NewSequence();
  SeqInput in{&st, *ids, true};
  std::vector<float> logits;
  Status s = (*model)->Forward(std::span<const SeqInput>(&in, 1), &logits);
  if (!s.ok()) return Fail(s);
  std::FILE* f = std::fopen(out_path.c_str(), "wb");
  if (!f) return Fail(Status::Unavailable("cannot write " + out_path));
  const size_t n = std::fwrite(logits.data(), sizeof(float), logits.size(), f);
  if (std::fclose(f) != 0 || n != logits.size()) return Fail(Status::Unavailable("short write to " + out_path));
  std::fprintf(stderr, "gyre: wrote [%zu, %lld] float32 logits to %s\n", ids->size(),
               static_cast<long long>((*model)->config().vocab_size), out_path.c_str());
  return 0;
}

int RunTokenize(const std::string& path, bool decode) {
  auto tok = Tokenizer::FromFile(path);
  if (!tok) return Fail(tok.error());
  const std::string input = ReadAll(std::cin);
  if (!decode) {
    auto ids = (*tok)->Encode(input);
    if (!ids) return Fail(ids.error());
    std::printf("%s\n", json{{"ids", *ids}}.dump().c_str());
    return 0;
  }
  std::vector<int32_t> ids;
  if (Status d = CheckJsonDepth(input, "stdin"); !d.ok()) return Fail(d);
  try {
    json j = json::parse(input);
    if (!j.is_object() || !j.contains("ids") || !j["ids"].is_array()) {
      return Fail(Status::InvalidArgument("--decode expects {\"ids\": [...]} on stdin"));
    }
    for (const auto& v : j["ids"]) {
      if (!v.is_number_integer()) return Fail(Status::InvalidArgument("ids must be integers"));
      ids.push_back(v.get<int32_t>());
    }
  } catch (const json::exception& e) {
    return Fail(Status::InvalidArgument(std::string("stdin is not valid JSON: ") + e.what()));
  }
  auto text = (*tok)->Decode(ids);
  if (!text) return Fail(text.error());
  std::printf("%s\n", json{{"text", *text}}.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  return 0;
}

// Weight-file facts inspect prints; absent for `inspect --config`.
struct InspectWeights {
  int64_t num_params = 0, num_tensors_used = 0, num_tensors_ignored = 0;
  bool has_mtp = false;
};

Result<ModelConfig> InspectConfig(const std::string& dir, const std::string& config_file) {
  if (config_file.empty()) return LoadModelConfig(dir);
  std::ifstream f(config_file, std::ios::binary);
  if (!f) return Status::NotFound("cannot open --config " + config_file);
  auto c = ParseModelConfig(ReadAll(f));
  if (!c) return c.error().WithContext(config_file);
  return c;
}

int RunInspect(const std::string& dir, const std::string& config_file, bool as_json) {
  if (dir.empty() == config_file.empty()) {
    std::fprintf(stderr, "gyre inspect: give exactly one of --model DIR or --config FILE\n");
    return 2;
  }
  auto cfg = InspectConfig(dir, config_file);
  if (!cfg) return Fail(cfg.error());
  std::optional<InspectWeights> weights;
  std::optional<decltype(BytesByLayer(std::declval<const WeightFiles&>()))> groups;  // with weights
  if (!dir.empty()) {
    auto files = WeightFiles::Open(dir);
    if (!files) return Fail(files.error());
    auto bound = BindWeights(*cfg, **files);
    if (!bound) return Fail(bound.error().WithContext(dir));
    weights = InspectWeights{bound->num_params, bound->num_tensors_used, bound->num_tensors_ignored, bound->has_mtp};
    groups = BytesByLayer(**files);
  }
  const ModelConfig& c = *cfg;
  const ModelSummary s = Summarize(c);
  json layers = json::array();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    json l = {{"index", i}, {"attn", AttnKindName(c.layer_types[i])},
              {"mlp", c.mlp_layer_types[i] == MlpKind::kDense ? "dense" : "moe"}};
    if (c.layer_types[i] == AttnKind::kDsa) l["indexer"] = c.indexer_types[i] == IndexerKind::kFull ? "full" : "shared";
    layers.push_back(l);
  }
  json out = {{"model_type", c.model_type_name},
              {"num_layers", c.num_hidden_layers},
              {"layers_by_kind", {{"kda", s.num_kda}, {"dsa", s.num_dsa}, {"mla", s.num_mla},
                                  {"dense_mlp", s.num_dense}, {"moe", s.num_moe}}},
              {"params_total", s.params_total},
              {"params_active_per_token", s.params_active},
              {"attn_cache_bytes_per_token", s.attn_cache_bytes_per_token},
              {"kda_state_bytes_per_sequence", s.kda_state_bytes_per_sequence},
              {"layers", layers}};
  if (weights) {
    out["params_loaded"] = weights->num_params;
    out["tensors_used"] = weights->num_tensors_used;
    out["tensors_ignored"] = weights->num_tensors_ignored;
    out["mtp_layers"] = weights->has_mtp ? 1 : 0;
  }
  // Quantization: the scheme and the tensor bytes of each layer (docs/quantization.md).
  int64_t q_total = 0, hp_total = 0;
  out["quantization"] = {{"scheme", QuantSchemeName(c.quant.scheme)}, {"quant_method", c.quant.quant_method}};
  if (groups) {
    json bytes = json::object();
    for (const auto& [key, g] : *groups) {
      bytes[key] = {{"quantized", g.quantized}, {"high_precision", g.high_precision},
                    {"quantized_weights", g.num_quantized_weights}};
      q_total += g.quantized;
      hp_total += g.high_precision;
    }
    out["quantization"]["bytes_quantized"] = q_total;
    out["quantization"]["bytes_high_precision"] = hp_total;
    out["quantization"]["bytes_by_layer"] = bytes;
  }
  if (c.quant.scheme == QuantScheme::kFp8Block) {
    out["quantization"]["weight_block_size"] = {c.quant.block_n, c.quant.block_k};
  }
  if (as_json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("model_type        %s (%lld layers: %lld KDA, %lld DSA, %lld MLA; %lld dense MLP, %lld MoE)\n",
              c.model_type_name.c_str(), (long long)c.num_hidden_layers, (long long)s.num_kda, (long long)s.num_dsa,
              (long long)s.num_mla, (long long)s.num_dense, (long long)s.num_moe);
  if (weights) {
    std::printf("parameters        %lld total, %lld active per token (loaded %lld from %lld tensors; %lld ignored)\n",
                (long long)s.params_total, (long long)s.params_active, (long long)weights->num_params,
                (long long)weights->num_tensors_used, (long long)weights->num_tensors_ignored);
  } else {
    std::printf("parameters        %lld total, %lld active per token (text model, from the config; no weights read)\n",
                (long long)s.params_total, (long long)s.params_active);
  }
  std::printf("attention cache   %lld bytes per token (bf16 latent%s)\n", (long long)s.attn_cache_bytes_per_token,
              s.num_dsa ? " + indexer keys" : "");
  std::printf("KDA state         %lld bytes per sequence (conv tail bf16 + fp32 recurrent state)\n",
              (long long)s.kda_state_bytes_per_sequence);
  if (weights && weights->has_mtp) {
    std::printf("MTP layer         layers.%lld (MLA + dense SwiGLU + shared_head; docs/engine.md \"MTP layer\")\n",
                (long long)c.num_hidden_layers);
  }
  if (groups) {
    std::printf("quantization      %s%s: %lld bytes quantized (weights + scales), %lld high precision\n",
                QuantSchemeName(c.quant.scheme),
                c.quant.quant_method.empty() ? "" : (" (quant_method " + c.quant.quant_method + ")").c_str(),
                (long long)q_total, (long long)hp_total);
    for (const auto& [key, g] : *groups) {
      std::printf("  %-15s %10lld quantized (%lld weights) %10lld high precision\n", key.c_str(),
                  (long long)g.quantized, (long long)g.num_quantized_weights, (long long)g.high_precision);
    }
  }
  std::printf("layers           ");
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    std::printf(" %s%s", AttnKindName(c.layer_types[i]), c.mlp_layer_types[i] == MlpKind::kDense ? "" : "+moe");
  }
  std::printf("\n");
  return 0;
}

}  // namespace

int Main(int argc, char** argv) {
  CLI::App app{"gyre: inference engine for GLM-5.3-Flash-class hybrid models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("gyre ") + kGyreVersion);
  // --help shows every option's default (the value its variable holds when the option is made);
  // subcommands made below inherit this.
  app.option_defaults()->always_capture_default();

  GenerateArgs g;
  auto* gen = app.add_subcommand("generate", "generate text from a prompt");
  gen->add_option("--model", g.model, "model folder")->required();
  auto* p_opt = gen->add_option("--prompt", g.prompt, "prompt text");
  auto* i_opt = gen->add_option("--ids", g.ids, "prompt token ids, comma separated");
  p_opt->excludes(i_opt);
  gen->add_option("--image", g.images, "PNG or JPEG file placed before the prompt (repeatable; cpu backend; "
                                        "the model's vision tower)");
  gen->add_option("--max-tokens", g.max_tokens, "maximum new tokens")->check(CLI::NonNegativeNumber);
  gen->add_option("--temperature", g.temperature, "0 = greedy");
  gen->add_option("--top-p", g.top_p);
  gen->add_option("--top-k", g.top_k);
  gen->add_option("--min-p", g.min_p);
  gen->add_option("--seed", g.seed);
  gen->add_option("--prefill-chunk", g.prefill_chunk, "prefill in pieces of N tokens");
  gen->add_option("--act", g.act, "activation dtype: f32 (default) or bf16");
  gen->add_flag("--json", g.json, "print one JSON object");
  gen->add_option("--trace", g.trace,
                  "write a Chrome trace (Perfetto) of the run to this file; with --backend cuda it holds the device "
                  "timeline too (CUPTI: kernels, copies, graph launches)");
  gen->add_option("--backend", g.backend, "cpu (default) or cuda (the model on the GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  gen->add_option("--weights", g.weights, "cuda: f32 (default) or bf16 GEMM weights")
      ->check(CLI::IsMember({"f32", "bf16"}));

  std::string f_model, f_ids, f_out, f_act = "f32";
  auto* fwd = app.add_subcommand("forward", "write the logits of one prefill");
  fwd->add_option("--model", f_model)->required();
  fwd->add_option("--ids", f_ids)->required();
  fwd->add_option("--logits-out", f_out)->required();
  fwd->add_option("--act", f_act, "activation dtype: f32 (default) or bf16");

  std::string t_path;
  bool t_decode = false;
  auto* tokz = app.add_subcommand("tokenize", "encode stdin text, or decode stdin ids");
  tokz->add_option("--tokenizer", t_path, "tokenizer.json or a model folder")->required();
  tokz->add_flag("--decode", t_decode);

  std::string i_model, i_config;
  bool i_json = false;
  auto* insp = app.add_subcommand("inspect", "print the architecture");
  insp->add_option("--model", i_model, "model folder (config.json + weights, checked)");
  insp->add_option("--config", i_config, "a config.json alone (architecture and sizes; no weights)");
  insp->add_flag("--json", i_json);

  std::function<int()> feedback_runner, serve_runner, eval_runner, plan_runner, quantize_runner, router_runner;
  AddFeedbackCommands(app, &feedback_runner);
  AddPlanCommand(app, &plan_runner);
  AddServeCommand(app, &serve_runner);
  AddRouterCommand(app, &router_runner);
  AddEvalCommand(app, &eval_runner);
  AddQuantizeCommands(app, &quantize_runner);

  // vLLM's two-letter short flag, which CLI11 cannot declare: -tp N / -tp=N.
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) {
    const std::string a = argv[i];
    args.push_back(a == "-tp"                   ? "--tensor-parallel-size"
                   : a.rfind("-tp=", 0) == 0   ? "--tensor-parallel-size=" + a.substr(4)
                   : a == "-pp"                ? "--pipeline-parallel-size"
                   : a.rfind("-pp=", 0) == 0   ? "--pipeline-parallel-size=" + a.substr(4)
                                               : a);
  }
  try {
    app.parse(std::move(args));  // CLI11 takes the arguments in reverse order
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (*gen) {
    if (g.prompt.empty() && g.ids.empty()) {
      std::fprintf(stderr, "gyre generate: one of --prompt or --ids is required (and must not be empty)\n");
      return 2;
    }
    return RunGenerate(g);
  }
  if (*fwd) return RunForward(f_model, f_ids, f_out, f_act);
  if (*tokz) return RunTokenize(t_path, t_decode);
  if (*insp) return RunInspect(i_model, i_config, i_json);
  if (feedback_runner) return feedback_runner();
  if (serve_runner) return serve_runner();
  if (router_runner) return router_runner();
  if (eval_runner) return eval_runner();
  if (plan_runner) return plan_runner();
  if (quantize_runner) return quantize_runner();
  return 2;
}

}  // namespace gyre::cli
