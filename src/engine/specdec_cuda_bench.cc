// gyre_specdec_cuda_bench: speculative decoding with ReplaySSM on the CUDA model (issue 15's
// benchmark figures; docs/engine.md "Speculative decoding").
//
// Usage: gyre_specdec_cuda_bench CONFIG_JSON [--batches 1,16,64] [--context 512] [--iters 20]
//                                 [--max-tokens 128] [--fp32]
//        gyre_specdec_cuda_bench --model DIR [--batches 1,16,64] [--max-tokens 128] [--fp32]
// Random weights (bf16 unless --fp32) from the config, one GPU. Prints JSON; the caller adds the
// machine and commit.
//
// With --model (a checkpoint with an MTP layer and its held-out text, the trained glm5_mini):
// MTP drafts. At each batch B, B concurrent greedy requests whose prompts are 64-token windows of
// the held-out text (heldout_eval.txt through the checkpoint's tokenizer), on one CudaModel built
// with MTP drafts: plain decoding, then MTP drafts with k = 1 and 3, then n-gram drafts (k = 3)
// on the same prompts: tokens/s, acceptance (per draft position), tokens per verify step, the
// GPU's busy time per step, and whether the outputs equal plain decoding's.
//
// 1. Step cost, on the runner directly (no engine): at each batch B, B sequences of `context`
//    tokens; a plain decode step (B one-token pieces; a CUDA graph, as serving runs it) against a
//    verify step of B speculative pieces of 1 + k tokens (k = 1..4) followed by the commit of all
//    of them (the largest fold, run at the next launch, inside the timed loop). Medians of host
//    wall time per step after warm-up; the ratio verify_k / plain is issue 15's "≤ 1.3× at k = 3,
//    batch 1". Also the KDA state bytes a step moves: ReplaySSM (verify reads the state, the
//    fold reads and writes it, the ring holds 4P + H floats per token) vs copying a state per draft.
// 2. Serving: B concurrent greedy requests through the engine on a repetitive prompt (an 8-token
//    unit repeated: drafts come from the prompt), with n-gram drafts (k = 3) and without:
//    wall-clock tokens/s, acceptance, and whether the outputs are identical (they must be).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/bench_sink.h"
#include "engine/engine.h"
#include "model/config.h"
#include "runtime/cuda_model.h"
#include "runtime/model.h"
#include "tokenizer/tokenizer.h"

