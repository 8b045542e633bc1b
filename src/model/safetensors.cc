#include "model/safetensors.h"

#include "core/json_depth.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

namespace gyre {

namespace {

using json = nlohmann::json;

// Same limit as the HF reader: a larger header is treated as corrupt, not allocated.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr char kMetadataKey[] = "__metadata__";

// Names and dtype strings come from the file: bound what goes into a message.
std::string Quote(std::string_view s) {
  constexpr size_t kMax = 200;
  if (s.size() > kMax) return "'" + std::string(s.substr(0, kMax)) + "...'";
  return "'" + std::string(s) + "'";
}

std::string DimsString(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

// A short, bounded rendering of a JSON value for error messages.
std::string Snippet(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 64) s = s.substr(0, 61) + "...";
  return s;
}

// Reads a non-negative integer from a JSON number (rejects floats, negatives, other types).
bool AsNonNegative(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    if (i < 0) return false;
    *out = static_cast<uint64_t>(i);
    return true;
  }
  return false;
}

Result<TensorHeaderEntry> ParseEntry(const std::string& name, const json& v) {
  const std::string where = "tensor " + Quote(name) + ": ";
  if (!v.is_object()) return Status::DataLoss(where + "entry is not a JSON object: " + Snippet(v));

  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) return Status::DataLoss(where + "missing or non-string \"dtype\"");
  TensorHeaderEntry e;
  const std::string& dtype_name = dt->get_ref<const std::string&>();
  if (!ParseDType(dtype_name, &e.dtype)) {
    return Status::InvalidArgument(where + "unknown dtype " + Quote(dtype_name));
  }

  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) return Status::DataLoss(where + "missing or non-array \"shape\"");
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& d : *sh) {
    uint64_t dim;
    if (!AsNonNegative(d, &dim) || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::DataLoss(where + "shape " + Snippet(*sh) + " has a dim that is not a non-negative integer");
    }
    e.shape.push_back(static_cast<int64_t>(dim));
    overflow = overflow || __builtin_mul_overflow(numel, dim, &numel);
  }
  uint64_t nbytes = 0;
  overflow = overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(DTypeSize(e.dtype)), &nbytes);
  // A zero dim makes the product 0 whatever the other dims are; only a non-zero product can overflow.
  if (overflow && std::find(e.shape.begin(), e.shape.end(), 0) == e.shape.end()) {
    return Status::DataLoss(where + "shape " + DimsString(e.shape) + " of " + std::string(DTypeName(e.dtype)) +
                            " overflows 64-bit byte count");
  }
  if (overflow) nbytes = 0;

  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !AsNonNegative((*off)[0], &e.begin) ||
      !AsNonNegative((*off)[1], &e.end)) {
    return Status::DataLoss(where + "\"data_offsets\" must be [begin, end] of non-negative integers, got " +
                            (off == v.end() ? std::string("nothing") : Snippet(*off)));
  }
  if (e.begin > e.end) {
    return Status::DataLoss(where + "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                            "] have begin > end");
  }
  if (e.end - e.begin != nbytes) {
    return Status::DataLoss(where + "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                            "] do not match " + std::string(DTypeName(e.dtype)) + " " + DimsString(e.shape) + " (" +
                            std::to_string(nbytes) + " bytes)");
  }
  return e;
}

Result<std::map<std::string, std::string>> ParseMetadata(const json& v) {
  if (!v.is_object()) return Status::DataLoss("__metadata__ is not a JSON object: " + Snippet(v));
  std::map<std::string, std::string> out;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_string()) {
      return Status::DataLoss("__metadata__ value of " + Quote(it.key()) + " is not a string: " + Snippet(it.value()));
    }
    out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

// Parses `text` as JSON without letting an exception escape; reports the first duplicate key of
// the top-level object in `*dup_key` (nlohmann silently keeps the last one).
Result<json> ParseJson(std::string_view text, std::string* dup_key) {
  if (Status d = CheckJsonDepth(text, "the header"); !d.ok()) return Status::DataLoss(d.message());
  try {
    std::set<std::string> top_keys;
    auto cb = [&](int depth, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::key && depth == 1 && dup_key->empty()) {
        const std::string& k = parsed.get_ref<const std::string&>();
        if (!top_keys.insert(k).second) *dup_key = k;
      }
      return true;
    };
    return json::parse(text.begin(), text.end(), cb);
  } catch (const json::exception& e) {
    return Status::DataLoss(std::string("not valid JSON: ") + e.what());
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("out of memory parsing " + std::to_string(text.size()) + " bytes of JSON");
  } catch (const std::exception& e) {
    return Status::DataLoss(std::string("JSON parse failed: ") + e.what());
  }
}

