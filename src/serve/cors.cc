#include "serve/cors.h"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "serve/openai_protocol.h"

namespace gyre::serve {

namespace {

constexpr const char* kAllMethods = "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT";
constexpr std::string_view kSafelisted[] = {"accept", "accept-language", "content-language", "content-type"};
constexpr const char* kMaxAgeSeconds = "600";

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool Contains(const std::vector<std::string>& v, std::string_view x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// The trimmed items of a comma-separated list ("" gives none; "a,,b" gives an empty item).
std::vector<std::string_view> SplitCommas(std::string_view text) {
  std::vector<std::string_view> out;
  if (Trim(text).empty()) return out;
  while (true) {
    const size_t comma = text.find(',');
    out.push_back(Trim(text.substr(0, comma)));
    if (comma == std::string_view::npos) return out;
    text.remove_prefix(comma + 1);
  }
}

// A request header's list of names: lower-cased, empty items dropped.
std::vector<std::string> HeaderNames(std::string_view value) {
  std::vector<std::string> out;
  for (std::string_view item : SplitCommas(value)) {
    if (!item.empty()) out.push_back(Lower(item));
  }
  return out;
}

HttpResponse Refuse(const std::string& what) {
  HttpResponse r;
  r.status = 400;
  ApiError e;
  e.message = "CORS preflight refused: " + what;
  r.body = e.Body();
  return r;
}

}  // namespace

Result<std::vector<std::string>> ParseCorsList(std::string_view text, std::string_view flag) {
  const std::string_view t = Trim(text);
  std::vector<std::string> out;
  const std::string bad = std::string(flag) + " '" + std::string(text) + "': ";
  if (!t.empty() && t.front() == '[') {
    const nlohmann::json j = nlohmann::json::parse(t.begin(), t.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_array()) return Status::InvalidArgument(bad + "not a JSON list of strings");
    for (const auto& item : j) {
      if (!item.is_string()) return Status::InvalidArgument(bad + "not a JSON list of strings");
      out.push_back(std::string(Trim(item.get<std::string>())));
    }
  } else {
    for (std::string_view item : SplitCommas(t)) out.emplace_back(item);
  }
  for (const std::string& s : out) {
    if (s.empty()) return Status::InvalidArgument(bad + "an item is empty");
  }
  return out;
}

Cors::Cors(CorsOptions options)
    : opts_(std::move(options)),
      any_origin_(Contains(opts_.allowed_origins, "*")),
      any_method_(Contains(opts_.allowed_methods, "*")),
      any_header_(Contains(opts_.allowed_headers, "*")),
      headers_lower_([this] {
        std::vector<std::string> v;
        for (const std::string& h : opts_.allowed_headers) v.push_back(Lower(h));
        return v;
      }()) {}

bool Cors::OriginAllowed(std::string_view origin) const {
  return enabled() && !origin.empty() && (any_origin_ || Contains(opts_.allowed_origins, origin));
}

bool Cors::MethodAllowed(std::string_view method) const {
  return any_method_ || Contains(opts_.allowed_methods, method);
}

bool Cors::HeaderAllowed(std::string_view name) const {
  return any_header_ || Contains(headers_lower_, name) ||
         std::find(std::begin(kSafelisted), std::end(kSafelisted), name) != std::end(kSafelisted);
}

bool Cors::IsPreflight(const HttpRequest& req) const {
  return enabled() && req.method == "OPTIONS" && !req.Header("origin").empty() &&
         !req.Header("access-control-request-method").empty();
}

HttpResponse Cors::Preflight(const HttpRequest& req) const {
  const std::string_view origin = req.Header("origin");
  const std::string_view method = req.Header("access-control-request-method");
  if (!OriginAllowed(origin)) return Refuse("origin '" + std::string(origin) + "' is not allowed");
  if (!MethodAllowed(method)) return Refuse("method '" + std::string(method) + "' is not allowed");
  const std::vector<std::string> asked = HeaderNames(req.Header("access-control-request-headers"));
  for (const std::string& h : asked) {
    if (!HeaderAllowed(h)) return Refuse("header '" + h + "' is not allowed");
  }
  HttpResponse r;
  r.status = 204;
  r.content_type = "text/plain";
  r.headers = ResponseHeaders(origin);
  r.headers.emplace_back("Access-Control-Allow-Methods", any_method_ ? kAllMethods : Join(opts_.allowed_methods));
  // "*" answers with the headers asked for (a literal "*" is not honoured with credentials).
  const std::string allowed = any_header_ ? Join(asked) : Join(opts_.allowed_headers);
  if (!allowed.empty()) r.headers.emplace_back("Access-Control-Allow-Headers", allowed);
  r.headers.emplace_back("Access-Control-Max-Age", kMaxAgeSeconds);
  return r;
}

HeaderList Cors::ResponseHeaders(std::string_view origin) const {
  if (!OriginAllowed(origin)) return {};
  if (any_origin_) return {{"Access-Control-Allow-Origin", "*"}};
  return {{"Access-Control-Allow-Origin", std::string(origin)}, {"Vary", "Origin"}};
}

}  // namespace gyre::serve