namespace gyre {
namespace {


double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<int64_t> ParseList(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) out.push_back(std::stoll(part));
  return out;
}

struct Args {
  std::string config, model;
  std::vector<int64_t> batches = {1, 16, 64};
  int64_t context = 512, iters = 20, max_tokens = 128;
  bool bf16 = true;
};

constexpr int64_t kMaxDrafts = 4;

// Part 1 at batch B on `m` (sequences in slots 0..B-1, pages per sequence `pps`).
Result<nlohmann::json> StepCost(CudaModel& m, const ModelConfig& c, const Args& a, int64_t B, int64_t pps) {
  std::mt19937 rng(static_cast<uint32_t>(B) + 11);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(std::min<int64_t>(c.vocab_size, 30000)) - 1);
  std::vector<std::vector<PageId>> pages(B);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < pps; ++p) pages[b].push_back(static_cast<PageId>(b * pps + p));
  std::vector<int64_t> len(B, 0);
  const int64_t chunk = std::max<int64_t>(1, m.capacity().max_step_tokens);
  for (int64_t b = 0; b < B; ++b) {  // prefill
    std::vector<int32_t> ids(a.context);
    for (auto& x : ids) x = tok(rng);
    for (int64_t p = 0; p < a.context; p += chunk) {
      StepPiece in;
      in.slot = static_cast<SlotId>(b);
      in.pages = pages[b];
      in.start = p;
      in.ids = std::span<const int32_t>(ids.data() + p, std::min(chunk, a.context - p));
      in.sample.enabled = p + chunk >= a.context;
      GYRE_RETURN_IF_ERROR(m.Step(std::span<const StepPiece>(&in, 1), nullptr));
    }
    len[b] = a.context;
  }
  std::vector<int32_t> ids(B * (kMaxDrafts + 1));
  auto timed = [&](int64_t rows, bool spec) -> Result<double> {  // one step of B pieces of `rows` tokens
    for (auto& x : ids) x = tok(rng);
    std::vector<StepPiece> ps(B);
    for (int64_t b = 0; b < B; ++b) {
      StepPiece& in = ps[b];
      in.slot = static_cast<SlotId>(b);
      in.pages = pages[b];
      in.start = len[b];
      in.ids = std::span<const int32_t>(ids.data() + b * (kMaxDrafts + 1), rows);
      in.sample.enabled = true;
      in.speculative = spec;
    }
    const auto t0 = std::chrono::steady_clock::now();
    GYRE_RETURN_IF_ERROR(m.Launch(ps));
    std::vector<SampledToken> out;
    GYRE_RETURN_IF_ERROR(m.Collect(&out));
    if (spec)
      for (int64_t b = 0; b < B; ++b) GYRE_RETURN_IF_ERROR(m.CommitSpeculative(static_cast<SlotId>(b), rows));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (int64_t b = 0; b < B; ++b) len[b] += rows;
    return ms;
  };
  nlohmann::json r;
  const int64_t warm = 3;
  std::vector<double> plain;
  for (int64_t i = 0; i < warm + a.iters; ++i) {
    GYRE_ASSIGN_OR_RETURN(double ms, timed(1, false));
    if (i >= warm) plain.push_back(ms);
  }
  const double plain_ms = Median(plain);
  r["plain_step_ms"] = plain_ms;
  nlohmann::json verify, ratio;
  for (int64_t k = 1; k <= kMaxDrafts; ++k) {
    std::vector<double> v;
    for (int64_t i = 0; i < warm + a.iters; ++i) {
      GYRE_ASSIGN_OR_RETURN(double ms, timed(k + 1, true));
      if (i >= warm) v.push_back(ms);
    }
    // The last commit's fold has not run yet: a synchronize runs it (untimed), so every fold
    // counted in the timed loop ran inside a launch.
    GYRE_RETURN_IF_ERROR(m.Synchronize());
    verify[std::to_string(k)] = Median(v);
    ratio[std::to_string(k)] = plain_ms > 0 ? Median(v) / plain_ms : 0.0;
  }
  r["verify_step_ms"] = verify;  // verify step + the commit of all 1 + k tokens (fold at the next launch)
  r["verify_over_plain"] = ratio;
  // KDA state traffic per step (bytes, all KDA layers, B sequences), at k = 3 with every token kept.
  int64_t kda_layers = 0;
  for (AttnKind t : c.layer_types) kda_layers += t == AttnKind::kKda;
  const double Hh = static_cast<double>(c.linear_num_heads), K = static_cast<double>(c.linear_head_dim);
  const double state = Hh * K * K * 4, P = Hh * K, tail = (c.linear_conv_kernel_dim - 1) * 3 * P * 4;
  const double ring_tok = (4 * P + Hh) * 4, k3 = 3;
  const double replay = kda_layers * B * (state /*verify read*/ + 2 * state /*fold read+write*/ + 2 * tail +
                                          2 * (k3 + 1) * ring_tok /*ring write+read*/);
  const double copies = kda_layers * B * (state /*read*/ + (k3 + 1) * (state + tail) /*a state per token*/ +
                                          2 * (state + tail) /*copy the kept one back*/);
  const double plain_bytes = kda_layers * B * (2 * state + 2 * tail);
  r["kda_state_bytes_per_step"] = {{"plain_decode", plain_bytes}, {"replayssm_k3", replay},
                                   {"per_draft_copies_k3", copies}};
  return r;
}

// Request b's prompt: an 8-token unit repeated 8 times (the n-gram drafts come from it).
std::vector<int32_t> ServePrompt(int64_t b) {
  std::vector<int32_t> prompt;
  for (int r = 0; r < 8; ++r)
    for (int32_t t : {11, 57, 203, 9, 88, 311, 42, 7}) prompt.push_back(t + static_cast<int32_t>(b) * 13);
  return prompt;
}

