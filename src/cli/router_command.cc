#include "cli/router_command.h"

#include <CLI/CLI.hpp>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/prefix_affinity.h"
#include "serve/http_server.h"
#include "serve/loadgen.h"
#include "serve/openai_protocol.h"
#include "serve/openai_serving.h"
#include "serve/server.h"

namespace gyre::cli {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using serve::Json;
using Clock = std::chrono::steady_clock;

struct RouterArgs {
  std::vector<std::string> prefill, decode;
  std::vector<std::string> encode;  // image requests go through one of these first (may be empty)
  std::string host = "127.0.0.1";
  int port = 8000;
  int http_threads = 2;
  double timeout_s = 600;  // one upstream answer (a whole generation)
  int poll_ms = 200;
  int max_retries = 2;  // further decode instances tried when a handoff fails before any output
  bool prefix_routing = true;
  PrefixAffinityOptions affinity;
};

serve::ApiError Error(int status, std::string message) {
  serve::ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = serve::ErrorTypeFor(status);
  return e;
}

// One HTTP exchange with an instance over a blocking socket whose reads time out (SO_RCVTIMEO).
// Close() from another thread unblocks a read (the client left).
class UpstreamCall {
 public:
  // Connects, sends, and reads the answer's header. Unavailable when the instance cannot be
  // reached or the connection broke.
  Status Start(const serve::Endpoint& ep, http::verb verb, const std::string& path, const std::string& body,
               const std::vector<std::pair<std::string, std::string>>& headers, double timeout_s) {
    beast::error_code ec;
    asio::ip::tcp::resolver resolver(ioc_);
    auto hosts = resolver.resolve(ep.host, ep.port, ec);
    if (!ec) asio::connect(socket_, hosts, ec);
    if (ec) return Status::Unavailable("cannot connect to " + ep.host + ":" + ep.port + ": " + ec.message());
    connected_ = true;
    timeval tv{static_cast<time_t>(timeout_s), static_cast<suseconds_t>((timeout_s - static_cast<int64_t>(timeout_s)) * 1e6)};
    setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    http::request<http::string_body> req{verb, ep.prefix + path, 11};
    req.set(http::field::host, ep.host + ":" + ep.port);
    if (verb == http::verb::post) req.set(http::field::content_type, "application/json");
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    http::write(socket_, req, ec);
    if (!ec) {
      parser_.body_limit(boost::none);
      http::read_header(socket_, buf_, parser_, ec);
    }
    if (ec) return Status::Unavailable("no answer from " + ep.host + ":" + ep.port + ": " + ec.message());
    return Status::Ok();
  }
  // Whether Start got as far as a connection (after a failed Start: the request may have arrived).
  bool connected() const { return connected_; }
  int status() const { return static_cast<int>(parser_.get().result_int()); }
  std::string content_type() const { return std::string(parser_.get()[http::field::content_type]); }
  bool done() const { return parser_.is_done(); }
  // Appends what arrives next of the body (at least one byte unless done). Unavailable when the
  // connection broke (or timed out) before the body was complete.
  Status ReadSome(std::string* out) {
    char tmp[16384];
    while (!parser_.is_done()) {
      parser_.get().body().data = tmp;
      parser_.get().body().size = sizeof tmp;
      beast::error_code ec;
      http::read_some(socket_, buf_, parser_, ec);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) return Status::Unavailable("the connection broke: " + ec.message());
      const size_t n = sizeof tmp - parser_.get().body().size;
      if (n > 0) {
        out->append(tmp, n);
        return Status::Ok();
      }
    }
    return Status::Ok();
  }
  Status ReadAll(std::string* out) {
    while (!parser_.is_done()) GYRE_RETURN_IF_ERROR(ReadSome(out));
    return Status::Ok();
  }
  void Close() {
    beast::error_code ec;
    socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  }

