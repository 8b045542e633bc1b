#include "feedback/length_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "ops/basic.h"
#include "ops/sampling.h"

namespace gyre::feedback {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// rel-L2 and max |diff| of n values against ref (ops::Compare: a NaN on either side fails a gate).
ops::Diff Compare(const float* a, const float* ref, int64_t n) {
  return ops::Compare(std::span<const float>(a, static_cast<size_t>(n)), std::span<const float>(ref, static_cast<size_t>(n)));
}

int64_t Argmax(const float* row, int64_t v) { return ops::Argmax(std::span<const float>(row, static_cast<size_t>(v))); }

std::vector<float> AsFloats(const std::vector<std::byte>& b) {
  std::vector<float> f(b.size() / sizeof(float));
  if (!f.empty()) std::memcpy(f.data(), b.data(), f.size() * sizeof(float));
  return f;
}

// One step of one piece, waited for; `logits` (may be null) gets the rows the piece asks for.
Status RunPiece(ModelRunner& r, const StepPiece& p, std::vector<float>* logits) {
  return r.Step(std::span<const StepPiece>(&p, 1), nullptr, logits);
}

// Prefill ids[from, to) of the sequence in `slot` (its first `from` tokens already there) in pieces
// of `chunk`; the last piece's last-row logits into `logits` (may be null).
Status Prefill(ModelRunner& r, SlotId slot, std::span<const PageId> pages, std::span<const int32_t> ids, int64_t from,
               int64_t to, int64_t chunk, std::vector<float>* logits) {
  for (int64_t pos = from; pos < to; pos += chunk) {
    const int64_t n = std::min(chunk, to - pos);
    StepPiece p;
    p.slot = slot;
    p.pages = pages;
    p.start = pos;
    p.ids = ids.subspan(pos, n);
    p.num_prompt = to;
    const bool last = pos + n >= to;
    GYRE_RETURN_IF_ERROR(RunPiece(r, p, last ? logits : nullptr).WithContext("prefill piece at " + std::to_string(pos)));
  }
  return Status::Ok();
}

}  // namespace

int64_t LengthCheckPages(const LengthCheckOptions& o, int64_t pt) {
  return CeilDiv(o.tokens, pt) + CeilDiv(std::max<int64_t>({o.tail, o.head, 1}), pt) + 1;
}

