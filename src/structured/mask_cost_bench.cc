// gyre_structured_mask_bench: the CPU cost of one token mask (structured output) on a tokenizer's
// vocabulary, for a few constraints, cold (a trie walk: the first visit of an automaton state) and
// warm (the per-state cache). Prints one JSON object (bench/results/structured_mask_cost.json).
//
//   gyre_structured_mask_bench TOKENIZER.json VOCAB EOS_ID [TOKENIZER.json VOCAB EOS_ID ...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "structured/grammar.h"
#include "structured/json_schema.h"
#include "structured/regex.h"
#include "tokenizer/tokenizer.h"

using namespace gyre;
using namespace gyre::structured;
using Json = nlohmann::json;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || (argc - 1) % 3 != 0) {
    std::fprintf(stderr, "usage: %s TOKENIZER.json VOCAB EOS_ID [...]\n", argv[0]);
    return 2;
  }
  const std::vector<std::pair<std::string, ConstraintSpec>> specs = [] {
    std::vector<std::pair<std::string, ConstraintSpec>> v;  // (name, spec); kInside[i]: a prefix into free text
    ConstraintSpec s;
    s.kind = ConstraintSpec::Kind::kJsonSchema;
    s.schema = Json::parse(R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"type": "string"}}, "ok": {"type": "boolean"}},
      "required": ["name", "age", "tags", "ok"], "additionalProperties": false})");
    v.emplace_back("json_schema person", s);
    ConstraintSpec o;
    o.kind = ConstraintSpec::Kind::kJsonObject;
    v.emplace_back("json_object", o);
    ConstraintSpec r;
    r.regex = "[A-Za-z ,.]{0,300}";
    v.emplace_back("regex [A-Za-z ,.]{0,300}", r);
    ConstraintSpec c;
    c.kind = ConstraintSpec::Kind::kChoice;
    c.choices = {"positive", "negative", "neutral"};
    v.emplace_back("choice of 3", c);
    return v;
  }();
  // Per constraint, a prefix that ends inside free text (the most expensive states: almost every
  // token is allowed, so the walk visits almost the whole trie).
  const std::vector<std::string> kInside = {"{\"age\":1,\"name\":\"", "{\"k\":\"", "Hello", ""};
  Json out;
  out["what"] = "CPU time of one structured-output token mask (median over automaton states reached by random walks)";
  out["cpu"] = CpuModel();
  out["hardware_threads"] = std::thread::hardware_concurrency();
  const double step_ms = 4.78;  // docs/cuda.md: bare decode step, 4-layer model, batch 16, H200
  out["target"] = {{"decode_step_ms_batch16", step_ms}, {"budget_us", step_ms * 1000 * 0.05},
                   {"source", "docs/cuda.md serving table: 4-layer model, b16 bare decode step 4.78 ms"}};
  for (int a = 1; a + 2 < argc; a += 3) {
    auto tok = Tokenizer::FromFile(argv[a]);
    if (!tok.ok()) {
      std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
      return 1;
    }
    const int64_t vocab = std::stoll(argv[a + 1]);
    const int32_t eos = static_cast<int32_t>(std::stol(argv[a + 2]));
    double t0 = Now();
    auto trie = TokenTrie::FromTokenizer(**tok, vocab, {eos});
    const double build_ms = (Now() - t0) * 1e3;
    Json tj;
    tj["tokenizer"] = argv[a];
    tj["vocab"] = vocab;
    tj["trie_nodes"] = trie->num_nodes();
    tj["trie_build_ms"] = build_ms;
    std::mt19937_64 rng(1);
    for (const auto& [name, spec] : specs) {
      t0 = Now();
      auto g = Grammar::Compile(spec, trie);
      const double compile_ms = (Now() - t0) * 1e3;
      if (!g.ok()) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(), g.status().ToString().c_str());
        return 1;
      }
      const ByteDfa& dfa = (*g)->dfa();
      std::vector<uint32_t> words(trie->mask_words());
      std::vector<double> cold, warm;
      for (int w = 0; w < 40; ++w) {
        int32_t st = dfa.start();
        for (int k = static_cast<int>(rng() % 12); k > 0 && dfa.HasExit(st); --k) {
          std::vector<int> bytes;
          for (int b = 0; b < 256; ++b)
            if (dfa.Next(st, static_cast<uint8_t>(b)) != ByteDfa::kDead) bytes.push_back(b);
          st = dfa.Next(st, static_cast<uint8_t>(bytes[rng() % bytes.size()]));
        }
        t0 = Now();
        trie->Mask(dfa, st, words);
        cold.push_back((Now() - t0) * 1e6);
        (*g)->Mask(st, words);  // fills the cache
        t0 = Now();
        (*g)->Mask(st, words);
        warm.push_back((Now() - t0) * 1e6);
      }
      std::vector<double> inside;
      const std::string& prefix = kInside[tj.contains("constraints") ? tj["constraints"].size() : 0];
      const int32_t in_st = dfa.Walk(dfa.start(), reinterpret_cast<const uint8_t*>(prefix.data()), prefix.size());
      if (in_st != ByteDfa::kDead) {
        for (int k = 0; k < 7; ++k) {
          t0 = Now();
          trie->Mask(dfa, in_st, words);
          inside.push_back((Now() - t0) * 1e6);
        }
      }
      tj["constraints"].push_back({{"constraint", name},
                                   {"free_text_prefix", prefix},
                                   {"free_text_state_cold_mask_us_median", Median(inside)},
                                   {"dfa_states", dfa.num_states()},
                                   {"compile_ms", compile_ms},
                                   {"cold_mask_us_median", Median(cold)},
                                   {"cold_mask_us_max", *std::max_element(cold.begin(), cold.end())},
                                   {"warm_mask_us_median", Median(warm)}});
    }
    out["tokenizers"].push_back(tj);
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
