#include "runtime/parity.h"

#include <cstdio>
#include <map>

#include "model/safetensors.h"
#include "ops/basic.h"

namespace gyre {

std::vector<float> TensorToF32(const TensorView& t) {
  std::vector<float> v(t.numel());
  ConvertToF32(t.dtype, t.data, v.size(), v.data());
  return v;
}

namespace {
std::vector<float> ToF32(const TensorView& t) { return TensorToF32(t); }
std::vector<int32_t> ToI32(const TensorView& t) {
  std::vector<float> f = ToF32(t);
  return std::vector<int32_t>(f.begin(), f.end());
}
}  // namespace

std::string ParityReport::Summary(const ModelConfig& c) const {
  char buf[512];
  if (!first_divergence) {
    double worst = 0;
    for (const auto& e : entries) worst = std::max(worst, e.rel_l2);
    std::snprintf(buf, sizeof buf, "all %zu intermediates within rel-L2 %.1e (worst %.2e); logits rel-L2 %.2e",
                  entries.size(), tolerance, worst, logits_rel_l2);
    return buf;
  }
  const ParityEntry& e = entries[*first_divergence];
  std::string kind;
  int layer = -1;
  if (std::sscanf(e.name.c_str(), "layers.%d", &layer) == 1 && layer >= 0 && layer < c.num_hidden_layers) {
    kind = std::string(" (") + AttnKindName(c.layer_types[layer]) + "/" +
           (c.mlp_layer_types[layer] == MlpKind::kDense ? "dense" : "moe") + ")";
  }
  std::snprintf(buf, sizeof buf,
                "first divergence at %s%s: rel-L2 %.3e > %.1e, max-abs %.3e at flat index %lld; logits rel-L2 %.3e",
                e.name.c_str(), kind.c_str(), e.rel_l2, tolerance, e.max_abs, static_cast<long long>(e.worst_index),
                logits_rel_l2);
  return buf;
}

Result<ParityReport> CheckParity(const Model& model, const std::string& golden_path, double tolerance) {
  GYRE_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(golden_path));
  const auto& t = file->tensors();
  auto ids_it = t.find("input_ids");
  auto logits_it = t.find("logits");
  if (ids_it == t.end() || logits_it == t.end()) {
    return Status::InvalidArgument(golden_path + " lacks input_ids or logits");
  }
  const std::vector<int32_t> ids = ToI32(ids_it->second);
  SequenceState st = model.NewSequence();
  SeqInput in{&st, ids, true};
  std::map<std::string, std::vector<float>> got;
  std::vector<std::string> order;
  std::vector<float> logits;
  GYRE_RETURN_IF_ERROR(model.Forward(std::span<const SeqInput>(&in, 1), &logits,
                                     [&](std::string_view name, std::span<const float> d, std::vector<int64_t>) {
                                       order.emplace_back(name);
                                       got[std::string(name)].assign(d.begin(), d.end());
                                     }));
  ParityReport r;
  r.tolerance = tolerance;
  for (const auto& name : order) {
    auto g = t.find(name);
    if (g == t.end()) continue;
    const std::vector<float> ref = ToF32(g->second);
    const auto& mine = got[name];
    if (ref.size() != mine.size()) {
      return Status::InvalidArgument("golden '" + name + "' has " + std::to_string(ref.size()) +
                                     " elements, gyre produced " + std::to_string(mine.size()));
    }
    const ops::Diff d = ops::Compare(mine, ref);
    ParityEntry e{name, d.rel_l2, d.max_abs, d.worst_index, d.rel_l2 <= tolerance};
    if (!e.within && !r.first_divergence) r.first_divergence = r.entries.size();
    if (name == "logits") r.logits_rel_l2 = d.rel_l2;
    r.entries.push_back(e);
  }
  return r;
}

Result<GoldenGreedy> LoadGoldenGreedy(const std::string& golden_path, int64_t prompt_len) {
  GYRE_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(golden_path));
  const auto& t = file->tensors();
  auto ids_it = t.find("input_ids");
  auto g_it = t.find("greedy_ids");
  if (ids_it == t.end() || g_it == t.end()) return Status::InvalidArgument(golden_path + " lacks greedy_ids");
  GoldenGreedy g;
  g.prompt = ToI32(ids_it->second);
  if (prompt_len > static_cast<int64_t>(g.prompt.size())) return Status::InvalidArgument("prompt_len too large");
  g.prompt.resize(prompt_len);
  g.greedy = ToI32(g_it->second);
  if (auto d = t.find("decode_logits"); d != t.end()) g.decode_logits = ToF32(d->second);
  return g;
}

}  // namespace gyre
