#include "cli/http_post.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

namespace gyre::cli {

Result<HttpReply> HttpPost(const std::string& url, const std::string& path, const std::string& body,
                           const std::vector<std::pair<std::string, std::string>>& headers, double timeout_s) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) return Status::InvalidArgument("the URL must start with http:// (got '" + url + "')");
  std::string rest = url.substr(kScheme.size());
  std::string base;
  if (const auto slash = rest.find('/'); slash != std::string::npos) {
    base = rest.substr(slash);
    rest.resize(slash);
  }
  while (!base.empty() && base.back() == '/') base.pop_back();
  std::string host = rest, port = "80";
  if (!rest.empty() && rest[0] == '[') {  // [v6]:port
    const auto close = rest.find(']');
    if (close == std::string::npos) return Status::InvalidArgument("bad IPv6 host in '" + url + "'");
    host = rest.substr(1, close - 1);
    if (close + 1 < rest.size() && rest[close + 1] == ':') port = rest.substr(close + 2);
  } else if (const auto colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty() || port.empty()) return Status::InvalidArgument("no host or port in '" + url + "'");
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return Status::Unavailable("cannot resolve " + host + ": " + gai_strerror(rc));
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return Status::Unavailable("cannot connect to " + host + ":" + port + ": " + std::strerror(errno));
  std::string req = "POST " + base + path + " HTTP/1.1\r\nHost: " + host + ":" + port +
                    "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\n";
  for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
  req += "\r\n" + body;
  for (size_t off = 0; off < req.size();) {
    const ssize_t n = send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      close(fd);
      return Status::Unavailable("the connection broke while sending");
    }
    off += static_cast<size_t>(n);
  }
  std::string in;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[16384];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      close(fd);
      return Status(StatusCode::kDeadlineExceeded, "no complete answer within " + std::to_string(static_cast<int>(timeout_s)) + " s");
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0) {
      close(fd);
      return Status::Unavailable("the connection broke while reading");
    }
    if (n == 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  HttpReply r;
  if (in.rfind("HTTP/1.", 0) != 0 || in.size() < 12) return Status::Unavailable("not an HTTP answer");
  r.status = std::atoi(in.c_str() + 9);
  const auto hdr_end = in.find("\r\n\r\n");
  if (hdr_end == std::string::npos) return Status::Unavailable("an HTTP answer without the end of its headers");
  std::string head = in.substr(0, hdr_end), payload = in.substr(hdr_end + 4);
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (head.find("transfer-encoding: chunked") != std::string::npos) {
    std::string out;
    size_t pos = 0;
    while (pos < payload.size()) {
      const auto eol = payload.find("\r\n", pos);
      if (eol == std::string::npos) break;
      const size_t len = std::strtoul(payload.substr(pos, eol - pos).c_str(), nullptr, 16);
      if (len == 0) break;
      out += payload.substr(eol + 2, len);
      pos = eol + 2 + len + 2;
    }
    payload = out;
  }
  r.body = payload;
  return r;
}

}  // namespace gyre::cli
