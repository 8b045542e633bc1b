#include "tokenizer/added_vocabulary.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tokenizer/unicode.h"

namespace gyre::tok {
namespace {

// Rust `\w$` on text[..end] / `^\w` on text[begin..].
bool EndsWithWordChar(std::string_view text) {
  if (text.empty()) return false;
  size_t i = text.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
  return IsWordChar(DecodeUtf8(text, &i));
}
bool StartsWithWordChar(std::string_view text) {
  if (text.empty()) return false;
  size_t i = 0;
  return IsWordChar(DecodeUtf8(text, &i));
}

// Start of the run of whitespace that ends `text`.
size_t TrailingSpaceStart(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t i = end - 1;
    while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
    size_t j = i;
    if (!IsWhiteSpace(DecodeUtf8(text, &j))) break;
    end = i;
  }
  return end;
}

// Length of the run of whitespace that starts `text`.
size_t LeadingSpaceLength(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    if (!IsWhiteSpace(DecodeUtf8(text, &j))) break;
    i = j;
  }
  return i;
}

}  // namespace

void AddedVocabulary::Matcher::Add(std::string pattern, int32_t id) {
  patterns_.emplace_back(std::move(pattern), id);
}

void AddedVocabulary::Matcher::Finish() {
  for (uint32_t i = 0; i < patterns_.size(); ++i) {
    if (patterns_[i].first.empty()) continue;
    by_first_byte_[static_cast<unsigned char>(patterns_[i].first[0])].push_back(i);
  }
  for (auto& list : by_first_byte_) {
    // Longest first; among equal lengths the earlier pattern wins (stable).
    std::stable_sort(list.begin(), list.end(), [this](uint32_t a, uint32_t b) {
      return patterns_[a].first.size() > patterns_[b].first.size();
    });
  }
}

void AddedVocabulary::Matcher::Split(std::string_view text, const AddedVocabulary& vocab,
                                     bool parse_special, std::vector<Segment>* out) const {
  out->clear();
  size_t start_offset = 0;  // end of the last emitted segment
  size_t pos = 0;           // where the leftmost-longest scan continues
  while (pos < text.size()) {
    const std::pair<std::string, int32_t>* found = nullptr;
    for (uint32_t idx : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
      const auto& p = patterns_[idx];
      if (text.compare(pos, p.first.size(), p.first) == 0) {
        found = &p;
        break;
      }
    }
    if (found == nullptr) {
      ++pos;
      continue;
    }
    size_t begin = pos, end = pos + found->first.size();
    pos = end;
    const AddedToken& token = vocab.by_id_.at(found->second);
    if (!parse_special && token.special) continue;
    if (token.single_word) {
      const bool space_before = begin == 0 || !EndsWithWordChar(text.substr(0, begin));
      const bool space_after = end == text.size() || !StartsWithWordChar(text.substr(end));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) begin = std::max(TrailingSpaceStart(text.substr(0, begin)), start_offset);
    if (token.rstrip) end += LeadingSpaceLength(text.substr(end));
    // NOTE: an rstrip may swallow the start of the next match; HF then emits that match with no
    // gap before it (and may re-emit text after it), and so do we. Clamping `begin` keeps the
    // segment well-formed where HF would panic.
    begin = std::min(begin, end);
    if (start_offset < begin) out->push_back({start_offset, begin, -1});
    out->push_back({begin, end, found->second});
    start_offset = end;
  }
  if (start_offset < text.size()) out->push_back({start_offset, text.size(), -1});
}

std::string AddedVocabulary::Key(const AddedToken& t) {
  std::string key = t.content;
  key.push_back('\0');
  for (bool flag : {t.special, t.single_word, t.lstrip, t.rstrip, t.normalized}) {
    key.push_back(flag ? '1' : '0');
  }
  return key;
}

Status AddedVocabulary::Add(const AddedToken& token, const BpeModel& model) {
  if (token.special && !token.content.empty() && special_.insert(token.content).second) {
    special_order_.push_back(token);
  }
  if (token.content.empty()) return Status::Ok();
  if (by_id_keys_.count(Key(token)) > 0) return Status::Ok();  // identical token already added
  int32_t id;
  if (auto it = by_content_.find(token.content); it != by_content_.end()) {
    id = it->second;
  } else if (auto vid = model.TokenToId(token.content)) {
    id = *vid;
  } else {
    // HF: the model vocab size (number of entries), or one past the largest added id.
    const int64_t vocab_len = static_cast<int64_t>(model.vocab().size());
    int64_t next = vocab_len;
    if (!by_content_.empty() && (max_added_id_ >= vocab_len || vocab_len == 0)) {
      next = max_added_id_ + 1;
    }
    if (next > INT32_MAX - 1) return Status::InvalidArgument("too many added tokens");
    id = static_cast<int32_t>(next);
  }
  by_content_[token.content] = id;
  max_added_id_ = std::max<int64_t>(max_added_id_, id);
  if (auto it = by_id_.find(id); it != by_id_.end()) by_id_keys_.erase(Key(it->second));
  by_id_[id] = token;
  by_id_keys_.insert(Key(token));
  if (special_.count(token.content) == 0) plain_order_.push_back(token);
  return Status::Ok();
}

Result<AddedVocabulary> AddedVocabulary::FromJson(const Json& j, const std::string& path,
                                                  const BpeModel& model,
                                                  const Normalizer& normalizer) {
  AddedVocabulary v;
  if (!j.is_null()) {
    if (!j.is_array()) return TypeError(path, "array", j);
    for (size_t i = 0; i < j.size(); ++i) {
      const std::string entry_path = IndexPath(path, i);
      const Json& e = j[i];
      if (!e.is_object()) return TypeError(entry_path, "object", e);
      const Json* id = FindField(e, "id");
      if (id == nullptr || !id->is_number_integer()) {
        return Status::InvalidArgument(FieldPath(entry_path, "id") + ": expected an integer");
      }
      AddedToken t;
      GYRE_ASSIGN_OR_RETURN(t.content, GetString(e, "content", entry_path));
      GYRE_ASSIGN_OR_RETURN(t.special, GetBool(e, "special", false, entry_path));
      GYRE_ASSIGN_OR_RETURN(t.single_word, GetBool(e, "single_word", false, entry_path));
      GYRE_ASSIGN_OR_RETURN(t.lstrip, GetBool(e, "lstrip", false, entry_path));
      GYRE_ASSIGN_OR_RETURN(t.rstrip, GetBool(e, "rstrip", false, entry_path));
      GYRE_ASSIGN_OR_RETURN(t.normalized, GetBool(e, "normalized", !t.special, entry_path));
      GYRE_RETURN_IF_ERROR(v.Add(t, model).WithContext(entry_path));
    }
  }
  // HF refresh_added_tokens: special tokens first, then the others, split by `normalized`.
  for (const auto* list : {&v.special_order_, &v.plain_order_}) {
    for (const AddedToken& t : *list) {
      const int32_t id = v.by_content_.at(t.content);
      if (!t.normalized) {
        v.raw_.Add(t.content, id);
        continue;
      }
      GYRE_ASSIGN_OR_RETURN(std::string pattern, normalizer.Normalize(t.content));
      v.normalized_.Add(std::move(pattern), id);
    }
  }
  v.raw_.Finish();
  v.normalized_.Finish();
  return v;
}

std::optional<int32_t> AddedVocabulary::TokenToId(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

}  // namespace gyre::tok
