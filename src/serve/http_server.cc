// HttpServer on Boost.Beast. Map:
//   Shared      - options, handler and counters that outlive the HttpServer object if needed.
//   Exchange    - one request/response; thread-safe queue of what the handler produced, and the
//                 abort state. Wakes its connection by posting to the connection strand.
//   Connection  - one coroutine per socket: read request → call handler → drive the exchange
//                 (write the response or the stream chunks as they arrive) → next request.
//   ServerImpl  - io_context + threads, the accept loop, the set of live connections, Stop.
//
// Lifetimes: every Exchange and Connection holds shared_ptrs to the io_context and to Shared, so
// strands never outlive their io_context (a strand's destructor touches its service) and an
// exchange kept by an engine sink stays valid after the server is gone. Handlers still queued at
// Stop, or posted after it, are never run, only destroyed: Stop destroys the queued ones itself
// (IoContext::DestroyHandlers), since they can hold the Exchanges and Connections that keep the
// io_context alive, and ~io_context would then never run (a cycle that leaked the whole server).
//
// Threading: a connection's socket, timer and `current_` are touched only on its strand; an
// Exchange's queue is guarded by its mutex; the engine thread only calls Exchange methods.
#include "serve/http_server.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <deque>
#include <mutex>
#include <thread>

#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "serve/http_parse.h"

namespace gyre::serve {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Strand = asio::strand<asio::io_context::executor_type>;
using asio::use_awaitable;

class Connection;

// The io_context of one server, with a way to destroy its handlers before the last owner lets go.
class IoContext : public asio::io_context {  // not final: Asio's traits derive from it
 public:
  using asio::io_context::io_context;
  // What ~io_context does first: every service destroys the handlers it still holds (queued,
  // waiting on a socket or timer, on a strand) without running them; later posts to a strand are
  // destroyed at once. Only once no thread runs the context. ~io_context repeats it harmlessly.
  void DestroyHandlers() { shutdown(); }
};

std::string DefaultErrorBody(int status, const std::string& message) {
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) escaped += c;
  }
  return "{\"error\": {\"message\": \"" + escaped + "\", \"type\": \"invalid_request_error\", \"param\": null, " +
         "\"code\": null}}";
}

// ---------------------------------------------------------------------------------------------
// Shared: state of one server that its connections and exchanges keep alive (an exchange held by
// an engine sink may outlive the HttpServer object).

struct Shared {
  Shared(HttpServerOptions o, HttpHandler h) : opts(std::move(o)), handler(std::move(h)) {}
  const HttpServerOptions opts;
  const HttpHandler handler;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> open_exchanges{0};
  std::atomic<int64_t> num_conns{0};
  std::atomic<int64_t> refused_conns{0};

  void Register(const std::shared_ptr<Connection>& c) {
    std::lock_guard<std::mutex> l(mu);
    std::erase_if(conns, [](const std::weak_ptr<Connection>& w) { return w.expired(); });
    conns.push_back(c);
    ++num_conns;
  }
  void Unregister() { --num_conns; }
  std::vector<std::shared_ptr<Connection>> Live() {
    std::vector<std::shared_ptr<Connection>> live;
    std::lock_guard<std::mutex> l(mu);
    for (auto& w : conns) {
      if (auto sp = w.lock()) live.push_back(sp);
    }
    return live;
  }

 private:
  std::mutex mu;
  std::vector<std::weak_ptr<Connection>> conns;  // guarded by mu
};

// ---------------------------------------------------------------------------------------------
// Exchange

class Exchange final : public HttpExchange, public std::enable_shared_from_this<Exchange> {
 public:
  enum class Kind { kNone, kFull, kStream };

  struct StreamHead {
    int status = 200;
    std::string content_type;
    std::vector<std::pair<std::string, std::string>> headers;
  };

  // What the connection takes from the exchange in one go (under the lock).
  struct Taken {
    bool aborted = false;
    Kind kind = Kind::kNone;
    bool head_new = false;  // `full` / `head` are set for the first Take after Respond/StartStream
    HttpResponse full;
    StreamHead head;
    std::string data;  // queued stream bytes
    bool ended = false;
  };

  Exchange(std::shared_ptr<asio::io_context> ioc, Strand strand, std::weak_ptr<Connection> conn,
           std::shared_ptr<Shared> shared)
      : ioc_(std::move(ioc)), strand_(std::move(strand)), conn_(std::move(conn)), shared_(std::move(shared)),
        max_buffered_(shared_->opts.max_buffered_bytes) {
    ++shared_->open_exchanges;
  }
  ~Exchange() override {
    std::lock_guard<std::mutex> l(mu_);
    if (!closed_) --shared_->open_exchanges;
  }

