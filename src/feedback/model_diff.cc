#include "feedback/model_diff.h"

#include <cstdio>
#include <map>

#include "ops/basic.h"

namespace gyre::feedback {

namespace {
struct Captured {
  std::vector<std::string> order;
  std::map<std::string, std::vector<float>> data;
};

Result<Captured> RunCaptured(const RunConfig& rc, const std::vector<int32_t>& ids) {
  Captured c;
  SequenceState st = rc.model->NewSequence();
  const size_t step = rc.prefill_chunk > 0 ? static_cast<size_t>(rc.prefill_chunk) : ids.size();
  std::vector<float> logits;
  for (size_t pos = 0; pos < ids.size(); pos += step) {
    const size_t n = std::min(step, ids.size() - pos);
    SeqInput in{&st, std::span<const int32_t>(ids).subspan(pos, n), true};
    GYRE_RETURN_IF_ERROR(rc.model->Forward(std::span<const SeqInput>(&in, 1), &logits,
                                           [&](std::string_view name, std::span<const float> d, std::vector<int64_t>) {
                                             std::string k(name);
                                             if (!c.data.count(k)) c.order.push_back(k);
                                             auto& v = c.data[k];
                                             v.insert(v.end(), d.begin(), d.end());
                                           }));
  }
  return c;
}
}  // namespace

Result<ModelDiffReport> DiffModels(const RunConfig& a, const RunConfig& b, const std::vector<int32_t>& ids,
                                   double tol) {
  GYRE_ASSIGN_OR_RETURN(Captured ca, RunCaptured(a, ids));
  GYRE_ASSIGN_OR_RETURN(Captured cb, RunCaptured(b, ids));
  ModelDiffReport r;
  r.tolerance = tol;
  r.a = a.label;
  r.b = b.label;
  for (const auto& name : ca.order) {
    auto it = cb.data.find(name);
    if (it == cb.data.end() || it->second.size() != ca.data[name].size()) continue;
    const ops::Diff d = ops::Compare(it->second, ca.data[name]);
    r.entries.push_back({name, d.rel_l2, d.max_abs, d.worst_index});
    if (!r.first && d.rel_l2 > tol) r.first = r.entries.size() - 1;
  }
  return r;
}

std::string ModelDiffReport::Human() const {
  std::string s = "diff " + a + "  vs  " + b + "\n";
  char buf[256];
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    std::snprintf(buf, sizeof buf, "  %s %-36s rel-L2 %.3e max-abs %.3e\n", first && *first == i ? ">>" : "  ",
                  e.name.c_str(), e.rel_l2, e.max_abs);
    s += buf;
  }
  if (first) {
    std::snprintf(buf, sizeof buf, "first divergence beyond %.1e: %s (rel-L2 %.3e, worst flat index %lld)\n", tolerance,
                  entries[*first].name.c_str(), entries[*first].rel_l2,
                  static_cast<long long>(entries[*first].worst_index));
  } else {
    std::snprintf(buf, sizeof buf, "no intermediate differs beyond %.1e\n", tolerance);
  }
  return s + buf;
}

nlohmann::json ModelDiffReport::Json() const {
  nlohmann::json j = {{"a", a}, {"b", b}, {"tolerance", tolerance}};
  j["entries"] = nlohmann::json::array();
  for (const auto& e : entries)
    j["entries"].push_back({{"name", e.name}, {"rel_l2", e.rel_l2}, {"max_abs", e.max_abs}, {"worst_index", e.worst_index}});
  j["first_divergence"] = first ? nlohmann::json(entries[*first].name) : nlohmann::json();
  return j;
}

}  // namespace gyre::feedback