// Where a speculative and a plain greedy output part: the logits after `prefix` (one prefill
// piece on slot 0, fp32 logits back) — the top-2 gap and logit[a] − logit[b] of the two tokens
// chosen. A gap at the level of bf16 rounding means a near tie that the verify rows (the prefill
// attention path, multi-row GEMMs) and decode rows may break differently.
nlohmann::json TieAt(ModelRunner& runner, const std::vector<int32_t>& prefix, int32_t a, int32_t b) {
  const RunnerCapacity cap = runner.capacity();
  const int64_t n = static_cast<int64_t>(prefix.size());
  std::vector<PageId> pages((n + cap.page_tokens - 1) / cap.page_tokens);
  for (size_t i = 0; i < pages.size(); ++i) pages[i] = static_cast<PageId>(i);
  StepPiece p;
  p.slot = 0;
  p.pages = pages;
  p.start = 0;
  p.ids = prefix;
  std::vector<SampledToken> out;
  std::vector<float> logits;
  Status s = runner.Launch(std::span<const StepPiece>(&p, 1), /*want_logits=*/true);
  if (s.ok()) s = runner.Collect(&out, &logits);
  if (!s.ok()) return {{"error", s.ToString()}};
  const int64_t V = runner.config().vocab_size;
  std::vector<float> row(logits.end() - V, logits.end()), sorted = row;
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
  return {{"top2_gap", sorted[0] - sorted[1]},
          {"logit_plain_minus_spec", row[a] - row[b]},
          {"prefill_argmax", std::max_element(row.begin(), row.end()) - row.begin()}};
}

// Part 2: B requests through the engine, with or without n-gram drafts.
struct ServeRun {
  double wall_s = 0;
  int64_t tokens = 0;
  std::vector<std::vector<int32_t>> outputs;
  EngineStats stats;
  Status status;
};

// method: "" (plain), "ngram" (k = 3) or "mtp" (k = mtp_k). prompts: request b's is
// prompts[b % size], else ServePrompt(b).
ServeRun Serve(ModelRunner& runner, const Args& a, int64_t B, const std::string& method, int64_t mtp_k = 0,
               const std::vector<std::vector<int32_t>>* prompts = nullptr) {
  ServeRun res;
  EngineOptions eo;
  eo.max_num_seqs = B;
  eo.max_num_batched_tokens = std::min<int64_t>(runner.capacity().max_step_tokens, 8192);
  eo.kv_page_tokens = runner.capacity().page_tokens;
  eo.enable_prefix_caching = false;
  if (method == "ngram") {
    eo.speculative.method = "ngram";
    eo.speculative.num_speculative_tokens = 3;
    eo.speculative.prompt_lookup_max = 4;
    eo.speculative.prompt_lookup_min = 2;
  } else if (method == "mtp") {
    eo.speculative.method = "mtp";
    eo.speculative.num_speculative_tokens = mtp_k;
  }
  auto engine = Engine::Create(runner, eo);
  if (!engine.ok()) {
    res.status = engine.status();
    return res;
  }
  if (Status s = (*engine)->Start(); !s.ok()) {
    res.status = s;
    return res;
  }
  std::vector<std::shared_ptr<BenchSink>> sinks;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int32_t> prompt =
        prompts && !prompts->empty() ? (*prompts)[static_cast<size_t>(b) % prompts->size()] : ServePrompt(b);
    RequestParams p;
    p.prompt = prompt;
    p.max_tokens = a.max_tokens;
    p.ignore_eos = true;
    sinks.push_back(std::make_shared<BenchSink>());
    if (auto id = (*engine)->Submit(p, sinks.back()); !id.ok()) {
      res.status = id.status();
      sinks.pop_back();
    }
  }
  for (auto& s : sinks) {
    s->Wait();
    if (!s->status.ok()) res.status = s->status;
    res.tokens += static_cast<int64_t>(s->ids.size());
    res.outputs.push_back(s->ids);
  }
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int i = 0; i < 1000 && (*engine)->Stats().requests_finished < B; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  res.stats = (*engine)->Stats();
  (*engine)->Stop();
  return res;
}