  void Respond(HttpResponse response) override {
    std::lock_guard<std::mutex> l(mu_);
    if (aborted_ || kind_ != Kind::kNone) return;
    kind_ = Kind::kFull;
    full_ = std::move(response);
    head_taken_ = false;
    NotifyLocked();
  }

  void StartStream(int status, std::string content_type,
                   std::vector<std::pair<std::string, std::string>> headers) override {
    std::lock_guard<std::mutex> l(mu_);
    if (aborted_ || kind_ != Kind::kNone) return;
    kind_ = Kind::kStream;
    head_ = StreamHead{status, std::move(content_type), std::move(headers)};
    head_taken_ = false;
    NotifyLocked();
  }

  bool Write(std::string data) override {
    std::unique_lock<std::mutex> l(mu_);
    if (aborted_ || kind_ != Kind::kStream || ended_) return false;
    if (data.empty()) return true;
    out_bytes_ += static_cast<int64_t>(data.size());
    out_.push_back(std::move(data));
    if (out_bytes_ > max_buffered_) {
      AbortLocked(l);
      return false;
    }
    NotifyLocked();
    return true;
  }

  void EndStream() override {
    std::lock_guard<std::mutex> l(mu_);
    if (aborted_ || kind_ != Kind::kStream || ended_) return;
    ended_ = true;
    NotifyLocked();
  }

  void Post(std::function<void()> fn) override { asio::post(strand_, std::move(fn)); }

  void OnAbort(std::function<void()> fn) override {
    std::lock_guard<std::mutex> l(mu_);
    if (completed_) return;
    if (aborted_) {
      asio::post(strand_, std::move(fn));
      return;
    }
    on_abort_.push_back(std::move(fn));
  }

  bool aborted() const override {
    std::lock_guard<std::mutex> l(mu_);
    return aborted_;
  }

  // --- Connection side -----------------------------------------------------------------------

  // Aborts (idempotent): runs the OnAbort callbacks on the strand and wakes the connection, which
  // cancels its socket operations and closes.
  void Abort() {
    std::unique_lock<std::mutex> l(mu_);
    AbortLocked(l);
  }

  // The response went out completely: OnAbort callbacks are dropped.
  void Complete() {
    std::lock_guard<std::mutex> l(mu_);
    completed_ = true;
    on_abort_.clear();
    MarkClosedLocked();
  }

  // The connection is done with this exchange (completed or aborted).
  void Close() {
    std::lock_guard<std::mutex> l(mu_);
    MarkClosedLocked();
  }

  Taken Take() {
    std::lock_guard<std::mutex> l(mu_);
    Taken t;
    t.aborted = aborted_;
    t.kind = kind_;
    if (!head_taken_ && kind_ != Kind::kNone) {
      head_taken_ = true;
      t.head_new = true;
      if (kind_ == Kind::kFull) t.full = std::move(full_);
      if (kind_ == Kind::kStream) t.head = std::move(head_);
    }
    for (auto& s : out_) t.data += s;
    out_.clear();
    out_bytes_ = 0;
    t.ended = ended_;
    return t;
  }

 private:
  void NotifyLocked();
  void AbortLocked(std::unique_lock<std::mutex>& l) {
    if (aborted_ || completed_) return;
    aborted_ = true;
    out_.clear();
    out_bytes_ = 0;
    std::vector<std::function<void()>> fns;
    fns.swap(on_abort_);
    for (auto& fn : fns) asio::post(strand_, std::move(fn));
    NotifyLocked();
  }
  void MarkClosedLocked() {
    if (closed_) return;
    closed_ = true;
    --shared_->open_exchanges;
  }

  // Constant after construction. ioc_ is declared first so it is destroyed after strand_.
  const std::shared_ptr<asio::io_context> ioc_;
  const Strand strand_;
  const std::weak_ptr<Connection> conn_;
  const std::shared_ptr<Shared> shared_;
  const int64_t max_buffered_;

  // Guarded by mu_.
  mutable std::mutex mu_;
  Kind kind_ = Kind::kNone;
  bool head_taken_ = false;
  HttpResponse full_;
  StreamHead head_;
  std::deque<std::string> out_;
  int64_t out_bytes_ = 0;
  bool ended_ = false;
  bool aborted_ = false;
  bool completed_ = false;
  bool closed_ = false;
  bool notify_pending_ = false;
  std::vector<std::function<void()>> on_abort_;
};

