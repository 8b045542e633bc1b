#include "cli/bench_serve_command.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>

#include "serve/loadgen.h"

namespace gyre::cli {

namespace {

struct BenchArgs {
  serve::LoadgenOptions o;
  std::string rate = "inf";
  std::string arrival = "poisson";
  std::string json_out;
};

int RunBenchServe(BenchArgs& a) {
  if (a.rate == "inf" || a.rate == "Infinity") {
    a.o.request_rate = std::numeric_limits<double>::infinity();
  } else {
    char* end = nullptr;
    a.o.request_rate = std::strtod(a.rate.c_str(), &end);
    if (end == a.rate.c_str() || *end != '\0' || !(a.o.request_rate > 0)) {
      std::fprintf(stderr, "gyre bench serve: --request-rate must be a positive number or 'inf'\n");
      return 2;
    }
  }
  if (a.arrival != "poisson" && a.arrival != "fixed") {
    std::fprintf(stderr, "gyre bench serve: --arrival must be poisson or fixed\n");
    return 2;
  }
  a.o.poisson = a.arrival == "poisson";
  a.o.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  auto report = serve::RunLoad(a.o);
  if (!report.ok()) {
    std::fprintf(stderr, "gyre bench serve: error: %s\n", report.error().ToString().c_str());
    return report.error().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::fputs(serve::ReportText(*report).c_str(), stdout);
  int shown = 0;
  for (const auto& r : report->requests) {
    if (!r.ok && shown++ < 3) std::fprintf(stderr, "gyre bench serve: request failed: %s\n", r.error.c_str());
  }
  if (!a.json_out.empty()) {
    std::ofstream out(a.json_out);
    out << serve::ReportJson(a.o, *report).dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "gyre bench serve: cannot write %s\n", a.json_out.c_str());
      return 1;
    }
  }
  return report->metrics.at("completed") > 0 ? 0 : 1;
}

}  // namespace

void AddBenchServeCommand(CLI::App& bench, std::function<int()>* runner) {
  auto a = std::make_shared<BenchArgs>();
  serve::LoadgenOptions& o = a->o;
  auto* s = bench.add_subcommand("serve", "load-test an OpenAI-compatible server (TTFT, TPOT, ITL, throughput)");
  s->add_option("--url", o.url, "server base URL (default http://127.0.0.1:8000)");
  s->add_option("--model", o.model, "model name (default: the server's first model)");
  s->add_option("--api-key", o.api_key, "Bearer token");
  s->add_option("--num-prompts", o.num_prompts, "requests to send (default 100)")->check(CLI::PositiveNumber);
  s->add_option("--request-rate", a->rate, "requests per second, or inf (default inf)");
  s->add_option("--arrival", a->arrival, "poisson (default) or fixed");
  s->add_option("--max-concurrency", o.max_concurrency, "cap on requests in flight (default: none)")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--input-len", o.input_len, "random prompt length in tokens (default 128)")->check(CLI::PositiveNumber);
  s->add_option("--output-len", o.output_len, "max_tokens per request (default 128)")->check(CLI::PositiveNumber);
  s->add_option("--token-id-range", o.token_id_range, "random prompt ids are drawn from [0, N) (default 1000)")
      ->check(CLI::PositiveNumber);
  s->add_option("--prompts-file", o.prompts_file, "one prompt per line (text or {\"prompt\": ...})");
  s->add_option("--seed", o.seed, "seed for prompts and arrivals (default 0)");
  s->add_option("--slo-ttft-ms", o.slo_ttft_ms, "TTFT SLO for goodput")->check(CLI::NonNegativeNumber);
  s->add_option("--slo-tpot-ms", o.slo_tpot_ms, "TPOT SLO for goodput")->check(CLI::NonNegativeNumber);
  s->add_option("--json", a->json_out, "write the results as JSON to this file");
  s->callback([a, runner] { *runner = [a] { return RunBenchServe(*a); }; });
}

}  // namespace gyre::cli
