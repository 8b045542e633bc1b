// DistOptions: how the processes of a multi-node group find each other, parsed from flags in
// the spirit of SGLang's launcher: --nnodes N, --node-rank R, --dist-init-addr HOST:PORT
// (also --flag=value). Each process ("node") runs one or more GPU ranks; rank 0's process
// listens at the init address and hands the others the NCCL unique id (bootstrap.h).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "core/status.h"

namespace gyre::parallel {

struct DistOptions {
  int nnodes = 1;
  int node_rank = 0;
  std::string dist_init_addr;  // "host:port" or "[v6addr]:port"; required when nnodes > 1
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};  // --dist-timeout SECONDS
};

// Parses the distributed flags out of `args`: recognised flags (and their values) are consumed,
// everything else is returned in *rest in its original order, so a caller can parse its own
// flags afterwards. On success the options are validated (Validate). On failure returns
// InvalidArgument naming the flag and leaves *out unspecified.
Status ParseDistOptions(const std::vector<std::string>& args, DistOptions* out, std::vector<std::string>* rest);

// OK when nnodes >= 1, 0 <= node_rank < nnodes, timeout > 0, and, when nnodes > 1, the init
// address splits into a host and a port in [1, 65535].
Status Validate(const DistOptions& o);

// Splits "host:port" / "[v6]:port" into its parts. InvalidArgument on an empty host, a missing
// or non-numeric port, or a port outside [1, 65535]. A port of 0 is accepted only when
// allow_port_zero (tests: "listen on any free port").
Status SplitHostPort(const std::string& addr, std::string* host, int* port, bool allow_port_zero = false);

}  // namespace gyre::parallel
