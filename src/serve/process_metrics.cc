#include "serve/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace gyre::serve {

namespace {

Result<std::string> ReadAll(const char* path) {
  std::ifstream in(path);
  if (!in) return Status::Unavailable(std::string("cannot read ") + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<int64_t> BootTime() {
  GYRE_ASSIGN_OR_RETURN(std::string stat, ReadAll("/proc/stat"));
  std::istringstream lines(stat);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("btime ", 0) == 0) return std::strtoll(line.c_str() + 6, nullptr, 10);
  }
  return Status::Unavailable("/proc/stat has no btime");
}

Result<int64_t> OpenFds() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return Status::Unavailable("cannot list /proc/self/fd");
  int64_t n = 0;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n - 1;  // not the descriptor opendir itself holds
}

}  // namespace

Status ParseProcStat(std::string_view text, int64_t ticks_per_second, int64_t page_size, int64_t boot_time_s,
                     ProcessStats* out) {
  const size_t close = text.rfind(')');
  if (close == std::string_view::npos) return Status::InvalidArgument("/proc/self/stat: no command name");
  // Fields from 3 (state) on, after "pid (comm) ".
  std::istringstream rest{std::string(text.substr(close + 1))};
  std::vector<std::string> f;
  for (std::string tok; rest >> tok;) f.push_back(tok);
  if (f.size() < 22) return Status::InvalidArgument("/proc/self/stat: too few fields");
  auto field = [&](int n) { return std::strtod(f[static_cast<size_t>(n - 3)].c_str(), nullptr); };
  const double ticks = static_cast<double>(ticks_per_second);
  out->cpu_seconds = (field(14) + field(15)) / ticks;                       // utime + stime
  out->start_time_seconds = static_cast<double>(boot_time_s) + field(22) / ticks;  // starttime
  out->virtual_memory_bytes = static_cast<int64_t>(field(23));                   // vsize
  out->resident_memory_bytes = static_cast<int64_t>(field(24)) * page_size;      // rss pages
  return Status::Ok();
}

Result<ProcessStats> ReadProcessStats() {
  ProcessStats s;
  GYRE_ASSIGN_OR_RETURN(std::string stat, ReadAll("/proc/self/stat"));
  GYRE_ASSIGN_OR_RETURN(int64_t boot, BootTime());
  GYRE_RETURN_IF_ERROR(ParseProcStat(stat, sysconf(_SC_CLK_TCK), sysconf(_SC_PAGESIZE), boot, &s));
  GYRE_ASSIGN_OR_RETURN(s.open_fds, OpenFds());
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0) s.max_fds = static_cast<int64_t>(lim.rlim_cur);
  return s;
}

}  // namespace gyre::serve