 private:
  asio::io_context ioc_;
  asio::ip::tcp::socket socket_{ioc_};
  beast::flat_buffer buf_;
  http::response_parser<http::buffer_body> parser_;
  bool connected_ = false;
};

// One instance as the router sees it.
enum class Role { kPrefill, kDecode, kEncode };
const char* RoleName(Role r) { return r == Role::kPrefill ? "prefill" : r == Role::kDecode ? "decode" : "encode"; }

// Whether a chat body has image parts (messages[i].content[j].type == "image_url").
bool HasImages(const Json& body) {
  const Json* messages = body.contains("messages") ? &body["messages"] : nullptr;
  if (!messages || !messages->is_array()) return false;
  for (const Json& m : *messages) {
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    for (const Json& part : m["content"]) {
      if (part.is_object() && part.value("type", "") == "image_url") return true;
    }
  }
  return false;
}

struct Instance {
  std::string url;
  serve::Endpoint ep;
  Role role = Role::kDecode;
  // Guarded by Router::mu_.
  bool healthy = false;
  std::string why;  // when not healthy
  int64_t load = 0, pages_free = 0;
  std::string transfer_address;  // decode (caches, image rows), prefill (image rows)
  int64_t routed = 0;            // this router's requests there now
};

class Router {
 public:
  explicit Router(const RouterArgs& a)
      : args_(a),
        affinity_(a.prefill.size() + a.decode.size() + a.encode.size(), a.affinity),
        rng_(std::random_device{}()) {}

