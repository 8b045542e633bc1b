#include "feedback/gate_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>

#include "feedback/stats.h"

namespace gyre::feedback {
namespace {

using nlohmann::json;

// Returns the quantile in [0, 1] for "p<q>", or a negative number if `stat` is not of that form.
double PercentileOf(const std::string& stat) {
  if (stat.size() < 2 || stat[0] != 'p') return -1;
  const char* begin = stat.c_str() + 1;
  char* end = nullptr;
  const double q = std::strtod(begin, &end);
  if (end != stat.c_str() + stat.size() || !(q >= 0 && q <= 100)) return -1;
  if (!std::isdigit(static_cast<unsigned char>(*begin))) return -1;  // no "p-1", "p+5", "pinf"
  return q / 100;
}

bool IsScenarioName(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

std::string ScenarioList(const GateSpec& g) {
  std::string out;
  for (const auto& [name, spec] : g.scenarios) out += (out.empty() ? "" : ", ") + name;
  return out;
}

Status CheckKeys(const json& obj, const std::set<std::string>& allowed, const std::string& where) {
  for (const auto& [key, v] : obj.items()) {
    if (!allowed.count(key)) return Status::InvalidArgument(where + ": unknown key '" + key + "'");
  }
  return Status::Ok();
}

Result<MetricRef> ParseRef(const json& v, const GateSpec& g, const std::string& where) {
  if (!v.is_string()) return Status::InvalidArgument(where + ": a metric reference must be a string");
  const std::string s = v.get<std::string>();
  const size_t dot = s.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == s.size()) {
    return Status::InvalidArgument(where + ": metric reference '" + s +
                                   "' is not of the form <scenario>.<metric>");
  }
  MetricRef ref{s.substr(0, dot), s.substr(dot + 1)};
  const bool known = std::any_of(g.scenarios.begin(), g.scenarios.end(),
                                 [&](const auto& sc) { return sc.first == ref.scenario; });
  if (!known) {
    return Status::InvalidArgument(where + ": metric '" + s + "' names unknown scenario '" +
                                   ref.scenario + "' (scenarios: " + ScenarioList(g) + ")");
  }
  return ref;
}

Result<std::pair<MetricRef, MetricRef>> ParseRefPair(const json& v, const GateSpec& g,
                                                     const std::string& where) {
  if (!v.is_array() || v.size() != 2) {
    return Status::InvalidArgument(where + ": expected a list of two metric references");
  }
  GYRE_ASSIGN_OR_RETURN(MetricRef a, ParseRef(v[0], g, where));
  GYRE_ASSIGN_OR_RETURN(MetricRef b, ParseRef(v[1], g, where));
  return std::make_pair(std::move(a), std::move(b));
}

Result<CompareOp> ParseOp(const json& p, const std::string& where) {
  if (!p.contains("op")) return Status::InvalidArgument(where + ": missing 'op'");
  const std::string op = p["op"].is_string() ? p["op"].get<std::string>() : p["op"].dump();
  if (op == "<") return CompareOp::kLess;
  if (op == "<=") return CompareOp::kLessEqual;
  if (op == ">") return CompareOp::kGreater;
  if (op == ">=") return CompareOp::kGreaterEqual;
  return Status::InvalidArgument(where + ": unknown op '" + op + "' (expected <, <=, >, >=)");
}

Result<double> ParseNumber(const json& p, const char* key, const std::string& where) {
  if (!p.contains(key)) return Status::InvalidArgument(where + ": missing '" + key + "'");
  if (!p[key].is_number() || !std::isfinite(p[key].get<double>())) {
    return Status::InvalidArgument(where + ": '" + key + "' must be a finite number");
  }
  return p[key].get<double>();
}

Result<PredicateSpec> ParsePredicate(const json& p, size_t index, const GateSpec& g,
                                     std::set<std::string>& ids) {
  std::string where = "predicate #" + std::to_string(index + 1);
  if (!p.is_object()) return Status::InvalidArgument(where + ": must be an object");
  if (!p.contains("id") || !p["id"].is_string() || p["id"].get<std::string>().empty()) {
    return Status::InvalidArgument(where + ": missing string 'id'");
  }
  PredicateSpec s;
  s.id = p["id"].get<std::string>();
  where = "predicate '" + s.id + "'";
  if (!ids.insert(s.id).second) return Status::InvalidArgument(where + ": duplicate id");
  if (p.contains("description") && p["description"].is_string()) {
    s.description = p["description"].get<std::string>();
  }
  const int forms = int(p.contains("metric")) + int(p.contains("expr")) + int(p.contains("compare"));
  if (forms != 1) {
    return Status::InvalidArgument(where + ": needs exactly one of 'metric', 'expr', 'compare'");
  }
  GYRE_ASSIGN_OR_RETURN(s.op, ParseOp(p, where));
  if (p.contains("stat")) {
    s.stat = p["stat"].is_string() ? p["stat"].get<std::string>() : p["stat"].dump();
    if (!IsValidStat(s.stat)) {
      return Status::InvalidArgument(where + ": unknown stat '" + s.stat +
                                     "' (expected median, mean, min, max, or p<0..100>)");
    }
  }
  if (p.contains("metric")) {
    s.kind = PredicateKind::kBound;
    GYRE_RETURN_IF_ERROR(
        CheckKeys(p, {"id", "description", "comment", "metric", "stat", "op", "value"}, where));
    GYRE_ASSIGN_OR_RETURN(s.a, ParseRef(p["metric"], g, where));
    GYRE_ASSIGN_OR_RETURN(s.value, ParseNumber(p, "value", where));
  } else if (p.contains("expr")) {
    s.kind = PredicateKind::kRatio;
    GYRE_RETURN_IF_ERROR(
        CheckKeys(p, {"id", "description", "comment", "expr", "stat", "op", "value"}, where));
    if (!p["expr"].is_object() || p["expr"].size() != 1 || !p["expr"].contains("ratio")) {
      return Status::InvalidArgument(where + ": 'expr' must be {\"ratio\": [num, den]}");
    }
    GYRE_ASSIGN_OR_RETURN(auto refs, ParseRefPair(p["expr"]["ratio"], g, where));
    s.a = std::move(refs.first);
    s.b = std::move(refs.second);
    GYRE_ASSIGN_OR_RETURN(s.value, ParseNumber(p, "value", where));
  } else {
    s.kind = PredicateKind::kCompare;
    GYRE_RETURN_IF_ERROR(CheckKeys(
        p, {"id", "description", "comment", "compare", "op", "test", "min_effect_pct", "alpha"}, where));
    GYRE_ASSIGN_OR_RETURN(auto refs, ParseRefPair(p["compare"], g, where));
    s.a = std::move(refs.first);
    s.b = std::move(refs.second);
    if (p.contains("test") && p["test"] != "mannwhitney") {
      return Status::InvalidArgument(where + ": unknown test " + p["test"].dump() +
                                     " (supported: \"mannwhitney\")");
    }
    s.alpha = g.alpha;
    if (p.contains("alpha")) {
      GYRE_ASSIGN_OR_RETURN(s.alpha, ParseNumber(p, "alpha", where));
      if (!(s.alpha > 0 && s.alpha < 1)) {
        return Status::InvalidArgument(where + ": 'alpha' must be in (0, 1)");
      }
    }
    if (p.contains("min_effect_pct")) {
      GYRE_ASSIGN_OR_RETURN(s.min_effect_pct, ParseNumber(p, "min_effect_pct", where));
      if (s.min_effect_pct < 0) return Status::InvalidArgument(where + ": 'min_effect_pct' must be >= 0");
    }
  }
  return s;
}

Result<int> ParseInt(const json& g, const char* key, int fallback, int min) {
  if (!g.contains(key)) return fallback;
  if (!g[key].is_number_integer() || g[key].get<int64_t>() < min || g[key].get<int64_t>() > 1000000) {
    return Status::InvalidArgument(std::string("'") + key + "' must be an integer >= " + std::to_string(min));
  }
  return g[key].get<int>();
}

Result<double> ParseUnit(const json& g, const char* key, double fallback) {
  if (!g.contains(key)) return fallback;
  if (!g[key].is_number() || !(g[key].get<double>() > 0 && g[key].get<double>() < 1)) {
    return Status::InvalidArgument(std::string("'") + key + "' must be a number in (0, 1)");
  }
  return g[key].get<double>();
}

Result<GateSpec> ParseGateUnchecked(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("a gate must be a JSON object");
  GYRE_RETURN_IF_ERROR(CheckKeys(j, {"name", "description", "comment", "repeats", "warmup", "alpha",
                                     "confidence", "bootstrap_resamples", "scenarios", "predicates"},
                                 "gate"));
  GateSpec g;
  if (!j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty()) {
    return Status::InvalidArgument("gate: missing string 'name'");
  }
  g.name = j["name"].get<std::string>();
  if (j.contains("description") && j["description"].is_string()) {
    g.description = j["description"].get<std::string>();
  }
  GYRE_ASSIGN_OR_RETURN(g.repeats, ParseInt(j, "repeats", 5, 1));
  GYRE_ASSIGN_OR_RETURN(g.warmup, ParseInt(j, "warmup", 0, 0));
  GYRE_ASSIGN_OR_RETURN(g.bootstrap_resamples, ParseInt(j, "bootstrap_resamples", 2000, 100));
  GYRE_ASSIGN_OR_RETURN(g.alpha, ParseUnit(j, "alpha", 0.05));
  GYRE_ASSIGN_OR_RETURN(g.confidence, ParseUnit(j, "confidence", 0.95));

  if (!j.contains("scenarios") || !j["scenarios"].is_object() || j["scenarios"].empty()) {
    return Status::InvalidArgument("gate: 'scenarios' must be a non-empty object");
  }
  for (const auto& [name, spec] : j["scenarios"].items()) {
    if (!IsScenarioName(name)) {
      return Status::InvalidArgument("scenario '" + name + "': name must match [A-Za-z0-9_-]+");
    }
    if (!spec.is_object() || !spec.contains("kind") || !spec["kind"].is_string()) {
      return Status::InvalidArgument("scenario '" + name + "': must be an object with a string 'kind'");
    }
    g.scenarios.emplace_back(name, spec);
  }
  std::sort(g.scenarios.begin(), g.scenarios.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });

