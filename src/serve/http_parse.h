// The request side of HttpServer without the socket: the limits every request parser gets, when
// to answer "Expect: 100-continue", the conversion of a parsed Beast request into an HttpRequest,
// and the answer to a failed read. http_server.cc reads each request with these; the fuzz target
// http_request_fuzz.cc feeds them bytes directly, so both run the same parsing code.
//
// Internal to the HTTP layer: it names Beast types, so only http_server.cc and its fuzz target
// include it. Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <boost/beast/http.hpp>

#include "serve/http_server.h"

namespace gyre::serve {

using BeastRequest = boost::beast::http::request<boost::beast::http::string_body>;
using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Sets the limits of `options` (max_body_bytes, max_header_bytes) on a fresh parser.
void LimitRequestParser(const HttpServerOptions& options, RequestParser& parser);

// True when the parsed header asks for "100 Continue" before the body and the server should send
// it: the body is not complete yet and its announced length (if any) is within the body limit
// (otherwise the 413 answers instead). REQUIRES: parser.is_header_done().
bool WantsContinue(const HttpServerOptions& options, const RequestParser& parser);

// The handler's view of a complete request: method and target as sent, path up to '?', headers
// in the order sent (Beast keeps the repeats of a name together) with lower-cased names, the
// body moved out of `req`.
HttpRequest ToHttpRequest(BeastRequest&& req);

// What the server answers when reading a request failed with `ec`: 413 (body too large), 431
// (headers too large), 400 (malformed HTTP), or status 0 for errors that get no answer (the
// client closed, a partial message, a socket error or timeout). `message` is the error text.
struct ReadErrorAnswer {
  int status = 0;
  std::string message;
};
ReadErrorAnswer AnswerReadError(const HttpServerOptions& options, const boost::beast::error_code& ec);

// What was read of a request whose read failed, for HttpServerOptions::on_read_error: from
// `parser` when its header is complete (no body); otherwise what the parser stored before it
// failed (the start line and the fields before the bad one, which it has consumed from the
// buffer), then read leniently from the raw bytes left in `buffered` (the request line's method
// and target unless the parser had them, then every "name: value" line up to the end of the
// header or of the bytes; names lower-cased, values trimmed; other lines skipped).
HttpRequest RequestReadSoFar(const RequestParser& parser, std::string_view buffered);

}  // namespace gyre::serve