  Status Init() {
    for (const auto& [urls, role] : {std::pair{&args_.prefill, Role::kPrefill}, std::pair{&args_.decode, Role::kDecode},
                                     std::pair{&args_.encode, Role::kEncode}}) {
      for (const std::string& u : *urls) {
        auto ep = serve::ParseUrl(u);
        if (!ep.ok()) return ep.error().WithContext(std::string("--") + RoleName(role));
        auto in = std::make_unique<Instance>();
        in->url = u;
        in->ep = *ep;
        in->role = role;
        instances_.push_back(std::move(in));
      }
    }
    PollOnce();
    poller_ = std::thread([this] { PollLoop(); });
    return Status::Ok();
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (poller_.joinable()) poller_.join();
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, std::chrono::seconds(5), [&] { return active_ == 0; });
  }

  void Handle(serve::HttpRequest req, std::shared_ptr<serve::HttpExchange> ex) {
    const std::string& p = req.path;
    if (p == "/health") return ex->Respond({.status = 200, .content_type = "text/plain"});
    if (p == "/disagg/status") return serve::RespondJson(*ex, StatusJson());
    if (p == "/v1/models") return Spawn([this, req = std::move(req), ex]() mutable { Models(req, *ex); });
    if (p == "/v1/chat/completions" || p == "/v1/completions") {
      if (req.method != "POST") return serve::RespondError(*ex, Error(405, "use POST on " + p));
      return Spawn([this, req = std::move(req), ex]() mutable { Generate(req, ex); });
    }
    serve::RespondError(*ex, Error(404, "the router serves /v1/chat/completions, /v1/completions, /v1/models, "
                                        "/health and /disagg/status; '" + p + "' is not one of them"));
  }

 private:
  // Runs `fn` on its own thread (each request blocks on its upstream sockets).
  void Spawn(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> l(mu_);
      ++active_;
    }
    std::thread([this, fn = std::move(fn)] {
      fn();
      std::lock_guard<std::mutex> l(mu_);
      --active_;
      cv_.notify_all();
    }).detach();
  }

  void PollLoop() {
    std::unique_lock<std::mutex> l(mu_);
    while (!cv_.wait_for(l, std::chrono::milliseconds(args_.poll_ms), [&] { return stopping_; })) {
      l.unlock();
      PollOnce();
      l.lock();
    }
  }

  // Reads every instance's GET /disagg/status.
  void PollOnce() {
    for (auto& in : instances_) {
      UpstreamCall c;
      std::string body;
      Status s = c.Start(in->ep, http::verb::get, "/disagg/status", "", {}, 2.0);
      if (s.ok()) s = c.ReadAll(&body);
      Json j;
      if (s.ok() && c.status() != 200) s = Status::Unavailable("GET /disagg/status answered " + std::to_string(c.status()));
      if (s.ok()) {
        j = Json::parse(body, nullptr, false);
        const std::string want = RoleName(in->role);
        if (j.is_discarded() || j.value("role", "") != want)
          s = Status::Unavailable("it is not a " + want + " instance (gyre serve --role " + want + ")");
      }
      std::lock_guard<std::mutex> l(mu_);
      in->healthy = s.ok();
      in->why = s.ok() ? "" : s.message();
      if (!s.ok()) {  // (when it comes back, its cache may be gone)
        affinity_.Forget(static_cast<size_t>(&in - instances_.data()));
        continue;
      }
      in->load = j.value("num_running", int64_t{0}) + j.value("num_waiting", int64_t{0});
      in->pages_free = j.value("kv_pages_free", int64_t{0});
      in->transfer_address = j.value("transfer_address", "");
    }
  }

  Json StatusJson() {
    std::lock_guard<std::mutex> l(mu_);
    Json list = Json::array();
    for (size_t i = 0; i < instances_.size(); ++i) {
      const Instance& in = *instances_[i];
      Json e{{"url", in.url},
             {"role", RoleName(in.role)},
             {"healthy", in.healthy},
             {"why", in.why},
             {"load", in.load},
             {"kv_pages_free", in.pages_free},
             {"routed", in.routed}};
      if (in.role == Role::kPrefill) e["prefix_blocks"] = affinity_.Blocks(i);
      list.push_back(std::move(e));
    }
    return Json{{"role", "router"},
                {"instances", list},
                {"handoff_retries", retries_},
                {"image_requests", image_requests_},
                {"max_retries", args_.max_retries},
                {"prefix_routing",
                 {{"enabled", args_.prefix_routing},
                  {"block_bytes", args_.affinity.block_bytes},
                  {"balance_slack", args_.affinity.balance_slack},
                  {"prefill_requests", prefill_requests_},
                  {"routed_by_prefix", routed_by_prefix_},
                  {"matched_blocks", matched_blocks_}}}};
  }

  // The least loaded healthy instance of a role (load reported + routed here; then the most free
  // pages); null when none is healthy. For prefill with prefix routing on and a prompt of at least
  // one block (`chain`), the instance that got the longest run of its leading blocks when its load
  // is within the slack (PrefixAffinity). Counts the request as routed there.
  // `exclude`: instances that already failed this request (a retry goes elsewhere).
  Instance* Pick(bool prefill, const std::vector<uint64_t>& chain = {}, const std::vector<const Instance*>& exclude = {}) {
    std::lock_guard<std::mutex> l(mu_);
    size_t best = instances_.size();
    std::vector<PrefixAffinity::Candidate> candidates;
    auto key = [](const Instance& x) { return std::pair{x.load + x.routed, -x.pages_free}; };
    for (size_t i = 0; i < instances_.size(); ++i) {
      const Instance& in = *instances_[i];
      if (in.role != (prefill ? Role::kPrefill : Role::kDecode) || !in.healthy ||
          (!prefill && in.transfer_address.empty()))
        continue;
      if (std::find(exclude.begin(), exclude.end(), &in) != exclude.end()) continue;
      if (best == instances_.size() || key(in) < key(*instances_[best])) best = i;
      candidates.push_back({i, in.load + in.routed});
    }
    if (best == instances_.size()) return nullptr;
    if (prefill) ++prefill_requests_;
    if (prefill && args_.prefix_routing && !chain.empty()) {
      const PrefixAffinity::Choice c = affinity_.Choose(candidates, chain);
      if (c.by_prefix) {
        best = c.instance;
        ++routed_by_prefix_;
        matched_blocks_ += static_cast<int64_t>(c.matched_blocks);
      }
      affinity_.Record(best, chain);
    }
    ++instances_[best]->routed;
    return instances_[best].get();
  }
  // The least loaded healthy encode instance (counted as routed there), or null.
  Instance* PickEncoder() {
    std::lock_guard<std::mutex> l(mu_);
    Instance* best = nullptr;
    for (auto& in : instances_) {
      if (in->role != Role::kEncode || !in->healthy) continue;
      if (!best || in->load + in->routed < best->load + best->routed) best = in.get();
    }
    if (best) ++best->routed;
    return best;
  }
  void Done(Instance* in, bool unreachable) {
    std::lock_guard<std::mutex> l(mu_);
    --in->routed;
    if (unreachable) {  // until the next poll says otherwise
      in->healthy = false;
      in->why = "unreachable";
    }
  }

  static std::vector<std::pair<std::string, std::string>> Forwarded(const serve::HttpRequest& req) {
    std::vector<std::pair<std::string, std::string>> h;
    if (auto a = req.Header("authorization"); !a.empty()) h.emplace_back("Authorization", std::string(a));
    return h;
  }

  // Relays a non-200 (or non-streamed) answer whole: status, content type and body.
  static void RelayWhole(UpstreamCall& c, serve::HttpExchange& ex, const std::string& who) {
    std::string body;
    if (Status s = c.ReadAll(&body); !s.ok())
      return serve::RespondError(ex, Error(502, "the " + who + " instance's answer broke off: " + s.message()));
    ex.Respond({.status = c.status(), .content_type = c.content_type().empty() ? "application/json" : c.content_type(),
                .body = std::move(body)});
  }

  void Models(const serve::HttpRequest& req, serve::HttpExchange& ex) {
    Instance* d = Pick(false);
    if (!d) return serve::RespondError(ex, Error(503, "no decode instance is available"));
    UpstreamCall c;
    Status s = c.Start(d->ep, http::verb::get, "/v1/models", "", Forwarded(req), 10);
    Done(d, !s.ok());
    if (!s.ok()) return serve::RespondError(ex, Error(502, "decode instance " + d->url + ": " + s.message()));
    RelayWhole(c, ex, "decode");
  }

  // Step 0 of an image request: an encode instance sends the image rows (`images_id`) to the
  // transfer addresses `to` ("P,D"). kSent: both hold verified rows; kRetry: the encoder answered
  // 503 (a send failed; another decode instance may do) and `last` is false; kAnswered: an error
  // went to the client (the encoder's own answer, a 400 for a bad image among them, or a 502/503).
  enum class EncodeOutcome { kSent, kRetry, kAnswered };
  EncodeOutcome Encode(const serve::HttpRequest& req, const std::string& body, uint64_t images_id, const std::string& to,
                       bool last, serve::HttpExchange& ex) {
    Instance* e = PickEncoder();
    if (!e) {
      serve::RespondError(ex, Error(503, "no encode instance is available"));
      return EncodeOutcome::kAnswered;
    }
    auto headers = Forwarded(req);
    headers.emplace_back("X-Gyre-Images-Id", std::to_string(images_id));
    headers.emplace_back("X-Gyre-Images-To", to);
    UpstreamCall c;
    Status s = c.Start(e->ep, http::verb::post, req.path, body, headers, args_.timeout_s);
    Done(e, !s.ok());
    if (s.ok() && c.status() == 503 && !last) {
      std::string ignored;
      (void)c.ReadAll(&ignored);
      return EncodeOutcome::kRetry;
    }
    if (s.ok() && c.status() != 200) {
      RelayWhole(c, ex, "encode");
      return EncodeOutcome::kAnswered;
    }
    std::string ignored;
    if (s.ok()) s = c.ReadAll(&ignored);
    if (s.ok()) return EncodeOutcome::kSent;
    serve::RespondError(ex, Error(502, "encode instance " + e->url + ": " + s.message()));
    return EncodeOutcome::kAnswered;
  }

  void Generate(const serve::HttpRequest& req, std::shared_ptr<serve::HttpExchange> ex) {
    Json body = Json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object())
      return serve::RespondError(*ex, Error(400, "the request body is not a JSON object"));
    const std::vector<uint64_t> chain =
        args_.prefix_routing ? BlockChain(PromptKey(body), args_.affinity.block_bytes) : std::vector<uint64_t>{};
    Instance* p = Pick(true, chain);
    if (!p) return serve::RespondError(*ex, Error(503, "no prefill instance is available"));
    std::vector<const Instance*> failed_prefill;
    // A handoff that fails before anything reached the client is tried again with another decode
    // instance (up to --max-retries more): the prefill instance answered 503 (its transfer to the
    // decode instance failed; it released the cache), or the decode instance could not be reached,
    // or answered 404 (no cache under the transfer id) or 5xx. A prefill instance that cannot be
    // connected to is replaced by another (same budget). Each try prefills again under a fresh
    // transfer id. Other answers (a 400 for a bad field, ...) go to the client as they are.
    // Image requests go through an encode instance first (docs/vision.md "Encode role"): it runs
    // the tower and sends the rows to the prefill and the decode instance of this try; without
    // one, they are sent on and refused there (400).
    const bool images = !args_.encode.empty() && req.path == "/v1/chat/completions" && HasImages(body);
    if (images) {
      std::lock_guard<std::mutex> l(mu_);
      ++image_requests_;
    }
    Json pre = body;
    pre["stream"] = false;
    pre.erase("stream_options");
    const std::string pre_body = pre.dump();
    std::vector<const Instance*> failed;
    std::shared_ptr<UpstreamCall> c;
    Instance* d = nullptr;
    bool p_held = true;  // counted in p->routed (Pick) until its prefill answered
    auto release_p = [&](bool unreachable) {
      if (p_held) Done(p, unreachable);
      p_held = false;
    };
    for (int attempt = 0;; ++attempt) {
      const bool last = attempt >= args_.max_retries;
      d = Pick(false, {}, failed);
      if (!d) {
        release_p(false);
        return serve::RespondError(*ex, Error(503, failed.empty() ? "no decode instance is available"
                                                                  : "no other decode instance is available after " +
                                                                        std::to_string(failed.size()) + " failed handoffs"));
      }
      if (attempt > 0) {
        std::lock_guard<std::mutex> l(mu_);
        ++retries_;
        if (!p_held) ++p->routed;
        p_held = true;
      }
      uint64_t id;
      std::string to;
      {
        std::lock_guard<std::mutex> l(mu_);
        id = rng_() >> 1;  // (decimal in a header; any 63-bit value)
        to = d->transfer_address;
      }
      auto headers = Forwarded(req);
      headers.emplace_back("X-Gyre-Transfer-Id", std::to_string(id));
      if (images) {
        // 0. Encode: the image rows to both instances of this try (each try sends them again, under
        // a fresh id: the encoder's embedding cache makes a repeat cheap). 200 only once both hold
        // verified rows. A refused image (400) goes to the client as it is.
        uint64_t images_id;
        std::string p_addr;
        {
          std::lock_guard<std::mutex> l(mu_);
          images_id = (rng_() >> 1) | 1;
          p_addr = p->transfer_address;
        }
        EncodeOutcome o = EncodeOutcome::kAnswered;
        if (p_addr.empty()) {
          serve::RespondError(*ex, Error(503, "prefill instance " + p->url + " reports no transfer address for image rows"));
        } else {
          o = Encode(req, pre_body, images_id, p_addr + "," + to, last, *ex);
        }
        if (o == EncodeOutcome::kRetry) {  // a send to `p` or `d` failed: another decode instance
          Done(d, false);
          failed.push_back(d);
          continue;
        }
        if (o == EncodeOutcome::kAnswered) {
          release_p(false);
          Done(d, false);
          return;
        }
        headers.emplace_back("X-Gyre-Images-Id", std::to_string(images_id));
      }
      // 1. Prefill: the prompt and its first token; 200 only once the decode instance holds the cache.
      {
        UpstreamCall pc;
        auto pre_headers = headers;
        pre_headers.emplace_back("X-Gyre-Transfer-To", to);
        Status s = pc.Start(p->ep, http::verb::post, req.path, pre_body, pre_headers, args_.timeout_s);
        if (!s.ok()) {
          release_p(true);
          Done(d, false);
          // Nothing reached a prefill instance that could not be connected to: another one may
          // take the request (one that was connected may be running it: not tried again).
          if (!pc.connected() && !last) {
            failed_prefill.push_back(p);
            if (Instance* q = Pick(true, chain, failed_prefill)) {
              p = q;
              p_held = true;
              continue;
            }
          }
          return serve::RespondError(*ex, Error(502, "prefill instance " + p->url + " is unreachable: " + s.message()));
        }
        if (pc.status() == 503 && !last) {  // the transfer to `d` failed
          std::string ignored;
          (void)pc.ReadAll(&ignored);
          Done(d, false);
          failed.push_back(d);
          continue;
        }
        if (pc.status() != 200) {
          release_p(false);
          Done(d, false);
          return RelayWhole(pc, *ex, "prefill");
        }
        std::string ignored;
        Status r = pc.ReadAll(&ignored);
        release_p(false);
        if (!r.ok()) {
          Done(d, false);
          return serve::RespondError(*ex, Error(502, "prefill instance " + p->url + ": " + r.message()));
        }
      }
      // 2. Decode: relayed as it comes.
      c = std::make_shared<UpstreamCall>();
      Status s = c->Start(d->ep, http::verb::post, req.path, req.body, headers, args_.timeout_s);
      Done(d, !s.ok());
      const bool retry = !s.ok() || c->status() == 404 || c->status() >= 500;
      if (retry && !last) {
        failed.push_back(d);
        continue;
      }
      if (!s.ok())
        return serve::RespondError(*ex, Error(502, "decode instance " + d->url + " is unreachable: " + s.message()));
      break;
    }
    ex->OnAbort([c] { c->Close(); });  // the client left: the decode instance sees its request go
    const bool sse = c->content_type().rfind("text/event-stream", 0) == 0;
    if (c->status() != 200 || !sse) return RelayWhole(*c, *ex, "decode");
    ex->StartStream(200, c->content_type());
    while (!c->done()) {
      std::string chunk;
      if (Status r = c->ReadSome(&chunk); !r.ok()) {
        serve::ApiError e = Error(502, "decode instance " + d->url + " stopped mid-stream: " + r.message());
        ex->Write("data: " + Json{{"error", e.ToJson()["error"]}}.dump() + "\n\n");
        break;
      }
      if (!chunk.empty() && !ex->Write(std::move(chunk))) {
        c->Close();
        return;
      }
    }
    ex->EndStream();
  }

  const RouterArgs args_;
  std::vector<std::unique_ptr<Instance>> instances_;  // the list is constant after Init
  std::thread poller_;
  std::mutex mu_;
  PrefixAffinity affinity_;  // guarded by mu_
  int64_t prefill_requests_ = 0, routed_by_prefix_ = 0, matched_blocks_ = 0;
  int64_t retries_ = 0;  // handoffs tried again with another decode instance
  int64_t image_requests_ = 0;  // requests sent through an encode instance
  std::condition_variable cv_;
  bool stopping_ = false;
  int64_t active_ = 0;
  std::mt19937_64 rng_;
};

