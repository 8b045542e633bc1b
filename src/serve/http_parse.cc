#include "serve/http_parse.h"

#include <algorithm>
#include <cctype>

namespace gyre::serve {

namespace http = boost::beast::http;

void LimitRequestParser(const HttpServerOptions& options, RequestParser& parser) {
  parser.body_limit(static_cast<uint64_t>(options.max_body_bytes));
  parser.header_limit(static_cast<uint32_t>(options.max_header_bytes));
}

bool WantsContinue(const HttpServerOptions& options, const RequestParser& parser) {
  if (parser.get()[http::field::expect] != "100-continue" || parser.is_done()) return false;
  const auto len = parser.content_length();
  return !len || *len <= static_cast<uint64_t>(options.max_body_bytes);
}

HttpRequest ToHttpRequest(BeastRequest&& req) {
  HttpRequest hr;
  hr.method = std::string(req.method_string());
  hr.target = std::string(req.target());
  hr.path = hr.target.substr(0, hr.target.find('?'));
  for (const auto& f : req) {
    std::string name(f.name_string());
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    hr.headers.emplace_back(std::move(name), std::string(f.value()));
  }
  hr.body = std::move(req.body());
  return hr;
}

ReadErrorAnswer AnswerReadError(const HttpServerOptions& options, const boost::beast::error_code& ec) {
  if (ec == http::error::body_limit) {
    return {413, "request body exceeds " + std::to_string(options.max_body_bytes) + " bytes"};
  }
  if (ec == http::error::header_limit) return {431, "request headers too large"};
  if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
      ec != http::error::end_of_stream && ec != http::error::partial_message) {
    return {400, "malformed HTTP request: " + ec.message()};
  }
  return {0, ec.message()};
}

}  // namespace gyre::serve
