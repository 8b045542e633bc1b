#include "feedback/skeletons.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json_depth.h"

namespace gyre::feedback {

const std::vector<std::string>& TriggerSignals() {
  static const std::vector<std::string> k = {"op_share",     "roofline",     "device_idle", "gap_cpu",
                                             "overlap",      "tiny_kernels", "eager_decode", "gate_fail"};
  return k;
}

nlohmann::json Skeleton::Json(bool with_prose) const {
  nlohmann::json j = {{"name", name},         {"title", title},   {"ops", ops},
                      {"backend", backend},   {"signal", signal}, {"triggers", triggers},
                      {"transformation", transformation},         {"limits", limits},
                      {"evidence", evidence}, {"risks", risks},   {"guard", guard},
                      {"path", path}};
  if (with_prose) j["prose"] = prose;
  return j;
}

Result<Skeleton> ParseSkeleton(const std::string& text, const std::string& path) {
  auto bad = [&](const std::string& why) { return Status::InvalidArgument(path + ": " + why); };
  // Front matter: the first two lines that are exactly "---".
  std::istringstream in(text);
  std::string line, front, prose;
  int fences = 0;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (fences < 2 && line == "---") {
      ++fences;
      continue;
    }
    if (fences == 0) {
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      return bad("must start with a '---' line, a JSON object and another '---' line");
    }
    (fences == 1 ? front : prose) += line + "\n";
  }
  if (fences < 2) return bad("the front matter is not closed by a '---' line");
  GYRE_RETURN_IF_ERROR(CheckJsonDepth(front, path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(front);
  } catch (const nlohmann::json::exception& e) {
    return bad(std::string("the front matter is not JSON: ") + e.what());
  }
  if (!j.is_object()) return bad("the front matter must be a JSON object");
  Skeleton s;
  s.path = path;
  s.prose = prose;
  auto str = [&](const char* key, std::string* out, bool required) -> Status {
    if (!j.contains(key) || j[key].is_null()) return required ? bad(std::string("missing '") + key + "'") : Status::Ok();
    if (!j[key].is_string()) return bad(std::string("'") + key + "' must be a string");
    *out = j[key].get<std::string>();
    return Status::Ok();
  };
  GYRE_RETURN_IF_ERROR(str("name", &s.name, true));
  GYRE_RETURN_IF_ERROR(str("title", &s.title, true));
  GYRE_RETURN_IF_ERROR(str("backend", &s.backend, true));
  GYRE_RETURN_IF_ERROR(str("signal", &s.signal, true));
  GYRE_RETURN_IF_ERROR(str("transformation", &s.transformation, true));
  GYRE_RETURN_IF_ERROR(str("limits", &s.limits, false));
  GYRE_RETURN_IF_ERROR(str("risks", &s.risks, false));
  GYRE_RETURN_IF_ERROR(str("guard", &s.guard, true));
  if (s.name.empty() || !std::all_of(s.name.begin(), s.name.end(), [](char c) {
        return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-';
      }))
    return bad("'name' must be [a-z0-9-]+");
  const std::string stem = std::filesystem::path(path).stem().string();
  if (!path.empty() && stem != s.name) return bad("'name' is '" + s.name + "' but the file is " + stem + ".md");
  if (s.backend != "cpu" && s.backend != "cuda" && s.backend != "any") return bad("'backend' must be cpu, cuda or any");
  if (j.contains("ops")) {
    if (!j["ops"].is_array()) return bad("'ops' must be a list of names");
    for (const auto& o : j["ops"]) {
      if (!o.is_string()) return bad("'ops' must be a list of names");
      s.ops.push_back(o.get<std::string>());
    }
  }
  if (!j.contains("triggers") || !j["triggers"].is_array()) return bad("'triggers' must be a list");
  for (const auto& t : j["triggers"]) {
    if (!t.is_object() || !t.contains("signal") || !t["signal"].is_string()) return bad("each trigger needs a 'signal'");
    const auto& sig = TriggerSignals();
    if (std::find(sig.begin(), sig.end(), t["signal"].get<std::string>()) == sig.end())
      return bad("unknown trigger signal '" + t["signal"].get<std::string>() + "'");
  }
  s.triggers = j["triggers"];
  if (!j.contains("evidence") || !j["evidence"].is_array() || j["evidence"].empty())
    return bad("'evidence' must be a non-empty list");
  s.evidence = j["evidence"];
  return s;
}

Result<std::vector<Skeleton>> LoadSkeletons(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return Status::NotFound("no skeleton catalogue at " + dir);
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".md" && e.path().filename() != "README.md") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::vector<Skeleton> out;
  for (const auto& f : files) {
    std::ifstream in(f);
    std::stringstream ss;
    ss << in.rdbuf();
    GYRE_ASSIGN_OR_RETURN(Skeleton s, ParseSkeleton(ss.str(), f));
    out.push_back(std::move(s));
  }
  return out;
}

std::string DefaultSkeletonDir() {
  std::error_code ec;
  if (std::filesystem::is_directory("docs/skeletons", ec)) return "docs/skeletons";
#ifdef GYRE_SOURCE_DIR_STR
  return std::string(GYRE_SOURCE_DIR_STR) + "/docs/skeletons";
#else
  return "docs/skeletons";
#endif
}

namespace {
std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

std::vector<const Skeleton*> SearchSkeletons(const std::vector<Skeleton>& all, const std::string& op,
                                             const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(Lower(text));
  for (std::string w; in >> w;) words.push_back(w);
  std::vector<const Skeleton*> out;
  for (const auto& s : all) {
    if (!op.empty() && std::find(s.ops.begin(), s.ops.end(), op) == s.ops.end()) continue;
    const std::string hay = Lower(s.name + " " + s.title + " " + s.signal + " " + s.transformation + " " + s.prose);
    if (std::all_of(words.begin(), words.end(), [&](const std::string& w) { return hay.find(w) != std::string::npos; }))
      out.push_back(&s);
  }
  return out;
}

}  // namespace gyre::feedback
