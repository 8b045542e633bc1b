// Safetensors checkpoint reading: memory-mapped files, single file or sharded through
// `model.safetensors.index.json`.
//
// Format: u64 little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data.
// Every tensor's byte range is validated against its dtype and shape and against the file size.
//
// Thread safety: immutable after Open; concurrent reads are safe. Tensor data pointers stay valid
// while the owning SafetensorsFile / WeightFiles lives.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace gyre {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping; not aligned in general
  size_t nbytes = 0;
  int64_t numel() const;
  std::string ShapeString() const;  // "[2, 3]"
};

// One parsed header entry (offsets relative to the start of the data section).
struct TensorHeaderEntry {
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};
struct SafetensorsHeader {
  std::map<std::string, TensorHeaderEntry> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + N
};
// Parses and validates the header of a safetensors image of `file_size` bytes, given its first
// bytes (at least 8 + N of them). Errors (DataLoss / InvalidArgument, message says what): file
// shorter than 8 bytes or than the header, header not JSON or not an object, unknown dtype,
// negative/non-integer shape, byte range not matching dtype*shape, ranges outside the data.
//
// Codes: InvalidArgument for a dtype gyre does not know (e.g. "F7", "U16") and for a `prefix`
// shorter than the header or longer than `file_size` (caller error); DataLoss for everything
// else: file < 8 bytes, header length > 100 MB or past the end of the file, header not a JSON
// object, duplicate tensor names, a `__metadata__` that is not a string->string map, a malformed
// entry (missing/ill-typed dtype, shape, data_offsets), shape dims not non-negative integers or
// numel*size overflowing u64, begin > end, end - begin != numel * dtype size, end past the data
// section, and two tensors whose byte ranges overlap. Gaps between tensors and trailing bytes
// after the last tensor are accepted (the HF reader rejects them; gyre only needs the ranges).
// ResourceExhausted when memory runs out parsing a huge header. Never reads outside `prefix`;
// never throws. Messages do not name the file: callers add it.
Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> prefix, uint64_t file_size);

// Parses the JSON text of a `model.safetensors.index.json` into its `weight_map`
// (tensor name -> shard file name). Errors: DataLoss when the text is not JSON, has no
// `weight_map` object, a value is not a string, or the map is empty; InvalidArgument when a shard
// name is absolute, empty or contains a ".." component (shards live inside the model folder).
Result<std::map<std::string, std::string>> ParseSafetensorsIndex(std::string_view json_text);

class SafetensorsFile {
 public:
  // Maps `path` read-only (mmap PROT_READ, MAP_PRIVATE) and validates its header with
  // ParseSafetensorsHeader. Errors, each message starting with `path`: NotFound when the file does
  // not exist; InvalidArgument when it is not a regular file or (see ParseSafetensorsHeader) has an
  // unknown dtype; DataLoss when truncated/corrupt; Unavailable when it cannot be opened or mapped
  // for another reason (permissions, mmap failure).
  // NOTE: a file truncated by another process after Open faults (SIGBUS) on access; weights are
  // assumed immutable while mapped.
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All weights of a model folder: `model.safetensors`, or the shards named by
// `model.safetensors.index.json` (every shard it names must exist and hold the tensors the index
// assigns to it), or — when neither exists — every `*.safetensors` file in the folder.
class WeightFiles {
 public:
  // Opens the weights of `dir`, in this order of preference:
  //   1. `dir/model.safetensors` alone;
  //   2. the shards named by `dir/model.safetensors.index.json` (each distinct shard opened once);
  //   3. every `*.safetensors` file in `dir` (sorted by name).
  // Every tensor of every opened file is exposed. Errors: NotFound when `dir` does not exist, holds
  // no safetensors file ("no safetensors files in DIR"), or the index names a shard that does not
  // exist (message names the shard); DataLoss when the index is corrupt (see ParseSafetensorsIndex)
  // or names a tensor its shard does not hold (message names tensor and shard); InvalidArgument
  // when two files hold a tensor of the same name; any error of SafetensorsFile::Open.
  static Result<std::unique_ptr<WeightFiles>> Open(const std::string& dir);
  // nullptr when absent.
  const TensorView* Find(const std::string& name) const;
  std::vector<std::string> Names() const;
  size_t num_files() const { return files_.size(); }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

// Writes a safetensors file (used by tests, fixture tools and benchmarks). Tensors are written in
// name order, their data contiguous from offset 0; the header is compact JSON with sorted keys,
// padded with spaces so the data starts at a multiple of 8 (as the HF writer does).
// Errors: InvalidArgument when a tensor's bytes do not match dtype*shape, a dim is negative, a name
// repeats, is empty or is "__metadata__", or a string is not valid UTF-8; Unavailable (IOError-like)
// when the file cannot be written. On error a partially written file may remain at `path`.
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
};
Status WriteSafetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace gyre