Result<LengthCheckReport> CheckLength(ModelRunner& r, const LengthCheckOptions& o) {
  const RunnerCapacity cap = r.capacity();
  const int64_t N = o.tokens, V = r.config().vocab_size, pt = cap.page_tokens;
  if (N < 2) return Status::InvalidArgument("length check: tokens must be >= 2");
  if (o.chunks.empty()) return Status::InvalidArgument("length check: give at least one chunk size");
  for (int64_t c : o.chunks)
    if (c < 1) return Status::InvalidArgument("length check: chunk sizes must be >= 1");
  if (o.tail < 0 || o.tail >= N || o.head < 0 || o.head > N)
    return Status::InvalidArgument("length check: need 0 <= tail < tokens and 0 <= head <= tokens");
  const int64_t widest = std::max({*std::max_element(o.chunks.begin(), o.chunks.end()), o.tail, o.head});
  if (widest > cap.max_step_tokens)
    return Status::InvalidArgument("length check: a piece of " + std::to_string(widest) + " tokens exceeds the runner's " +
                                   std::to_string(cap.max_step_tokens) + " tokens per step");
  if (cap.num_slots < 2) return Status::InvalidArgument("length check: the runner needs 2 slots");
  if (cap.num_pages < LengthCheckPages(o, pt))
    return Status::InvalidArgument("length check: the runner has " + std::to_string(cap.num_pages) + " pages, " +
                                   std::to_string(LengthCheckPages(o, pt)) + " needed");

  LengthCheckReport rep;
  rep.options = o;
  rep.backend = r.backend();
  rep.vocab = V;
  std::mt19937_64 rng(o.seed);
  std::vector<int32_t> ids(N);
  for (auto& t : ids) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(V));
  // Pages: slot 0 holds the prompt in pages [0, ceil(N/pt)); slot 1's own pages follow.
  std::vector<PageId> pages0(CeilDiv(N, pt));
  for (size_t i = 0; i < pages0.size(); ++i) pages0[i] = static_cast<PageId>(i);
  const int64_t spare0 = static_cast<int64_t>(pages0.size());
  std::vector<std::byte> img(cap.bytes_per_slot);
  rep.state_floats = cap.bytes_per_slot / static_cast<int64_t>(sizeof(float));

  // 1. One prefill per chunk size.
  std::vector<float> ref_logits, ref_state;
  for (int64_t c : o.chunks) {
    LengthChunkRow row;
    row.chunk = c;
    std::vector<float> logits;
    const auto t0 = Clock::now();
    GYRE_RETURN_IF_ERROR(Prefill(r, 0, pages0, ids, 0, N, c, &logits).WithContext("chunk " + std::to_string(c)));
    row.seconds = Seconds(t0);
    row.tokens_per_s = N / std::max(row.seconds, 1e-9);
    if (static_cast<int64_t>(logits.size()) != V) return Status::Internal("length check: expected one logits row");
    GYRE_RETURN_IF_ERROR(r.ReadSlotState(0, img));
    std::vector<float> st = AsFloats(img);
    if (ref_logits.empty()) {
      ref_logits = logits;
      ref_state = st;
    }
    const ops::Diff dl = Compare(logits.data(), ref_logits.data(), V), ds = Compare(st.data(), ref_state.data(), st.size());
    row.logits_rel_l2 = dl.rel_l2, row.logits_max_abs = dl.max_abs;
    row.state_rel_l2 = ds.rel_l2, row.state_max_abs = ds.max_abs;
    row.argmax_same = Argmax(logits.data(), V) == Argmax(ref_logits.data(), V);
    if (!(row.logits_rel_l2 <= o.logits_tol))
      rep.failures.push_back("chunk " + std::to_string(c) + ": last logits rel-L2 " + std::to_string(row.logits_rel_l2));
    if (!(row.state_rel_l2 <= o.state_tol))
      rep.failures.push_back("chunk " + std::to_string(c) + ": KDA state rel-L2 " + std::to_string(row.state_rel_l2));
    rep.chunks.push_back(row);
  }

  // Compares an all-logits piece (`piece`, n rows) with n decode steps' rows (`steps`).
  auto compare_rows = [&](LengthDecodeRow& d, const std::vector<float>& piece, const std::vector<float>& steps) {
    for (int64_t j = 0; j < d.n; ++j) {
      const ops::Diff dj = Compare(&steps[j * V], &piece[j * V], V);
      d.row_rel_l2.push_back(dj.rel_l2);
      if (!(dj.rel_l2 <= d.worst_rel_l2)) d.worst_rel_l2 = dj.rel_l2;
      d.argmax_agree += Argmax(&steps[j * V], V) == Argmax(&piece[j * V], V);
    }
    std::vector<double> sorted = d.row_rel_l2;
    std::sort(sorted.begin(), sorted.end(), [](double a, double b) { return a < b || (std::isnan(b) && !std::isnan(a)); });
    d.median_rel_l2 = sorted.empty() ? 0 : sorted[sorted.size() / 2];
    if (!(d.median_rel_l2 <= o.logits_tol))
      rep.failures.push_back(d.where + ": decode vs prefill median row rel-L2 " + std::to_string(d.median_rel_l2));
    if (!(d.worst_rel_l2 <= o.worst_tol))
      rep.failures.push_back(d.where + ": decode vs prefill worst row rel-L2 " + std::to_string(d.worst_rel_l2));
  };
  // Decode ids[from, from + n) one token at a time in `slot` (its first `from` tokens there).
  auto decode = [&](SlotId slot, std::span<const PageId> pages, int64_t from, int64_t n, std::vector<float>* rows,
                    double* median_ms) -> Status {
    rows->clear();
    std::vector<double> ms;
    std::vector<float> one;
    for (int64_t j = 0; j < n; ++j) {
      StepPiece p;
      p.slot = slot;
      p.pages = pages;
      p.start = from + j;
      p.ids = std::span<const int32_t>(ids).subspan(from + j, 1);
      p.num_prompt = N;
      const auto t0 = Clock::now();
      GYRE_RETURN_IF_ERROR(RunPiece(r, p, &one).WithContext("decode at " + std::to_string(from + j)));
      ms.push_back(1e3 * Seconds(t0));
      rows->insert(rows->end(), one.begin(), one.end());
    }
    std::sort(ms.begin(), ms.end());
    *median_ms = ms.empty() ? 0 : ms[ms.size() / 2];
    return Status::Ok();
  };

  // 2. The last `tail` tokens: one piece vs decode from a checkpoint.
  if (o.tail > 0) {
    const int64_t P = N - o.tail, c0 = o.chunks[0];
    LengthDecodeRow d;
    d.where = "tail";
    d.pos0 = P;
    d.n = o.tail;
    GYRE_RETURN_IF_ERROR(r.ReserveCheckpoints(1));
    GYRE_RETURN_IF_ERROR(Prefill(r, 0, pages0, ids, 0, P, c0, nullptr).WithContext("tail check"));
    GYRE_RETURN_IF_ERROR(r.SaveState(0, 0));
    StepPiece p;
    p.slot = 0;
    p.pages = pages0;
    p.start = P;
    p.ids = std::span<const int32_t>(ids).subspan(P, o.tail);
    p.num_prompt = N;
    p.all_logits = true;
    std::vector<float> piece;
    GYRE_RETURN_IF_ERROR(RunPiece(r, p, &piece).WithContext("tail piece"));
    if (static_cast<int64_t>(piece.size()) != o.tail * V) return Status::Internal("length check: tail piece rows");
    GYRE_RETURN_IF_ERROR(r.ReadSlotState(0, img));
    const std::vector<float> st_piece = AsFloats(img);
    // Slot 1: the prefix's full pages, then its own; the partial page (if any) copied.
    const int64_t full = P / pt;
    std::vector<PageId> pages1(pages0.begin(), pages0.begin() + full);
    for (int64_t i = 0; static_cast<int64_t>(pages1.size()) < CeilDiv(N, pt); ++i)
      pages1.push_back(static_cast<PageId>(spare0 + i));
    if (P % pt != 0) {
      std::vector<std::byte> page(cap.bytes_per_page);
      const PageId src = pages0[full], dst = pages1[full];
      GYRE_RETURN_IF_ERROR(r.ReadPages(std::span<const PageId>(&src, 1), page));
      GYRE_RETURN_IF_ERROR(r.WritePages(std::span<const PageId>(&dst, 1), page));
    }
    GYRE_RETURN_IF_ERROR(r.RestoreState(0, 1, P));
    std::vector<float> steps;
    GYRE_RETURN_IF_ERROR(decode(1, pages1, P, o.tail, &steps, &d.decode_step_ms_median));
    compare_rows(d, piece, steps);
    GYRE_RETURN_IF_ERROR(r.ReadSlotState(1, img));
    const std::vector<float> st_dec = AsFloats(img);
    d.state_rel_l2 = Compare(st_dec.data(), st_piece.data(), st_dec.size()).rel_l2;
    if (!(d.state_rel_l2 <= o.state_tol))
      rep.failures.push_back("tail: decode vs prefill KDA state rel-L2 " + std::to_string(d.state_rel_l2));
    rep.decode.push_back(d);
  }

  // 3. The first `head` tokens: one piece vs decode from position 0.
  if (o.head > 0) {
    LengthDecodeRow d;
    d.where = "head";
    d.n = o.head;
    std::vector<PageId> pages1;
    for (int64_t i = 0; i < CeilDiv(o.head, pt); ++i) pages1.push_back(static_cast<PageId>(spare0 + i));
    StepPiece p;
    p.slot = 0;
    p.pages = pages0;
    p.ids = std::span<const int32_t>(ids).subspan(0, o.head);
    p.num_prompt = N;
    p.all_logits = true;
    std::vector<float> piece, steps;
    GYRE_RETURN_IF_ERROR(RunPiece(r, p, &piece).WithContext("head piece"));
    if (static_cast<int64_t>(piece.size()) != o.head * V) return Status::Internal("length check: head piece rows");
    GYRE_RETURN_IF_ERROR(decode(1, pages1, 0, o.head, &steps, &d.decode_step_ms_median));
    compare_rows(d, piece, steps);
    rep.decode.push_back(d);
  }
  rep.pass = rep.failures.empty();
  return rep;
}

