#include "tokenizer/bpe.h"

#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>

#include "tokenizer/unicode.h"

namespace gyre::tok {
namespace {

constexpr size_t kCacheCapacity = 1 << 16;  // words
constexpr size_t kMaxCachedWordBytes = 256;  // HF's MAX_LENGTH

// One symbol of the word being merged; a doubly linked list over `symbols`.
struct Symbol {
  int32_t id;
  int32_t prev;  // -1 at the start
  int32_t next;  // -1 at the end
  bool alive;
};

// A candidate merge of symbols[pos] with its successor.
struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
  // priority_queue pops the largest: the smallest rank, then the leftmost position.
  bool operator<(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};

}  // namespace

Result<std::unique_ptr<BpeModel>> BpeModel::FromJson(const Json& j, const std::string& path) {
  if (!j.is_object()) return TypeError(path, "object", j);
  std::unique_ptr<BpeModel> m(new BpeModel());
  if (const Json* type = FindField(j, "type"); type != nullptr) {
    if (!type->is_string()) return TypeError(FieldPath(path, "type"), "string", *type);
    if (*type != "BPE") {
      return Status::InvalidArgument(FieldPath(path, "type") + ": unsupported model \"" +
                                     type->get<std::string>() + "\" (supported: BPE)");
    }
  }
  if (const Json* d = FindField(j, "dropout"); d != nullptr) {
    if (!d->is_number()) return TypeError(FieldPath(path, "dropout"), "number", *d);
    if (d->get<double>() != 0.0) {
      return Status::InvalidArgument(FieldPath(path, "dropout") + ": BPE dropout is not supported");
    }
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const Json* v = FindField(j, key); v != nullptr) {
      if (!v->is_string()) return TypeError(FieldPath(path, key), "string", *v);
      if (!v->get_ref<const std::string&>().empty()) {
        return Status::InvalidArgument(FieldPath(path, key) + ": only null or \"\" is supported");
      }
    }
  }
  if (const Json* unk = FindField(j, "unk_token"); unk != nullptr) {
    if (!unk->is_string()) return TypeError(FieldPath(path, "unk_token"), "string", *unk);
    m->unk_token_ = unk->get<std::string>();
  }
  GYRE_ASSIGN_OR_RETURN(m->fuse_unk_, GetBool(j, "fuse_unk", false, path));
  GYRE_ASSIGN_OR_RETURN(m->byte_fallback_, GetBool(j, "byte_fallback", false, path));
  GYRE_ASSIGN_OR_RETURN(m->ignore_merges_, GetBool(j, "ignore_merges", false, path));

  const std::string vocab_path = FieldPath(path, "vocab");
  const Json* vocab = FindField(j, "vocab");
  if (vocab == nullptr) return Status::InvalidArgument(vocab_path + ": missing");
  if (!vocab->is_object()) return TypeError(vocab_path, "object", *vocab);
  m->vocab_.reserve(vocab->size());
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX - 1) {
      return Status::InvalidArgument(vocab_path + "[\"" + token +
                                     "\"]: id must be an integer in [0, 2^31 - 1)");
    }
    m->vocab_.emplace(token, static_cast<int32_t>(id.get<int64_t>()));
  }

  const std::string merges_path = FieldPath(path, "merges");
  const Json* merges = FindField(j, "merges");
  if (merges == nullptr) return Status::InvalidArgument(merges_path + ": missing");
  GYRE_RETURN_IF_ERROR(m->ParseMerges(*merges, merges_path));
  return m;
}

