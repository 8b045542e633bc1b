// CORS for browser clients: which origins may call the server, and the answers to preflights.
//
// Off unless origins are configured (--allowed-origins): then no response carries CORS headers
// and OPTIONS is routed like any method (405 on the API routes). On:
//   - a response to a request whose Origin is allowed carries Access-Control-Allow-Origin (the
//     origin itself, with Vary: Origin, or "*" when every origin is allowed); other origins get no
//     CORS headers, so the browser withholds the response from the page;
//   - a preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered by the
//     server itself, before authentication (browsers send preflights without credentials): 204
//     with Access-Control-Allow-Origin/-Methods/-Headers and -Max-Age when the origin, the method
//     and every requested header are allowed; 400 naming what was refused, without CORS headers,
//     otherwise.
// "*" in a list allows everything of that kind. The CORS-safelisted request headers (Accept,
// Accept-Language, Content-Language, Content-Type) are always allowed.
//
// Thread safety: immutable after construction.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "serve/http_server.h"

namespace gyre::serve {

struct CorsOptions {
  std::vector<std::string> allowed_origins;          // empty: CORS off; "*": any origin
  std::vector<std::string> allowed_methods = {"*"};  // e.g. "GET", "POST"; case-sensitive
  std::vector<std::string> allowed_headers = {"*"};  // header names; case-insensitive
};

// A list flag's value: a JSON array of strings (vLLM's form, '["https://a.example"]') or
// comma-separated items ("https://a.example, https://b.example"); blanks around items are
// dropped. InvalidArgument naming `flag` for malformed JSON, a non-string item or an empty item.
Result<std::vector<std::string>> ParseCorsList(std::string_view text, std::string_view flag);

using HeaderList = std::vector<std::pair<std::string, std::string>>;

class Cors {
 public:
  explicit Cors(CorsOptions options);
  bool enabled() const { return !opts_.allowed_origins.empty(); }
  bool OriginAllowed(std::string_view origin) const;
  // True for an OPTIONS request with Origin and Access-Control-Request-Method, when enabled.
  bool IsPreflight(const HttpRequest& req) const;
  // The answer to a preflight (see the top of this file). REQUIRES: IsPreflight(req).
  HttpResponse Preflight(const HttpRequest& req) const;
  // The CORS headers for a response to a request from `origin` ("" when it sent none): empty
  // when CORS is off or the origin is not allowed.
  HeaderList ResponseHeaders(std::string_view origin) const;

 private:
  bool MethodAllowed(std::string_view method) const;
  bool HeaderAllowed(std::string_view name) const;  // `name` lower-case

  const CorsOptions opts_;
  const bool any_origin_, any_method_, any_header_;
  const std::vector<std::string> headers_lower_;  // allowed_headers, lower-cased
};

}  // namespace gyre::serve
