// Text evaluation. Sections: figures; one window (main logits, MTP); EvaluateIds / EvaluateText;
// report output.
#include "feedback/text_eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "ops/sampling.h"

namespace gyre::feedback {

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// -log softmax(row)[target] in double, shifted by the row's max (stable for any logit range).
double Nll(std::span<const float> row, int32_t target) {
  double mx = -std::numeric_limits<double>::infinity(), sum = 0;
  for (float v : row) mx = std::max(mx, static_cast<double>(v));
  for (float v : row) sum += std::exp(v - mx);
  return mx + std::log(sum) - row[target];
}

// ---- one window ----------------------------------------------------------------------------------

// Prefills the window's first L-1 tokens on a fresh sequence, in pieces of `step` tokens with all
// logits; adds the NLL of tokens 1..L-1 to `r` and writes each row's argmax to `argmax` [L-1].
Status ScoreWindow(RunnerSession& session, std::span<const int32_t> win, int64_t step, TextEvalReport* r,
                   std::vector<int32_t>* argmax) {
  const int64_t V = session.runner().config().vocab_size, n = static_cast<int64_t>(win.size()) - 1;
  GYRE_ASSIGN_OR_RETURN(int seq, session.NewSequence());
  argmax->resize(n);
  std::vector<float> logits;
  Status s;
  for (int64_t p = 0; p < n && s.ok(); p += step) {
    const int64_t take = std::min(step, n - p);
    const RunnerSession::Input in{seq, win.subspan(p, take), {}, /*all_logits=*/true};
    s = session.Step(std::span<const RunnerSession::Input>(&in, 1), nullptr, &logits);
    for (int64_t j = 0; s.ok() && j < take; ++j) {
      const std::span<const float> row(logits.data() + j * V, V);
      r->nll_sum += Nll(row, win[p + j + 1]);
      (*argmax)[p + j] = ops::Argmax(row);
    }
  }
  session.Release(seq);
  return s;
}

// The MTP figures of one window: one CPU forward of its first L-1 tokens for their hidden states,
// then the MTP layer over them; positions t = 0..L-3 (none when L < 3).
Status ScoreMtpWindow(const Model& m, std::span<const int32_t> win, const std::vector<int32_t>& main_argmax,
                      MtpEvalReport* r) {
  const int64_t V = m.config().vocab_size, n = static_cast<int64_t>(win.size()) - 1;
  if (n < 2) return Status();
  SequenceState st = m.NewSequence();
  std::vector<float> hidden, last_logits, mtp;
  const SeqInput in{&st, win.first(n), /*all_logits=*/false, &hidden};
  GYRE_RETURN_IF_ERROR(m.Forward(std::span<const SeqInput>(&in, 1), &last_logits));
  GYRE_RETURN_IF_ERROR(m.MtpForward(win.first(n), hidden, &mtp));
  for (int64_t t = 0; t + 1 < n; ++t) {
    const std::span<const float> row(mtp.data() + t * V, V);
    r->num_accepted += ops::Argmax(row) == main_argmax[t + 1];
    r->nll_sum += Nll(row, win[t + 2]);
    ++r->num_positions;
  }
  return Status();
}

}  // namespace

// ---- figures -------------------------------------------------------------------------------------

double MtpEvalReport::acceptance() const {
  return num_positions ? static_cast<double>(num_accepted) / num_positions : kNaN;
}
double MtpEvalReport::mean_nll() const { return num_positions ? nll_sum / num_positions : kNaN; }

double TextEvalReport::mean_nll() const { return num_tokens_scored ? nll_sum / num_tokens_scored : kNaN; }
double TextEvalReport::perplexity() const { return std::exp(mean_nll()); }
double TextEvalReport::bits_per_byte() const { return num_bytes ? nll_sum / std::log(2.0) / num_bytes : kNaN; }
double TextEvalReport::tokens_per_s() const { return wall_s > 0 ? num_tokens_scored / wall_s : kNaN; }

// ---- EvaluateIds / EvaluateText ------------------------------------------------------------------