// Runs `fn` (returning a Result) so that an allocation failure while loading becomes
// ResourceExhausted instead of an exception escaping gyre code (style.md §2.4).
template <typename Fn>
auto NoThrow(const char* what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(std::string(what) + ": out of memory");
  } catch (const std::exception& e) {
    return Status::Internal(std::string(what) + ": unexpected exception: " + e.what());
  }
}

Status ErrnoStatus(const std::string& what, const std::string& path, int err) {
  if (err == ENOENT || err == ENOTDIR) return Status::NotFound(path + ": file not found");
  return Status::Unavailable(path + ": " + what + ": " + std::strerror(err));
}

}  // namespace

int64_t TensorView::numel() const {
  // Unsigned so a shape like [huge, huge, 0] wraps (defined) before the final zero instead of UB.
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return static_cast<int64_t>(n);
}

std::string TensorView::ShapeString() const { return DimsString(shape); }

namespace {
Result<SafetensorsHeader> ParseHeaderImpl(std::span<const uint8_t> prefix, uint64_t file_size) {
  if (prefix.size() > file_size) {
    return Status::InvalidArgument("prefix of " + std::to_string(prefix.size()) + " bytes is longer than the file (" +
                                   std::to_string(file_size) + " bytes)");
  }
  if (file_size < 8) {
    return Status::DataLoss("file is " + std::to_string(file_size) +
                            " bytes, shorter than the 8-byte header length field");
  }
  if (prefix.size() < 8) {
    return Status::InvalidArgument("prefix of " + std::to_string(prefix.size()) + " bytes lacks the header length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
  if (n > kMaxHeaderBytes) {
    return Status::DataLoss("header length " + std::to_string(n) + " exceeds the " + std::to_string(kMaxHeaderBytes) +
                            "-byte limit (corrupt file?)");
  }
  if (n > file_size - 8) {
    return Status::DataLoss("header length " + std::to_string(n) + " runs past the end of the file (" +
                            std::to_string(file_size) + " bytes; truncated?)");
  }
  if (prefix.size() < 8 + n) {
    return Status::InvalidArgument("prefix of " + std::to_string(prefix.size()) + " bytes is shorter than the " +
                                   std::to_string(8 + n) + "-byte header");
  }

  std::string_view text(reinterpret_cast<const char*>(prefix.data() + 8), n);
  std::string dup;
  Result<json> parsed = ParseJson(text, &dup);
  if (!parsed.ok()) return parsed.error().WithContext("header");
  const json& root = *parsed;
  if (!root.is_object()) return Status::DataLoss("header is not a JSON object: " + Snippet(root));
  if (!dup.empty()) return Status::DataLoss("header names " + Quote(dup) + " more than once");

  SafetensorsHeader h;
  h.data_offset = 8 + n;
  const uint64_t data_size = file_size - h.data_offset;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == kMetadataKey) {
      GYRE_ASSIGN_OR_RETURN(h.metadata, ParseMetadata(it.value()));
      continue;
    }
    GYRE_ASSIGN_OR_RETURN(TensorHeaderEntry e, ParseEntry(it.key(), it.value()));
    if (e.end > data_size) {
      return Status::DataLoss("tensor " + Quote(it.key()) + ": data_offsets [" + std::to_string(e.begin) + ", " +
                              std::to_string(e.end) + "] run past the end of the data (" + std::to_string(data_size) +
                              " bytes; truncated file?)");
    }
    h.tensors.emplace(it.key(), std::move(e));
  }

  // Overlap check: sort ranges by begin; each non-empty range must start at or after the end of
  // the previous one. Empty ranges hold no bytes and cannot overlap anything.
  std::vector<std::pair<const std::string*, const TensorHeaderEntry*>> order;
  order.reserve(h.tensors.size());
  for (const auto& [name, e] : h.tensors)
    if (e.end > e.begin) order.emplace_back(&name, &e);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < order.size(); ++i) {
    const TensorHeaderEntry& prev = *order[i - 1].second;
    const TensorHeaderEntry& cur = *order[i].second;
    if (cur.begin < prev.end) {
      return Status::DataLoss("tensors " + Quote(*order[i - 1].first) + " [" + std::to_string(prev.begin) + ", " +
                              std::to_string(prev.end) + "] and " + Quote(*order[i].first) + " [" +
                              std::to_string(cur.begin) + ", " + std::to_string(cur.end) + "] overlap");
    }
  }
  return h;
}

