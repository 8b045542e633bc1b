#include "quant/kv_policy_search.h"

#include <algorithm>
#include <cmath>

namespace gyre {

Result<LogitDivergence> CompareLogitRows(std::span<const float> ref, std::span<const float> got, int64_t vocab) {
  if (vocab < 1 || ref.size() != got.size() || ref.size() % static_cast<size_t>(vocab) != 0 || ref.empty())
    return Status::InvalidArgument("compare logits: " + std::to_string(ref.size()) + " and " +
                                   std::to_string(got.size()) + " values are not equal whole rows of " +
                                   std::to_string(vocab));
  LogitDivergence d;
  const size_t V = static_cast<size_t>(vocab), n = ref.size() / V;
  for (size_t p = 0; p < n; ++p) {
    const float* r = ref.data() + p * V;
    const float* g = got.data() + p * V;
    const float mr = *std::max_element(r, r + V), mg = *std::max_element(g, g + V);
    double zr = 0, zg = 0;
    for (size_t v = 0; v < V; ++v) {
      zr += std::exp(double(r[v]) - mr);
      zg += std::exp(double(g[v]) - mg);
    }
    const double lzr = std::log(zr), lzg = std::log(zg);
    double kl = 0;
    for (size_t v = 0; v < V; ++v) {
      const double lp = double(r[v]) - mr - lzr, lq = double(g[v]) - mg - lzg;
      kl += std::exp(lp) * (lp - lq);
    }
    d.mean_kl += std::max(kl, 0.0);
    d.top1 += (std::max_element(r, r + V) - r) == (std::max_element(g, g + V) - g) ? 1 : 0;
  }
  d.positions = static_cast<int64_t>(n);
  d.mean_kl /= double(n);
  d.top1 /= double(n);
  return d;
}

std::string KvPolicySearchResult::PolicyJson() const {
  nlohmann::json layers = nlohmann::json::object();
  for (int64_t l : moved) layers[std::to_string(l)] = KvDtypeName(policy.layers[l]);
  return nlohmann::json{{"default", KvDtypeName(base)}, {"layers", layers}}.dump(2) + "\n";
}

nlohmann::json KvPolicySearchResult::Report(int64_t bytes_base, int64_t bytes_final) const {
  auto cost = [](const LogitDivergence& d) {
    return nlohmann::json{{"mean_kl", d.mean_kl}, {"top1_agreement", d.top1}, {"positions", d.positions}};
  };
  nlohmann::json s = nlohmann::json::array();
  for (const KvLayerCost& c : singles)
    s.push_back({{"layer", c.layer}, {"dtype", KvDtypeName(c.dtype)}, {"alone", cost(c.alone)}});
  return {{"singles", s},
          {"moved", moved},
          {"rejected", rejected},
          {"base", cost(base_cost)},
          {"final", cost(final_cost)},
          {"runs", runs},
          {"policy", nlohmann::json::parse(PolicyJson())},
          {"cache_bytes_per_token_base", bytes_base},
          {"cache_bytes_per_token_final", bytes_final}};
}

Result<KvPolicySearchResult> SearchKvPolicy(const std::vector<bool>& is_attention, int64_t vocab,
                                            const KvPolicyRun& run, const KvPolicySearchOptions& o) {
  if (o.candidates.empty()) return Status::InvalidArgument("kv policy search: no candidate dtype");
  if (!(o.max_kl >= 0)) return Status::InvalidArgument("kv policy search: max_kl must be >= 0");
  const int64_t L = static_cast<int64_t>(is_attention.size());
  std::vector<int64_t> attn;
  for (int64_t l = 0; l < L; ++l)
    if (is_attention[l]) attn.push_back(l);
  if (attn.empty()) return Status::InvalidArgument("kv policy search: the model has no attention layer");
  KvPolicySearchResult r;
  r.base = o.base;
  auto with = [&](KvDtype fill) {
    KvCachePolicy p = UniformKvPolicy(L, KvDtype::kF32);
    for (int64_t l : attn) p.layers[l] = fill;
    return p;
  };
  auto measure = [&](const std::vector<float>& ref, const KvCachePolicy& p) -> Result<LogitDivergence> {
    GYRE_ASSIGN_OR_RETURN(std::vector<float> got, run(p));
    ++r.runs;
    return CompareLogitRows(ref, got, vocab);
  };
  GYRE_ASSIGN_OR_RETURN(std::vector<float> ref, run(with(o.reference)));
  ++r.runs;
  const KvCachePolicy base = with(o.base);
  GYRE_ASSIGN_OR_RETURN(r.base_cost, measure(ref, base));
  if (r.base_cost.mean_kl > o.max_kl)
    return Status::InvalidArgument("kv policy search: the base dtype " + std::string(KvDtypeName(o.base)) +
                                   " alone costs KL " + std::to_string(r.base_cost.mean_kl) + " > the budget " +
                                   std::to_string(o.max_kl));
  // One layer at a time.
  std::vector<KvLayerCost> best;  // per attention layer, its cheapest candidate
  for (int64_t l : attn) {
    KvLayerCost cheapest{l, o.candidates[0], {}};
    cheapest.alone.mean_kl = INFINITY;
    for (KvDtype d : o.candidates) {
      KvCachePolicy p = base;
      p.layers[l] = d;
      GYRE_ASSIGN_OR_RETURN(LogitDivergence c, measure(ref, p));
      r.singles.push_back({l, d, c});
      if (c.mean_kl < cheapest.alone.mean_kl) cheapest = {l, d, c};
    }
    best.push_back(cheapest);
  }
  std::stable_sort(best.begin(), best.end(),
                   [](const KvLayerCost& a, const KvLayerCost& b) { return a.alone.mean_kl < b.alone.mean_kl; });
  // Greedy moves, each checked by a run of the combined policy.
  r.policy = base;
  r.final_cost = r.base_cost;
  for (const KvLayerCost& c : best) {
    KvCachePolicy p = r.policy;
    p.layers[c.layer] = c.dtype;
    GYRE_ASSIGN_OR_RETURN(LogitDivergence combined, measure(ref, p));
    if (combined.mean_kl <= o.max_kl) {
      r.policy = p;
      r.final_cost = combined;
      r.moved.push_back(c.layer);
    } else {
      r.rejected.push_back(c.layer);
    }
  }
  return r;
}

}  // namespace gyre
