// Server: gyre's OpenAI-compatible HTTP front end over one Engine.
//
// Routes (every answer that is not 2xx is an OpenAI error object, see openai_protocol.h):
//   POST /v1/chat/completions, POST /v1/completions   generation (openai_serving.h)
//   POST /v1/responses                                the Responses API (responses_protocol.h);
//                                                     GET /v1/responses/{id} is a 404 (gyre
//                                                     keeps no responses)
//   POST /tokenize, POST /detokenize                  vLLM's tokenizer endpoints (tokenization.h)
//   GET  /v1/models, GET /v1/models/{name}            the served model
//   GET  /health                                      200 while serving, 503 once stopping
//   GET  /metrics                                     Prometheus text (metrics.h)
//   GET  /version                                     {"version": ...}
//   POST /debug/trace {"seconds": S}                  a trace window of the running server
//                                                     (trace_window.h; behind the API key)
// Generation and tokenization bodies are parsed and tokenized on a bounded worker pool
// (ServerOptions), so the HTTP threads stay free for other connections (/health answers while big
// bodies are prepared). With an API key, /v1/*, /tokenize and /detokenize require
// "Authorization: Bearer <key>" (401 otherwise). Unknown paths get 404, known paths with the
// wrong method 405 (with Allow), oversized bodies 413.
//
// Every request that reaches the handler is observed when it ends (observed_exchange.h): an
// error status is counted in the metrics, and one access-log line is written (ServerOptions::log).
// With allowed origins (ServerOptions::cors), CORS preflights are answered before authentication
// and responses to allowed origins carry CORS headers (cors.h).
//
// Lifecycle: Create (binds the port) → Start → ... → Stop. Stop stops accepting, stops the
// engine (in-flight requests end: streams get a last chunk with finish_reason "abort"), gives
// open responses `grace_ms` to finish writing, then closes every connection. Idempotent.
//
// Thread safety: Create/Start/Stop/Banner from one controlling thread; requests are served on
// the HTTP threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/engine.h"
#include "model/config.h"
#include "serve/access_log.h"
#include "serve/cors.h"
#include "serve/http_server.h"
#include "serve/metrics.h"
#include "serve/openai_serving.h"
#include "serve/trace_window.h"
#include "serve/work_pool.h"
#include "tokenizer/tokenizer.h"

namespace gyre::serve {

// At load: the tokenizer must not produce ids the model cannot embed, and the model's EOS ids must
// be ids of its vocabulary. InvalidArgument with the numbers otherwise. (A tokenizer smaller than
// the model is fine: checkpoints pad the embedding.)
Status CheckTokenizerMatchesModel(const Tokenizer& tok, const ModelConfig& config);

struct ServerOptions {
  HttpServerOptions http;
  std::string served_model_name = "gyre";
  std::string api_key;          // empty: no authentication
  int64_t kv_page_tokens = 0;   // for the banner only (tokens per latent-cache page)
  int64_t default_completion_max_tokens = 16;
  // Generation requests are parsed and tokenized on this many worker threads, not on the HTTP
  // threads; at most `max_queued_prepares` more wait for one (beyond: 429 with Retry-After).
  int num_prepare_threads = 2;
  int64_t max_queued_prepares = 64;
  CorsOptions cors;  // no allowed origins: no CORS headers, OPTIONS routed as any method
  // The access log (one line per request, access_log.h); null: none. Shared: a report can come
  // from an exchange that outlives the Server.
  std::shared_ptr<const Log> log;
};

// Borrowed collaborators; all must outlive the Server.
struct ServerDeps {
  Engine* engine = nullptr;              // created and started by the caller; Stop() stops it
  const Tokenizer* tokenizer = nullptr;
  TokenizerConfig tokenizer_config;
  ChatRenderFn render_chat;              // see openai_serving.h
  // POST /debug/trace (behind the API key) records a trace window through these; empty start:
  // the endpoint answers 404 with how to enable it.
  TraceHooks trace;
  // Image inputs (openai_serving.h ServingConfig::images); null: refused, with the reason.
  std::shared_ptr<const ImageEncoder> images;
  std::string images_refused_reason;
  // --role prefill|decode (may be null): requests with X-Gyre-Transfer-Id go there.
  DisaggHandler* disagg = nullptr;
};

class Server {
 public:
  // Errors: InvalidArgument (missing engine/tokenizer, bad option), Unavailable (cannot bind).
  static Result<std::unique_ptr<Server>> Create(ServerDeps deps, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  Status Start();
  void Stop(int64_t grace_ms = 2000);
  int port() const;
  // One line for stdout: where it listens, the model name, memory budgets, max concurrency.
  std::string Banner() const;
  const ServeMetrics& metrics() const { return *metrics_; }
  // Generation requests waiting for a prepare thread (for tests and metrics).
  int64_t num_queued_prepares() const { return prepare_pool_->num_queued(); }

 private:
  Server(ServerDeps deps, ServerOptions options);
  void Handle(HttpRequest req, std::shared_ptr<HttpExchange> ex);
  // Runs `work` on the prepare pool; answers 503 if the pool stops first and 429 if its queue is
  // full; skips `work` when the client left while it waited.
  void OffHttpThread(std::shared_ptr<HttpExchange> ex, std::function<void()> work);
  // Prepares a generation request on the pool, then submits it on the exchange's strand.
  enum class Api { kChat, kCompletions, kResponses };  // the generation routes
  void Generate(Api api, std::string body, std::shared_ptr<HttpExchange> ex, Clock::time_point arrival,
                std::shared_ptr<RequestRecord> record, std::optional<DisaggTicket> ticket = std::nullopt);
  // GET /disagg/status: the pools and queue the disaggregation router balances on.
  Json DisaggStatus() const;
  // /tokenize (`tokenize`) or /detokenize, answered from the pool.
  void Tokenization(bool tokenize, std::string body, std::shared_ptr<HttpExchange> ex);
  // `ex` wrapped so that its end is counted (rejections by status) and logged (access line), and
  // its response carries `headers`.
  std::shared_ptr<HttpExchange> Observe(const HttpRequest& req, std::shared_ptr<HttpExchange> ex,
                                        Clock::time_point arrival, std::shared_ptr<RequestRecord> record,
                                        HeaderList headers) const;
  void TraceRequest(const std::string& body, std::shared_ptr<HttpExchange> ex);
  bool Authorized(const HttpRequest& req) const;
  Json ModelCard() const;

  // Constant after construction.
  const ServerDeps deps_;
  const ServerOptions opts_;
  const Cors cors_;
  std::shared_ptr<ServeMetrics> metrics_;  // shared: a report can come from an exchange that outlives the Server
  std::unique_ptr<OpenAiServing> serving_;
  std::unique_ptr<WorkPool> prepare_pool_;  // stopped before the engine, so no task outlives it
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<TraceWindow> trace_window_;  // null when deps_.trace is not wired
  const int64_t created_;  // unix seconds, for /v1/models

  std::atomic<bool> stopping_{false};
  bool stopped_ = false;  // controlling thread only
};

// An HttpServerOptions::error_body that writes OpenAI error objects.
std::string OpenAiErrorBody(int status, const std::string& message);

}  // namespace gyre::serve