int Run(const Args& a) {
  std::ifstream f(a.config);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", a.config.c_str());
    return 2;
  }
  std::stringstream text;
  text << f.rdbuf();
  auto cfg = ParseModelConfig(text.str());
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", cfg.status().ToString().c_str());
    return 2;
  }
  const ModelConfig& c = *cfg;
  nlohmann::json out;
  bool identical = true, ok = true;
  for (int64_t B : a.batches) {
    CudaModelOptions mo;
    mo.bf16_weights = a.bf16;
    mo.max_seqs = B;
    mo.max_batch_tokens = std::max<int64_t>(2048, B * (kMaxDrafts + 1));
    mo.page_tokens = 64;
    const int64_t seq_tokens = a.context + (1 + 2 + 3 + 4 + 5 + 2) * (a.iters + 3) + a.max_tokens + 256;
    const int64_t pps = (seq_tokens + mo.page_tokens - 1) / mo.page_tokens;
    mo.kv_tokens = B * pps * mo.page_tokens;
    mo.max_seq_tokens = pps * mo.page_tokens;
    mo.speculative_tokens = kMaxDrafts;
    auto m = CudaModel::Random(c, mo);
    if (!m.ok()) {
      std::fprintf(stderr, "batch %lld: %s\n", static_cast<long long>(B), m.status().ToString().c_str());
      ok = false;
      continue;
    }
    nlohmann::json row;
    const CudaModelStats st = (*m)->stats();
    row["model"] = {{"weight_bytes", st.weight_bytes}, {"state_bytes", st.state_bytes}, {"spec_ring_bytes", st.spec_bytes},
                    {"kv_bytes", st.kv_bytes}};
    auto cost = StepCost(**m, c, a, B, pps);
    if (!cost.ok()) {
      std::fprintf(stderr, "batch %lld step cost: %s\n", static_cast<long long>(B), cost.status().ToString().c_str());
      ok = false;
    } else {
      row["step"] = *cost;
    }
    {  // warm-up: graph captures and workspaces of these batch sizes, untimed
      Args w = a;
      w.max_tokens = 16;
      (void)Serve(**m, w, B, "");
      (void)Serve(**m, w, B, "ngram");
    }
    ServeRun plain = Serve(**m, a, B, ""), spec = Serve(**m, a, B, "ngram");
    if (!plain.status.ok() || !spec.status.ok()) {
      std::fprintf(stderr, "batch %lld serve: %s / %s\n", static_cast<long long>(B), plain.status.ToString().c_str(),
                   spec.status.ToString().c_str());
      ok = false;
    }
    const bool same = plain.outputs == spec.outputs;
    identical = identical && same;
    // Where they part: requests that differ and the first differing position of the first one.
    int64_t differ = 0, first_req = -1, first_pos = -1;
    nlohmann::json tie;
    for (size_t q = 0; q < plain.outputs.size() && q < spec.outputs.size(); ++q) {
      if (plain.outputs[q] == spec.outputs[q]) continue;
      ++differ;
      if (first_req >= 0) continue;
      first_req = static_cast<int64_t>(q);
      const auto& x = plain.outputs[q];
      const auto& y = spec.outputs[q];
      size_t j = 0;
      while (j < x.size() && j < y.size() && x[j] == y[j]) ++j;
      first_pos = static_cast<int64_t>(j);
      if (j < x.size() && j < y.size()) {
        std::vector<int32_t> prefix = ServePrompt(first_req);
        prefix.insert(prefix.end(), x.begin(), x.begin() + j);
        tie = TieAt(**m, prefix, x[j], y[j]);
      }
    }
    const EngineStats& s = spec.stats;
    row["serve"] = {{"plain_tok_s", plain.wall_s > 0 ? plain.tokens / plain.wall_s : 0.0},
                    {"ngram_tok_s", spec.wall_s > 0 ? spec.tokens / spec.wall_s : 0.0},
                    {"speedup", plain.wall_s > 0 && spec.wall_s > 0 ? plain.wall_s / spec.wall_s : 0.0},
                    {"verify_pieces", s.spec_verify_pieces},
                    {"draft_tokens", s.spec_draft_tokens},
                    {"accepted_tokens", s.spec_accepted_tokens},
                    {"acceptance_rate", s.spec_draft_tokens > 0
                                            ? double(s.spec_accepted_tokens) / double(s.spec_draft_tokens)
                                            : 0.0},
                    {"mean_accepted_per_verify",
                     s.spec_verify_pieces > 0 ? double(s.spec_accepted_tokens) / double(s.spec_verify_pieces) : 0.0},
                    {"outputs_identical", same},
                    {"requests_differing", differ},
                    {"first_differing_request", first_req},
                    {"first_differing_position", first_pos},
                    {"first_difference_logits", tie},
                    {"tokens", spec.tokens}};
    row["folds"] = (*m)->stats().spec_folds;
    row["fold_batches"] = (*m)->stats().spec_fold_batches;
    out["batches"][std::to_string(B)] = row;
    std::fprintf(stderr, "batch %lld done\n", static_cast<long long>(B));
  }
  out["outputs_identical"] = identical;
  out["meta"] = {{"config", a.config},       {"context", a.context}, {"iters", a.iters},
                 {"max_tokens", a.max_tokens}, {"bf16_weights", a.bf16},
                 {"serve_speculative_config",
                  R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4,"prompt_lookup_min":2})"}};
  std::printf("%s\n", out.dump(2).c_str());
  return ok && identical ? 0 : 1;
}

