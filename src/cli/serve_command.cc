#include "cli/serve_command.h"
#include "cli/disagg_node.h"

#include <CLI/CLI.hpp>

#include <atomic>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <pthread.h>
#include <unistd.h>
#include <sstream>
#include <thread>
#include <tuple>

#include "core/trace.h"
#include "engine/engine.h"
#include "feedback/trace_export.h"
#include "model/config.h"
#include "quant/kv_cache.h"
#include "runtime/kv_policy_flags.h"
#include "runtime/cpu_runner.h"
#include "runtime/model.h"
#include "runtime/model_runner.h"
#ifdef GYRE_CUDA
#include "runtime/cuda_model.h"
#include "runtime/cuda_vision.h"
#ifdef GYRE_HAVE_DEVCOMM
#include "parallel/tp_runner.h"
#endif
#endif
#include "serve/chat_template.h"
#include "serve/launch_options.h"
#include "serve/server.h"
#include "transfer/disagg_runner.h"
#include "transfer/tcp_connection.h"
#include "tokenizer/tokenizer.h"

namespace gyre::cli {

namespace {

constexpr const char* kBundledTemplate = "src/serve/testdata/chat_templates/glm5.jinja";

struct ServeArgs {
  std::string model = "tests/fixtures/glm5_mini";
  bool model_explicit = false;  // --model was given
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string served_model_name;
  std::optional<std::string> api_key;  // --api-key; absent: $GYRE_API_KEY
  int64_t max_num_seqs = EngineOptions{}.max_num_seqs;
  std::string kv_memory = "256M";
  int64_t max_num_batched_tokens = EngineOptions{}.max_num_batched_tokens;
  int64_t long_prefill_token_threshold = -1;  // -1: half of max_num_batched_tokens
  int64_t kv_page_tokens = EngineOptions{}.kv_page_tokens;
  int64_t max_waiting = EngineOptions{}.max_waiting;
  int64_t max_model_len = 0;
  bool allow_long_max_model_len = false;
  // CORS (serve/cors.h): lists as JSON or comma-separated.
  std::string allowed_origins, allowed_methods = "*", allowed_headers = "*";
  std::string chat_template;
  int http_threads = 2;
  std::string act = "f32";
  // Backend.
  std::string backend = "cpu";
  // Disaggregation (docs/disaggregation.md): both (one runner) or local-pair (a prefill and a
  // decode runner in this process, each prefill's cache moved over TCP loopback).
  std::string role = "both";
  int transfer_port = 0;          // --role decode: where caches arrive (0: a free port, printed)
  std::string config;             // --config FILE: random weights (cuda)
  bool random_weights = false;
  std::string tokenizer;          // tokenizer.json for --config (default: the bundled fixture tokenizer)
  std::string allowed_local_media_path;  // image_url file:// under this folder (docs/vision.md)
  int64_t image_cache_mb = 512;   // image embedding cache (serve/image_cache.h); 0: none
  std::string vision_backend = "auto";  // the tower: cpu, cuda, or auto (cuda with --backend cuda)
  std::string dtype = "auto";     // cuda weights: auto (f32 for --model, bf16 for --config), f32, bf16
  double gpu_memory_utilization = 0.9;
  uint64_t seed = 0;
  std::string trace;
  std::string trace_dir;          // --trace-dir DIR: POST /debug/trace writes windows there
  // vLLM launch-line habits (implemented or refused in CheckVllmFlags).
  std::string model_positional;
  int tensor_parallel_size = 1;
  bool tp_shared_gpu = false;
  bool enable_expert_parallel = false;
  int pipeline_parallel_size = 1;
  std::string kv_cache_dtype = "auto";
  std::string kv_cache_policy;  // JSON file (quant/kv_cache.h)
  bool enable_prefix_caching = true;  // as vLLM: on unless --no-enable-prefix-caching
  std::string prefix_cache_checkpoint_bytes = "auto";
  int64_t prefix_cache_checkpoint_interval = EngineOptions{}.prefix_cache_checkpoint_interval_blocks;
  std::string speculative_config;  // vLLM's JSON (ngram, mtp)
  bool disable_log_requests = false;
  std::string log_level = "info", log_format = "text";
  // HTTP hardening knobs (serve::ServerOptions / HttpServerOptions).
  int64_t header_timeout_ms = serve::HttpServerOptions{}.header_timeout_ms;
  int64_t max_connections = serve::HttpServerOptions{}.max_connections;
  int prepare_threads = serve::ServerOptions{}.num_prepare_threads;              // --trace FILE: spans of the whole run, written at shutdown
  bool disable_overlap = false;   // one engine step at a time
};

int Fail(const Status& s) {
  std::fprintf(stderr, "gyre serve: error: %s\n", s.ToString().c_str());
  return 1;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string BaseName(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t slash = dir.rfind('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

// The chat template source and where it came from ("" source when none was found).
std::pair<std::string, std::string> FindChatTemplate(const ServeArgs& a, const TokenizerConfig& tc, Status* error) {
  if (!a.chat_template.empty()) {
    auto t = ReadFile(a.chat_template);
    if (!t.ok()) *error = t.error().WithContext("--chat-template");
    return {t.ok() ? *t : "", a.chat_template};
  }
  // As transformers: a chat_template.jinja file beside the checkpoint wins over the
  // tokenizer_config.json field.
  const std::string file = a.model + "/chat_template.jinja";
  if (auto t = ReadFile(file); t.ok()) return {*t, file};
  if (!tc.chat_template.empty()) return {tc.chat_template, a.model + "/tokenizer_config.json"};
  std::vector<std::string> candidates = {kBundledTemplate};
#ifdef GYRE_SOURCE_DIR
  candidates.push_back(std::string(GYRE_SOURCE_DIR) + "/" + kBundledTemplate);
#endif
  for (const auto& c : candidates) {
    if (auto t = ReadFile(c); t.ok()) return {*t, c};
  }
  return {"", ""};
}

// The vLLM flags a launch line carries: what gyre does with each, or why it refuses it.
Status CheckVllmFlags(const ServeArgs& a) {
  if (a.tensor_parallel_size < 1)
    return Status::InvalidArgument("--tensor-parallel-size must be >= 1, not " + std::to_string(a.tensor_parallel_size));
  if (a.tensor_parallel_size != 1 && a.backend != "cuda")
    return Status::InvalidArgument("--tensor-parallel-size " + std::to_string(a.tensor_parallel_size) +
                                   ": tensor parallelism runs on --backend cuda (docs/parallel.md); the cpu backend "
                                   "serves one rank");
  if (a.pipeline_parallel_size < 1)
    return Status::InvalidArgument("--pipeline-parallel-size must be >= 1, not " + std::to_string(a.pipeline_parallel_size));
  if (a.pipeline_parallel_size != 1 && a.backend != "cuda")
    return Status::InvalidArgument("--pipeline-parallel-size " + std::to_string(a.pipeline_parallel_size) +
                                   ": layer split runs on --backend cuda (docs/parallel.md)");
  if (a.pipeline_parallel_size != 1 && a.tensor_parallel_size != 1)
    return Status::InvalidArgument("--pipeline-parallel-size with --tensor-parallel-size: one of the two at a time "
                                   "for now (docs/parallel.md)");
  if (a.enable_expert_parallel && a.tensor_parallel_size == 1)
    return Status::InvalidArgument("--enable-expert-parallel needs --tensor-parallel-size >= 2 (the experts are "
                                   "split over the TP ranks)");
  if (a.tp_shared_gpu && a.tensor_parallel_size == 1 && a.pipeline_parallel_size == 1)
    return Status::InvalidArgument("--tp-shared-gpu needs --tensor-parallel-size or --pipeline-parallel-size >= 2");
  if (Result<KvDtype> kv = ParseKvDtype(a.kv_cache_dtype); !kv.ok()) {
    return Status::InvalidArgument("--kv-cache-dtype: " + kv.error().message());
  } else if (a.backend != "cuda" && (*kv != KvDtype::kF32 || !a.kv_cache_policy.empty())) {
    return Status::InvalidArgument(std::string(a.kv_cache_policy.empty() ? "--kv-cache-dtype " + a.kv_cache_dtype
                                                                          : "--kv-cache-policy") +
                                   ": quantized KV caches run on --backend cuda; the CPU engine keeps its cache in "
                                   "fp32 (docs/quantization.md \"KV cache dtype\")");
  }
  if (!a.kv_cache_policy.empty() && a.kv_cache_dtype != "auto")
    return Status::InvalidArgument("--kv-cache-policy with --kv-cache-dtype " + a.kv_cache_dtype +
                                   ": give one of the two (the policy file has its own \"default\")");
  if (!a.model_positional.empty() && a.model_explicit && a.model_positional != a.model)
    return Status::InvalidArgument("the model is given twice: '" + a.model_positional + "' and --model '" +
                                   a.model + "'");
  return Status::Ok();
}

// --role local-pair: two CPU runners sized as Engine::Create(model) sizes one, a TCP loopback
// link, and the DisaggRunner over them. Members are declared in destruction-safe order.
struct DisaggPair {
  std::unique_ptr<CpuRunner> prefill, decode;
  std::unique_ptr<transfer::Connection> to_decode, from_prefill;
  std::unique_ptr<transfer::DisaggRunner> runner;
};

// Image inputs (docs/vision.md): the vision tower of a model that has one, on the CPU or on the GPU
// (`tower_backend` cuda: runtime/cuda_vision.h, fp32 weights on the current device). The language
// model's backend is independent: either takes the rows. Servers of random weights (--config)
// refuse images (with the reason in the 400).
Status AttachImageEncoder(const std::string& model_dir, bool random_weights, const std::string& media_path,
                          int64_t cache_mb, const std::string& tower_backend, serve::ServerDeps* deps) {
  if (random_weights) {
    deps->images_refused_reason = "a server of random weights (--config) has no vision tower (docs/vision.md)";
    return Status::Ok();
  }
  serve::ImageInputOptions o;
  o.allowed_local_media_path = media_path;
  o.cache_bytes = cache_mb << 20;
  o.tower_backend = tower_backend;
  if (tower_backend == "cuda") {
#ifdef GYRE_CUDA
    o.make_tower = [](const VisionConfig& c, const VisionWeights& w) { return CudaVisionTowerFn(c, w); };
#else
    return Status::Unimplemented("--vision-backend cuda: this gyre was built without CUDA (cmake --preset cuda)");
#endif
  }
  auto enc = serve::LoadImageEncoder(model_dir, o);
  if (enc.ok()) {
    deps->images = *enc;
  } else if (enc.status().code() == StatusCode::kNotFound && enc.status().message().find("vision_config") != std::string::npos) {
    deps->images_refused_reason = "the model has no vision tower";
  } else {
    return enc.status().WithContext("vision tower");
  }
  return Status::Ok();
}

Result<DisaggPair> MakeLocalPair(const Model& model, const EngineOptions& eo) {
  CpuRunnerOptions ro;
  ro.page_tokens = eo.kv_page_tokens;
  ro.num_slots = eo.max_num_seqs;
  const bool mtp = eo.speculative.method == "mtp";
  ro.mtp_drafts = mtp ? eo.speculative.num_speculative_tokens : 0;
  ro.num_pages = CpuRunner::PagesForBytes(model.config(), eo.kv_page_tokens, eo.kv_memory_bytes, mtp);
  DisaggPair p;
  GYRE_ASSIGN_OR_RETURN(p.prefill, CpuRunner::Create(model, ro));
  GYRE_ASSIGN_OR_RETURN(p.decode, CpuRunner::Create(model, ro));
  GYRE_ASSIGN_OR_RETURN(auto listener, transfer::TcpListener::Listen("127.0.0.1", 0));
  Result<std::unique_ptr<transfer::Connection>> accepted = Status::Internal("no connection");
  std::thread acc([&] { accepted = listener->Accept(std::chrono::milliseconds(10000)); });
  auto connected = transfer::TcpConnect("127.0.0.1", listener->port(), std::chrono::milliseconds(10000));
  acc.join();
  if (!connected.ok()) return connected.error();
  if (!accepted.ok()) return accepted.error();
  p.to_decode = std::move(*connected);
  p.from_prefill = std::move(*accepted);
  GYRE_ASSIGN_OR_RETURN(p.runner, transfer::DisaggRunner::Create(*p.prefill, *p.decode, *p.to_decode,
                                                                 *p.from_prefill, {}));
  return p;
}

int RunServe(ServeArgs a) {
  if (Status s = CheckVllmFlags(a); !s.ok()) {
    std::fprintf(stderr, "gyre serve: %s\n", s.ToString().c_str());
    return 2;
  }
  if (!a.model_positional.empty()) a.model = a.model_positional;
  auto log_level = serve::ParseLogLevel(a.log_level);
  auto log_format = serve::ParseLogFormat(a.log_format);
  for (const Status& s : {log_level.status(), log_format.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "gyre serve: %s\n", s.message().c_str());
      return 2;
    }
  }
  auto log = std::make_shared<const serve::Log>(*log_level, *log_format, /*access_enabled=*/!a.disable_log_requests);
  serve::CorsOptions cors;
  for (auto [flag, text, out] : {std::tuple{"--allowed-origins", &a.allowed_origins, &cors.allowed_origins},
                                 std::tuple{"--allowed-methods", &a.allowed_methods, &cors.allowed_methods},
                                 std::tuple{"--allowed-headers", &a.allowed_headers, &cors.allowed_headers}}) {
    auto list = serve::ParseCorsList(*text, flag);
    if (!list.ok()) {
      std::fprintf(stderr, "gyre serve: %s\n", list.status().message().c_str());
      return 2;
    }
    *out = std::move(*list);
  }
  // Block the shutdown signals before any thread starts, so every thread inherits the mask and
  // only sigwait below receives them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  int64_t checkpoint_bytes = 0;  // 0: auto
  if (a.prefix_cache_checkpoint_bytes != "auto") {
    const auto b = ParseByteSize(a.prefix_cache_checkpoint_bytes);
    if (!b || *b <= 0) {
      std::fprintf(stderr, "gyre serve: --prefix-cache-checkpoint-bytes '%s' is not a byte size (e.g. 64M, 1G) or auto\n",
                   a.prefix_cache_checkpoint_bytes.c_str());
      return 2;
    }
    if (!a.enable_prefix_caching) {
      std::fprintf(stderr, "gyre serve: --prefix-cache-checkpoint-bytes needs prefix caching (drop --no-enable-prefix-caching)\n");
      return 2;
    }
    checkpoint_bytes = *b;
  }
  const auto kv_bytes = ParseByteSize(a.kv_memory);
  if (!kv_bytes || *kv_bytes <= 0) {
    std::fprintf(stderr, "gyre serve: --kv-memory '%s' is not a byte size (e.g. 268435456, 256M, 1G)\n",
                 a.kv_memory.c_str());
    return 2;
  }
  ModelOptions mo;
  if (a.act == "bf16") mo.act = ActDType::kBf16;
  else if (a.act != "f32") return Fail(Status::InvalidArgument("--act must be f32 or bf16"));

  const bool cuda = a.backend == "cuda";
  const bool random = !a.config.empty();
  if (random && !cuda) return Fail(Status::InvalidArgument("--config (random weights) needs --backend cuda"));
  // Prefill and decode instances run on either backend (the sequence image of the CUDA model is
  // read and written by device copies); the two-runner local pair is built from CPU runners only.
  if (a.role == "local-pair" && cuda)
    return Fail(Status::Unimplemented("--role local-pair runs on the cpu backend only (docs/disaggregation.md); "
                                      "--role prefill / decode run on cuda"));
  if (a.role != "both" && (a.tensor_parallel_size > 1 || a.pipeline_parallel_size > 1))
    return Fail(Status::Unimplemented("--role " + a.role + " with --tensor-parallel-size: the TP runner does not "
                                      "export or import sequence caches yet (docs/parallel.md)"));
  if (a.random_weights && !random) return Fail(Status::InvalidArgument("--random-weights needs --config FILE"));
  // An encode instance runs the vision tower (cpu) and loads no language model.
  const bool encode_only = a.role == "encode";
  if (encode_only && (cuda || random))
    return Fail(Status::Unimplemented("--role encode runs the vision tower on the cpu backend (docs/vision.md): "
                                      "drop --backend cuda and --config"));
  std::unique_ptr<Model> model;   // the CPU model (cpu backend; host weights for --backend cuda --model)
  ModelConfig config;
  std::string tok_path = a.model;
  std::string model_name = BaseName(a.model);
  if (random) {
    auto text = ReadFile(a.config);
    if (!text.ok()) return Fail(text.error());
    auto c = ParseModelConfig(*text);
    if (!c.ok()) return Fail(c.error().WithContext(a.config));
    config = *c;
    tok_path = a.tokenizer.empty() ? "tests/fixtures/tokenizer/tokenizer.json" : a.tokenizer;
    model_name = BaseName(a.config);
  } else if (encode_only) {  // the config alone (vocabulary, EOS ids, context length)
    auto c = LoadModelConfig(a.model);
    if (!c.ok()) return Fail(c.error());
    config = *c;
    if (!a.tokenizer.empty()) tok_path = a.tokenizer;
  } else {
    auto m = Model::Load(a.model, mo);
    if (!m.ok()) return Fail(m.error());
    model = std::move(*m);
    config = model->config();
    if (!a.tokenizer.empty()) tok_path = a.tokenizer;
  }
  auto tok = Tokenizer::FromFile(tok_path);
  if (!tok.ok()) return Fail(tok.error().WithContext(random ? "--tokenizer" : "the model folder needs a tokenizer.json"));
  if (Status m = serve::CheckTokenizerMatchesModel(**tok, config); !m.ok()) return Fail(m.WithContext(tok_path));
  TokenizerConfig tc;
  if (!random) {
    if (auto c = LoadTokenizerConfig(a.model); c.ok()) {
      tc = *c;
    } else if (c.error().code() != StatusCode::kNotFound) {
      return Fail(c.error());
    }
  }

  Status tpl_error;
  auto [tpl_source, tpl_origin] = FindChatTemplate(a, tc, &tpl_error);
  if (!tpl_error.ok()) return Fail(tpl_error);
  std::shared_ptr<ChatTemplate> tpl;
  if (!tpl_source.empty()) {
    auto t = ChatTemplate::Compile(tpl_source);
    if (!t.ok()) return Fail(t.error().WithContext(tpl_origin));
    tpl = std::move(*t);
  } else {
    log->Message(serve::LogLevel::kWarning, "gyre serve: no chat template (no --chat-template, none in " + a.model +
                                                ", no " + kBundledTemplate + "); /v1/chat/completions will fail");
  }

  auto max_model_len = serve::CheckMaxModelLen(a.max_model_len, config.max_position_embeddings,
                                              a.allow_long_max_model_len);
  if (!max_model_len.ok()) {
    std::fprintf(stderr, "gyre serve: %s\n", max_model_len.status().message().c_str());
    return 2;
  }
  EngineOptions eo;
  eo.max_num_seqs = a.max_num_seqs;
  eo.kv_page_tokens = a.kv_page_tokens;
  eo.kv_memory_bytes = *kv_bytes;
  eo.max_num_batched_tokens = a.max_num_batched_tokens;
  eo.long_prefill_token_threshold = a.long_prefill_token_threshold >= 0
                                        ? a.long_prefill_token_threshold
                                        : std::max<int64_t>(1, a.max_num_batched_tokens / 2);
  eo.max_waiting = a.max_waiting;
  eo.max_model_len = *max_model_len;
  eo.max_model_len_cap = config.max_position_embeddings;
  eo.overlap_steps = !a.disable_overlap;
  eo.enable_prefix_caching = a.enable_prefix_caching;
  eo.prefix_cache_checkpoint_interval_blocks = a.prefix_cache_checkpoint_interval;
  eo.prefix_cache_checkpoint_bytes = checkpoint_bytes;
  if (!a.speculative_config.empty()) {
    Result<SpeculativeOptions> so = ParseSpeculativeConfig(a.speculative_config);
    if (!so.ok()) {
      std::fprintf(stderr, "gyre serve: %s\n", so.status().message().c_str());
      return 2;
    }
    eo.speculative = *so;
  }
  // The vision tower first: on the GPU its weights and scratch are allocated before the CUDA model
  // sizes its cache from the free memory.
  serve::ServerDeps deps;
  const std::string tower_backend = a.vision_backend == "auto" ? (cuda ? "cuda" : "cpu") : a.vision_backend;
  if (Status s = AttachImageEncoder(a.model, random, a.allowed_local_media_path, a.image_cache_mb, tower_backend, &deps);
      !s.ok())
    return Fail(s);
  if (a.role == "encode" && !deps.images)
    return Fail(Status::InvalidArgument("--role encode needs a model with a vision tower: " +
                                        deps.images_refused_reason));
  Result<std::unique_ptr<Engine>> engine = Status::Internal("no backend");
  std::unique_ptr<ModelRunner> runner;  // --backend cuda: the GPU model (outlives the engine)
  DisaggPair disagg;                    // --role local-pair (outlives the engine)
  std::string backend_line = "cpu";
  if (encode_only) {
    engine = MakeNoGenerationEngine(config, *max_model_len > 0 ? *max_model_len : config.max_position_embeddings,
                                    "this is an encode instance (gyre serve --role encode): it runs the vision tower "
                                    "for the router and generates nothing; send requests to the router");
    backend_line = tower_backend + " vision tower only (no language model loaded)";
  } else if (cuda) {
#ifdef GYRE_CUDA
    CudaModelOptions co;
    co.bf16_weights = a.dtype == "bf16" || a.dtype == "bfloat16" || (a.dtype == "auto" && random);
    co.max_seqs = a.max_num_seqs;
    co.max_batch_tokens = a.max_num_batched_tokens;
    co.page_tokens = a.kv_page_tokens;
    co.seed = a.seed;
    co.gpu_memory_utilization = a.gpu_memory_utilization;
    co.reserve_bytes = checkpoint_bytes;  // an explicit prefix-cache checkpoint budget is not the pool's
    // auto: a tenth of the memory budget or 4 states per sequence slot if more, at most a quarter,
    // kept out of the pool for the checkpoints (the engine's own
    // auto, max(256M, 4 states), is too small on the GPU: 4 of the full-depth model's 152 MB
    // states, which 4 conversations evict before their next turn).
    if (a.enable_prefix_caching && checkpoint_bytes == 0 && a.gpu_memory_utilization > 0) {
      co.reserve_fraction = 0.1;
      co.reserve_min_states = 4 * a.max_num_seqs;
    }
    co.max_seq_tokens = a.max_model_len > 0 ? a.max_model_len : int64_t(1) << 17;  // block-table width
    // Speculative decoding: the ReplaySSM rings for 1 + num_speculative_tokens tokens per slot.
    if (!eo.speculative.method.empty()) co.speculative_tokens = eo.speculative.num_speculative_tokens;
    // MTP drafts: the checkpoint's MTP layer on the device, drafting that many tokens.
    if (eo.speculative.method == "mtp") co.mtp_drafts = eo.speculative.num_speculative_tokens;
    {
      Result<KvCachePolicy> kvp = KvPolicyFromFlags(config, a.kv_cache_dtype, a.kv_cache_policy);
      if (!kvp.ok()) return Fail(kvp.error());
      co.kv_cache = std::move(*kvp);
    }
    Result<std::unique_ptr<ModelRunner>> gpu = Status::Internal("no runner");
    CudaModelStats st;
    std::string tp_line;
    const int ranks = std::max(a.tensor_parallel_size, a.pipeline_parallel_size);
    if (ranks > 1) {
#ifdef GYRE_HAVE_DEVCOMM
      if (random)
        return Fail(Status::Unimplemented("--tensor-parallel-size with --config (random weights): the ranks shard "
                                          "host weights; give --model DIR"));
      parallel::TpRunnerOptions to;
      to.size = ranks;
      to.pipeline = a.pipeline_parallel_size > 1;
      to.comm = a.tp_shared_gpu ? parallel::TpRunnerOptions::Comm::kShared : parallel::TpRunnerOptions::Comm::kNccl;
      to.model = co;
      to.expert_parallel = a.enable_expert_parallel;
      auto tp = parallel::TpRunner::Create(config, model->weights(), to);
      if (!tp.ok()) return Fail(tp.status());
      for (int r = 0; r < (*tp)->size(); ++r) {
        const CudaModelStats rs = (*tp)->rank_model(r).stats();
        st.weight_bytes += rs.weight_bytes;
        st.kv_bytes += rs.kv_bytes;
        st.state_bytes += rs.state_bytes;
        st.scratch_bytes += rs.scratch_bytes;
        st.reserved_bytes += rs.reserved_bytes;
      }
      tp_line = std::string(to.pipeline ? "; layer split over " : "; tensor parallel ") + std::to_string(ranks) +
                (a.tp_shared_gpu ? " ranks as threads sharing GPU 0" : " ranks over NCCL") +
                (a.enable_expert_parallel ? ", experts split by expert" : "") + ", totals over ranks";
      gpu = std::unique_ptr<ModelRunner>(std::move(*tp));
#else
      return Fail(Status::Unimplemented("--tensor-parallel-size: this gyre was built without NCCL"));
#endif
    } else {
      auto one = random ? CudaModel::Random(config, co) : CudaModel::FromHost(config, model->weights(), co);
      if (!one.ok()) return Fail(one.error());
      st = (*one)->stats();
      gpu = std::unique_ptr<ModelRunner>(std::move(*one));
    }
    if (!gpu.ok()) return Fail(gpu.status());
    const RunnerCapacity cap = (*gpu)->capacity();
    char line[512];
    std::snprintf(line, sizeof line,
                  "cuda (%s weights, %.2f GiB; KV pool %lld pages x %lld tokens = %.2f GiB, from "
                  "--gpu-memory-utilization %.2f; %lld state slots = %.2f GiB; scratch %.2f GiB)",
                  co.bf16_weights ? "bf16" : "f32", st.weight_bytes / 1073741824.0,
                  static_cast<long long>(cap.num_pages), static_cast<long long>(cap.page_tokens),
                  st.kv_bytes / 1073741824.0, a.gpu_memory_utilization, static_cast<long long>(cap.num_slots),
                  st.state_bytes / 1073741824.0, st.scratch_bytes / 1073741824.0);
    KvCachePolicy attn_only;
    for (int64_t l = 0; l < config.num_hidden_layers; ++l)
      if (config.layer_types[l] != AttnKind::kKda) attn_only.layers.push_back(co.kv_cache.layers[l]);
    backend_line = line + tp_line + "; KV cache " + attn_only.Describe();
    if (co.reserve_fraction > 0 && st.reserved_bytes > 0) {
      eo.prefix_cache_checkpoint_bytes = st.reserved_bytes;
      std::snprintf(line, sizeof line, "; prefix-cache checkpoints %.2f GiB (auto: max(0.1 of the budget, 4 states per slot), <= 0.25)",
                    st.reserved_bytes / 1073741824.0);
      backend_line += line;
    }
    runner = std::move(*gpu);
    eo.max_model_len = a.max_model_len > 0 ? a.max_model_len : std::min(co.max_seq_tokens, cap.num_pages * cap.page_tokens);
    if (a.max_model_len == 0 && config.max_position_embeddings > 0) {
      eo.max_model_len = std::min(eo.max_model_len, config.max_position_embeddings);
    }
    engine = Engine::Create(*runner, eo);
#else
    return Fail(Status::Unimplemented("this gyre was built without CUDA (cmake --preset cuda)"));
#endif
  } else {
    // The CPU runner allocates every KDA state slot up front: refuse a count that cannot fit in
    // this machine's memory instead of dying on the allocation (std::bad_alloc, or the OOM killer).
    const int64_t slot_bytes = Summarize(config).kda_state_bytes_per_sequence;
    const int64_t ram = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
    if (slot_bytes > 0 && ram > 0 && a.max_num_seqs > ram / slot_bytes / 2) {
      std::fprintf(stderr,
                   "gyre serve: --max-num-seqs %lld: each sequence's KDA state takes %lld bytes, so at most %lld fit "
                   "in half of this machine's %lld MiB of memory\n",
                   static_cast<long long>(a.max_num_seqs), static_cast<long long>(slot_bytes),
                   static_cast<long long>(ram / slot_bytes / 2), static_cast<long long>(ram >> 20));
      return 2;
    }
    if (a.role == "local-pair") {
      Result<DisaggPair> pair = MakeLocalPair(*model, eo);
      if (!pair.ok()) return Fail(pair.error());
      disagg = std::move(*pair);
      eo.enable_prefix_caching = false;  // KDA checkpoints do not cross the hand-off yet
      backend_line = "cpu, disaggregated: prefill and decode runners in this process, cache over TCP loopback";
      engine = Engine::Create(*disagg.runner, eo);
    } else {
      engine = Engine::Create(*model, eo);
    }
  }
  if (!engine.ok()) return Fail(engine.error());
  if (Status s = (*engine)->Start(); !s.ok()) return Fail(s);
  std::unique_ptr<DisaggNode> node;  // --role prefill|decode|encode (stopped before the engine)
  if (a.role == "prefill" || a.role == "decode" || a.role == "encode") {
    DisaggNodeOptions no;
    no.role = a.role == "prefill"  ? DisaggRole::kPrefill
              : a.role == "decode" ? DisaggRole::kDecode
                                   : DisaggRole::kEncode;
    no.transfer_host = a.host;
    no.transfer_port = a.transfer_port;
    if (deps.images) no.tower_fingerprint = TowerFingerprint(*deps.images);
    auto n = DisaggNode::Create(engine->get(), no);
    if (!n.ok()) {
      (*engine)->Stop();
      return Fail(n.error().WithContext("--transfer-port"));
    }
    node = std::move(*n);
    backend_line += a.role == "prefill"  ? "; disaggregated prefill instance (caches sent to the decode instance the "
                                           "router names), image rows arrive on transfer port " +
                                               std::to_string(node->transfer_port())
                    : a.role == "decode" ? "; disaggregated decode instance, caches arrive on transfer port " +
                                               std::to_string(node->transfer_port())
                                         : std::string("; encode instance (image rows sent to the instances the "
                                                       "router names)");
  }

  deps.engine = engine->get();
  deps.tokenizer = tok->get();
  deps.tokenizer_config = tc;
  deps.disagg = node.get();
  if (tpl) {
    deps.render_chat = [tpl](const serve::Json& ctx) { return tpl->Render(ctx); };
  }
  if (!a.trace_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.trace_dir, ec);
    if (ec) {
      (*engine)->Stop();
      return Fail(Status::InvalidArgument("--trace-dir " + a.trace_dir + ": " + ec.message()));
    }
    auto device_on = std::make_shared<bool>(false);
    deps.trace.start = [device_on, cuda = a.backend == "cuda"]() -> Status {
      *device_on = feedback::StartTrace(/*device=*/cuda);
      return Status::Ok();
    };
    deps.trace.stop = [device_on, dir = a.trace_dir, backend = a.backend]() -> Result<nlohmann::ordered_json> {
      static std::atomic<int> n_windows{0};
      char stamp[32];
      const std::time_t now = std::time(nullptr);
      std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", std::gmtime(&now));
      const std::string path = dir + "/trace-" + stamp + "-" + std::to_string(n_windows++) + ".json";
      auto n = feedback::StopAndWriteTrace(path, {{"command", "serve"}, {"window", true}, {"backend", backend}});
      if (!n.ok()) return n.status();
      return nlohmann::ordered_json{{"path", path}, {"events", *n}, {"device_timeline", *device_on}};
    };
  }
  serve::ServerOptions so;
  so.http.host = a.host;
  so.http.port = a.port;
  so.http.num_threads = a.http_threads;
  so.http.header_timeout_ms = a.header_timeout_ms;
  so.http.max_connections = a.max_connections;
  so.num_prepare_threads = a.prepare_threads;
  so.served_model_name = a.served_model_name.empty() ? model_name : a.served_model_name;
  so.api_key = serve::ResolveApiKey(a.api_key, std::getenv(serve::kApiKeyEnv));  // read once, here
  so.kv_page_tokens = a.kv_page_tokens;
  so.cors = cors;
  so.log = log;
  auto server = serve::Server::Create(std::move(deps), so);
  if (!server.ok()) {
    (*engine)->Stop();
    return Fail(server.error());
  }
  if (Status s = (*server)->Start(); !s.ok()) {
    (*engine)->Stop();
    return Fail(s);
  }
  if (!a.trace.empty()) feedback::StartTrace(/*device=*/a.backend == "cuda");
  std::printf("%s\n", (*server)->Banner().c_str());
  std::printf("gyre serve: backend %s\n", backend_line.c_str());
  if (deps.images) std::printf("gyre serve: image inputs on; the vision tower runs on %s\n", tower_backend.c_str());
  if (!tpl_origin.empty()) std::printf("gyre serve: chat template from %s\n", tpl_origin.c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&sigs, &sig);
  std::fprintf(stderr, "gyre serve: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  (*server)->Stop();
  if (node) node->Stop();
  // Before the engine (and its GPU context) goes: the device trace flushes from a live context.
  if (!a.trace.empty()) {
    auto n = feedback::StopAndWriteTrace(a.trace, {{"command", "serve"}, {"backend", a.backend}});
    if (!n.ok()) return Fail(n.error());
    std::fprintf(stderr, "gyre serve: wrote %zu trace events to %s\n", *n, a.trace.c_str());
  }
  server->reset();
  (*engine)->Stop();  // (held exports end here, before the node that holds their sinks' target goes)
  node.reset();
  engine->reset();
  std::fprintf(stderr, "gyre serve: stopped\n");
  return 0;
}

}  // namespace

std::optional<int64_t> ParseByteSize(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  const std::string num = text.substr(0, i);
  if (std::count(num.begin(), num.end(), '.') > 1) return std::nullopt;
  std::string suf = text.substr(i);
  for (auto& c : suf) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 1;
  if (suf.empty() || suf == "B") mult = 1;
  else if (suf == "K" || suf == "KI" || suf == "KIB") mult = 1024.0;
  else if (suf == "M" || suf == "MI" || suf == "MIB") mult = 1024.0 * 1024;
  else if (suf == "G" || suf == "GI" || suf == "GIB") mult = 1024.0 * 1024 * 1024;
  else if (suf == "T" || suf == "TI" || suf == "TIB") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (suf == "KB") mult = 1e3;
  else if (suf == "MB") mult = 1e6;
  else if (suf == "GB") mult = 1e9;
  else if (suf == "TB") mult = 1e12;
  else return std::nullopt;
  const double v = std::strtod(num.c_str(), nullptr) * mult;
  if (!std::isfinite(v) || v >= 9.2e18) return std::nullopt;
  return static_cast<int64_t>(v);
}

void AddServeCommand(CLI::App& app, std::function<int()>* runner) {
  auto args = std::make_shared<ServeArgs>();
  auto* s = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  s->add_option("MODEL", args->model_positional, "model folder, as vLLM's `vllm serve MODEL` (same as --model)");
  s->add_option("--model", args->model, "model folder (default tests/fixtures/glm5_mini, the bundled trained model)")
      ->each([args](const std::string&) { args->model_explicit = true; });
  s->add_option("--host", args->host, "address to listen on (default 127.0.0.1)");
  s->add_option("--port", args->port, "port (default 8000; 0 picks a free one)")->check(CLI::Range(0, 65535));
  s->add_option("--served-model-name", args->served_model_name, "model name in the API (default: the folder name)");
  s->add_option("--api-key", args->api_key,
                "require 'Authorization: Bearer KEY' on /v1/*, /tokenize and /detokenize (default: $GYRE_API_KEY; "
                "unset or empty: no key; --api-key '' turns it off whatever the environment says)");
  s->add_option("--max-num-seqs", args->max_num_seqs, "concurrent sequences (KDA state slots)")
      ->check(CLI::PositiveNumber);
  s->add_option("--kv-memory", args->kv_memory, "latent KV-cache budget in bytes (suffixes K, M, G; default 256M)");
  s->add_option("--max-num-batched-tokens", args->max_num_batched_tokens, "token budget per engine step")
      ->check(CLI::PositiveNumber);
  s->add_option("--long-prefill-token-threshold", args->long_prefill_token_threshold,
                "while a request waits, cap a running prefill's piece at N tokens so the waiting one starts "
                "(default: half of --max-num-batched-tokens; 0: off)")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--kv-page-tokens", args->kv_page_tokens, "tokens per KV page")->check(CLI::PositiveNumber);
  s->add_option("--max-waiting", args->max_waiting, "queue bound; beyond it requests get 429")
      ->check(CLI::PositiveNumber);
  s->add_option("--max-model-len", args->max_model_len,
                "context length (default: what the KV budget holds, at most config.json's max_position_embeddings; "
                "a longer value is refused unless --allow-long-max-model-len)")
      ->check(CLI::NonNegativeNumber);
  s->add_flag("--allow-long-max-model-len", args->allow_long_max_model_len,
              "accept a --max-model-len beyond the model's max_position_embeddings (positions it was never trained on)");
  s->add_option("--allowed-origins", args->allowed_origins,
                "CORS: origins browsers may call from, as a JSON list or comma-separated ('*': any; default: none, "
                "no CORS headers)");
  s->add_option("--allowed-methods", args->allowed_methods, "CORS: methods a preflight may ask for ('*': any)")
      ->capture_default_str();
  s->add_option("--allowed-headers", args->allowed_headers, "CORS: request headers a preflight may ask for ('*': any)")
      ->capture_default_str();
  s->add_option("--chat-template", args->chat_template, "Jinja chat template file");
  s->add_option("--http-threads", args->http_threads, "HTTP I/O threads (default 2)")->check(CLI::Range(1, 256));
  s->add_option("--act", args->act, "cpu: activation dtype f32 (default) or bf16");
  s->add_option("--role", args->role,
                "both (default: prefill and decode here), prefill (a disaggregated prefill instance: runs the prompts "
                "`gyre router` sends, and sends each cache, DSA pages + KDA state + first token, to the decode "
                "instance the router names; frees it when acknowledged), decode (receives caches on --transfer-port, "
                "verifies every checksum and decodes), or local-pair (cpu: prefill and decode on two runners of this "
                "process, the cache over TCP loopback; no prefix caching), or encode (no language model: runs the vision tower, --vision-backend, on "
                "the images of the requests the router sends and sends their rows to the prefill and decode "
                "instances; docs/vision.md). docs/disaggregation.md")
      ->check(CLI::IsMember({"both", "prefill", "decode", "local-pair", "encode"}));
  s->add_option("--transfer-port", args->transfer_port,
                "--role decode: TCP port (on --host) where prefill instances send caches; --role prefill|decode: "
                "where encode instances send image rows; 0 (default) picks a free one, printed at startup and "
                "reported by GET /disagg/status")
      ->check(CLI::Range(0, 65535));
  s->add_option("--allowed-local-media-path", args->allowed_local_media_path,
                "image_url parts may name file:// images inside this folder (default: file:// refused)");
  s->add_option("--image-cache-mb", args->image_cache_mb,
                "MiB of image embeddings kept by content (a repeated image is encoded once; LRU); 0 turns the cache off")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  s->add_option("--vision-backend", args->vision_backend,
                "where the vision tower runs: cpu, cuda (fp32 on the GPU), or auto (default: cuda with --backend cuda, "
                "else cpu); --role encode may run it on cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  s->add_option("--backend", args->backend, "cpu (default) or cuda (the model on one GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  s->add_option("--config", args->config, "cuda: config.json served with random weights built on the GPU (benchmarks)");
  s->add_flag("--random-weights", args->random_weights, "with --config (the default for --config)");
  s->add_option("--tokenizer", args->tokenizer, "tokenizer.json (default: the model folder's; with --config the bundled one)");
  s->add_option("--dtype", args->dtype, "cuda weights: auto (f32 for --model, bf16 for --config), f32, bf16")
      ->check(CLI::IsMember({"auto", "f32", "float32", "bf16", "bfloat16"}));
  s->add_option("--gpu-memory-utilization", args->gpu_memory_utilization,
                "cuda: fraction of the GPU memory free after weights, scratch and an explicit --prefix-cache-checkpoint-bytes that the KV page pool takes (default 0.9)")
      ->check(CLI::Range(0.01, 1.0));
  s->add_option("--seed", args->seed, "cuda --config: random-weight seed");
  s->add_flag("--disable-overlap-schedule", args->disable_overlap,
              "run one engine step at a time (default: step n+1 is launched before step n is collected)");
  auto* trace_opt = s->add_option("--trace", args->trace,
                                  "record the whole run to a Chrome trace, written at shutdown (engine steps; cuda: the "
                                  "device timeline too)");
  s->add_option("--trace-dir", args->trace_dir,
                "enable POST /debug/trace {\"seconds\": S} (S <= 60, behind the API key): a trace window of the running "
                "server written to DIR")
      ->excludes(trace_opt);
  s->add_option("--tensor-parallel-size", args->tensor_parallel_size,
                "vLLM's flag (also -tp): --backend cuda shards KDA heads, MLA heads, the MLP width and the LM-head "
                "vocabulary over N ranks, rank r on GPU r over NCCL (docs/parallel.md)")
      ->capture_default_str();
  s->add_flag("--tp-shared-gpu", args->tp_shared_gpu,
              "with --tensor-parallel-size N: the N ranks are threads sharing GPU 0 (device copies, no NCCL): "
              "checks the sharded model on one GPU; it is slower than one rank, not faster");
  s->add_option("--pipeline-parallel-size", args->pipeline_parallel_size,
                "vLLM's flag (also -pp): --backend cuda splits the layers into N stages, stage r on GPU r over NCCL "
                "(or sharing GPU 0 with --tp-shared-gpu); no micro-batching yet (docs/parallel.md)")
      ->capture_default_str();
  s->add_flag("--enable-expert-parallel", args->enable_expert_parallel,
              "vLLM's flag: with --tensor-parallel-size N, split the routed experts by expert over the N ranks "
              "(attention stays TP; one all-reduce combines)");
  s->add_option("--kv-cache-dtype", args->kv_cache_dtype,
                 "DSA/MLA cache rows (latent, k_rot) on --backend cuda: auto (fp32), bf16, fp8 (fp8_e4m3), int8")
      ->capture_default_str();
  s->add_option("--kv-cache-policy", args->kv_cache_policy,
                "JSON file: the KV cache dtype per attention layer, {\"default\": \"bf16\", \"layers\": {\"3\": "
                "\"fp8\"}} (--backend cuda)");
  s->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", args->enable_prefix_caching,
              "vLLM's flag: reuse cached prompt prefixes (attention pages shared, KDA state restored from checkpoints); "
              "on by default");
  s->add_option("--prefix-cache-checkpoint-bytes", args->prefix_cache_checkpoint_bytes,
                "budget of the KDA state checkpoints of the prefix cache (suffixes K, M, G), or auto: on cuda with "
                "--gpu-memory-utilization, max(a tenth of the memory budget, 4 states per --max-num-seqs), at most a quarter; "
                "otherwise max(256M, 4 checkpoints)")
      ->capture_default_str();
  s->add_option("--prefix-cache-checkpoint-interval", args->prefix_cache_checkpoint_interval,
                "during prefill, a KDA checkpoint every N blocks (--kv-page-tokens each) besides the prompt's end; 0: "
                "only at the end")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  s->add_option("--speculative-config", args->speculative_config,
                "vLLM's flag: speculative decoding as JSON, e.g. {\"method\":\"ngram\",\"num_speculative_tokens\":3,"
                "\"prompt_lookup_max\":4,\"prompt_lookup_min\":2}, or {\"method\":\"mtp\",\"num_speculative_tokens\":1} "
                "(the checkpoint's MTP layer, cpu and cuda backends); requests without penalties, logit_bias, "
                "min_tokens, structured output or top_logprobs speculate, greedy or sampled");
  s->add_flag("--disable-log-requests", args->disable_log_requests,
              "vLLM's flag: no access log (one line per request on stderr)");
  s->add_option("--log-level", args->log_level,
                "debug, info, warning or error; access lines are info, so warning and error turn them off")
      ->capture_default_str();
  s->add_option("--log-format", args->log_format, "text, or json (one JSON object per line)")->capture_default_str();
  s->add_option("--header-timeout-ms", args->header_timeout_ms,
                "a new connection's first request headers must arrive within this")
      ->check(CLI::Range(int64_t{1}, int64_t{3600000}))->capture_default_str();
  s->add_option("--max-connections", args->max_connections, "open connections beyond this are closed at accept")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  s->add_option("--prepare-threads", args->prepare_threads,
                "threads that parse, template and tokenize requests off the HTTP threads")
      ->check(CLI::Range(1, 256))->capture_default_str();
  s->callback([args, runner] { *runner = [args] { return RunServe(*args); }; });
}

}  // namespace gyre::cli
