// Tokenizer assembly and the encode/decode pipeline.
//
// Sections: decoder parsing; TokenizerImpl (Build, Encode, Decode); Tokenizer factories;
// StreamDecoder. The stages live in their own files: normalizer, pre_tokenizer (+ regex,
// byte_level), bpe, added_vocabulary.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <new>
#include <nlohmann/json.hpp>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"

namespace gyre {
namespace {

using tok::Json;

// Accepts a ByteLevel decoder, alone or as the only member of a Sequence: the only decoders a
// byte-level BPE needs. Anything else would change Decode's output, so it is refused.
Status CheckDecoder(const Json& j, const std::string& path) {
  if (j.is_null()) return Status::InvalidArgument(path + ": missing (ByteLevel is required)");
  GYRE_ASSIGN_OR_RETURN(std::string type, tok::GetType(j, path));
  if (type == "ByteLevel") return Status::Ok();
  if (type == "Sequence") {
    const std::string list_path = tok::FieldPath(path, "decoders");
    const Json* list = tok::FindField(j, "decoders");
    if (list == nullptr) return Status::InvalidArgument(list_path + ": missing");
    if (!list->is_array()) return tok::TypeError(list_path, "array", *list);
    if (list->size() != 1) {
      return Status::InvalidArgument(list_path + ": only a single ByteLevel decoder is supported");
    }
    const std::string item_path = tok::IndexPath(list_path, 0);
    GYRE_ASSIGN_OR_RETURN(std::string item_type, tok::GetType((*list)[0], item_path));
    if (item_type == "ByteLevel") return Status::Ok();
    return Status::InvalidArgument(tok::FieldPath(item_path, "type") +
                                   ": unsupported decoder \"" + item_type + "\"");
  }
  return Status::InvalidArgument(tok::FieldPath(path, "type") + ": unsupported decoder \"" +
                                 type + "\" (supported: ByteLevel, Sequence of ByteLevel)");
}

class TokenizerImpl final : public Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> Build(const Json& root);

  Result<std::vector<int32_t>> Encode(std::string_view text, bool parse_special) const override;
  Result<std::string> Decode(std::span<const int32_t> ids, bool skip_special) const override;
  std::string TokenBytes(int32_t id) const override {
    return id >= 0 && id < vocab_size() ? token_bytes_[id] : std::string();
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(token_bytes_.size()); }
  std::optional<int32_t> TokenToId(std::string_view token) const override {
    if (auto id = added_.TokenToId(token)) return id;
    return model_->TokenToId(token);
  }
  bool IsSpecial(int32_t id) const override {
    return id >= 0 && id < vocab_size() && special_[id] != 0;
  }

 private:
  TokenizerImpl() = default;
  Status BuildIdTables();
  // Encodes one piece of raw text that holds no normalized=false added token.
  Status EncodeSegment(std::string_view raw, bool parse_special, std::vector<int32_t>* ids) const;