// ---------------------------------------------------------------------------------------------
// Connection

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<Shared> shared, std::shared_ptr<asio::io_context> ioc, Strand strand, tcp::socket socket);
  ~Connection();

  asio::awaitable<void> Run();
  // Strand only: wakes the coroutine; if the current exchange was aborted, cancels socket I/O.
  void Wake();
  // Strand only: aborts the current exchange and closes the socket.
  void Shutdown();
  // Any thread: runs Shutdown on the strand.
  void PostShutdown() {
    asio::post(strand_, [self = shared_from_this()] { self->Shutdown(); });
  }

 private:
  asio::awaitable<bool> ReadRequest(RequestParser& parser, bool* fatal);
  asio::awaitable<bool> WriteSimple(int status, const std::string& message, unsigned version,
                                    const std::vector<std::pair<std::string, std::string>>& headers);
  asio::awaitable<bool> Drive(const std::shared_ptr<Exchange>& ex, unsigned version, bool keep_alive);
  asio::awaitable<void> WaitWake();
  void StartWatch(const std::shared_ptr<Exchange>& ex);
  std::string ErrorBody(int status, const std::string& message) const;
  void StopWatch();

  const std::shared_ptr<Shared> shared_;
  const std::shared_ptr<asio::io_context> ioc_;  // before the I/O objects: destroyed after them
  const Strand strand_;
  beast::tcp_stream stream_;
  asio::steady_timer wake_;
  beast::flat_buffer buffer_;
  // Strand only.
  std::shared_ptr<Exchange> current_;
  bool watching_ = false;
  uint64_t watch_gen_ = 0;  // StartWatch / StopWatch count: which watch a completion belongs to
  bool closed_ = false;
  int64_t served_ = 0;  // requests read on this connection
};

// ---------------------------------------------------------------------------------------------
// ServerImpl

class ServerImpl final : public HttpServer {
 public:
  ServerImpl(const HttpServerOptions& o, HttpHandler h)
      : shared_(std::make_shared<Shared>(o, std::move(h))),
        ioc_(std::make_shared<IoContext>(std::max(1, o.num_threads))),
        acceptor_strand_(asio::make_strand(*ioc_)),
        acceptor_(acceptor_strand_) {}
  ~ServerImpl() override { Stop(0); }

  Status Bind() {
    const HttpServerOptions& o = shared_->opts;
    if (o.port < 0 || o.port > 65535) return Status::InvalidArgument("--port must be in [0, 65535]");
    boost::system::error_code ec;
    tcp::endpoint ep;
    auto addr = asio::ip::make_address(o.host, ec);
    if (!ec) {
      ep = tcp::endpoint(addr, static_cast<unsigned short>(o.port));
    } else {  // a host name, e.g. "localhost"
      tcp::resolver resolver(*ioc_);
      auto found = resolver.resolve(o.host, std::to_string(o.port), ec);
      if (ec || found.empty()) return Status::InvalidArgument("--host '" + o.host + "' does not resolve: " + ec.message());
      ep = found.begin()->endpoint();
    }
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Status::Unavailable("cannot listen on " + o.host + ":" + std::to_string(o.port) + ": " + ec.message());
    port_ = acceptor_.local_endpoint().port();
    return Status::Ok();
  }

  Status Start() override {
    if (started_) return Status::Ok();
    started_ = true;
    work_.emplace(ioc_->get_executor());
    asio::co_spawn(acceptor_strand_, AcceptLoop(), asio::detached);
    for (int i = 0; i < std::max(1, shared_->opts.num_threads); ++i) {
      threads_.emplace_back([ioc = ioc_] { ioc->run(); });
    }
    return Status::Ok();
  }

  int port() const override { return port_; }

  void StopAccepting() override {
    if (accept_stopped_.exchange(true)) return;
    if (!started_) {
      boost::system::error_code ec;
      acceptor_.close(ec);
      return;
    }
    asio::post(acceptor_strand_, [this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
    });
  }

