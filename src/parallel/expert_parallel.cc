// EP plan. Sections: sharding; route + dispatch; experts; combine.
#include "parallel/expert_parallel.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "ops/basic.h"
#include "ops/moe.h"
#include "parallel/reference.h"

namespace gyre::parallel {

MoeEpShard ShardMoe(const MoeWeights& w, const ModelConfig& c, int size, int rank) {
  MoeEpShard s;
  s.experts = Split(c.n_routed_experts, size, rank);
  s.router = w.router;
  s.bias = w.bias;
  s.owned.assign(w.experts.begin() + s.experts.begin, w.experts.begin() + s.experts.end);
  s.shared = w.shared;
  s.has_shared = w.has_shared;
  return s;
}

Status MoeEpForward(Communicator& comm, const MoeEpShard& w, const ModelConfig& c, const float* x, int64_t n_local,
                    int64_t token0, MoeEpTrace* t) {
  const int n = comm.size();
  const int64_t E = c.n_routed_experts, k = c.num_experts_per_tok, D = c.hidden_size, rec = D + 2;
  const float limit = c.swiglu_limit.value_or(0.0f);

  // ---- route + dispatch ----
  std::vector<float> logits(n_local * E), wts(n_local * k);
  std::vector<int32_t> idx(n_local * k);
  ops::LinearF32(x, n_local, w.router, logits.data());
  ops::Route(logits.data(), n_local, w.bias, RouterParamsOf(c), idx.data(), wts.data());
  t->route.clear();
  for (int32_t e : idx) t->route.push_back(static_cast<float>(e));
  t->route.insert(t->route.end(), wts.begin(), wts.end());

  // Owner of each expert, and the (token, slot) pairs per destination in (token, slot) order.
  std::vector<int> owner(E);
  for (int r = 0; r < n; ++r) {
    const Range er = Split(E, n, r);
    for (int64_t e = er.begin; e < er.end; ++e) owner[e] = r;
  }
  std::vector<std::vector<int64_t>> sent(n);  // flat pair index i * k + j, per destination
  for (int64_t p = 0; p < n_local * k; ++p) sent[owner[idx[p]]].push_back(p);
  std::vector<float> send;
  std::vector<int64_t> send_counts(n);
  for (int d = 0; d < n; ++d) {
    for (int64_t p : sent[d]) {
      send.push_back(static_cast<float>(idx[p]));
      send.push_back(static_cast<float>(token0 + p / k));
      send.insert(send.end(), x + (p / k) * D, x + (p / k + 1) * D);
    }
    send_counts[d] = static_cast<int64_t>(sent[d].size()) * rec;
  }
  std::vector<float> recv;
  std::vector<int64_t> recv_counts;
  GYRE_RETURN_IF_ERROR(comm.AllToAllV(send, send_counts, &recv, &recv_counts));

  // ---- experts ----
  // Received records in arrival order; `order` sorts them by (expert, token) for the expert GEMMs.
  const int64_t m = static_cast<int64_t>(recv.size()) / rec;
  std::vector<int64_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  auto expert_of = [&](int64_t i) { return static_cast<int64_t>(recv[i * rec]); };
  auto token_of = [&](int64_t i) { return static_cast<int64_t>(recv[i * rec + 1]); };
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return expert_of(a) != expert_of(b) ? expert_of(a) < expert_of(b) : token_of(a) < token_of(b);
  });
  t->pair_expert.resize(m);
  t->pair_token.resize(m);
  t->pair_x.resize(m * D);
  t->pair_y.resize(m * D);
  for (int64_t s = 0; s < m; ++s) {
    const int64_t i = order[s];
    const int64_t e = expert_of(i);
    if (e < w.experts.begin || e >= w.experts.end) {
      return Status::Internal("received a token for expert " + std::to_string(e) + ", which rank " +
                              std::to_string(comm.rank()) + " does not own");
    }
    t->pair_expert[s] = static_cast<int32_t>(e);
    t->pair_token[s] = static_cast<int32_t>(token_of(i));
    std::memcpy(&t->pair_x[s * D], &recv[i * rec + 2], D * sizeof(float));
  }
  for (int64_t s0 = 0; s0 < m;) {
    int64_t s1 = s0;
    while (s1 < m && t->pair_expert[s1] == t->pair_expert[s0]) ++s1;
    SwiGluMlp(w.owned[t->pair_expert[s0] - w.experts.begin], &t->pair_x[s0 * D], s1 - s0, limit, &t->pair_y[s0 * D]);
    s0 = s1;
  }

  // ---- combine ----
  // Return the outputs in arrival order, so each source finds them in the order it sent.
  std::vector<float> back(m * D);
  for (int64_t s = 0; s < m; ++s) std::memcpy(&back[order[s] * D], &t->pair_y[s * D], D * sizeof(float));
  std::vector<int64_t> back_counts(n);
  for (int r = 0; r < n; ++r) back_counts[r] = recv_counts[r] / rec * D;
  std::vector<float> ys;
  std::vector<int64_t> ys_counts;
  GYRE_RETURN_IF_ERROR(comm.AllToAllV(back, back_counts, &ys, &ys_counts));
  std::vector<const float*> y_of(n_local * k);  // flat pair index → its output row
  int64_t row = 0;
  for (int d = 0; d < n; ++d)
    for (int64_t p : sent[d]) y_of[p] = &ys[(row++) * D];
  t->out.assign(n_local * D, 0.0f);
  std::vector<int64_t> slots(k);
  for (int64_t i = 0; i < n_local; ++i) {
    std::iota(slots.begin(), slots.end(), 0);
    std::sort(slots.begin(), slots.end(), [&](int64_t a, int64_t b) { return idx[i * k + a] < idx[i * k + b]; });
    float* dst = &t->out[i * D];
    for (int64_t j : slots) {
      const float* y = y_of[i * k + j];
      const float wt = wts[i * k + j];
      for (int64_t d = 0; d < D; ++d) dst[d] += y[d] * wt;
    }
  }
  if (w.has_shared) {
    std::vector<float> sh(n_local * D);
    SwiGluMlp(w.shared, x, n_local, limit, sh.data());
    for (int64_t i = 0; i < n_local * D; ++i) t->out[i] += sh[i];
  }
  return Status();
}

}  // namespace gyre::parallel