Result<std::map<std::string, std::string>> ParseIndexImpl(std::string_view json_text) {
  std::string dup;
  Result<json> parsed = ParseJson(json_text, &dup);
  if (!parsed.ok()) return parsed.error();
  const json& root = *parsed;
  if (!root.is_object()) return Status::DataLoss("index is not a JSON object");
  auto wm = root.find("weight_map");
  if (wm == root.end() || !wm->is_object()) return Status::DataLoss("index has no \"weight_map\" object");
  if (wm->empty()) return Status::DataLoss("index \"weight_map\" is empty");
  std::map<std::string, std::string> out;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string()) {
      return Status::DataLoss("weight_map entry " + Quote(it.key()) + " is not a string: " + Snippet(it.value()));
    }
    const std::string& shard = it.value().get_ref<const std::string&>();
    bool bad = shard.empty() || shard.front() == '/' || shard.find('\0') != std::string::npos;
    for (size_t start = 0; !bad && start <= shard.size();) {
      size_t slash = shard.find('/', start);
      if (slash == std::string::npos) slash = shard.size();
      if (shard.compare(start, slash - start, "..") == 0) bad = true;
      start = slash + 1;
    }
    if (bad) {
      return Status::InvalidArgument("weight_map entry " + Quote(it.key()) + " names shard " + Quote(shard) +
                                     " outside the model folder");
    }
    out.emplace(it.key(), shard);
  }
  return out;
}

}  // namespace

Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> prefix, uint64_t file_size) {
  return NoThrow("safetensors header", [&] { return ParseHeaderImpl(prefix, file_size); });
}

Result<std::map<std::string, std::string>> ParseSafetensorsIndex(std::string_view json_text) {
  return NoThrow("safetensors index", [&] { return ParseIndexImpl(json_text); });
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, map_size_);
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  return NoThrow(path.c_str(), [&]() -> Result<std::unique_ptr<SafetensorsFile>> {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open", path, errno);
    struct stat st;
    if (fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return ErrnoStatus("fstat", path, err);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status::InvalidArgument(path + ": not a regular file");
    }
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size < 8) {
      ::close(fd);
      return Status::DataLoss(path + ": file is " + std::to_string(size) +
                              " bytes, shorter than the 8-byte header length field");
    }
    void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_err = errno;
    ::close(fd);  // the mapping keeps the file referenced
    if (map == MAP_FAILED) return ErrnoStatus("mmap", path, map_err);

    std::unique_ptr<SafetensorsFile> f(new (std::nothrow) SafetensorsFile());
    if (f == nullptr) {
      munmap(map, size);
      return Status::ResourceExhausted(path + ": out of memory");
    }
    f->path_ = path;
    f->map_ = map;  // owned from here: the destructor unmaps on every path below
    f->map_size_ = size;

    const auto* base = static_cast<const uint8_t*>(map);
    Result<SafetensorsHeader> h = ParseSafetensorsHeader(std::span<const uint8_t>(base, size), size);
    if (!h.ok()) return h.error().WithContext(path);
    f->metadata_ = std::move(h->metadata);
    for (auto& [name, e] : h->tensors) {
      TensorView v;
      v.name = name;
      v.dtype = e.dtype;
      v.shape = std::move(e.shape);
      v.data = base + h->data_offset + e.begin;
      v.nbytes = static_cast<size_t>(e.end - e.begin);
      f->tensors_.emplace(name, std::move(v));
    }
    return f;
  });
}

// ---------------------------------------------------------------------------------------------
// WeightFiles

namespace {

namespace fs = std::filesystem;

Result<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Unavailable(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::Unavailable(path + ": read failed");
  return ss.str();
}

bool IsRegularFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

}  // namespace

const TensorView* WeightFiles::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> WeightFiles::Names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, v] : index_) out.push_back(name);
  return out;
}

