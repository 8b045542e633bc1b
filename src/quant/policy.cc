#include "quant/policy.h"

#include <string_view>

namespace gyre {

namespace {
// Projection names (the component before ".weight") that run as GEMMs on activations.
constexpr std::string_view kQuantized[] = {
    "q_proj",     "k_proj",  "v_proj",    "o_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj",
    "gate_proj",  "up_proj", "down_proj", "w1",     "w2",       "w3",       "eh_proj",            "wq_b",
    "wk",
};

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
}  // namespace

bool ShouldQuantize(const std::string& name, const std::vector<int64_t>& shape) {
  if (shape.size() != 2 || shape[0] < 1 || shape[1] < 1) return false;
  std::string_view n = name;
  if (!EndsWith(n, ".weight")) return false;
  if (n.find("visual") != std::string_view::npos || n.find("vision") != std::string_view::npos) return false;
  if (n.find("shared_head.") != std::string_view::npos) return false;
  n.remove_suffix(7);
  const size_t dot = n.rfind('.');
  const std::string_view leaf = dot == std::string_view::npos ? n : n.substr(dot + 1);
  for (std::string_view q : kQuantized)
    if (leaf == q) return true;
  return false;
}

}  // namespace gyre