int RunRouter(const RouterArgs& a) {
  if (a.prefill.empty() || a.decode.empty()) {
    std::fprintf(stderr, "gyre router: give at least one --prefill URL and one --decode URL\n");
    return 2;
  }
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  Router router(a);
  if (Status s = router.Init(); !s.ok()) {
    std::fprintf(stderr, "gyre router: %s\n", s.message().c_str());
    return 2;
  }
  serve::HttpServerOptions ho;
  ho.host = a.host;
  ho.port = a.port;
  ho.num_threads = a.http_threads;
  ho.error_body = serve::OpenAiErrorBody;
  auto server = serve::HttpServer::Create(
      ho, [&router](serve::HttpRequest r, std::shared_ptr<serve::HttpExchange> ex) { router.Handle(std::move(r), ex); });
  if (!server.ok()) {
    std::fprintf(stderr, "gyre router: error: %s\n", server.error().ToString().c_str());
    router.Stop();
    return 1;
  }
  if (Status s = (*server)->Start(); !s.ok()) {
    std::fprintf(stderr, "gyre router: error: %s\n", s.ToString().c_str());
    router.Stop();
    return 1;
  }
  std::printf("gyre router: listening on http://%s:%d (%zu prefill, %zu decode instances)\n", a.host.c_str(),
              (*server)->port(), a.prefill.size(), a.decode.size());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&sigs, &sig);
  (*server)->Stop();
  router.Stop();
  std::fprintf(stderr, "gyre router: stopped\n");
  return 0;
}

}  // namespace