Result<std::unique_ptr<WeightFiles>> WeightFiles::Open(const std::string& dir) {
  return NoThrow(dir.c_str(), [&]() -> Result<std::unique_ptr<WeightFiles>> {
    std::error_code ec;
    const fs::path root(dir);
    if (!fs::is_directory(root, ec)) return Status::NotFound(dir + ": model directory not found");

    std::vector<std::string> shards;                 // file names relative to dir, opened in order
    std::map<std::string, std::string> weight_map;  // from the index, when used
    const fs::path single = root / "model.safetensors";
    const fs::path index_path = root / "model.safetensors.index.json";
    if (IsRegularFile(single)) {
      shards.push_back("model.safetensors");
    } else if (IsRegularFile(index_path)) {
      GYRE_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(index_path.string()));
      Result<std::map<std::string, std::string>> wm = ParseSafetensorsIndex(text);
      if (!wm.ok()) return wm.error().WithContext(index_path.string());
      weight_map = std::move(wm).value();
      std::set<std::string> distinct;
      for (const auto& [name, shard] : weight_map) distinct.insert(shard);
      shards.assign(distinct.begin(), distinct.end());
    } else {
      fs::directory_iterator it(root, ec), end;
      if (ec) return Status::Unavailable(dir + ": cannot list directory: " + ec.message());
      for (; it != end; it.increment(ec)) {
        if (ec) return Status::Unavailable(dir + ": cannot list directory: " + ec.message());
        const fs::path& p = it->path();
        if (p.extension() == ".safetensors" && IsRegularFile(p)) shards.push_back(p.filename().string());
      }
      if (ec) return Status::Unavailable(dir + ": cannot list directory: " + ec.message());
      std::sort(shards.begin(), shards.end());
      if (shards.empty()) return Status::NotFound("no safetensors files in " + dir);
    }

    auto w = std::make_unique<WeightFiles>();
    std::map<std::string, const SafetensorsFile*> by_shard;
    for (const std::string& shard : shards) {
      const std::string path = (root / shard).string();
      Result<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(path);
      if (!f.ok()) {
        if (!weight_map.empty()) {
          return f.error().WithContext("shard " + Quote(shard) + " named by " + index_path.string());
        }
        return f.error();
      }
      for (const auto& [name, view] : (*f)->tensors()) {
        auto [it, inserted] = w->index_.emplace(name, &view);
        if (!inserted) {
          // index_ values point into files_ already opened, so the other file is known.
          std::string other;
          for (const auto& g : w->files_)
            if (g->tensors().count(name)) other = g->path();
          return Status::InvalidArgument("tensor " + Quote(name) + " appears in both " + other + " and " + path);
        }
      }
      by_shard[shard] = f->get();
      w->files_.push_back(std::move(f).value());
    }

    for (const auto& [name, shard] : weight_map) {
      const SafetensorsFile* f = by_shard.at(shard);
      if (f->tensors().count(name) == 0) {
        return Status::DataLoss(index_path.string() + ": tensor " + Quote(name) + " is assigned to shard " +
                                Quote(shard) + ", which does not hold it");
      }
    }
    return w;
  });
}

// ---------------------------------------------------------------------------------------------
// WriteSafetensors

namespace {
Status WriteImpl(const std::string& path, std::span<const TensorToWrite> tensors,
                 const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> sorted;
  sorted.reserve(tensors.size());
  for (const TensorToWrite& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->name < b->name; });

  std::string header;
  try {
    json root = json::object();
    uint64_t offset = 0;
    for (size_t i = 0; i < sorted.size(); ++i) {
      const TensorToWrite& t = *sorted[i];
      if (t.name.empty() || t.name == kMetadataKey) {
        return Status::InvalidArgument("WriteSafetensors: invalid tensor name " + Quote(t.name));
      }
      if (i > 0 && sorted[i - 1]->name == t.name) {
        return Status::InvalidArgument("WriteSafetensors: tensor " + Quote(t.name) + " given twice");
      }
      uint64_t numel = 1, nbytes = 0;
      bool overflow = false;
      for (int64_t d : t.shape) {
        if (d < 0) return Status::InvalidArgument("WriteSafetensors: tensor " + Quote(t.name) + " has a negative dim");
        overflow = __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel) || overflow;
      }
      overflow = __builtin_mul_overflow(numel, static_cast<uint64_t>(DTypeSize(t.dtype)), &nbytes) || overflow;
      const bool has_zero = std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end();
      if (has_zero) nbytes = 0;  // exact, whatever the other dims did to the product
      if ((overflow && !has_zero) || nbytes != t.bytes.size()) {
        return Status::InvalidArgument("WriteSafetensors: tensor " + Quote(t.name) + ": " +
                                       std::to_string(t.bytes.size()) + " bytes given, " +
                                       std::string(DTypeName(t.dtype)) + " " + DimsString(t.shape) + " needs " +
                                       std::to_string(nbytes));
      }
      root[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + nbytes}}};
      offset += nbytes;
    }
    if (!metadata.empty()) root[kMetadataKey] = metadata;
    header = root.dump();  // strict: throws on invalid UTF-8
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("WriteSafetensors: cannot encode header: ") + e.what());
  }
  header.append((8 - header.size() % 8) % 8, ' ');

  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  std::FILE* fp = std::fopen(path.c_str(), "wb");
  if (fp == nullptr) return Status::Unavailable(path + ": cannot open for writing: " + std::strerror(errno));
  bool ok = std::fwrite(len, 1, 8, fp) == 8 && std::fwrite(header.data(), 1, header.size(), fp) == header.size();
  for (size_t i = 0; ok && i < sorted.size(); ++i) {
    const auto& b = sorted[i]->bytes;
    ok = b.empty() || std::fwrite(b.data(), 1, b.size(), fp) == b.size();
  }
  int err = ok ? 0 : errno;
  if (std::fclose(fp) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) return Status::Unavailable(path + ": write failed: " + std::strerror(err));
  return Status::Ok();
}

}  // namespace

Status WriteSafetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                        const std::map<std::string, std::string>& metadata) {
  return NoThrow("WriteSafetensors", [&] { return WriteImpl(path, tensors, metadata); });
}

}  // namespace gyre
