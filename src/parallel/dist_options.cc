#include "parallel/dist_options.h"

#include <charconv>

namespace gyre::parallel {

namespace {

Status ParseInt(const std::string& flag, const std::string& v, long long lo, long long hi, long long* out) {
  long long x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || v.empty()) {
    return Status::InvalidArgument(flag + ": '" + v + "' is not an integer");
  }
  if (x < lo || x > hi) {
    return Status::InvalidArgument(flag + ": " + v + " is outside [" + std::to_string(lo) + ", " +
                                   std::to_string(hi) + "]");
  }
  *out = x;
  return Status();
}

}  // namespace

Status SplitHostPort(const std::string& addr, std::string* host, int* port, bool allow_port_zero) {
  std::string h, p;
  if (!addr.empty() && addr[0] == '[') {
    const size_t close = addr.find(']');
    if (close == std::string::npos || close + 1 >= addr.size() || addr[close + 1] != ':') {
      return Status::InvalidArgument("address '" + addr + "': expected [v6addr]:port");
    }
    h = addr.substr(1, close - 1);
    p = addr.substr(close + 2);
  } else {
    const size_t colon = addr.rfind(':');
    if (colon == std::string::npos) return Status::InvalidArgument("address '" + addr + "': expected host:port");
    h = addr.substr(0, colon);
    p = addr.substr(colon + 1);
    if (h.find(':') != std::string::npos) {
      return Status::InvalidArgument("address '" + addr + "': write an IPv6 host in brackets, [addr]:port");
    }
  }
  if (h.empty()) return Status::InvalidArgument("address '" + addr + "': empty host");
  long long x = 0;
  GYRE_RETURN_IF_ERROR(ParseInt("port of '" + addr + "'", p, allow_port_zero ? 0 : 1, 65535, &x));
  *host = h;
  *port = static_cast<int>(x);
  return Status();
}

Status Validate(const DistOptions& o) {
  if (o.nnodes < 1) return Status::InvalidArgument("--nnodes must be >= 1, got " + std::to_string(o.nnodes));
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    return Status::InvalidArgument("--node-rank " + std::to_string(o.node_rank) + " is outside [0, --nnodes " +
                                   std::to_string(o.nnodes) + ")");
  }
  if (o.timeout.count() <= 0) return Status::InvalidArgument("--dist-timeout must be > 0");
  if (o.nnodes > 1) {
    if (o.dist_init_addr.empty()) return Status::InvalidArgument("--nnodes > 1 needs --dist-init-addr HOST:PORT");
    std::string host;
    int port = 0;
    GYRE_RETURN_IF_ERROR(SplitHostPort(o.dist_init_addr, &host, &port).WithContext("--dist-init-addr"));
  }
  return Status();
}

Status ParseDistOptions(const std::vector<std::string>& args, DistOptions* out, std::vector<std::string>* rest) {
  DistOptions o;
  rest->clear();
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    bool has_value = false;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    if (flag != "--nnodes" && flag != "--node-rank" && flag != "--dist-init-addr" && flag != "--dist-timeout") {
      rest->push_back(args[i]);
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) return Status::InvalidArgument(flag + ": missing value");
      value = args[++i];
    }
    long long x = 0;
    if (flag == "--nnodes") {
      GYRE_RETURN_IF_ERROR(ParseInt(flag, value, 1, 1 << 16, &x));
      o.nnodes = static_cast<int>(x);
    } else if (flag == "--node-rank") {
      GYRE_RETURN_IF_ERROR(ParseInt(flag, value, 0, 1 << 16, &x));
      o.node_rank = static_cast<int>(x);
    } else if (flag == "--dist-timeout") {
      GYRE_RETURN_IF_ERROR(ParseInt(flag, value, 1, 86400, &x));
      o.timeout = std::chrono::seconds(x);
    } else {
      if (value.empty()) return Status::InvalidArgument(flag + ": empty value");
      o.dist_init_addr = value;
    }
  }
  GYRE_RETURN_IF_ERROR(Validate(o));
  *out = std::move(o);
  return Status();
}

}  // namespace gyre::parallel
