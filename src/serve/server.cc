#include "serve/server.h"

#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>
#include <tuple>

#include "serve/observed_exchange.h"

namespace gyre::serve {

Status CheckTokenizerMatchesModel(const Tokenizer& tok, const ModelConfig& config) {
  if (tok.vocab_size() > config.vocab_size) {
    return Status::InvalidArgument("the tokenizer has " + std::to_string(tok.vocab_size()) +
                                   " ids but the model's vocabulary is " + std::to_string(config.vocab_size) +
                                   ": ids beyond it cannot be embedded (wrong tokenizer for this model?)");
  }
  for (int32_t e : config.eos_token_ids) {
    if (e < 0 || e >= config.vocab_size) {
      return Status::InvalidArgument("eos_token_id " + std::to_string(e) + " is outside the model's vocabulary [0, " +
                                     std::to_string(config.vocab_size) + ")");
    }
  }
  return Status::Ok();
}

Json Server::DisaggStatus() const {
  const EngineStats st = deps_.engine->Stats();
  Json j{{"role", "both"},
         {"num_running", st.num_running},
         {"num_waiting", st.num_waiting},
         {"kv_pages_total", st.kv_pages_total},
         {"kv_pages_used", st.kv_pages_used},
         {"kv_pages_free", st.kv_pages_total - st.kv_pages_used},
         {"kda_slots_total", st.kda_slots_total},
         {"kda_slots_used", st.kda_slots_used},
         {"exported_held", st.num_exported_held}};
  if (deps_.disagg) j.update(deps_.disagg->StatusJson());
  return j;
}

std::string OpenAiErrorBody(int status, const std::string& message) {
  ApiError e;
  e.status = status;
  e.type = ErrorTypeFor(status);
  e.message = message;
  return e.Body();
}

namespace {

ApiError MakeError(int status, std::string message, std::string code = {}) {
  ApiError e;
  e.status = status;
  e.type = ErrorTypeFor(status);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

// Constant-time comparison (the API key must not leak through timing).
bool SameSecret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

std::string MiB(int64_t bytes) {
  char buf[32];
  if (bytes < (1 << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", static_cast<double>(bytes) / 1024);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  }
  return buf;
}

}  // namespace

Server::Server(ServerDeps deps, ServerOptions options)
    : deps_(std::move(deps)),
      opts_(std::move(options)),
      cors_(opts_.cors),
      created_(static_cast<int64_t>(std::time(nullptr))) {}

Server::~Server() { Stop(0); }

Result<std::unique_ptr<Server>> Server::Create(ServerDeps deps, ServerOptions options) {
  if (!deps.engine || !deps.tokenizer) return Status::InvalidArgument("the server needs an engine and a tokenizer");
  if (options.served_model_name.empty()) return Status::InvalidArgument("--served-model-name must not be empty");
  if (options.num_prepare_threads < 1 || options.max_queued_prepares < 0) {
    return Status::InvalidArgument("the server needs >= 1 prepare thread and a queue bound >= 0");
  }
  std::unique_ptr<Server> s(new Server(std::move(deps), std::move(options)));
  s->metrics_ = std::make_shared<ServeMetrics>(s->opts_.served_model_name);
  ServingConfig sc;
  sc.engine = s->deps_.engine;
  sc.tokenizer = s->deps_.tokenizer;
  sc.tokenizer_config = s->deps_.tokenizer_config;
  sc.render_chat = s->deps_.render_chat;
  sc.served_model_name = s->opts_.served_model_name;
  sc.metrics = s->metrics_.get();
  sc.default_completion_max_tokens = s->opts_.default_completion_max_tokens;
  sc.eos_token_ids = s->deps_.engine->config().eos_token_ids;
  sc.images = s->deps_.images;
  sc.images_refused_reason = s->deps_.images_refused_reason;
  sc.disagg = s->deps_.disagg;
  s->serving_ = std::make_unique<OpenAiServing>(std::move(sc));
  s->prepare_pool_ = std::make_unique<WorkPool>(s->opts_.num_prepare_threads, s->opts_.max_queued_prepares);
  if (s->deps_.trace.start && s->deps_.trace.stop) s->trace_window_ = std::make_unique<TraceWindow>(s->deps_.trace);
  HttpServerOptions ho = s->opts_.http;
  ho.error_body = OpenAiErrorBody;
  // The HTTP layer's own 400/413/431 answers: counted, logged and given CORS headers like the
  // handler's answers (they never reach the handler).
  ho.on_read_error = [metrics = s->metrics_, log = s->opts_.log, cors = Cors(s->opts_.cors)](
                         const HttpRequest& req, int status, double elapsed_ms) {
    metrics->CountRejected(status);
    if (log && log->AccessEnabled()) {
      AccessEntry e;
      e.id = NewResponseId("req-");
      e.method = req.method;
      e.path = req.path;
      e.status = status;
      e.latency_ms = elapsed_ms;
      log->Access(e);
    }
    return cors.ResponseHeaders(req.Header("origin"));
  };
  Server* raw = s.get();
  GYRE_ASSIGN_OR_RETURN(s->http_, HttpServer::Create(ho, [raw](HttpRequest req, std::shared_ptr<HttpExchange> ex) {
                          raw->Handle(std::move(req), std::move(ex));
                        }));
  return s;
}

Status Server::Start() {
  return http_->Start();
}

void Server::Stop(int64_t grace_ms) {
  if (stopped_) return;
  stopped_ = true;
  stopping_ = true;
  if (http_) http_->StopAccepting();
  if (trace_window_) trace_window_->Stop();  // a running window ends early; its trace is written
  // Requests being prepared finish and submit (their Submit runs on a strand, before or after the
  // engine stops; either way they end); queued ones are answered 503.
  if (prepare_pool_) prepare_pool_->Stop();
  deps_.engine->Stop();  // every request reaches OnFinish; the runs write their last chunks
  if (http_) http_->Stop(grace_ms);
}

int Server::port() const { return http_->port(); }

std::string Server::Banner() const {
  const EngineStats st = deps_.engine->Stats();
  const int64_t kv_tokens = st.kv_pages_total * opts_.kv_page_tokens;
  const std::string& h = opts_.http.host;
  const std::string host = h.find(':') != std::string::npos ? "[" + h + "]" : h;  // IPv6 literal
  std::string b = "gyre serve: listening on http://" + host + ":" + std::to_string(port()) +
                  " | model '" + opts_.served_model_name + "'";
  b += " | KV cache " + std::to_string(st.kv_pages_total) + " pages x " + std::to_string(opts_.kv_page_tokens) +
       " tokens = " + std::to_string(kv_tokens) + " tokens (" + MiB(st.kv_pages_total * st.kv_bytes_per_page) + ")";
  b += " | KDA state " + std::to_string(st.kda_slots_total) + " slots (" +
       MiB(st.kda_slots_total * st.kda_bytes_per_slot) + ")";
  b += " | max concurrency " + std::to_string(st.kda_slots_total) + " sequences";
  if (st.max_model_len > 0) b += " | max model len " + std::to_string(st.max_model_len);
  if (st.max_model_len > 0 && kv_tokens > 0) {
    b += " (the KV cache holds " + std::to_string(kv_tokens / st.max_model_len) + " such sequences)";
  }
  return b;
}

bool Server::Authorized(const HttpRequest& req) const {
  if (opts_.api_key.empty()) return true;
  const std::string_view h = req.Header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (h.size() < kBearer.size() || h.substr(0, kBearer.size()) != kBearer) return false;
  return SameSecret(h.substr(kBearer.size()), opts_.api_key);
}

Json Server::ModelCard() const {
  return Json{{"id", opts_.served_model_name},
              {"object", "model"},
              {"created", created_},
              {"owned_by", "gyre"},
              {"root", opts_.served_model_name},
              {"parent", nullptr},
              {"max_model_len", deps_.engine->Stats().max_model_len}};
}

void Server::OffHttpThread(std::shared_ptr<HttpExchange> ex, std::function<void()> work) {
  auto task = [ex, work = std::move(work)](bool cancelled) {
    if (cancelled) return RespondError(*ex, MakeError(503, "the server is shutting down"));
    if (ex->aborted()) return;  // the client left while the request waited
    work();
  };
  if (!prepare_pool_->TrySubmit(std::move(task))) {
    RespondError(*ex, ApiError::FromStatus(Status::ResourceExhausted(
                          "too many requests are waiting to be parsed and tokenized; retry later")));
  }
}

void Server::TraceRequest(const std::string& body, std::shared_ptr<HttpExchange> ex) {
  if (!trace_window_) {
    RespondError(*ex, MakeError(404, "trace windows are off: start gyre serve with --trace-dir DIR", "not_found"));
    return;
  }
  auto seconds = ParseTraceRequest(body);
  if (!seconds.ok()) {
    ApiError e = ApiError::FromStatus(seconds.error());
    e.param = "seconds";
    RespondError(*ex, e);
    return;
  }
  const Status st = trace_window_->Begin(*seconds, [ex](Result<Json> r) {
    ex->Post([ex, r = std::move(r)]() {
      if (!r.ok()) return RespondError(*ex, ApiError::FromStatus(r.error()));
      RespondJson(*ex, *r);
    });
  });
  if (!st.ok()) {
    // A window already running is a conflict, not an outage.
    const bool busy = st.code() == StatusCode::kUnavailable && !stopping_;
    ApiError e = busy ? MakeError(409, st.message()) : ApiError::FromStatus(st);
    if (st.code() == StatusCode::kInvalidArgument) e.param = "seconds";
    RespondError(*ex, e);
  }
}

void Server::Generate(Api api, std::string body, std::shared_ptr<HttpExchange> ex, Clock::time_point arrival,
                      std::shared_ptr<RequestRecord> record, std::optional<DisaggTicket> ticket) {
  OffHttpThread(ex, [this, api, body = std::move(body), ex, arrival, record, ticket] {
    auto prepared = api == Api::kResponses ? serving_->PrepareResponses(body)
                                           : serving_->Prepare(api == Api::kChat, body, ticket ? &*ticket : nullptr);
    if (prepared.ok()) prepared->ticket = ticket;
    ex->Post([this, prepared = std::move(prepared), ex, arrival, record]() mutable {
      if (!prepared.ok()) return RespondError(*ex, ApiError::FromStatus(prepared.error()));
      serving_->Submit(std::move(*prepared), ex, arrival, record);
    });
  });
}

void Server::Tokenization(bool tokenize, std::string body, std::shared_ptr<HttpExchange> ex) {
  OffHttpThread(ex, [this, tokenize, body = std::move(body), ex] {
    auto answer = tokenize ? serving_->Tokenize(body) : serving_->Detokenize(body);
    if (answer.ok()) {
      RespondJson(*ex, *answer);
    } else {
      RespondError(*ex, ApiError::FromStatus(answer.error()));
    }
  });
}

std::shared_ptr<HttpExchange> Server::Observe(const HttpRequest& req, std::shared_ptr<HttpExchange> ex,
                                             Clock::time_point arrival, std::shared_ptr<RequestRecord> record,
                                             HeaderList headers) const {
  auto on_done = [metrics = metrics_, log = opts_.log, record = std::move(record), method = req.method,
                  path = req.path, arrival](const ObservedExchange::Outcome& o) {
    metrics->CountRejected(o.status);
    if (!log || !log->AccessEnabled()) return;
    AccessEntry e;
    e.id = record->id();
    e.method = method;
    e.path = path;
    e.status = o.status;
    e.aborted = o.aborted;
    std::tie(e.prompt_tokens, e.completion_tokens) = record->tokens();
    e.latency_ms = std::chrono::duration<double, std::milli>(Clock::now() - arrival).count();
    log->Access(e);
  };
  return ObservedExchange::Wrap(std::move(ex), std::move(headers), std::move(on_done));
}

void Server::Handle(HttpRequest req, std::shared_ptr<HttpExchange> ex) {
  const auto arrival = Clock::now();
  auto record = std::make_shared<RequestRecord>(NewResponseId("req-"));
  if (cors_.IsPreflight(req)) {  // before authentication: browsers send preflights without credentials
    Observe(req, std::move(ex), arrival, record, {})->Respond(cors_.Preflight(req));
    return;
  }
  ex = Observe(req, std::move(ex), arrival, record, cors_.ResponseHeaders(req.Header("origin")));
  const std::string& path = req.path;
  auto allow = [&](const char* method) -> bool {
    if (req.method == method) return true;
    ApiError e = MakeError(405, "Method " + req.method + " is not allowed on " + path + " (use " + method + ")");
    HttpResponse r;
    r.status = 405;
    r.body = e.Body();
    r.headers.emplace_back("Allow", method);
    ex->Respond(std::move(r));
    return false;
  };
  try {
    if (path == "/health") {
      if (!allow("GET")) return;
      HttpResponse r;
      if (stopping_) {
        r.status = 503;
        r.body = MakeError(503, "the server is shutting down").Body();
      } else {
        r.content_type = "text/plain";
      }
      ex->Respond(std::move(r));
      return;
    }
    if (path == "/metrics") {
      if (!allow("GET")) return;
      HttpResponse r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = metrics_->Render(deps_.engine->Stats());
      if (deps_.disagg) r.body += deps_.disagg->Metrics("model_name=\"" + PromEscape(opts_.served_model_name) + "\"");
      if (deps_.images && deps_.images->cache) {
        r.body += ImageCacheMetrics(deps_.images->cache->stats(),
                                    "model_name=\"" + PromEscape(opts_.served_model_name) + "\"");
      }
      ex->Respond(std::move(r));
      return;
    }
    if (path == "/disagg/status") {
      if (allow("GET")) RespondJson(*ex, DisaggStatus());
      return;
    }
    if (path == "/version") {
      if (!allow("GET")) return;
      RespondJson(*ex, Json{{"version", "0.1.0"}});
      return;
    }
    if (path == "/debug/trace") {
      if (!Authorized(req)) {
        RespondError(*ex, MakeError(401, "Incorrect API key provided.", "invalid_api_key"));
        return;
      }
      if (allow("POST")) TraceRequest(req.body, ex);
      return;
    }
    const bool tokenization = path == "/tokenize" || path == "/detokenize";
    const bool guarded = path.rfind("/v1/", 0) == 0 || tokenization;  // behind the API key
    if (guarded && !Authorized(req)) {
      RespondError(*ex, MakeError(401, "Incorrect API key provided.", "invalid_api_key"));
      return;
    }
    if (stopping_ && guarded) {
      RespondError(*ex, MakeError(503, "the server is shutting down"));
      return;
    }
    if (tokenization) {
      if (allow("POST")) Tokenization(path == "/tokenize", std::move(req.body), ex);
      return;
    }
    if (path == "/v1/chat/completions" || path == "/v1/completions") {
      // The disaggregation router's headers (docs/disaggregation.md).
      std::optional<DisaggTicket> ticket;
      auto id_header = [&](const char* name, uint64_t* out) {
        const std::string_view id = req.Header(name);
        if (id.empty()) return true;
        if (!ticket) ticket.emplace();
        const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), *out);
        if (ec == std::errc() && end == id.data() + id.size() && *out != 0) return true;
        RespondError(*ex, MakeError(400, std::string(name) + " must be a decimal 64-bit id other than 0"));
        return false;
      };
      uint64_t transfer_id = 0, images_id = 0;
      if (!id_header("x-gyre-transfer-id", &transfer_id) || !id_header("x-gyre-images-id", &images_id)) return;
      if (const std::string_view to = req.Header("x-gyre-images-to"); !to.empty()) {
        if (!ticket) ticket.emplace();
        for (size_t at = 0; at <= to.size();) {  // comma-separated HOST:PORT
          const size_t comma = std::min(to.find(',', at), to.size());
          if (comma > at) ticket->images_to.emplace_back(to.substr(at, comma - at));
          at = comma + 1;
        }
      }
      if (ticket) {
        ticket->transfer_id = transfer_id;
        ticket->images_id = images_id;
        ticket->send_to = std::string(req.Header("x-gyre-transfer-to"));
        if (transfer_id == 0 && ticket->images_to.empty()) {
          RespondError(*ex, MakeError(400, "X-Gyre-Images-Id without X-Gyre-Transfer-Id or X-Gyre-Images-To"));
          return;
        }
      }
      const Api api = path == "/v1/chat/completions" ? Api::kChat : Api::kCompletions;
      if (allow("POST")) Generate(api, std::move(req.body), ex, arrival, record, std::move(ticket));
      return;
    }
    if (path == "/v1/responses") {
      if (allow("POST")) Generate(Api::kResponses, std::move(req.body), ex, arrival, record);
      return;
    }
    if (path.rfind("/v1/responses/", 0) == 0) {
      // OpenAI's retrieve / delete / input_items: nothing to find, as nothing is kept.
      RespondError(*ex, MakeError(404, "Response '" + path.substr(14) + "' not found: gyre keeps no responses "
                                           "(store is not supported; send the conversation in 'input')",
                                  "not_found"));
      return;
    }
    if (path == "/v1/models") {
      if (allow("GET")) RespondJson(*ex, Json{{"object", "list"}, {"data", Json::array({ModelCard()})}});
      return;
    }
    if (path.rfind("/v1/models/", 0) == 0) {
      if (!allow("GET")) return;
      const std::string name = path.substr(std::string("/v1/models/").size());
      if (name == opts_.served_model_name) {
        RespondJson(*ex, ModelCard());
      } else {
        RespondError(*ex, ApiError::FromStatus(ModelNotFound(name)));
      }
      return;
    }
    RespondError(*ex, MakeError(404, "Route " + req.method + " " + path + " not found", "not_found"));
  } catch (const std::exception& e) {
    // Nothing below should throw (gyre code returns Status); this is the edge that guarantees it.
    RespondError(*ex, MakeError(500, std::string("internal error: ") + e.what()));
  }
}

}  // namespace gyre::serve
