#include "cli/mcp_http.h"

#include <random>

#include "core/json_depth.h"

namespace gyre::cli {

namespace {

const char* const kProtocols[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

serve::HttpResponse JsonResponse(int status, const nlohmann::json& body,
                                 std::vector<std::pair<std::string, std::string>> headers = {}) {
  serve::HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  r.headers = std::move(headers);
  return r;
}

serve::HttpResponse RpcError(int status, int code, const std::string& message) {
  return JsonResponse(status, {{"jsonrpc", "2.0"}, {"id", nullptr}, {"error", {{"code", code}, {"message", message}}}});
}

// Loopback origins only: scheme://host[:port] with host localhost, 127.0.0.1 or [::1].
bool LoopbackOrigin(std::string_view origin) {
  const auto scheme = origin.find("://");
  if (scheme == std::string_view::npos) return false;
  std::string_view host = origin.substr(scheme + 3);
  if (host.rfind("[::1]", 0) == 0) return host.size() == 5 || host[5] == ':';
  host = host.substr(0, host.find(':'));
  return host == "localhost" || host == "127.0.0.1";
}

std::string NewSessionId() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> l(mu);
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

}  // namespace

Result<std::unique_ptr<McpHttp>> McpHttp::Create(McpServer* server, const McpHttpOptions& options) {
  std::unique_ptr<McpHttp> m(new McpHttp(server, options));
  serve::HttpServerOptions ho;
  ho.host = options.host;
  ho.port = options.port;
  ho.num_threads = 2;
  McpHttp* raw = m.get();
  GYRE_ASSIGN_OR_RETURN(m->http_, serve::HttpServer::Create(ho, [raw](serve::HttpRequest req,
                                                                      std::shared_ptr<serve::HttpExchange> ex) {
                          raw->Handle(std::move(req), std::move(ex));
                        }));
  return m;
}

void McpHttp::Handle(serve::HttpRequest req, std::shared_ptr<serve::HttpExchange> ex) {
  if (req.path != "/mcp") return ex->Respond(RpcError(404, -32600, "not found: the MCP endpoint is /mcp"));
  if (const auto origin = req.Header("origin"); !origin.empty() && !LoopbackOrigin(origin))
    return ex->Respond(RpcError(403, -32600, "origin " + std::string(origin) + " is not allowed"));
  if (!opts_.api_key.empty() && req.Header("authorization") != "Bearer " + opts_.api_key) {
    auto r = RpcError(401, -32600, "unauthorized: send Authorization: Bearer <key>");
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return ex->Respond(std::move(r));
  }
  if (const auto v = req.Header("mcp-protocol-version"); !v.empty()) {
    if (std::find(std::begin(kProtocols), std::end(kProtocols), v) == std::end(kProtocols))
      return ex->Respond(RpcError(400, -32600, "unsupported MCP-Protocol-Version " + std::string(v)));
  }
  const std::string session(req.Header("mcp-session-id"));
  if (req.method == "DELETE") {
    std::lock_guard<std::mutex> l(mu_);
    if (!sessions_.erase(session)) return ex->Respond(RpcError(404, -32600, "no such session"));
    serve::HttpResponse r;
    r.status = 200;
    r.body = "";
    return ex->Respond(std::move(r));
  }
  if (req.method != "POST") {
    auto r = RpcError(405, -32600, "use POST (this server opens no event stream)");
    r.headers.emplace_back("Allow", "POST, DELETE");
    return ex->Respond(std::move(r));
  }
  if (!CheckJsonDepth(req.body, "message").ok()) return ex->Respond(RpcError(400, -32700, "message nests too deeply"));
  const nlohmann::json msg = nlohmann::json::parse(req.body, nullptr, false);
  if (msg.is_discarded()) return ex->Respond(RpcError(400, -32700, "parse error: not JSON"));
  if (msg.is_array()) return ex->Respond(RpcError(400, -32600, "batches are not supported"));
  const bool init = msg.is_object() && msg.value("method", "") == "initialize";
  std::vector<std::pair<std::string, std::string>> headers;
  if (init) {
    const std::string id = NewSessionId();
    {
      std::lock_guard<std::mutex> l(mu_);
      sessions_.insert(id);
    }
    headers.emplace_back("Mcp-Session-Id", id);
  } else {
    if (session.empty()) return ex->Respond(RpcError(400, -32600, "missing Mcp-Session-Id (send initialize first)"));
    std::lock_guard<std::mutex> l(mu_);
    if (!sessions_.count(session)) return ex->Respond(RpcError(404, -32600, "unknown or ended session"));
  }
  const nlohmann::json id = msg.is_object() && msg.contains("id") ? msg["id"] : nlohmann::json();
  // The response is the one message that carries the request's id; progress is dropped (no stream).
  auto sink = [ex, id, headers](const nlohmann::json& m) {
    if (!m.contains("id") || m["id"] != id || !(m.contains("result") || m.contains("error"))) return;
    ex->Post([ex, m, headers] { ex->Respond(JsonResponse(200, m, headers)); });
  };
  if (!server_->HandleMessage(msg, sink)) {
    serve::HttpResponse r;
    r.status = 202;
    r.body = "";
    ex->Respond(std::move(r));
  }
}

}  // namespace gyre::cli
