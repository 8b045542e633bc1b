// Optimization skeletons as data (docs/skeletons/*.md): one file per transformation that worked
// for us, with the signal that says it applies, machine-checkable triggers, limits, evidence from
// bench/results and the gyre command that guards it. docs/skeletons/README.md has the format and
// the trigger vocabulary; `gyre skeletons` searches the catalogue and `gyre advise` matches the
// triggers against measured signals.
//
// File format: a line "---", one JSON object, a line "---", then markdown prose.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gyre::feedback {

struct Skeleton {
  std::string name, title, backend, signal, transformation, limits, risks, guard;
  std::vector<std::string> ops;
  nlohmann::json triggers = nlohmann::json::array();  // [{signal, ...}] (README vocabulary)
  nlohmann::json evidence = nlohmann::json::array();
  std::string prose, path;
  nlohmann::json Json(bool with_prose = false) const;
};

// The trigger signals `gyre advise` evaluates.
const std::vector<std::string>& TriggerSignals();

// Errors: InvalidArgument naming `path` and what is wrong (no front matter, not JSON, a missing or
// mistyped field, a name that is not the file's, an unknown trigger signal).
Result<Skeleton> ParseSkeleton(const std::string& text, const std::string& path);
// Every *.md but README.md in `dir`, sorted by name. Errors: NotFound (no such folder), or the
// first file that does not parse.
Result<std::vector<Skeleton>> LoadSkeletons(const std::string& dir);
// docs/skeletons under the working directory, else under the source tree gyre was built from.
std::string DefaultSkeletonDir();

// Entries that concern `op` (an exact name in `ops`, or any when empty) and contain every word of
// `text` (case-insensitive, over name, title, signal, transformation and prose; any when empty).
std::vector<const Skeleton*> SearchSkeletons(const std::vector<Skeleton>& all, const std::string& op,
                                             const std::string& text);

}  // namespace gyre::feedback