  if (!j.contains("predicates") || !j["predicates"].is_array() || j["predicates"].empty()) {
    return Status::InvalidArgument("gate: 'predicates' must be a non-empty list");
  }
  std::set<std::string> ids;
  for (size_t i = 0; i < j["predicates"].size(); ++i) {
    GYRE_ASSIGN_OR_RETURN(PredicateSpec p, ParsePredicate(j["predicates"][i], i, g, ids));
    g.predicates.push_back(std::move(p));
  }
  return g;
}

}  // namespace

const char* CompareOpName(CompareOp op) {
  switch (op) {
    case CompareOp::kLess: return "<";
    case CompareOp::kLessEqual: return "<=";
    case CompareOp::kGreater: return ">";
    case CompareOp::kGreaterEqual: return ">=";
  }
  return "?";
}

bool Holds(double lhs, CompareOp op, double rhs) {
  switch (op) {
    case CompareOp::kLess: return lhs < rhs;
    case CompareOp::kLessEqual: return lhs <= rhs;
    case CompareOp::kGreater: return lhs > rhs;
    case CompareOp::kGreaterEqual: return lhs >= rhs;
  }
  return false;
}

const char* PredicateKindName(PredicateKind k) {
  switch (k) {
    case PredicateKind::kBound: return "bound";
    case PredicateKind::kRatio: return "ratio";
    case PredicateKind::kCompare: return "compare";
  }
  return "?";
}