Result<TextEvalReport> EvaluateIds(ModelRunner& runner, const Model* mtp_model, std::span<const int32_t> ids,
                                   int64_t num_bytes, const TextEvalOptions& o) {
  if (o.ctx < 1) return Status::InvalidArgument("ctx must be >= 1 (got " + std::to_string(o.ctx) + ")");
  if (o.step_tokens < 1) return Status::InvalidArgument("step_tokens must be >= 1");
  if (o.max_tokens < 0) return Status::InvalidArgument("max_tokens must be >= 0");
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t used = o.max_tokens > 0 ? std::min(o.max_tokens, n) : n;
  if (used < 2) {
    return Status::InvalidArgument("the text has " + std::to_string(used) +
                                   " token(s) to evaluate; at least 2 are needed");
  }
  const int64_t V = runner.config().vocab_size;
  for (int64_t i = 0; i < used; ++i) {
    if (ids[i] < 0 || ids[i] >= V) {
      return Status::InvalidArgument("token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                                     " is outside the vocabulary [0, " + std::to_string(V) + ")");
    }
  }
  TextEvalReport r;
  r.backend = runner.backend();
  r.ctx = o.ctx;
  r.num_tokens_file = n;
  r.num_tokens_used = used;
  r.num_bytes = num_bytes;
  r.has_mtp = r.mtp_evaluated = mtp_model && mtp_model->has_mtp();
  RunnerSession session(runner);
  const int64_t step = std::min(o.step_tokens, runner.capacity().max_step_tokens);
  std::vector<int32_t> argmax;
  const auto t0 = Clock::now();
  for (int64_t k0 = 0; k0 < used; k0 += o.ctx) {
    const int64_t L = std::min(o.ctx + 1, used - k0);
    if (L < 2) break;
    const std::span<const int32_t> win = ids.subspan(k0, L);
    Status s = ScoreWindow(session, win, step, &r, &argmax);
    if (!s.ok()) return s.WithContext("window " + std::to_string(r.num_windows));
    ++r.num_windows;
    r.num_tokens_scored += L - 1;
    if (r.mtp_evaluated) {
      const auto t1 = Clock::now();
      s = ScoreMtpWindow(*mtp_model, win, argmax, &r.mtp);
      if (!s.ok()) return s.WithContext("MTP, window " + std::to_string(r.num_windows - 1));
      r.mtp.wall_s += SecondsSince(t1);
    }
  }
  r.wall_s = SecondsSince(t0);
  return r;
}

Result<TextEvalReport> EvaluateText(ModelRunner& runner, const Model* mtp_model, const Tokenizer& tokenizer,
                                    std::string_view text, const TextEvalOptions& o) {
  if (text.empty()) return Status::InvalidArgument("the text is empty");
  const auto t0 = Clock::now();
  GYRE_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Encode(text, /*parse_special=*/false));
  const double tokenize_s = SecondsSince(t0);
  const int64_t n = static_cast<int64_t>(ids.size());
  int64_t num_bytes = static_cast<int64_t>(text.size());
  if (o.max_tokens > 0 && o.max_tokens < n) {
    num_bytes = 0;
    for (int64_t i = 0; i < o.max_tokens; ++i) num_bytes += static_cast<int64_t>(tokenizer.TokenBytes(ids[i]).size());
  }
  GYRE_ASSIGN_OR_RETURN(TextEvalReport r, EvaluateIds(runner, mtp_model, ids, num_bytes, o));
  r.tokenize_s = tokenize_s;
  return r;
}

// ---- report output -------------------------------------------------------------------------------

namespace {
// NaN (no positions) as JSON null.
nlohmann::json Num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }
}  // namespace

nlohmann::json TextEvalReport::Json() const {
  nlohmann::json j = {{"backend", backend},
                      {"ctx", ctx},
                      {"tokens_in_file", num_tokens_file},
                      {"tokens_evaluated", num_tokens_used},
                      {"windows", num_windows},
                      {"tokens_scored", num_tokens_scored},
                      {"bytes", num_bytes},
                      {"nll_total", nll_sum},
                      {"mean_nll", Num(mean_nll())},
                      {"perplexity", Num(perplexity())},
                      {"bits_per_byte", Num(bits_per_byte())},
                      {"tokenize_s", tokenize_s},
                      {"wall_s", wall_s},
                      {"tokens_per_s", Num(tokens_per_s())}};
  if (!has_mtp) {
    j["mtp"] = nullptr;
  } else if (!mtp_evaluated) {
    j["mtp"] = {{"evaluated", false}, {"note", mtp_note}};
  } else {
    j["mtp"] = {{"evaluated", true},
                {"positions", mtp.num_positions},
                {"accepted", mtp.num_accepted},
                {"acceptance", Num(mtp.acceptance())},
                {"nll_total", mtp.nll_sum},
                {"mean_nll", Num(mtp.mean_nll())},
                {"perplexity", Num(std::exp(mtp.mean_nll()))},
                {"wall_s", mtp.wall_s}};
  }
  return j;
}

std::string TextEvalReport::Human() const {
  char buf[512];
  std::string out;
  std::snprintf(buf, sizeof buf,
                "text        %lld tokens (%lld evaluated, %lld bytes), %lld scored in %lld window(s) of ctx %lld\n",
                (long long)num_tokens_file, (long long)num_tokens_used, (long long)num_bytes,
                (long long)num_tokens_scored, (long long)num_windows, (long long)ctx);
  out += buf;
  std::snprintf(buf, sizeof buf, "main        mean NLL %.4f nats, perplexity %.3f, %.4f bits per byte\n", mean_nll(),
                perplexity(), bits_per_byte());
  out += buf;
  std::snprintf(buf, sizeof buf, "speed       %.2f s on %s, %.1f scored tokens/s (tokenizing %.2f s)\n", wall_s,
                backend.c_str(), tokens_per_s(), tokenize_s);
  out += buf;
  if (!has_mtp) {
    out += "mtp         none (the model has no MTP layer)\n";
  } else if (!mtp_evaluated) {
    out += "mtp         not evaluated: " + mtp_note + "\n";
  } else if (mtp.num_positions == 0) {
    out += "mtp         no positions (every window is shorter than 3 tokens)\n";
  } else {
    std::snprintf(buf, sizeof buf,
                  "mtp         acceptance %.4f (%lld of %lld positions), mean NLL %.4f nats (perplexity %.3f), "
                  "%.2f s\n",
                  mtp.acceptance(), (long long)mtp.num_accepted, (long long)mtp.num_positions, mtp.mean_nll(),
                  std::exp(mtp.mean_nll()), mtp.wall_s);
    out += buf;
  }
  return out;
}

}  // namespace gyre::feedback