  void Stop(int64_t grace_ms) override {
    if (shared_->stopping.exchange(true)) return;
    StopAccepting();
    if (!started_) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
    while (shared_->open_exchanges.load() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (auto& c : shared_->Live()) c->PostShutdown();
    const auto close_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
    while (shared_->num_conns.load() > 0 && std::chrono::steady_clock::now() < close_deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    work_.reset();
    ioc_->stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
    // What the threads left queued (e.g. an engine sink's last OnFinish, posted just before the
    // stop) holds exchanges, which hold ioc_: destroy it now, or nothing frees it.
    ioc_->DestroyHandlers();
  }

  int64_t num_open_exchanges() const override { return shared_->open_exchanges.load(); }

 private:
  asio::awaitable<void> AcceptLoop() {
    for (;;) {
      boost::system::error_code ec;
      Strand strand = asio::make_strand(*ioc_);
      tcp::socket sock = co_await acceptor_.async_accept(strand, asio::redirect_error(use_awaitable, ec));
      if (ec) {
        if (!acceptor_.is_open() || ec == asio::error::operation_aborted) co_return;
        // e.g. EMFILE: keep serving the open connections; wait before accepting again (the
        // pending connection stays in the backlog) instead of spinning on the error.
        asio::steady_timer backoff(*ioc_, std::chrono::milliseconds(shared_->opts.accept_backoff_ms));
        co_await backoff.async_wait(asio::redirect_error(use_awaitable, ec));
        continue;
      }
      if (shared_->num_conns.load() >= shared_->opts.max_connections) {
        sock.close(ec);  // over the cap: refuse this one, keep the others
        ++shared_->refused_conns;
        continue;
      }
      sock.set_option(tcp::no_delay(true), ec);
      auto conn = std::make_shared<Connection>(shared_, ioc_, strand, std::move(sock));
      shared_->Register(conn);
      asio::co_spawn(strand, [conn]() { return conn->Run(); }, asio::detached);
    }
  }

  const std::shared_ptr<Shared> shared_;
  const std::shared_ptr<IoContext> ioc_;  // before the I/O objects: destroyed after them
  Strand acceptor_strand_;
  tcp::acceptor acceptor_;
  int port_ = 0;
  bool started_ = false;  // controlling thread only
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
  std::atomic<bool> accept_stopped_{false};
};

void Exchange::NotifyLocked() {
  if (notify_pending_) return;
  notify_pending_ = true;
  asio::post(strand_, [self = shared_from_this()] {
    {
      std::lock_guard<std::mutex> l(self->mu_);
      self->notify_pending_ = false;
    }
    if (auto c = self->conn_.lock()) c->Wake();
  });
}

// ---------------------------------------------------------------------------------------------
// Connection implementation

Connection::Connection(std::shared_ptr<Shared> shared, std::shared_ptr<asio::io_context> ioc, Strand strand,
                       tcp::socket socket)
    : shared_(std::move(shared)), ioc_(std::move(ioc)), strand_(std::move(strand)), stream_(std::move(socket)),
      wake_(strand_) {}

Connection::~Connection() { shared_->Unregister(); }

std::string Connection::ErrorBody(int status, const std::string& message) const {
  const auto& f = shared_->opts.error_body;
  return f ? f(status, message) : DefaultErrorBody(status, message);
}

void Connection::Wake() {
  wake_.cancel();
  if (current_ && current_->aborted()) {
    beast::error_code ec;
    stream_.socket().cancel(ec);
  }
}

void Connection::Shutdown() {
  if (current_) current_->Abort();
  closed_ = true;
  wake_.cancel();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
}

// Watches the socket while a response is pending, to abort the exchange when the client goes
// away. Readiness alone is not EOF: the reactor can report a readiness edge that the request read
// already consumed (the epoll event for the request's bytes arrives after a speculative read took
// them). So the handler peeks: 0 bytes = EOF, data = the client pipelined its next request (alive),
// nothing yet = spurious wake-up, watch again. `watch_gen_` ties a completion to its watch: a
// completion of an earlier watch (already queued when StopWatch cancelled it) does nothing.
void Connection::StartWatch(const std::shared_ptr<Exchange>& ex) {
  watching_ = true;
  const uint64_t gen = ++watch_gen_;
  stream_.socket().async_wait(
      tcp::socket::wait_read,
      asio::bind_executor(strand_, [self = shared_from_this(), ex, gen](beast::error_code ec) {
        if (ec == asio::error::operation_aborted || !self->watching_ || gen != self->watch_gen_) return;
        if (!ec) {
          char byte;
          const ssize_t n = ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
          if (n > 0) return;  // pipelined data: the client is alive
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            self->StartWatch(ex);  // spurious readiness
            return;
          }
        }
        ex->Abort();  // EOF or error: the client went away
      }));
}

void Connection::StopWatch() {
  if (!watching_) return;
  watching_ = false;
  ++watch_gen_;
  beast::error_code ec;
  stream_.socket().cancel(ec);
}

asio::awaitable<void> Connection::WaitWake() {
  beast::error_code ec;
  wake_.expires_at(asio::steady_timer::time_point::max());
  co_await wake_.async_wait(asio::redirect_error(use_awaitable, ec));
}

asio::awaitable<bool> Connection::WriteSimple(int status, const std::string& message, unsigned version,
                                              const std::vector<std::pair<std::string, std::string>>& headers) {
  http::response<http::string_body> res{static_cast<http::status>(status), version};
  res.set(http::field::server, "gyre");
  res.set(http::field::content_type, "application/json");
  for (const auto& [k, v] : headers) res.set(k, v);
  res.keep_alive(false);
  res.body() = ErrorBody(status, message);
  res.prepare_payload();
  beast::error_code ec;
  stream_.expires_after(std::chrono::milliseconds(shared_->opts.write_timeout_ms));
  co_await http::async_write(stream_, res, asio::redirect_error(use_awaitable, ec));
  if (ec) co_return false;
  // Lingering close: the client may still be sending the rejected body; closing now would make it
  // see a reset (EPIPE) instead of our answer. Stop sending and discard its input for a while.
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream_.expires_after(std::chrono::seconds(2));
  static thread_local char sink[16384];
  for (int64_t drained = 0; !ec && drained < (int64_t{64} << 20);) {
    drained += static_cast<int64_t>(
        co_await stream_.async_read_some(asio::buffer(sink), asio::redirect_error(use_awaitable, ec)));
  }
  co_return true;
}

// Reads one request. Returns false when the connection should close; *fatal is set when an error
// response was already written or nothing can be written.
asio::awaitable<bool> Connection::ReadRequest(RequestParser& parser, bool* fatal) {
  const auto& o = shared_->opts;
  LimitRequestParser(o, parser);
  const auto started = std::chrono::steady_clock::now();
  beast::error_code ec;
  // Headers must arrive in time: header_timeout_ms on a new connection, idle_timeout_ms between
  // keep-alive requests.
  stream_.expires_after(std::chrono::milliseconds(served_ == 0 ? o.header_timeout_ms : o.idle_timeout_ms));
  co_await http::async_read_header(stream_, buffer_, parser, asio::redirect_error(use_awaitable, ec));
  if (!ec && WantsContinue(o, parser)) {
    http::response<http::empty_body> cont{http::status::continue_, parser.get().version()};
    co_await http::async_write(stream_, cont, asio::redirect_error(use_awaitable, ec));
  }
  if (!ec && !parser.is_done()) {
    co_await http::async_read(stream_, buffer_, parser, asio::redirect_error(use_awaitable, ec));
  }
  if (!ec) co_return true;
  *fatal = true;
  const unsigned version = parser.is_header_done() ? parser.get().version() : 11;
  const ReadErrorAnswer answer = AnswerReadError(o, ec);
  if (answer.status != 0) {
    std::vector<std::pair<std::string, std::string>> headers;
    if (o.on_read_error) {
      const auto data = buffer_.data();
      const HttpRequest seen =
          RequestReadSoFar(parser, std::string_view(static_cast<const char*>(data.data()), data.size()));
      const double elapsed_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
      headers = o.on_read_error(seen, answer.status, elapsed_ms);
    }
    co_await WriteSimple(answer.status, answer.message, version, headers);
  }
  co_return false;
}

asio::awaitable<void> Connection::Run() {
  auto self = shared_from_this();
  try {
    for (;;) {
      if (closed_ || shared_->stopping) break;
      RequestParser parser;
      bool fatal = false;
      if (!co_await ReadRequest(parser, &fatal)) break;
      stream_.expires_never();
      BeastRequest req = parser.release();
      ++served_;
      const bool keep_alive = req.keep_alive();
      const unsigned version = req.version();
      HttpRequest hr = ToHttpRequest(std::move(req));

      auto ex = std::make_shared<Exchange>(ioc_, strand_, weak_from_this(), shared_);
      current_ = ex;
      try {
        shared_->handler(std::move(hr), ex);
      } catch (const std::exception& e) {
        HttpResponse r;
        r.status = 500;
        r.body = ErrorBody(500, std::string("internal error: ") + e.what());
        ex->Respond(std::move(r));
      } catch (...) {
        HttpResponse r;
        r.status = 500;
        r.body = ErrorBody(500, "internal error");
        ex->Respond(std::move(r));
      }
      const bool again = co_await Drive(ex, version, keep_alive);
      current_.reset();
      if (!again) break;
    }
  } catch (const std::exception&) {
    // Fall through to close; nothing may escape the coroutine.
  }
  if (current_) {
    current_->Abort();
    current_->Close();
    current_.reset();
  }
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream_.socket().close(ec);
}

// Writes what the handler produces for `ex`. Returns true if the connection can serve another
// request.
asio::awaitable<bool> Connection::Drive(const std::shared_ptr<Exchange>& ex, unsigned version, bool keep_alive) {
  const auto& o = shared_->opts;
  const auto write_timeout = std::chrono::milliseconds(o.write_timeout_ms);
  beast::error_code ec;
  StartWatch(ex);
  auto fail = [&]() {
    StopWatch();
    ex->Abort();
    ex->Close();
    return false;
  };

  // Wait for the head.
  Exchange::Taken t = ex->Take();
  while (!t.aborted && t.kind == Exchange::Kind::kNone) {
    co_await WaitWake();
    t = ex->Take();
  }
  if (t.aborted || closed_) co_return fail();

  if (t.kind == Exchange::Kind::kFull) {
    StopWatch();
    http::response<http::string_body> res{static_cast<http::status>(t.full.status), version};
    res.set(http::field::server, "gyre");
    res.set(http::field::content_type, t.full.content_type);
    for (auto& [k, v] : t.full.headers) res.set(k, v);
    res.keep_alive(keep_alive);
    res.body() = std::move(t.full.body);
    res.prepare_payload();
    stream_.expires_after(write_timeout);
    co_await http::async_write(stream_, res, asio::redirect_error(use_awaitable, ec));
    stream_.expires_never();
    if (ec) co_return fail();
    ex->Complete();
    co_return keep_alive;
  }

  // Streaming.
  const bool chunked = version >= 11;
  const bool keep = keep_alive && chunked;
  {
    http::response<http::empty_body> res{static_cast<http::status>(t.head.status), version};
    res.set(http::field::server, "gyre");
    res.set(http::field::content_type, t.head.content_type);
    res.set(http::field::cache_control, "no-cache");
    for (auto& [k, v] : t.head.headers) res.set(k, v);
    res.keep_alive(keep);
    if (chunked) res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    stream_.expires_after(write_timeout);
    co_await http::async_write_header(stream_, sr, asio::redirect_error(use_awaitable, ec));
    stream_.expires_never();
    if (ec) co_return fail();
  }
  for (;;) {
    if (t.aborted || closed_) co_return fail();
    if (!t.data.empty()) {
      stream_.expires_after(write_timeout);
      if (chunked) {
        co_await asio::async_write(stream_, http::make_chunk(asio::buffer(t.data)), asio::redirect_error(use_awaitable, ec));
      } else {
        co_await asio::async_write(stream_, asio::buffer(t.data), asio::redirect_error(use_awaitable, ec));
      }
      stream_.expires_never();
      if (ec) co_return fail();
    } else if (t.ended) {
      StopWatch();
      if (chunked) {
        stream_.expires_after(write_timeout);
        co_await asio::async_write(stream_, http::make_chunk_last(), asio::redirect_error(use_awaitable, ec));
        stream_.expires_never();
        if (ec) co_return fail();
      }
      ex->Complete();
      co_return keep;
    } else {
      co_await WaitWake();
    }
    t = ex->Take();
  }
}

}  // namespace

std::string_view HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return {};
}

const char* HttpReason(int status) {
  const auto r = http::obsolete_reason(static_cast<http::status>(status));
  return r.empty() ? "Unknown" : r.data();
}

Result<std::unique_ptr<HttpServer>> HttpServer::Create(const HttpServerOptions& options, HttpHandler handler) {
  if (options.num_threads < 1) return Status::InvalidArgument("HTTP threads must be >= 1");
  if (options.max_body_bytes < 1 || options.max_buffered_bytes < 1 || options.max_header_bytes < 1 ||
      options.max_header_bytes > (int64_t{1} << 30)) {
    return Status::InvalidArgument("HTTP byte limits must be >= 1 (headers at most 1 GiB)");
  }
  auto s = std::make_unique<ServerImpl>(options, std::move(handler));
  GYRE_RETURN_IF_ERROR(s->Bind());
  return std::unique_ptr<HttpServer>(std::move(s));
}

}  // namespace gyre::serve
