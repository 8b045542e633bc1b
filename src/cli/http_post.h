// A blocking HTTP/1.1 POST (Boost.Beast) for CLI commands that talk to a running gyre server
// (`gyre trace-window`). http:// only; the URL is parsed as `gyre bench serve` parses --url.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace gyre::cli {

struct HttpReply {
  int status = 0;
  std::string body;
};

// `url` = http://HOST:PORT[/path]; `path` is appended. Errors: InvalidArgument (bad URL),
// Unavailable (cannot connect, or the connection broke), DeadlineExceeded (no answer in
// timeout_s).
Result<HttpReply> HttpPost(const std::string& url, const std::string& path, const std::string& body,
                           const std::vector<std::pair<std::string, std::string>>& headers, double timeout_s);

}  // namespace gyre::cli
