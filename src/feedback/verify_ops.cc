#include "feedback/verify_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace gyre::feedback {

double OpCheckRow::Margin() const {
  if (tolerance > 0) return rel_l2 / tolerance;
  return rel_l2 == 0 ? 0.0 : INFINITY;
}

int VerifyOpsReport::num_failed() const {
  int n = 0;
  for (const auto& r : rows) n += !r.pass;
  return n;
}

std::string VerifyOpsReport::Human() const {
  std::string s;
  char buf[512];
  std::snprintf(buf, sizeof buf, "verify ops: seed %llu (reproduce with --seed %llu)\n",
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  s += buf;
  for (const auto& r : rows) {
    if (!r.error.empty()) {
      std::snprintf(buf, sizeof buf, "  FAIL %-16s %-34s %s\n", r.op.c_str(), r.shape.c_str(), r.error.c_str());
    } else {
      std::snprintf(buf, sizeof buf, "  %s %-16s %-34s rel-L2 %.2e (tol %.2g, margin %.3f) max-abs %.2e worst@%lld%s%s\n",
                    r.pass ? "ok  " : "FAIL", r.op.c_str(), r.shape.c_str(), r.rel_l2, r.tolerance, r.Margin(),
                    r.max_abs,
                    static_cast<long long>(r.worst_index),
                    r.num_unwritten ? (" UNWRITTEN " + std::to_string(r.num_unwritten)).c_str() : "",
                    r.note.empty() ? "" : ("  [" + r.note + "]").c_str());
    }
    s += buf;
  }
  if (!not_covered.empty()) {
    s += "  not on this backend (not run):";
    for (const auto& n : not_covered) s += " " + n;
    s += "\n";
  }
  std::snprintf(buf, sizeof buf, "%zu checks, %d failed\n", rows.size(), num_failed());
  return s + buf;
}

nlohmann::json VerifyOpsReport::Json() const {
  nlohmann::json j;
  j["seed"] = seed;
  j["failed"] = num_failed();
  j["not_covered"] = not_covered;
  j["checks"] = nlohmann::json::array();
  for (const auto& r : rows) {
    j["checks"].push_back({{"op", r.op},
                           {"shape", r.shape},
                           {"backend", r.backend},
                           {"tolerance_class", r.tolerance_class},
                           {"tolerance", r.tolerance},
                           {"rel_l2", std::isfinite(r.rel_l2) ? nlohmann::json(r.rel_l2) : nlohmann::json("inf")},
                           {"margin", std::isfinite(r.Margin()) ? nlohmann::json(r.Margin()) : nlohmann::json("inf")},
                           {"max_abs", std::isfinite(r.max_abs) ? nlohmann::json(r.max_abs) : nlohmann::json("inf")},
                           {"worst_index", r.worst_index},
                           {"num_outputs", r.num_outputs},
                           {"num_unwritten", r.num_unwritten},
                           {"pass", r.pass},
                           {"error", r.error},
                           {"note", r.note}});
  }
  return j;
}

VerifyOpsReport VerifyOps(const std::vector<ops::OpSpec>& list, const std::string& only, ops::Backend backend,
                          uint64_t seed) {
  VerifyOpsReport rep;
  rep.seed = seed;
  const auto& all = list.empty() ? ops::Registry() : list;
  uint64_t k = 0;
  for (const auto& op : all) {
    if (!only.empty() && op.name != only) continue;
    if (std::find(op.backends.begin(), op.backends.end(), backend) == op.backends.end()) {
      rep.not_covered.push_back(op.name);
      continue;
    }
    for (const auto& shape : op.shapes) {
      const bool cuda_bound = backend == ops::Backend::kCuda && op.cuda_tolerance > 0 && shape.tolerance <= 0;
      const double tolerance = shape.tolerance > 0 ? shape.tolerance : cuda_bound ? op.cuda_tolerance : op.tolerance;
      OpCheckRow row{op.name, shape.label, ops::BackendName(backend),
                     cuda_bound ? op.cuda_tolerance_class
                                : op.tolerance_class + (shape.tolerance > 0 ? " (calibrated)" : ""),
                     tolerance};
      auto r = op.check(shape, seed + 1000003 * (++k), backend);
      if (!r.ok()) {
        row.error = r.status().ToString();
      } else {
        row.rel_l2 = r->diff.rel_l2;
        row.max_abs = r->diff.max_abs;
        row.worst_index = r->diff.worst_index;
        row.num_outputs = r->num_outputs;
        row.num_unwritten = r->num_unwritten;
        row.note = r->note;
        row.pass = r->num_unwritten == 0 && std::isfinite(row.rel_l2) && row.rel_l2 <= tolerance;
      }
      rep.rows.push_back(row);
    }
  }
  return rep;
}

}  // namespace gyre::feedback