  // Constant after construction.
  tok::Normalizer normalizer_;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<tok::BpeModel> model_;
  tok::AddedVocabulary added_;
  std::vector<std::string> token_bytes_;  // [vocab_size] decoder output per id; empty for holes
  std::vector<uint8_t> special_;          // [vocab_size] 1 for special tokens
};

Result<std::unique_ptr<Tokenizer>> TokenizerImpl::Build(const Json& root) {
  if (!root.is_object()) return tok::TypeError("(root)", "object", root);
  std::unique_ptr<TokenizerImpl> t(new TokenizerImpl());
  const Json kNull;
  auto field = [&](const char* key) -> const Json& {
    const Json* v = tok::FindField(root, key);
    return v != nullptr ? *v : kNull;
  };
  if (field("model").is_null()) return Status::InvalidArgument("model: missing");
  GYRE_ASSIGN_OR_RETURN(t->model_, tok::BpeModel::FromJson(field("model"), "model"));
  GYRE_ASSIGN_OR_RETURN(t->normalizer_,
                        tok::Normalizer::FromJson(field("normalizer"), "normalizer"));
  GYRE_ASSIGN_OR_RETURN(t->added_, tok::AddedVocabulary::FromJson(field("added_tokens"),
                                                                  "added_tokens", *t->model_,
                                                                  t->normalizer_));
  GYRE_ASSIGN_OR_RETURN(t->pre_tokenizer_,
                        tok::PreTokenizer::FromJson(field("pre_tokenizer"), "pre_tokenizer"));
  GYRE_RETURN_IF_ERROR(CheckDecoder(field("decoder"), "decoder"));
  // NOTE: post_processor, truncation and padding are ignored: Encode never adds BOS/EOS (the
  // caller does, from TokenizerConfig::add_bos_token).
  GYRE_RETURN_IF_ERROR(t->BuildIdTables());
  return std::unique_ptr<Tokenizer>(std::move(t));
}

Status TokenizerImpl::BuildIdTables() {
  int64_t max_id = -1;
  for (const auto& [token, id] : model_->vocab()) max_id = std::max<int64_t>(max_id, id);
  for (const auto& [id, token] : added_.tokens_by_id()) max_id = std::max<int64_t>(max_id, id);
  const int64_t num_tokens =
      static_cast<int64_t>(model_->vocab().size() + added_.tokens_by_id().size());
  // NOTE: ids index dense tables; refuse files whose ids would make those tables absurdly large.
  if (max_id + 1 > 2 * num_tokens + 65536) {
    return Status::InvalidArgument("model.vocab: ids are too sparse (largest id " +
                                   std::to_string(max_id) + " for " + std::to_string(num_tokens) +
                                   " tokens)");
  }
  token_bytes_.assign(static_cast<size_t>(max_id + 1), std::string());
  special_.assign(static_cast<size_t>(max_id + 1), 0);
  // HF id_to_token: an added token shadows a vocab entry with the same id. Special-ness is
  // looked up by the token's string, as HF's decode does.
  auto set = [this](int32_t id, const std::string& token) {
    token_bytes_[id] = tok::ByteLevelDecodeToken(token);
    special_[id] = added_.IsSpecialContent(token) ? 1 : 0;
  };
  for (const auto& [token, id] : model_->vocab()) {
    if (added_.tokens_by_id().count(id) == 0) set(id, token);
  }
  for (const auto& [id, token] : added_.tokens_by_id()) set(id, token.content);
  return Status::Ok();
}

Status TokenizerImpl::EncodeSegment(std::string_view raw, bool parse_special,
                                    std::vector<int32_t>* ids) const {
  GYRE_ASSIGN_OR_RETURN(std::string normalized, normalizer_.Normalize(raw));
  std::vector<tok::Segment> segments;
  added_.SplitNormalized(normalized, parse_special, &segments);
  std::vector<std::string> pieces;
  for (const tok::Segment& seg : segments) {
    if (seg.id >= 0) {
      ids->push_back(seg.id);
      continue;
    }
    pieces.assign(1, normalized.substr(seg.begin, seg.end - seg.begin));
    GYRE_RETURN_IF_ERROR(pre_tokenizer_->Apply(&pieces));
    for (const std::string& piece : pieces) GYRE_RETURN_IF_ERROR(model_->Tokenize(piece, ids));
  }
  return Status::Ok();
}

Result<std::vector<int32_t>> TokenizerImpl::Encode(std::string_view text,
                                                   bool parse_special) const {
  if (!tok::IsValidUtf8(text)) return Status::InvalidArgument("Encode: text is not valid UTF-8");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  std::vector<tok::Segment> segments;
  added_.SplitRaw(text, parse_special, &segments);
  for (const tok::Segment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
    } else {
      GYRE_RETURN_IF_ERROR(
          EncodeSegment(text.substr(seg.begin, seg.end - seg.begin), parse_special, &ids)
              .WithContext("Encode"));
    }
  }
  return ids;
}

Result<std::string> TokenizerImpl::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size()) {
      return Status::InvalidArgument("Decode: ids[" + std::to_string(i) + "] = " +
                                     std::to_string(id) + " is outside [0, " +
                                     std::to_string(vocab_size()) + ")");
    }
    if (skip_special && special_[id]) continue;
    bytes += token_bytes_[id];
  }
  return tok::Utf8Lossy(bytes);
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json_text) {
  // NOTE: the stage parsers use non-throwing accessors; this catch is the backstop that keeps
  // nlohmann's (and allocation) exceptions from escaping.
  try {
    GYRE_ASSIGN_OR_RETURN(Json root, tok::ParseJson(json_text, "tokenizer.json"));
    Result<std::unique_ptr<Tokenizer>> t = TokenizerImpl::Build(root);
    if (!t.has_value()) return t.error().WithContext("tokenizer.json");
    return t;
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("tokenizer.json: out of memory");
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("tokenizer.json: ") + e.what());
  }
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  std::error_code ec;
  std::string file = path;
  if (std::filesystem::is_directory(path, ec)) {
    file = (std::filesystem::path(path) / "tokenizer.json").string();
  }
  GYRE_ASSIGN_OR_RETURN(std::string text, tok::ReadFile(file));
  Result<std::unique_ptr<Tokenizer>> t = FromJson(text);
  if (!t.has_value()) return t.error().WithContext(file);
  return t;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::Push(int32_t id) {
  if (skip_special_ && tokenizer_.IsSpecial(id)) return std::string();
  pending_ += tokenizer_.TokenBytes(id);
  const size_t hold = tok::IncompleteUtf8Tail(pending_);
  std::string out = tok::Utf8Lossy(std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out = tok::Utf8Lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace gyre