std::string PredicateSpec::Expression() const {
  char value_buf[64];
  std::snprintf(value_buf, sizeof(value_buf), "%.6g", value);
  const std::string op_s = std::string(" ") + CompareOpName(op) + " ";
  switch (kind) {
    case PredicateKind::kBound: return stat + "(" + a.Full() + ")" + op_s + value_buf;
    case PredicateKind::kRatio:
      return stat + "(" + a.Full() + ") / " + stat + "(" + b.Full() + ")" + op_s + value_buf;
    case PredicateKind::kCompare: return a.Full() + op_s + b.Full() + " (Mann-Whitney)";
  }
  return "";
}

bool IsValidStat(const std::string& stat) {
  return stat == "median" || stat == "mean" || stat == "min" || stat == "max" || PercentileOf(stat) >= 0;
}

double ApplyStat(const std::string& stat, std::span<const double> x) {
  GYRE_CHECK(!x.empty());
  if (stat == "median") return Median(x);
  if (stat == "mean") return Mean(x);
  if (stat == "min") return *std::min_element(x.begin(), x.end());
  if (stat == "max") return *std::max_element(x.begin(), x.end());
  const double q = PercentileOf(stat);
  GYRE_CHECK(q >= 0);
  return Quantile(x, q);
}

Result<GateSpec> ParseGate(const json& gate) {
  try {
    return ParseGateUnchecked(gate);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("gate: malformed value: ") + e.what());
  }
}

Result<json> ReadGateFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot open gate file");
  try {
    json j;
    in >> j;
    return j;
  } catch (const json::exception& e) {
    return Status::InvalidArgument(path + ": not valid JSON: " + e.what());
  }
}

}  // namespace gyre::feedback