// --model: MTP drafts on a trained checkpoint (see the header).
int RunMtp(const Args& a) {
  auto model = Model::Load(a.model);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 2;
  }
  const Model& md = **model;
  if (!md.has_mtp()) {
    std::fprintf(stderr, "%s has no MTP layer\n", a.model.c_str());
    return 2;
  }
  // Prompts: 64-token windows of the held-out text, one per request (up to the largest batch).
  std::vector<std::vector<int32_t>> prompts;
  {
    auto tok = Tokenizer::FromFile(a.model);
    std::ifstream f(a.model + "/heldout_eval.txt");
    std::stringstream text;
    text << f.rdbuf();
    if (!tok.ok() || text.str().empty()) {
      std::fprintf(stderr, "--model needs tokenizer.json and heldout_eval.txt in %s\n", a.model.c_str());
      return 2;
    }
    auto ids = (*tok)->Encode(text.str(), false);
    if (!ids.ok()) {
      std::fprintf(stderr, "%s\n", ids.status().ToString().c_str());
      return 2;
    }
    const int64_t want = *std::max_element(a.batches.begin(), a.batches.end()), n = static_cast<int64_t>(ids->size());
    const int64_t stride = std::max<int64_t>(64, (n - 64) / std::max<int64_t>(want, 1));
    for (int64_t b = 0; b < want && b * stride + 64 <= n; ++b)
      prompts.emplace_back(ids->begin() + b * stride, ids->begin() + b * stride + 64);
  }
  nlohmann::json out;
  bool ok = true, identical = true;
  for (int64_t B : a.batches) {
    CudaModelOptions mo;
    mo.bf16_weights = a.bf16;
    mo.max_seqs = B;
    mo.max_batch_tokens = std::max<int64_t>(2048, B * (kMaxDrafts + 1));
    mo.page_tokens = 64;
    mo.max_seq_tokens = 64 + a.max_tokens + 128;
    mo.kv_tokens = B * ((mo.max_seq_tokens + 63) / 64) * 64;
    mo.speculative_tokens = 3;
    mo.mtp_drafts = 3;
    auto m = CudaModel::FromHost(md.config(), md.weights(), mo);
    if (!m.ok()) {
      std::fprintf(stderr, "batch %lld: %s\n", static_cast<long long>(B), m.status().ToString().c_str());
      ok = false;
      continue;
    }
    {  // warm-up (workspaces, graphs), untimed
      Args w = a;
      w.max_tokens = 16;
      (void)Serve(**m, w, B, "", 0, &prompts);
      (void)Serve(**m, w, B, "mtp", 3, &prompts);
    }
    nlohmann::json row;
    std::vector<std::vector<int32_t>> plain_out;
    double plain_tok_s = 0;
    for (const auto& [name, method, k] : {std::tuple<const char*, const char*, int64_t>{"plain", "", 0},
                                          {"mtp_k1", "mtp", 1}, {"mtp_k3", "mtp", 3}, {"ngram_k3", "ngram", 3}}) {
      const CudaModelStats before = (*m)->stats();
      ServeRun r = Serve(**m, a, B, method, k, &prompts);
      const CudaModelStats after = (*m)->stats();
      if (!r.status.ok()) {
        std::fprintf(stderr, "batch %lld %s: %s\n", static_cast<long long>(B), name, r.status.ToString().c_str());
        ok = false;
        continue;
      }
      const double tok_s = r.wall_s > 0 ? r.tokens / r.wall_s : 0.0;
      const int64_t steps = after.steps - before.steps;
      nlohmann::json j = {{"tok_s", tok_s},
                          {"tokens", r.tokens},
                          {"steps", steps},
                          {"gpu_busy_ms_per_step", steps > 0 ? (after.busy_ms_total - before.busy_ms_total) / steps : 0.0},
                          {"mtp_chain_steps", after.mtp_chain_steps - before.mtp_chain_steps}};
      if (name == std::string("plain")) {
        plain_out = r.outputs;
        plain_tok_s = tok_s;
      } else {
        const EngineStats& s = r.stats;
        const bool same = r.outputs == plain_out;
        identical = identical && (same || a.bf16);  // bf16: near ties may part (bench/results/gpu_check_d003038)
        nlohmann::json per_pos = nlohmann::json::array();
        for (size_t q = 0; q < s.spec_drafts_per_pos.size(); ++q)
          per_pos.push_back(s.spec_drafts_per_pos[q] > 0
                                ? double(s.spec_accepted_per_pos[q]) / double(s.spec_drafts_per_pos[q])
                                : 0.0);
        j["speedup_vs_plain"] = plain_tok_s > 0 ? tok_s / plain_tok_s : 0.0;
        j["verify_pieces"] = s.spec_verify_pieces;
        j["acceptance_rate"] = s.spec_draft_tokens > 0 ? double(s.spec_accepted_tokens) / double(s.spec_draft_tokens) : 0.0;
        j["acceptance_per_position"] = per_pos;
        j["tokens_per_verify_step"] =
            s.spec_verify_pieces > 0 ? double(s.spec_accepted_tokens + s.spec_verify_pieces) / double(s.spec_verify_pieces)
                                     : 0.0;
        j["outputs_identical_to_plain"] = same;
        int64_t differ = 0;
        for (size_t q = 0; q < r.outputs.size() && q < plain_out.size(); ++q) differ += r.outputs[q] != plain_out[q];
        j["requests_differing"] = differ;
      }
      row[name] = j;
    }
    row["model"] = {{"kv_bytes", (*m)->stats().kv_bytes}, {"state_bytes", (*m)->stats().state_bytes},
                    {"mtp_scratch_bytes", (*m)->stats().mtp_bytes}};
    out["batches"][std::to_string(B)] = row;
    std::fprintf(stderr, "batch %lld done\n", static_cast<long long>(B));
  }
  out["outputs_identical"] = identical;
  out["meta"] = {{"model", a.model},
                 {"prompts", "64-token windows of heldout_eval.txt, one per request"},
                 {"max_tokens", a.max_tokens},
                 {"bf16_weights", a.bf16},
                 {"greedy", true}};
  std::printf("%s\n", out.dump(2).c_str());
  return ok && identical ? 0 : 1;
}

}  // namespace
}  // namespace gyre

int main(int argc, char** argv) {
  gyre::Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--batches") a.batches = gyre::ParseList(next());
    else if (s == "--context") a.context = std::stoll(next());
    else if (s == "--iters") a.iters = std::stoll(next());
    else if (s == "--max-tokens") a.max_tokens = std::stoll(next());
    else if (s == "--fp32") a.bf16 = false;
    else if (s == "--model") a.model = next();
    else if (!s.empty() && s[0] != '-' && a.config.empty()) a.config = s;
    else {
      std::fprintf(stderr, "usage: gyre_specdec_cuda_bench CONFIG_JSON [--batches 1,16,64] [--context N] [--iters N] "
                           "[--max-tokens N] [--fp32] | --model DIR\n");
      return 2;
    }
  }
  if (!a.model.empty()) return gyre::RunMtp(a);
  if (a.config.empty()) {
    std::fprintf(stderr, "usage: gyre_specdec_cuda_bench CONFIG_JSON [...] | --model DIR [...]\n");
    return 2;
  }
  return gyre::Run(a);
}