nlohmann::json LengthCheckReport::Json() const {
  nlohmann::json j;
  j["backend"] = backend;
  j["tokens"] = options.tokens;
  j["tail"] = options.tail;
  j["head"] = options.head;
  j["seed"] = options.seed;
  j["vocab"] = vocab;
  j["state_floats"] = state_floats;
  j["tolerance"] = {{"logits_rel_l2", options.logits_tol},
                    {"state_rel_l2", options.state_tol},
                    {"worst_row_rel_l2", options.worst_tol}};
  j["chunks"] = nlohmann::json::array();
  for (const auto& c : chunks)
    j["chunks"].push_back({{"chunk", c.chunk},
                           {"seconds", c.seconds},
                           {"tokens_per_s", c.tokens_per_s},
                           {"logits_rel_l2", c.logits_rel_l2},
                           {"logits_max_abs", c.logits_max_abs},
                           {"state_rel_l2", c.state_rel_l2},
                           {"state_max_abs", c.state_max_abs},
                           {"argmax_same", c.argmax_same}});
  j["decode"] = nlohmann::json::array();
  for (const auto& d : decode)
    j["decode"].push_back({{"where", d.where},
                           {"pos0", d.pos0},
                           {"n", d.n},
                           {"worst_logits_rel_l2", d.worst_rel_l2},
                           {"median_logits_rel_l2", d.median_rel_l2},
                           {"row_logits_rel_l2", d.row_rel_l2},
                           {"argmax_agree", d.argmax_agree},
                           {"state_rel_l2", d.state_rel_l2},
                           {"decode_step_ms_median", d.decode_step_ms_median}});
  j["pass"] = pass;
  j["failures"] = failures;
  return j;
}

