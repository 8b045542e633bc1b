// `gyre mcp --http PORT`: the MCP server over the streamable HTTP transport (one endpoint, /mcp).
//
// POST /mcp carries one JSON-RPC message. A request is answered with its JSON-RPC response as
// application/json (this server never opens an SSE stream, which the transport allows, so
// progress notifications are not sent over HTTP); a notification or a client response gets 202.
// initialize creates a session (Mcp-Session-Id header); every later request must carry it (400
// without, 404 for an unknown or ended one); DELETE /mcp ends it. GET /mcp is 405 (no
// server-initiated stream). An Origin header other than a loopback one is refused with 403 (DNS
// rebinding); with an API key, "Authorization: Bearer KEY" is required (401). An MCP-Protocol-Version
// header naming a revision gyre does not speak is a 400. Batches (JSON arrays) are refused.
//
// Thread safety: Start/Stop from one thread; requests are served on the HTTP threads.
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "cli/mcp_server.h"
#include "core/status.h"
#include "serve/http_server.h"

namespace gyre::cli {

struct McpHttpOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string api_key;  // empty: no authentication
};

class McpHttp {
 public:
  // `server` must outlive this. Errors: Unavailable when the address cannot be bound.
  static Result<std::unique_ptr<McpHttp>> Create(McpServer* server, const McpHttpOptions& options);
  Status Start() { return http_->Start(); }
  int port() const { return http_->port(); }
  void Stop() { http_->Stop(1000); }

 private:
  McpHttp(McpServer* server, McpHttpOptions options) : server_(server), opts_(std::move(options)) {}
  void Handle(serve::HttpRequest req, std::shared_ptr<serve::HttpExchange> ex);

  McpServer* server_;
  const McpHttpOptions opts_;
  std::unique_ptr<serve::HttpServer> http_;
  std::mutex mu_;
  std::set<std::string> sessions_;
};

}  // namespace gyre::cli
