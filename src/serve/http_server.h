// HttpServer: an HTTP/1.1 server on Boost.Beast/Asio that hides Asio from its handlers.
//
// One io_context runs on a few threads; each connection is one C++20 coroutine on its own strand,
// so a slow client holds no thread. Keep-alive is honoured; request bodies above
// `max_body_bytes` get 413 and the connection is closed.
//
// A handler receives the parsed request and a shared HttpExchange. It answers either at once
// (Respond) or later from any thread, and may stream (StartStream / Write / EndStream: chunked
// transfer encoding). Work that must be serialised with the exchange's other callbacks is handed
// to Post, which runs it on the connection's strand (the engine thread posts token events there).
//
// While an exchange is open the connection watches the socket: a client that closes it (or
// resets it) aborts the exchange. So do a stream whose unsent bytes exceed `max_buffered_bytes`
// (a client that reads too slowly), a write that does not finish within `write_timeout_ms`, and
// Stop(). An aborted exchange runs its OnAbort callbacks once, on its strand, and ignores any
// later Respond/Write.
//
// Thread safety: HttpServer's methods are called from one controlling thread. HttpExchange's
// methods may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace gyre::serve {

struct HttpRequest {
  std::string method;  // as sent, e.g. "POST"
  std::string target;  // as sent, e.g. "/v1/models?x=1"
  std::string path;    // target up to '?'
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, in order
  std::string body;
  // Value of the first header named `name` (give it lower-case), or "" if absent.
  std::string_view Header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers, e.g. Retry-After
  std::string body;
};

class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  // Sends a complete response. Only the first of Respond/StartStream counts; later calls are
  // ignored, as is everything after an abort.
  virtual void Respond(HttpResponse response) = 0;
  // Starts a chunked response with `status` and `content_type`; Write appends data to it.
  virtual void StartStream(int status, std::string content_type,
                           std::vector<std::pair<std::string, std::string>> headers = {}) = 0;
  // Queues `data` for the stream. Returns false when the exchange is aborted (the data is
  // dropped); a write that makes the unsent bytes exceed the bound aborts it.
  virtual bool Write(std::string data) = 0;
  // Ends the stream (the terminating chunk is sent after the queued data).
  virtual void EndStream() = 0;
  // Runs `fn` on the exchange's strand, after the callbacks posted before it. Runs even after an
  // abort (so cleanup can rely on it) unless the server is stopping: what Stop finds still
  // queued, and what is posted after it, is destroyed without running.
  virtual void Post(std::function<void()> fn) = 0;
  // Registers `fn` to run once on the strand if the exchange is aborted before it completes
  // (client gone, too slow, or server stopping). Registering after the abort runs it at once
  // (posted). Never runs once the response is complete.
  virtual void OnAbort(std::function<void()> fn) = 0;
  // True once the exchange was aborted.
  virtual bool aborted() const = 0;
};

// The handler owns the request (it may move the body to another thread).
using HttpHandler = std::function<void(HttpRequest request, std::shared_ptr<HttpExchange> exchange)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                            // 0: the OS picks a free port (see HttpServer::port)
  int num_threads = 2;                        // io_context threads
  int64_t max_body_bytes = 16 << 20;          // larger request bodies get 413
  int64_t max_header_bytes = 64 << 10;        // larger request headers get 431
  int64_t max_buffered_bytes = 4 << 20;       // per stream: unsent bytes beyond this abort it
  int64_t write_timeout_ms = 30000;           // one socket write; longer aborts the exchange
  int64_t idle_timeout_ms = 30000;            // keep-alive wait for the next request's headers
  // A new connection must deliver its first request's headers within this (slow or idle
  // connections that never finish their headers are closed instead of holding a descriptor).
  int64_t header_timeout_ms = 10000;
  // Open connections beyond this are closed at accept (the listener keeps serving the others);
  // accept errors such as EMFILE back off for accept_backoff_ms instead of spinning.
  int64_t max_connections = 4096;
  int64_t accept_backoff_ms = 50;
  // Body of the errors the HTTP layer answers itself (400 malformed HTTP, 413, 431, 500 from a
  // throwing handler); JSON. Default: {"error": {"message": ..., "type": ..., ...}}.
  std::function<std::string(int status, const std::string& message)> error_body;
  // Told of each 400 (malformed HTTP), 413 and 431 the HTTP layer answers itself (such requests
  // never reach the handler), before the answer is written: `request` is what was read of the
  // request (method, target, path and headers as far as they could be read, lenient on a
  // malformed or oversized header; never a body), `elapsed_ms` the time since its read began.
  // Returns headers to add to the answer (CORS). Runs on the connection's strand; must not block
  // or throw. Empty: nothing is told and nothing added.
  std::function<std::vector<std::pair<std::string, std::string>>(const HttpRequest& request, int status,
                                                                 double elapsed_ms)>
      on_read_error;
};

class HttpServer {
 public:
  // Binds and listens (so port() is known) but serves nothing until Start. Errors: Unavailable
  // when the address cannot be bound; InvalidArgument for a bad host or option.
  // `handler` is called on a connection strand, must not block (hand CPU-heavy work to another
  // thread, see work_pool.h), and should not throw (an exception becomes a 500 response).
  static Result<std::unique_ptr<HttpServer>> Create(const HttpServerOptions& options, HttpHandler handler);
  virtual ~HttpServer() = default;

  virtual Status Start() = 0;
  // The bound port (the real one when options.port was 0).
  virtual int port() const = 0;
  // Closes the listening socket; open connections keep being served.
  virtual void StopAccepting() = 0;
  // Stops accepting, waits up to `grace_ms` for open exchanges to complete, then aborts the rest,
  // closes every connection, joins the threads and destroys, without running them, the callbacks
  // still queued (Post, OnAbort). Idempotent.
  virtual void Stop(int64_t grace_ms = 2000) = 0;
  // Number of exchanges currently open (for tests and shutdown).
  virtual int64_t num_open_exchanges() const = 0;
};

// The reason phrase for `status` ("Not Found"), or "Unknown".
const char* HttpReason(int status);

}  // namespace gyre::serve
