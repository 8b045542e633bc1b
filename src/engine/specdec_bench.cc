// gyre_specdec_bench: CPU tokens/s of greedy decoding with and without n-gram speculative
// decoding (docs/engine.md "Speculative decoding"), on a fixture, one request at a time (batch 1);
// with an MTP layer, also MTP drafts (k = 1 and 3, greedy; k = 1 at temperature 0.8) on a prose
// prompt (the held-out tokens of MODEL_DIR/golden_long.safetensors when present).
// Usage: gyre_specdec_bench MODEL_DIR [max_tokens] [repeats]. Prints JSON (metrics + config); the
// caller adds machine and commit (bench/results/cpu_specdec.json).
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/bench_sink.h"
#include "engine/engine.h"
#include "engine/ngram_draft.h"
#include "model/safetensors.h"
#include "runtime/model.h"
#include "runtime/parity.h"

namespace gyre {
namespace {


struct Sample {
  double decode_tok_s = 0;
  std::vector<int32_t> ids;
  EngineStats stats;
};

Sample RunOnce(const Model& model, const std::vector<int32_t>& prompt, int64_t max_tokens, bool spec,
               float temperature = 0, uint64_t seed = 0, int64_t mtp_k = 0) {
  EngineOptions eo;
  eo.max_num_seqs = 1;
  eo.overlap_steps = false;
  if (spec) {
    eo.speculative.method = "ngram";
    eo.speculative.num_speculative_tokens = 3;
    eo.speculative.prompt_lookup_max = 4;
    eo.speculative.prompt_lookup_min = 2;
  }
  if (mtp_k > 0) {
    eo.speculative.method = "mtp";
    eo.speculative.num_speculative_tokens = mtp_k;
  }
  auto engine = Engine::Create(model, eo);
  GYRE_CHECK(engine.ok());
  GYRE_CHECK((*engine)->Start().ok());
  auto sink = std::make_shared<BenchSink>();
  RequestParams p;
  p.prompt = prompt;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.sampling.temperature = temperature;
  p.sampling.seed = seed;
  GYRE_CHECK((*engine)->Submit(p, sink).ok());
  sink->Wait();
  Sample s;
  s.ids = sink->ids;
  // decode_s spans first → last token: max_tokens − 1 tokens.
  s.decode_tok_s = sink->usage.decode_s > 0 ? static_cast<double>(max_tokens - 1) / sink->usage.decode_s : 0;
  for (int i = 0; i < 1000 && (*engine)->Stats().requests_finished < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s.stats = (*engine)->Stats();
  (*engine)->Stop();
  return s;
}

}  // namespace
}  // namespace gyre

int main(int argc, char** argv) {
  using namespace gyre;
  if (argc < 2) {
    std::fprintf(stderr, "usage: gyre_specdec_bench MODEL_DIR [max_tokens] [repeats]\n");
    return 2;
  }
  const int64_t max_tokens = argc > 2 ? std::stoll(argv[2]) : 128;
  const int repeats = argc > 3 ? std::stoi(argv[3]) : 5;
  auto model = Model::Load(argv[1]);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  // A repetitive prompt: an 8-token unit six times (a code-editing-like workload repeats text).
  std::vector<int32_t> prompt;
  for (int r = 0; r < 6; ++r)
    for (int32_t t : {11, 57, 203, 9, 88, 311, 42, 7}) prompt.push_back(t);
  nlohmann::json out;
  nlohmann::json plain = nlohmann::json::array(), spec = nlohmann::json::array();
  bool identical = true;
  EngineStats last;
  for (int i = 0; i < repeats; ++i) {
    Sample a = RunOnce(**model, prompt, max_tokens, false);
    Sample b = RunOnce(**model, prompt, max_tokens, true);
    plain.push_back(a.decode_tok_s);
    spec.push_back(b.decode_tok_s);
    identical = identical && a.ids == b.ids;
    last = b.stats;
  }
  out["metrics"]["decode_tok_s_b1_plain"] = plain;
  out["metrics"]["decode_tok_s_b1_ngram"] = spec;
  out["metrics"]["verify_pieces"] = last.spec_verify_pieces;
  out["metrics"]["draft_tokens"] = last.spec_draft_tokens;
  out["metrics"]["accepted_tokens"] = last.spec_accepted_tokens;
  out["metrics"]["acceptance_rate"] =
      last.spec_draft_tokens > 0 ? double(last.spec_accepted_tokens) / double(last.spec_draft_tokens) : 0.0;
  out["metrics"]["outputs_identical"] = identical;
  // Sampled requests (temperature 0.8, a seed per repeat) speculate with rejection sampling: the
  // acceptance and the speed, against plain sampling of the same seeds (other draws, the same
  // distribution: the outputs are not compared).
  {
    nlohmann::json sp_plain = nlohmann::json::array(), sp_spec = nlohmann::json::array();
    int64_t drafts = 0, accepted = 0, pieces = 0;
    for (int i = 0; i < repeats; ++i) {
      Sample a = RunOnce(**model, prompt, max_tokens, false, 0.8f, 100 + i);
      Sample b = RunOnce(**model, prompt, max_tokens, true, 0.8f, 100 + i);
      sp_plain.push_back(a.decode_tok_s);
      sp_spec.push_back(b.decode_tok_s);
      drafts += b.stats.spec_draft_tokens;
      accepted += b.stats.spec_accepted_tokens;
      pieces += b.stats.spec_verify_pieces;
    }
    out["metrics"]["decode_tok_s_b1_t08_plain"] = sp_plain;
    out["metrics"]["decode_tok_s_b1_t08_ngram"] = sp_spec;
    out["metrics"]["t08_verify_pieces"] = pieces;
    out["metrics"]["t08_draft_tokens"] = drafts;
    out["metrics"]["t08_accepted_tokens"] = accepted;
    out["metrics"]["t08_acceptance_rate"] = drafts > 0 ? double(accepted) / double(drafts) : 0.0;
  }
  out["directions"] = {{"decode_tok_s_b1_plain", "higher"}, {"decode_tok_s_b1_ngram", "higher"},
                       {"decode_tok_s_b1_t08_plain", "higher"}, {"decode_tok_s_b1_t08_ngram", "higher"}};
  out["meta"]["options"] = {{"max_tokens", max_tokens}, {"repeats", repeats}, {"prompt_len", prompt.size()},
                            {"batch", 1}, {"overlap_steps", false},
                            {"speculative_config",
                             R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4,"prompt_lookup_min":2})"}};
  // The drafter alone: microseconds per decode step of one sequence at several lengths, the
  // whole-sequence scan (NgramDraft) vs the incremental index the engine uses (NgramIndex, fed one
  // token per step, as the engine does). Random tokens over 4096 ids: few n-grams recur, so the
  // scan walks the whole sequence (its worst case, and the common one for prose).
  {
    std::mt19937 rng(1);
    nlohmann::json scan_us, index_us;
    for (int64_t len : {1024, 8192, 32768, 131072}) {
      std::vector<int32_t> t(static_cast<size_t>(len));
      for (int32_t& x : t) x = static_cast<int32_t>(rng() % 4096);
      const int64_t steps = 256;
      std::vector<int32_t> d;
      int64_t found = 0;
      auto t0 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < steps; ++i) {
        found += NgramDraft(std::span<const int32_t>(t.data(), len - steps + i), 2, 4, 3, &d);
      }
      auto t1 = std::chrono::steady_clock::now();
      NgramIndex index(2, 4);
      index.Draft(std::span<const int32_t>(t.data(), len - steps), 3, &d);  // the prefill's tokens
      auto t2 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < steps; ++i) {
        found -= index.Draft(std::span<const int32_t>(t.data(), len - steps + i), 3, &d);
      }
      auto t3 = std::chrono::steady_clock::now();
      if (found != 0) std::fprintf(stderr, "drafter mismatch at length %lld\n", static_cast<long long>(len));
      const std::string key = std::to_string(len);
      scan_us[key] = std::chrono::duration<double, std::micro>(t1 - t0).count() / steps;
      index_us[key] = std::chrono::duration<double, std::micro>(t3 - t2).count() / steps;
    }
    out["metrics"]["drafter_us_per_step_scan"] = scan_us;
    out["metrics"]["drafter_us_per_step_index"] = index_us;
  }
  // MTP drafts (the checkpoint's MTP layer) on prose: the first 64 held-out tokens recorded with
  // the fixture (else the repetitive prompt).
  if ((*model)->has_mtp()) {
    std::vector<int32_t> prose = prompt;
    std::string prose_source = "repetitive";
    if (auto f = SafetensorsFile::Open(std::string(argv[1]) + "/golden_long.safetensors"); f.ok()) {
      const auto& t = (*f)->tensors();
      if (auto it = t.find("input_ids"); it != t.end()) {
        prose.clear();
        for (float v : TensorToF32(it->second)) {
          if (prose.size() == 64) break;
          prose.push_back(static_cast<int32_t>(v));
        }
        prose_source = "golden_long.safetensors input_ids[0:64] (held-out text)";
      }
    }
    nlohmann::json mtp;
    mtp["prompt"] = prose_source;
    nlohmann::json base = nlohmann::json::array();
    std::vector<int32_t> base_ids;
    for (int i = 0; i < repeats; ++i) {
      Sample a = RunOnce(**model, prose, max_tokens, false);
      base.push_back(a.decode_tok_s);
      base_ids = a.ids;
    }
    mtp["decode_tok_s_b1_plain"] = base;
    auto run = [&](const std::string& name, int64_t k, float temperature) {
      nlohmann::json tok_s = nlohmann::json::array();
      int64_t drafts = 0, accepted = 0, pieces = 0;
      std::vector<int64_t> drafts_pos(k, 0), accepted_pos(k, 0);
      bool same = true;
      for (int i = 0; i < repeats; ++i) {
        Sample b = RunOnce(**model, prose, max_tokens, false, temperature, 200 + i, k);
        tok_s.push_back(b.decode_tok_s);
        drafts += b.stats.spec_draft_tokens;
        accepted += b.stats.spec_accepted_tokens;
        pieces += b.stats.spec_verify_pieces;
        for (size_t j = 0; j < b.stats.spec_drafts_per_pos.size() && j < drafts_pos.size(); ++j) {
          drafts_pos[j] += b.stats.spec_drafts_per_pos[j];
          accepted_pos[j] += b.stats.spec_accepted_per_pos[j];
        }
        same = same && b.ids == base_ids;
      }
      nlohmann::json& r = mtp[name];
      r["decode_tok_s_b1"] = tok_s;
      r["verify_pieces"] = pieces;
      r["draft_tokens"] = drafts;
      r["accepted_tokens"] = accepted;
      r["acceptance_rate"] = drafts > 0 ? double(accepted) / double(drafts) : 0.0;
      // tokens a verify step emits: the accepted drafts + the row after them
      r["tokens_per_verify_step"] = pieces > 0 ? double(accepted + pieces) / double(pieces) : 0.0;
      // Per draft position: of the drafts proposed at j, the share accepted (a draft at j counts only
      // when drafts 0..j-1 were accepted too).
      nlohmann::json per_pos = nlohmann::json::array();
      for (int64_t j = 0; j < k; ++j)
        per_pos.push_back(drafts_pos[j] > 0 ? double(accepted_pos[j]) / double(drafts_pos[j]) : 0.0);
      r["acceptance_per_position"] = per_pos;
      if (temperature <= 0) {
        r["outputs_identical_to_plain"] = same;
        identical = identical && same;
      }
    };
    run("k1", 1, 0);
    run("k3", 3, 0);
    run("k1_t08", 1, 0.8f);
    out["metrics"]["mtp"] = mtp;
  }
  out["meta"]["model"] = {{"source", argv[1]}};
  std::printf("%s\n", out.dump(2).c_str());
  return identical ? 0 : 1;
}
