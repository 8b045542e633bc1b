#include "cli/http_post.h"

#include <boost/asio.hpp>
#include <boost/beast.hpp>

#include <chrono>

#include "serve/loadgen.h"

namespace gyre::cli {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

Result<HttpReply> HttpPost(const std::string& url, const std::string& path, const std::string& body,
                           const std::vector<std::pair<std::string, std::string>>& headers, double timeout_s) {
  GYRE_ASSIGN_OR_RETURN(serve::Endpoint ep, serve::ParseUrl(url));
  http::request<http::string_body> req{http::verb::post, ep.prefix + path, 11};
  req.set(http::field::host, ep.host + ":" + ep.port);
  req.set(http::field::content_type, "application/json");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();

  // Async operations on one thread, so the stream's deadline bounds resolve, connect, write and read.
  asio::io_context ioc;
  asio::ip::tcp::resolver resolver(ioc);
  beast::tcp_stream stream(ioc);
  stream.expires_after(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  beast::error_code failed;
  const char* stage = "resolve";
  resolver.async_resolve(ep.host, ep.port, [&](beast::error_code ec, asio::ip::tcp::resolver::results_type hosts) {
    if (ec) return void(failed = ec);
    stage = "connect to";
    stream.async_connect(hosts, [&](beast::error_code ec, const asio::ip::tcp::endpoint&) {
      if (ec) return void(failed = ec);
      stage = "send to";
      http::async_write(stream, req, [&](beast::error_code ec, size_t) {
        if (ec) return void(failed = ec);
        stage = "read from";
        http::async_read(stream, buf, res, [&](beast::error_code ec, size_t) { failed = ec; });
      });
    });
  });
  ioc.run();
  if (failed == beast::error::timeout)
    return Status(StatusCode::kDeadlineExceeded,
                  "no complete answer within " + std::to_string(static_cast<int>(timeout_s)) + " s");
  if (failed) return Status::Unavailable(std::string("cannot ") + stage + " " + ep.host + ":" + ep.port + ": " + failed.message());
  return HttpReply{static_cast<int>(res.result_int()), std::move(res.body())};
}

}  // namespace gyre::cli
