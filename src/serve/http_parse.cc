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

HttpRequest RequestReadSoFar(const RequestParser& parser, std::string_view buffered) {
  HttpRequest hr;
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
  };
  if (parser.is_header_done()) {
    const BeastRequest& req = parser.get();
    hr.method = std::string(req.method_string());
    hr.target = std::string(req.target());
    for (const auto& f : req) hr.headers.emplace_back(lower(std::string(f.name_string())), std::string(f.value()));
  } else {
    // Beast's parser consumes what it has parsed from the buffer, so after an error in a header
    // field the buffer begins after the start line and the fields before the bad one; those are
    // in parser.get() (the parser stores each field as it reads it).
    const BeastRequest& partial = parser.get();
    const bool start_line_parsed = !partial.target().empty() || !partial.method_string().empty();
    if (start_line_parsed) {
      hr.method = std::string(partial.method_string());
      hr.target = std::string(partial.target());
      for (const auto& f : partial) {
        hr.headers.emplace_back(lower(std::string(f.name_string())), std::string(f.value()));
      }
    }
    auto trim = [](std::string_view v) {
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r')) v.remove_suffix(1);
      return v;
    };
    bool first = !start_line_parsed;
    while (!buffered.empty()) {
      const size_t eol = buffered.find('\n');
      std::string_view line = buffered.substr(0, eol);
      buffered = eol == std::string_view::npos ? std::string_view() : buffered.substr(eol + 1);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (first) {
        first = false;
        const size_t sp = line.find(' ');
        hr.method = std::string(line.substr(0, sp));
        if (sp != std::string_view::npos) {
          const std::string_view rest = line.substr(sp + 1);
          hr.target = std::string(rest.substr(0, rest.find(' ')));
        }
        continue;
      }
      if (line.empty()) break;  // the end of the header
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos || colon == 0) continue;
      hr.headers.emplace_back(lower(std::string(line.substr(0, colon))), std::string(trim(line.substr(colon + 1))));
    }
  }
  hr.path = hr.target.substr(0, hr.target.find('?'));
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