Status BpeModel::ParseMerges(const Json& merges, const std::string& path) {
  if (!merges.is_array()) return TypeError(path, "array", merges);
  merges_.reserve(merges.size());
  int32_t rank = 0;
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& entry = merges[i];
    const std::string entry_path = IndexPath(path, i);
    std::string_view a, b;
    if (entry.is_string()) {
      const std::string& line = entry.get_ref<const std::string&>();
      if (line.rfind("#version", 0) == 0) continue;  // merges.txt header, as HF skips it
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return Status::InvalidArgument(entry_path + ": expected \"<a> <b>\" with one space");
      }
      a = std::string_view(line).substr(0, space);
      b = std::string_view(line).substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
               entry[1].is_string()) {
      a = entry[0].get_ref<const std::string&>();
      b = entry[1].get_ref<const std::string&>();
    } else {
      return TypeError(entry_path, "\"a b\" string or [a, b] pair of strings", entry);
    }
    const std::string joined = std::string(a) + std::string(b);
    const std::string_view joined_view = joined;
    auto ia = vocab_.find(a), ib = vocab_.find(b), ij = vocab_.find(joined_view);
    for (auto [it, tok] : {std::pair{ia, a}, std::pair{ib, b}, std::pair{ij, joined_view}}) {
      if (it == vocab_.end()) {
        return Status::InvalidArgument(entry_path + ": token \"" + std::string(tok) +
                                       "\" is not in the vocab");
      }
    }
    // Like HF's HashMap collect, a repeated pair keeps its last rank.
    merges_.insert_or_assign(PairKey(ia->second, ib->second), Merge{rank, ij->second});
    ++rank;
  }
  return Status::Ok();
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

Status BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return Status::Ok();
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out->push_back(it->second);
      return Status::Ok();
    }
  }
  const bool cacheable = word.size() < kMaxCachedWordBytes;
  if (cacheable) {
    std::shared_lock lock(cache_mu_);
    if (auto it = cache_.find(word); it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return Status::Ok();
    }
  }
  std::vector<int32_t> ids;
  GYRE_RETURN_IF_ERROR(MergeWord(word, &ids));
  out->insert(out->end(), ids.begin(), ids.end());
  if (cacheable) {
    std::unique_lock lock(cache_mu_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
  return Status::Ok();
}

Status BpeModel::MergeWord(std::string_view word, std::vector<int32_t>* out) const {
  // 1. One symbol per char (HF merge_word), with byte fallback and unk handling.
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&symbols](int32_t id) {
    const int32_t n = static_cast<int32_t>(symbols.size());
    if (n > 0) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, true});
  };
  std::optional<int32_t> pending_unk;  // an unk not yet added (fuse_unk may extend it)
  size_t i = 0;
  while (i < word.size()) {
    const size_t begin = i;
    i += NextUtf8(word, i).len;
    const std::string_view ch = word.substr(begin, i - begin);
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      if (pending_unk) add(*pending_unk);
      pending_unk.reset();
      add(it->second);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      for (char c : ch) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned char>(c));
        auto bt = vocab_.find(std::string_view(name));
        if (bt == vocab_.end()) break;
        bytes.push_back(bt->second);
      }
      if (bytes.size() == ch.size()) {
        for (int32_t id : bytes) add(id);
        continue;
      }
    }
    if (unk_token_) {
      auto ut = vocab_.find(std::string_view(*unk_token_));
      if (ut == vocab_.end()) {
        return Status::InvalidArgument("unk_token \"" + *unk_token_ + "\" is not in the vocab");
      }
      if (pending_unk && !fuse_unk_) add(*pending_unk);
      pending_unk = ut->second;
    }
  }
  if (pending_unk) add(*pending_unk);

  // 2. Apply merges, lowest rank first, leftmost first among equal ranks.
  std::priority_queue<Candidate> queue;
  auto push_pair = [&](int32_t pos) {
    const Symbol& s = symbols[pos];
    if (s.next < 0) return;
    auto it = merges_.find(PairKey(s.id, symbols[s.next].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.new_id});
  };
  for (int32_t pos = 0; pos + 1 < static_cast<int32_t>(symbols.size()); ++pos) push_pair(pos);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // Skip stale entries: the pair at `pos` must still produce `new_id`.
    auto it = merges_.find(PairKey(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (const Symbol& s : symbols) {
    if (s.alive) out->push_back(s.id);
  }
  return Status::Ok();
}

}  // namespace gyre::tok
