// libFuzzer target: the HTTP server's request reading, on the bytes one client sends.
//
// The seam. HttpServer's Connection::ReadRequest (http_server.cc) reads a request with Beast's
// request_parser, set up by LimitRequestParser; it sends 100 Continue when WantsContinue says
// so, answers a failed read with AnswerReadError, and hands ToHttpRequest's result to the handler
// (all in http_parse.h). Only the socket is left out. This target runs the same functions and
// Beast's read loop (http::read_header, then http::read, on a connection-lifetime flat_buffer)
// over an in-memory stream that holds the input: requests are read one after another
// (keep-alive, pipelining) until the stream ends, a read fails, or a request closes the
// connection. Each request then goes where Server::Handle sends it: the Authorization header,
// and for the two generation routes the body parser of openai_protocol.h, whose error becomes
// the OpenAI error body. (Server::Handle itself needs an Engine and a bound port; server_test
// covers it.)
//
// Every input runs under the default limits and under small ones (64-byte bodies, 512-byte
// headers, so that 413 and 431 are reachable with short inputs), each read whole and in pieces
// of 1 to 13 bytes. Checks (trap on violation):
//   * the outcome does not depend on how the bytes arrive (TCP splits a stream anywhere), but for
//     one case of Beast's (Outcome::SameAs);
//   * a failed read is answered 0 (no answer), 400, 413 or 431;
//   * an accepted request has a body within max_body_bytes, lower-case header names, and a path
//     that is its target up to '?';
//   * building the error bodies never throws (a throw escapes as a crash here).
//
// Run: scripts/fuzz.sh (seeds: src/serve/testdata/fuzz_http_request/).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include "serve/http_parse.h"
#include "serve/openai_protocol.h"
#include "serve/responses_protocol.h"
#include "serve/server.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using gyre::serve::HttpRequest;
using gyre::serve::HttpServerOptions;

// A SyncReadStream over the input: each read_some returns at most `piece` bytes (0: all that fit),
// then end of file, as a client that sends the bytes and closes.
class ByteStream {
 public:
  ByteStream(std::string_view bytes, size_t piece) : bytes_(bytes), piece_(piece) {}

  template <class MutableBuffers>
  size_t read_some(const MutableBuffers& buffers, beast::error_code& ec) {
    ec = {};
    if (pos_ == bytes_.size()) {
      ec = asio::error::eof;
      return 0;
    }
    size_t n = asio::buffer_size(buffers);
    n = std::min(n, bytes_.size() - pos_);
    if (piece_ > 0) n = std::min(n, 1 + (pos_ * 7 + bytes_.size()) % piece_);
    n = asio::buffer_copy(buffers, asio::buffer(bytes_.data() + pos_, n));
    pos_ += n;
    return n;
  }
  template <class MutableBuffers>
  size_t read_some(const MutableBuffers& buffers) {
    beast::error_code ec;
    const size_t n = read_some(buffers, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }

 private:
  std::string_view bytes_;
  size_t piece_;
  size_t pos_ = 0;
};

// What one connection's stream produced: the requests the handler saw, and how the stream ended.
struct Outcome {
  std::vector<HttpRequest> requests;
  std::vector<bool> continues;  // per request: 100 Continue was sent
  int answer = -1;              // -1: ended cleanly after a request that closes; else the read error's status
  bool partial = false;         // the stream ended inside a request (http::error::partial_message)

  // Same requests and the same end. One difference is Beast's and allowed: a start line that is
  // malformed but never followed by the end of the header is refused (400) when it arrives in one
  // piece, while a piecewise read waits for the rest and sees a partial message (no answer).
  bool SameAs(const Outcome& o) const {
    if (requests.size() != o.requests.size() || continues != o.continues) return false;
    if (answer != o.answer && !(answer == 400 && o.partial)) return false;
    for (size_t i = 0; i < requests.size(); ++i) {
      const HttpRequest &a = requests[i], &b = o.requests[i];
      if (a.method != b.method || a.target != b.target || a.headers != b.headers || a.body != b.body) return false;
    }
    return true;
  }
};

void CheckRequest(const HttpServerOptions& o, const HttpRequest& r) {
  if (static_cast<int64_t>(r.body.size()) > o.max_body_bytes) __builtin_trap();
  if (r.path != std::string_view(r.target).substr(0, r.target.find('?'))) __builtin_trap();
  for (const auto& [name, value] : r.headers) {
    if (std::any_of(name.begin(), name.end(), [](unsigned char c) { return c >= 'A' && c <= 'Z'; })) __builtin_trap();
  }
}

// Server::Handle's use of a request that needs no engine: the API key check reads the
// Authorization header, and the generation routes parse the body.
void Consume(const HttpRequest& r) {
  (void)r.Header("authorization");
  if (r.method != "POST") return;
  gyre::Status error;
  if (r.path == "/v1/chat/completions") {
    if (auto c = gyre::serve::ParseChatRequest(r.body); !c.ok()) error = c.error();
  } else if (r.path == "/v1/completions") {
    if (auto c = gyre::serve::ParseCompletionRequest(r.body); !c.ok()) error = c.error();
  } else if (r.path == "/v1/responses") {
    if (auto c = gyre::serve::ParseResponsesRequest(r.body); !c.ok()) error = c.error();
  }
  if (!error.ok()) (void)gyre::serve::ApiError::FromStatus(error).Body();
}

Outcome ReadConnection(const HttpServerOptions& o, std::string_view bytes, size_t piece) {
  Outcome out;
  ByteStream stream(bytes, piece);
  beast::flat_buffer buffer;
  for (;;) {
    gyre::serve::RequestParser parser;
    gyre::serve::LimitRequestParser(o, parser);
    beast::error_code ec;
    http::read_header(stream, buffer, parser, ec);
    const bool cont = !ec && gyre::serve::WantsContinue(o, parser);
    if (!ec && !parser.is_done()) http::read(stream, buffer, parser, ec);
    if (ec) {
      const gyre::serve::ReadErrorAnswer a = gyre::serve::AnswerReadError(o, ec);
      if (a.status != 0 && a.status != 400 && a.status != 413 && a.status != 431) __builtin_trap();
      if (a.status != 0) {
        (void)gyre::serve::OpenAiErrorBody(a.status, a.message);
        // What the server's on_read_error sees of the request (lenient on the raw bytes).
        const auto data = buffer.data();
        const gyre::serve::HttpRequest seen = gyre::serve::RequestReadSoFar(
            parser, std::string_view(static_cast<const char*>(data.data()), data.size()));
        if (seen.path.size() > seen.target.size()) __builtin_trap();
      }
      out.answer = a.status;
      out.partial = ec == http::error::partial_message;
      return out;
    }
    gyre::serve::BeastRequest req = parser.release();
    const bool keep_alive = req.keep_alive();
    out.requests.push_back(gyre::serve::ToHttpRequest(std::move(req)));
    out.continues.push_back(cont);
    CheckRequest(o, out.requests.back());
    if (!keep_alive) return out;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  HttpServerOptions small;
  small.max_body_bytes = 64;
  small.max_header_bytes = 512;
  for (const HttpServerOptions& o : {HttpServerOptions{}, small}) {
    const Outcome whole = ReadConnection(o, bytes, 0);
    if (!whole.SameAs(ReadConnection(o, bytes, 13))) __builtin_trap();
    for (const HttpRequest& r : whole.requests) Consume(r);
  }
  return 0;
}
