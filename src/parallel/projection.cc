#include "parallel/projection.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "core/json_depth.h"
#include "parallel/shard.h"

namespace gyre::parallel {

namespace {

using json = nlohmann::json;

// Ops that TP over heads / vocabulary divides (docs/parallel.md "Plan → op mapping").
const std::set<std::string>& TpOps() {
  static const std::set<std::string> ops = {"kda.in_proj", "kda.gates",     "kda.conv",  "kda.recurrent",
                                            "kda.chunk",   "kda.out",       "mla.in_proj", "mla.attention",
                                            "mla.out",     "lm_head"};
  return ops;
}


// Divides the bench's per-kind sums into per-layer costs.
Result<OpCosts> SplitOps(const json& op_ms, const ModelConfig& bc) {
  if (!op_ms.is_object() || op_ms.empty()) return Status::InvalidArgument("bench JSON: empty per-op costs");
  std::map<std::string, int64_t> attn_layers, moe_layers, dense_layers;  // by kind name
  int64_t num_moe = 0, num_dense = 0;
  for (int64_t l = 0; l < bc.num_hidden_layers; ++l) {
    const std::string k = AttnKindName(bc.layer_types[l]);
    attn_layers[k]++;
    if (bc.mlp_layer_types[l] == MlpKind::kMoe) moe_layers[k]++, num_moe++;
    else dense_layers[k]++, num_dense++;
  }
  OpCosts o;
  std::map<std::string, double> moe_sum, dense_sum;
  for (auto it = op_ms.begin(); it != op_ms.end(); ++it) {
    if (!it.value().is_number()) return Status::InvalidArgument("bench JSON: op '" + it.key() + "' is not a number");
    const double ms = it.value().get<double>();
    const std::string& key = it.key();
    const size_t slash = key.find('/');
    if (slash == std::string::npos) {
      o.outer[key] = ms;
      continue;
    }
    const std::string kind = key.substr(0, slash), op = key.substr(slash + 1);
    if (op.rfind("moe.", 0) == 0) {
      moe_sum[op] += ms;
    } else if (op == "mlp.dense") {
      dense_sum[op] += ms;
    } else {
      std::map<std::string, double>* dst = kind == "kda" ? &o.kda : kind == "dsa" ? &o.dsa : kind == "mla" ? &o.mla : nullptr;
      if (!dst || attn_layers[kind] == 0) return Status::InvalidArgument("bench JSON: op '" + key + "' of an unknown layer kind");
      (*dst)[op] = ms / attn_layers[kind];
    }
  }
  for (auto& [op, ms] : moe_sum) o.moe[op] = num_moe > 0 ? ms / num_moe : 0;
  for (auto& [op, ms] : dense_sum) o.dense[op] = num_dense > 0 ? ms / num_dense : 0;
  return o;
}

Result<ModelConfig> BenchConfig(const json& j) {
  if (!j.contains("config") || !j["config"].is_object()) return Status::InvalidArgument("bench JSON: no \"config\" object");
  auto c = ParseModelConfig(j["config"].dump());
  if (!c) return c.error().WithContext("bench JSON config");
  return *c;
}

// Linear interpolation of one op's cost in the step's tokens over measured points.
double Interp(const std::vector<MeasuredPoint>& pts, const std::map<std::string, double> OpCosts::*part,
              const std::string& op, double tokens) {
  auto at = [&](size_t i) {
    const auto& m = pts[i].ops.*part;
    auto it = m.find(op);
    return it == m.end() ? 0.0 : it->second;
  };
  if (pts.size() == 1) return at(0) * tokens / static_cast<double>(pts[0].tokens);
  size_t hi = 1;
  while (hi + 1 < pts.size() && pts[hi].tokens < tokens) ++hi;
  const double x0 = static_cast<double>(pts[hi - 1].tokens), x1 = static_cast<double>(pts[hi].tokens);
  if (tokens <= x0) return at(hi - 1);  // below the smallest measured batch: its cost
  const double y = at(hi - 1) + (at(hi) - at(hi - 1)) * (tokens - x0) / (x1 - x0);
  return std::max(0.0, y);
}

struct StageCost {
  double compute_ms = 0, comm_ms = 0;
  double tp_bytes = 0, ep_bytes = 0, pp_bytes = 0;
};

double Collective(double bytes, const LinkModel& link) { return link.latency_us * 1e-3 + bytes / (link.link_gbs * 1e9) * 1e3; }

// One step of one GPU of `stage`: `rep_tokens` tokens on its attention replica, `stage_tokens`
// over all replicas of the stage. `cost(part, op, tokens)` gives an op's one-GPU cost.
template <typename Cost>
StageCost StageStep(const ModelConfig& c, const MemoryPlan& plan, const StageMemory& s, double rep_tokens,
                    double stage_tokens, const LinkModel& link, Cost cost) {
  const PlanOptions& o = plan.options;
  const double G = static_cast<double>(plan.gpus_per_stage), tp = static_cast<double>(o.tp);
  const double ep = static_cast<double>(o.ep), D = static_cast<double>(c.hidden_size);
  const double k = static_cast<double>(c.num_experts_per_tok);
  StageCost r;
  auto block = [&](const std::map<std::string, double> OpCosts::*part, const std::map<std::string, double>& names) {
    for (const auto& [op, ms] : names) {
      (void)ms;
      r.compute_ms += TpOps().count(op) ? cost(part, op, rep_tokens) / tp : cost(part, op, rep_tokens);
    }
  };
  for (int64_t l = s.layer_begin; l < s.layer_end; ++l) {
    const AttnKind a = c.layer_types[l];
    const auto part = a == AttnKind::kKda ? &OpCosts::kda : a == AttnKind::kDsa ? &OpCosts::dsa : &OpCosts::mla;
    block(part, cost.names(part));
    if (o.tp > 1) {  // all-reduce of the attention output [tokens, D]
      const double bytes = 2 * (tp - 1) / tp * rep_tokens * D * 2;
      r.tp_bytes += bytes;
      r.comm_ms += Collective(bytes, link);
    }
    if (c.mlp_layer_types[l] == MlpKind::kDense) {
      block(&OpCosts::dense, cost.names(&OpCosts::dense));
      continue;
    }
    for (const auto& [op, ms] : cost.names(&OpCosts::moe)) {
      (void)ms;
      // ep > 1: the G GPUs split the stage's tokens and experts; ep = 1: each replica runs all
      // experts for its own tokens (TP ranks repeat it).
      if (op == "moe.experts" && o.ep > 1) r.compute_ms += cost(&OpCosts::moe, op, stage_tokens * ep / G) / ep;
      else r.compute_ms += cost(&OpCosts::moe, op, rep_tokens);
    }
    if (o.ep > 1) {  // dispatch + combine of this GPU's share of the tokens, then re-replicate in the TP group
      const double bytes = stage_tokens / G * k * D * 2 * (ep - 1) / ep;
      r.ep_bytes += 2 * bytes;
      r.comm_ms += 2 * Collective(bytes, link);
      if (o.tp > 1) {
        const double gather = rep_tokens * D * 2 * (tp - 1) / tp;
        r.tp_bytes += gather;
        r.comm_ms += Collective(gather, link);
      }
    }
  }
  if (s.stage == 0) r.compute_ms += cost(&OpCosts::outer, "embed", rep_tokens);
  if (s.layer_end == c.num_hidden_layers) {
    for (const char* op : {"head.norm", "lm_head", "argmax"}) {
      r.compute_ms += std::string(op) == "lm_head" ? cost(&OpCosts::outer, op, rep_tokens) / tp
                                                   : cost(&OpCosts::outer, op, rep_tokens);
    }
    if (o.tp > 1) r.comm_ms += Collective(rep_tokens * 8, link);  // (max, id) per row
  } else {
    const double bytes = rep_tokens / tp * std::max<int64_t>(c.hc_mult, 1) * D * 2;  // to the next stage
    r.pp_bytes += bytes;
    r.comm_ms += Collective(bytes, link);
  }
  return r;
}

// Costs from a list of measured points: decode interpolates in the batch; prefill scales one
// point linearly in tokens.
struct PointCost {
  const std::vector<MeasuredPoint>* pts;
  double operator()(const std::map<std::string, double> OpCosts::*part, const std::string& op, double tokens) const {
    return Interp(*pts, part, op, tokens);
  }
  const std::map<std::string, double>& names(const std::map<std::string, double> OpCosts::*part) const {
    return pts->back().ops.*part;
  }
};

ProjectedStep Combine(const ModelConfig& c, const MemoryPlan& plan, const std::vector<MeasuredPoint>& pts,
                      double rep_tokens, double stage_tokens, const LinkModel& link) {
  ProjectedStep p;
  double slowest = -1, sum = 0;
  for (const StageMemory& s : plan.stages) {
    const StageCost sc = StageStep(c, plan, s, rep_tokens, stage_tokens, link, PointCost{&pts});
    const double t = sc.compute_ms + sc.comm_ms;
    sum += t;
    if (t > slowest) {
      slowest = t;
      p.compute_ms = sc.compute_ms;
      p.comm_ms = sc.comm_ms;
      p.tp_allreduce_bytes = static_cast<int64_t>(sc.tp_bytes);
      p.ep_alltoall_bytes = static_cast<int64_t>(sc.ep_bytes);
      p.pp_send_bytes = static_cast<int64_t>(sc.pp_bytes);
    }
  }
  p.step_ms = slowest;
  p.latency_ms = sum;
  return p;
}

}  // namespace

Result<BenchCosts> ParseBenchCosts(const std::string& text, int64_t prefill_chunk) {
  GYRE_RETURN_IF_ERROR(CheckJsonDepth(text, "bench JSON"));
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("bench JSON: not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return Status::InvalidArgument("bench JSON: not an object");
  BenchCosts b;
  b.gpu = j.value("gpu", "?");
  b.config_file = j.value("config_file", "?");
  GYRE_ASSIGN_OR_RETURN(b.bench_config, BenchConfig(j));
  try {
    for (const json& d : j.value("decode", json::array())) {
      MeasuredPoint m;
      m.tokens = d.at("batch").get<int64_t>();
      m.context = d.value("context", int64_t(0));
      GYRE_ASSIGN_OR_RETURN(m.ops, SplitOps(d.at("eager_step_op_ms"), b.bench_config));
      if (m.tokens < 1) return Status::InvalidArgument("bench JSON: decode batch < 1");
      b.decode.push_back(std::move(m));
    }
    for (const json& d : j.value("prefill", json::array())) {
      MeasuredPoint m;
      const int64_t len = d.at("prompt_tokens").get<int64_t>();
      m.tokens = std::min(len, prefill_chunk);
      m.context = len;
      GYRE_ASSIGN_OR_RETURN(m.ops, SplitOps(d.at("last_chunk_op_ms"), b.bench_config));
      if (m.tokens < 1) return Status::InvalidArgument("bench JSON: prefill of < 1 token");
      b.prefill.push_back(std::move(m));
    }
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("bench JSON: ") + e.what());
  }
  std::sort(b.decode.begin(), b.decode.end(), [](const auto& x, const auto& y) { return x.tokens < y.tokens; });
  if (b.decode.empty() && b.prefill.empty()) return Status::InvalidArgument("bench JSON: no decode or prefill point");
  return b;
}

Status CheckSameShapes(const ModelConfig& a, const ModelConfig& b) {
  const std::pair<const char*, std::pair<int64_t, int64_t>> fields[] = {
      {"vocab_size", {a.vocab_size, b.vocab_size}},
      {"hidden_size", {a.hidden_size, b.hidden_size}},
      {"intermediate_size", {a.intermediate_size, b.intermediate_size}},
      {"moe_intermediate_size", {a.moe_intermediate_size, b.moe_intermediate_size}},
      {"num_attention_heads", {a.num_attention_heads, b.num_attention_heads}},
      {"q_lora_rank", {a.q_lora_rank, b.q_lora_rank}},
      {"kv_lora_rank", {a.kv_lora_rank, b.kv_lora_rank}},
      {"qk_nope_head_dim", {a.qk_nope_head_dim, b.qk_nope_head_dim}},
      {"qk_rope_head_dim", {a.qk_rope_head_dim, b.qk_rope_head_dim}},
      {"v_head_dim", {a.v_head_dim, b.v_head_dim}},
      {"index_topk", {a.index_topk, b.index_topk}},
      {"index_kpool", {a.index_kpool, b.index_kpool}},
      {"index_n_heads", {a.index_n_heads, b.index_n_heads}},
      {"index_head_dim", {a.index_head_dim, b.index_head_dim}},
      {"linear_num_heads", {a.linear_num_heads, b.linear_num_heads}},
      {"linear_head_dim", {a.linear_head_dim, b.linear_head_dim}},
      {"n_routed_experts", {a.n_routed_experts, b.n_routed_experts}},
      {"n_shared_experts", {a.n_shared_experts, b.n_shared_experts}},
      {"num_experts_per_tok", {a.num_experts_per_tok, b.num_experts_per_tok}},
      {"hc_mult", {a.hc_mult, b.hc_mult}},
  };
  for (const auto& [name, v] : fields) {
    if (v.first != v.second) {
      return Status::InvalidArgument(std::string("the bench model's ") + name + " is " + std::to_string(v.first) +
                                     ", the planned model's " + std::to_string(v.second) +
                                     ": its per-layer costs do not apply");
    }
  }
  return Status::Ok();
}

Result<Projection> Project(const ModelConfig& c, const MemoryPlan& plan, const BenchCosts& costs,
                           const LinkModel& link, const std::vector<int64_t>& decode_batches) {
  if (plan.options.cp > 1) return Status::InvalidArgument("projection: cp > 1 is not projected (docs/planning.md)");
  GYRE_RETURN_IF_ERROR(CheckSameShapes(costs.bench_config, c));
  if (link.link_gbs <= 0 || link.latency_us < 0) return Status::InvalidArgument("projection: link bandwidth must be > 0");
  Projection out;
  out.source = costs.gpu + ", " + costs.config_file;
  const double dp = static_cast<double>(plan.dp), pp = static_cast<double>(plan.options.pp);
  if (!costs.decode.empty()) {
    for (int64_t B : decode_batches) {
      // B sequences in flight as m = min(B, pp) micro-batches, each spread over the dp replicas. A
      // sequence's next token needs its previous one through every stage, so a cycle lasts the
      // longer of one pass (latency) and the m micro-batches through the slowest stage.
      const double m = std::min<double>(static_cast<double>(B), pp);
      const double mb = std::ceil(B / m), rep = std::ceil(mb / dp);
      ProjectedStep p = Combine(c, plan, costs.decode, rep, mb, link);
      p.phase = "decode";
      p.batch = B;
      p.context = costs.decode.back().context;
      p.tokens_per_s = B / std::max(p.latency_ms, m * p.step_ms) * 1e3;
      out.steps.push_back(p);
    }
  }
  for (const MeasuredPoint& m : costs.prefill) {
    // Each replica prefills one chunk of m.tokens; with pp, chunks stream through the stages.
    const std::vector<MeasuredPoint> one = {m};
    const double rep = static_cast<double>(m.tokens), stage = rep * dp;
    ProjectedStep p = Combine(c, plan, one, rep, stage, link);
    p.phase = "prefill";
    p.batch = static_cast<int64_t>(stage);
    p.context = m.context;
    p.tokens_per_s = stage / p.step_ms * 1e3;
    out.steps.push_back(p);
  }
  return out;
}

}  // namespace gyre::parallel