std::string LengthCheckReport::Human() const {
  std::ostringstream s;
  char buf[256];
  s << "length check on " << backend << ": " << options.tokens << " tokens, tolerance rel-L2 logits "
    << options.logits_tol << " (worst decoded row " << options.worst_tol << "), KDA state " << options.state_tol << "\n";
  for (const auto& c : chunks) {
    std::snprintf(buf, sizeof buf,
                  "  chunk %8lld: %8.2f s (%9.0f tokens/s)  last logits rel-L2 %.2e%s  KDA state rel-L2 %.2e\n",
                  static_cast<long long>(c.chunk), c.seconds, c.tokens_per_s, c.logits_rel_l2,
                  c.argmax_same ? "" : " (argmax differs)", c.state_rel_l2);
    s << buf;
  }
  for (const auto& d : decode) {
    char state[64] = "";
    if (d.where == "tail") std::snprintf(state, sizeof state, ", state rel-L2 %.2e", d.state_rel_l2);
    std::snprintf(buf, sizeof buf,
                  "  %s: positions [%lld, %lld) decoded vs one piece: rows rel-L2 median %.2e worst %.2e, argmax "
                  "%lld/%lld%s, decode step %.3f ms\n",
                  d.where.c_str(), static_cast<long long>(d.pos0), static_cast<long long>(d.pos0 + d.n), d.median_rel_l2,
                  d.worst_rel_l2,
                  static_cast<long long>(d.argmax_agree), static_cast<long long>(d.n), state, d.decode_step_ms_median);
    s << buf;
  }
  s << (pass ? "PASS\n" : "FAIL\n");
  for (const auto& f : failures) s << "  " << f << "\n";
  return s.str();
}

}  // namespace gyre::feedback
