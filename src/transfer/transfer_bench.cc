// TCP loopback transfer benchmark: one request's cache (DSA pages + KDA state, fp32 CPU layout)
// at several context lengths, through the full protocol (frames, XXH64 per piece, receiver
// verification, Ack), plus the raw Connection throughput for comparison. Writes JSON.
//   gyre_transfer_bench [--config JSON_FILE] [--out FILE] [--tokens 1024,32768,...] [--reps N]
//                       [--max-bytes B]
// Default config: {"model_type": "glm5_next"} (the default full-size shapes).
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "runtime/memory_pools.h"
#include "transfer/tcp_connection.h"
#include "transfer/transfer_engine.h"

namespace gyre::transfer {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string Shell(const std::string& cmd) {
  std::string out;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, f)) out += buf;
    pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

SequenceImage MakeImage(const CacheFormat& f, int64_t tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  SequenceImage im;
  im.format = f;
  im.num_tokens = tokens;
  im.next_token = 1;
  im.pages.resize(PagesFor(f, tokens));
  auto fill = [&](std::vector<std::byte>& v, int64_t n) {
    v.resize(n);
    for (int64_t i = 0; i + 8 <= n; i += 8) {
      const uint64_t r = rng();
      std::memcpy(v.data() + i, &r, 8);
    }
  };
  for (auto& p : im.pages) fill(p, f.bytes_per_page);
  fill(im.state, f.bytes_per_slot);
  return im;
}

int Main(int argc, char** argv) {
  std::string config_path, out_path = std::string(GYRE_SOURCE_DIR) + "/bench/results/cpu_transfer_tcp.json";
  std::vector<int64_t> tokens = {1024, 8192, 32768, 131072};
  int reps = 3;
  int64_t max_bytes = int64_t{3} << 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--config") config_path = v;
    else if (k == "--out") out_path = v;
    else if (k == "--reps") reps = std::stoi(v);
    else if (k == "--max-bytes") max_bytes = std::stoll(v);
    else if (k == "--tokens") {
      tokens.clear();
      std::stringstream ss(v);
      for (std::string t; std::getline(ss, t, ',');) tokens.push_back(std::stoll(t));
    } else {
      std::cerr << "unknown flag " << k << "\n";
      return 2;
    }
  }
  std::string config_text = R"({"model_type": "glm5_next"})";
  if (!config_path.empty()) {
    std::ifstream f(config_path);
    std::stringstream ss;
    ss << f.rdbuf();
    config_text = ss.str();
  }
  auto cfg = ParseModelConfig(config_text);
  if (!cfg.ok()) {
    std::cerr << cfg.status().ToString() << "\n";
    return 1;
  }
  CacheFormat fmt;
  fmt.backend = "cpu";
  fmt.page_tokens = 64;
  fmt.bytes_per_page = fmt.page_tokens * AttnRowLayout(*cfg).row_floats * 4;
  fmt.bytes_per_slot = KdaSlotStore(*cfg, 0).bytes_per_slot();

  auto listener = TcpListener::Listen("127.0.0.1", 0);
  if (!listener.ok()) return std::cerr << listener.status().ToString() << "\n", 1;
  Result<std::unique_ptr<Connection>> server = Status::Internal("");
  std::thread acc([&] { server = (*listener)->Accept(milliseconds(10000)); });
  auto client = TcpConnect("127.0.0.1", (*listener)->port(), milliseconds(10000));
  acc.join();
  if (!client.ok() || !server.ok()) return std::cerr << "tcp connect failed\n", 1;

  nlohmann::json results = nlohmann::json::array();
  // Raw Connection throughput: 64 messages of 4 MiB, timed until the last one is received.
  {
    const int n = 64;
    const Message chunk(4 << 20, std::byte{7});
    const auto t0 = Clock::now();
    std::thread rx([&] {
      for (int i = 0; i < n; ++i) (void)(*server)->Receive(milliseconds(10000));
    });
    for (int i = 0; i < n; ++i) (void)(*client)->Send(chunk);
    rx.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    results.push_back({{"what", "raw_connection"}, {"bytes", int64_t{n} * (4 << 20)}, {"seconds", s},
                       {"gb_per_s", n * (4.0 * (1 << 20)) / s / 1e9}});
    std::cerr << "raw: " << n * 4.0 / 1024 / s << " GiB/s\n";
  }
  ReceiverOptions ro;
  TransferReceiver receiver(**server, ro);
  SenderOptions so;
  so.ack_timeout = milliseconds(60000);
  TransferSender sender(**client, so);
  uint64_t id = 1;
  for (int64_t t : tokens) {
    const int64_t bytes = PagesFor(fmt, t) * fmt.bytes_per_page + fmt.bytes_per_slot;
    if (bytes > max_bytes) {
      results.push_back({{"what", "request"}, {"context_tokens", t}, {"bytes", bytes},
                         {"skipped", "image larger than --max-bytes (sender + receiver copies must fit in memory)"}});
      continue;
    }
    const SequenceImage im = MakeImage(fmt, t, t);
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      Status s = sender.Send(id, im);
      auto got = receiver.Take(id, milliseconds(60000));
      const double dt = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      ++id;
      if (!s.ok() || !got.ok() || !(*got == im)) {
        std::cerr << "transfer failed: " << s.ToString() << "\n";
        return 1;
      }
      ms.push_back(dt);
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    results.push_back({{"what", "request"}, {"context_tokens", t}, {"bytes", bytes}, {"pages", im.pages.size()},
                       {"latency_ms_median", med}, {"latency_ms_all", ms}, {"gb_per_s", bytes / (med / 1e3) / 1e9}});
    std::cerr << t << " tokens: " << bytes / 1e6 << " MB in " << med << " ms (" << bytes / (med / 1e3) / 1e9
              << " GB/s)\n";
  }
  receiver.Stop();
  utsname u{};
  uname(&u);
  nlohmann::json out;
  out["meta"] = {
      {"commit", Shell("git -C " + std::string(GYRE_SOURCE_DIR) + " rev-parse --short HEAD")},
      {"date", Shell("date -u +%Y-%m-%dT%H:%M:%SZ")},
      {"machine", {{"cpu", Shell("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'")},
                   {"hardware_threads", std::thread::hardware_concurrency()},
                   {"hostname", u.nodename}}},
      {"config", {{"model", config_path.empty() ? config_text : config_path},
                  {"page_tokens", fmt.page_tokens},
                  {"bytes_per_page", fmt.bytes_per_page},
                  {"bytes_per_slot", fmt.bytes_per_slot},
                  {"layout", "fp32, CPU runner page image"},
                  {"transport", "TCP 127.0.0.1 (Boost.Asio), frames + XXH64 per piece + receiver verify + Ack"},
                  {"reps", reps}}},
      {"loadavg_1m", Shell("cut -d' ' -f1 /proc/loadavg")}};
  out["results"] = results;
  std::ofstream(out_path) << out.dump(2) << "\n";
  std::cerr << "wrote " << out_path << "\n";
  return 0;
}

}  // namespace
}  // namespace gyre::transfer

int main(int argc, char** argv) { return gyre::transfer::Main(argc, argv); }
