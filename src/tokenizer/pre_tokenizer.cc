#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"

namespace gyre::tok {
namespace {

constexpr int kMaxNesting = 16;  // Sequence inside Sequence; guards the recursion

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

// One span of a piece and whether the split pattern matched it.
struct Span {
  size_t begin, end;
  bool is_match;
};

// HF NormalizedString::split: the pieces `text` splits into under `behavior`.
void SplitSpans(const std::string& text, const std::vector<MatchRange>& matches,
                SplitBehavior behavior, bool invert, std::vector<std::string>* out) {
  std::vector<Span> spans;
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != text.size()) spans.push_back({prev, text.size(), invert});

  // Merge spans per behavior; `keep` spans survive, others are removed.
  struct Kept {
    size_t begin, end;
    bool keep;
  };
  std::vector<Kept> kept;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) kept.push_back({s.begin, s.end, true});
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) kept.push_back({s.begin, s.end, !s.is_match});
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.begin, s.end, true});
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.begin, s.end, true});
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) {
          kept.back().begin = it->begin;
        } else {
          kept.push_back({it->begin, it->end, true});
        }
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
  }
  for (const Kept& k : kept) {
    if (k.keep && k.end > k.begin) out->push_back(text.substr(k.begin, k.end - k.begin));
  }
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}

  Status Apply(std::vector<std::string>* pieces) const override {
    std::vector<std::string> out;
    std::vector<MatchRange> matches;
    for (const std::string& piece : *pieces) {
      if (piece.empty()) continue;
      GYRE_RETURN_IF_ERROR(regex_->FindAll(piece, &matches));
      SplitSpans(piece, matches, behavior_, invert_, &out);
    }
    *pieces = std::move(out);
    return Status::Ok();
  }

 private:
  std::unique_ptr<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}

  Status Apply(std::vector<std::string>* pieces) const override {
    std::vector<std::string> split;
    std::vector<MatchRange> matches;
    for (std::string& piece : *pieces) {
      if (piece.empty()) continue;
      if (add_prefix_space_ && piece[0] != ' ') piece.insert(piece.begin(), ' ');
      if (regex_ == nullptr) {
        split.push_back(std::move(piece));
        continue;
      }
      GYRE_RETURN_IF_ERROR(regex_->FindAll(piece, &matches));
      SplitSpans(piece, matches, SplitBehavior::kIsolated, /*invert=*/false, &split);
    }
    pieces->clear();
    for (const std::string& s : split) {
      std::string mapped;
      mapped.reserve(s.size() * 2);
      AppendByteLevel(s, &mapped);
      pieces->push_back(std::move(mapped));
    }
    return Status::Ok();
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;  // null when use_regex is false
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> stages)
      : stages_(std::move(stages)) {}

  Status Apply(std::vector<std::string>* pieces) const override {
    for (const auto& stage : stages_) GYRE_RETURN_IF_ERROR(stage->Apply(pieces));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> stages_;
};

Result<SplitBehavior> ParseBehavior(const Json& j, const std::string& path) {
  GYRE_ASSIGN_OR_RETURN(std::string b, GetString(j, "behavior", path));
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return Status::InvalidArgument(FieldPath(path, "behavior") + ": unsupported behavior \"" + b +
                                 "\"");
}

Result<std::unique_ptr<PreTokenizer>> ParseSplit(const Json& j, const std::string& path) {
  const std::string pattern_path = FieldPath(path, "pattern");
  const Json* pattern = FindField(j, "pattern");
  if (pattern == nullptr) return Status::InvalidArgument(pattern_path + ": missing");
  if (!pattern->is_object()) return TypeError(pattern_path, "object", *pattern);
  const bool is_regex = FindField(*pattern, "Regex") != nullptr;
  if (!is_regex && FindField(*pattern, "String") == nullptr) {
    return Status::InvalidArgument(pattern_path +
                                   ": expected {\"Regex\": ...} or {\"String\": ...}");
  }
  GYRE_ASSIGN_OR_RETURN(std::string text,
                        GetString(*pattern, is_regex ? "Regex" : "String", pattern_path));
  Result<std::unique_ptr<Regex>> regex = is_regex ? Regex::Compile(text) : Regex::Literal(text);
  if (!regex.has_value()) return regex.error().WithContext(pattern_path);
  GYRE_ASSIGN_OR_RETURN(SplitBehavior behavior, ParseBehavior(j, path));
  GYRE_ASSIGN_OR_RETURN(bool invert, GetBool(j, "invert", false, path));
  return std::unique_ptr<PreTokenizer>(
      new SplitPreTokenizer(std::move(regex).value(), behavior, invert));
}

Result<std::unique_ptr<PreTokenizer>> Parse(const Json& j, const std::string& path, int depth) {
  if (depth > kMaxNesting) return Status::InvalidArgument(path + ": nested too deeply");
  GYRE_ASSIGN_OR_RETURN(std::string type, GetType(j, path));
  if (type == "Split") return ParseSplit(j, path);
  if (type == "ByteLevel") {
    GYRE_ASSIGN_OR_RETURN(bool add_prefix_space, GetBool(j, "add_prefix_space", true, path));
    GYRE_ASSIGN_OR_RETURN(bool use_regex, GetBool(j, "use_regex", true, path));
    std::unique_ptr<Regex> regex;
    if (use_regex) {
      GYRE_ASSIGN_OR_RETURN(regex, Regex::Compile(kGpt2Pattern));
    }
    return std::unique_ptr<PreTokenizer>(
        new ByteLevelPreTokenizer(add_prefix_space, std::move(regex)));
  }
  if (type == "Sequence") {
    const std::string list_path = FieldPath(path, "pretokenizers");
    const Json* list = FindField(j, "pretokenizers");
    if (list == nullptr) return Status::InvalidArgument(list_path + ": missing");
    if (!list->is_array()) return TypeError(list_path, "array", *list);
    std::vector<std::unique_ptr<PreTokenizer>> stages;
    for (size_t i = 0; i < list->size(); ++i) {
      GYRE_ASSIGN_OR_RETURN(auto stage, Parse((*list)[i], IndexPath(list_path, i), depth + 1));
      stages.push_back(std::move(stage));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(stages)));
  }
  return Status::InvalidArgument(FieldPath(path, "type") + ": unsupported pre_tokenizer \"" +
                                 type + "\" (supported: ByteLevel, Split, Sequence)");
}

}  // namespace

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const Json& j,
                                                            const std::string& path) {
  if (j.is_null()) {
    return std::unique_ptr<PreTokenizer>(
        new SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>>{}));
  }
  return Parse(j, path, 0);
}

}  // namespace gyre::tok