void AddRouterCommand(CLI::App& app, std::function<int()>* runner) {
  auto a = std::make_shared<RouterArgs>();
  auto* r = app.add_subcommand("router",
                               "front of disaggregated prefill/decode: the OpenAI API over `gyre serve --role prefill` "
                               "and `--role decode` instances (docs/disaggregation.md)");
  r->add_option("--prefill", a->prefill, "prefill instance base URLs (http://HOST:PORT), one or more")->required();
  r->add_option("--decode", a->decode, "decode instance base URLs (http://HOST:PORT), one or more")->required();
  r->add_option("--encode", a->encode,
                 "encode instance base URLs (gyre serve --role encode): chat requests with images go through one, "
                 "which sends the image rows to the prefill and the decode instance (docs/vision.md)");
  r->add_option("--host", a->host, "address to listen on")->capture_default_str();
  r->add_option("--port", a->port, "port (0 picks a free one)")->check(CLI::Range(0, 65535))->capture_default_str();
  r->add_option("--http-threads", a->http_threads, "HTTP I/O threads")->check(CLI::Range(1, 256))->capture_default_str();
  r->add_option("--timeout-s", a->timeout_s, "longest wait for one instance's answer (a whole generation)")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  r->add_option("--max-retries", a->max_retries,
                "further decode instances to try when a handoff fails before any output reached the client (the "
                "prefill instance's transfer failed, or the decode instance is unreachable or has no cache for it); "
                "each try prefills again")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  r->add_option("--poll-ms", a->poll_ms, "how often each instance's GET /disagg/status is read (load balancing, health)")
      ->check(CLI::Range(10, 60000))
      ->capture_default_str();
  r->add_flag("--prefix-routing,!--no-prefix-routing", a->prefix_routing,
              "send a prompt to the prefill instance that got the longest run of its leading blocks (a conversation's "
              "next turn to the instance whose prefix cache holds the last one), unless that instance is over "
              "--prefix-balance-slack requests busier than the least loaded")
      ->capture_default_str();
  r->add_option("--prefix-block-bytes", a->affinity.block_bytes, "prompt bytes per block the router records")
      ->check(CLI::Range(16, 1 << 20))
      ->capture_default_str();
  r->add_option("--prefix-balance-slack", a->affinity.balance_slack,
                "how many more requests than the least loaded prefill instance a prefix match may have")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  r->add_option("--prefix-max-blocks", a->affinity.max_blocks_per_instance,
                "blocks remembered per prefill instance (least recently used dropped)")
      ->check(CLI::Range(1, 1 << 26))
      ->capture_default_str();
  r->callback([a, runner] { *runner = [a] { return RunRouter(*a); }; });
}

}  // namespace gyre::cli
