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
Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> prefix, uint64_t file_size);

class SafetensorsFile {
 public:
  // Maps and validates `path`. Errors: NotFound, DataLoss (truncated/corrupt), InvalidArgument.
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
// name order. Errors: IOError-like Unavailable when the file cannot be written.
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
};
Status WriteSafetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace gyre
