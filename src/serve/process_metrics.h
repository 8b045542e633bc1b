// The process metrics every Prometheus client exports (process_cpu_seconds_total,
// process_resident_memory_bytes, ...), read from /proc/self on Linux.
//
// Thread safety: pure functions (ReadProcessStats reads files).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace gyre::serve {

struct ProcessStats {
  double cpu_seconds = 0;             // user + system time
  int64_t resident_memory_bytes = 0;
  int64_t virtual_memory_bytes = 0;
  int64_t open_fds = 0;
  int64_t max_fds = 0;                // the soft RLIMIT_NOFILE
  double start_time_seconds = 0;      // since the unix epoch
};

// This process's numbers. Unavailable where /proc is not mounted (not Linux).
Result<ProcessStats> ReadProcessStats();

// Fills cpu_seconds, virtual_memory_bytes, resident_memory_bytes and start_time_seconds from the
// text of /proc/<pid>/stat (the command name in parentheses may hold spaces and ')'). `boot_time_s`
// is /proc/stat's btime. InvalidArgument for text with too few fields.
Status ParseProcStat(std::string_view text, int64_t ticks_per_second, int64_t page_size, int64_t boot_time_s,
                     ProcessStats* out);

}  // namespace gyre::serve
