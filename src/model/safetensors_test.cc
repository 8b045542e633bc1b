#include "model/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace gyre {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A fresh directory per test, removed afterwards (tests may run concurrently).
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "gyre_st_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // Writes `bytes` verbatim.
  void WriteRaw(const std::string& name, const std::string& bytes) const {
    std::ofstream out(Path(name), std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good());
  }
  // A safetensors image with header text `header` (length field = its size) and `data_bytes` zeros.
  static std::string Image(const std::string& header, size_t data_bytes, uint64_t header_len_override = 0) {
    uint64_t n = header_len_override ? header_len_override : header.size();
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    out += header;
    out.append(data_bytes, '\0');
    return out;
  }
  Status OpenRaw(const std::string& header, size_t data_bytes, uint64_t header_len_override = 0) {
    WriteRaw("t.safetensors", Image(header, data_bytes, header_len_override));
    auto r = SafetensorsFile::Open(Path("t.safetensors"));
    return r.ok() ? Status::Ok() : r.error();
  }

  std::string dir_;
};

template <typename T>
std::span<const uint8_t> Bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

std::vector<float> ToF32(const TensorView& v) {
  std::vector<float> out(static_cast<size_t>(v.numel()));
  ConvertToF32(v.dtype, v.data, out.size(), out.data());
  return out;
}

// ---------------------------------------------------------------------------------------------
// Round trips

TEST_F(SafetensorsTest, RoundTripAllDtypes) {
  const std::vector<float> f32 = {1.0f, -2.5f, 0.0f, 3.25f, 1e-3f, -65504.0f};
  std::vector<uint16_t> bf16, f16;
  for (float f : f32) {
    bf16.push_back(F32ToBf16(f));
    f16.push_back(F32ToF16(f));
  }
  // Known encodings at the front so the bytes on disk are checked, not only the round trip.
  ASSERT_EQ(bf16[0], 0x3f80);
  ASSERT_EQ(f16[0], 0x3c00);
  const std::vector<uint8_t> f8 = {0x38, 0x7e, 0x00, 0xb8, 0x01, 0x7f};  // 1, 448, 0, -1, 2^-9, NaN
  const std::vector<int32_t> i32 = {0, -1, 7, 1 << 30, -(1 << 20), 42};
  const std::vector<float> scalar = {7.0f};

  std::vector<TensorToWrite> ts = {
      {"w.f32", DType::kF32, {2, 3}, Bytes(f32)},   {"w.bf16", DType::kBF16, {3, 2}, Bytes(bf16)},
      {"w.f16", DType::kF16, {6}, Bytes(f16)},      {"w.f8", DType::kF8E4M3, {1, 2, 3}, Bytes(f8)},
      {"w.i32", DType::kI32, {6, 1}, Bytes(i32)},   {"w.empty", DType::kF32, {0, 4}, {}},
      {"w.scalar", DType::kF32, {}, Bytes(scalar)},
  };
  ASSERT_TRUE(WriteSafetensors(Path("m.safetensors"), ts, {{"format", "pt"}}).ok());

  auto f = SafetensorsFile::Open(Path("m.safetensors"));
  ASSERT_TRUE(f.ok()) << f.error().ToString();
  const auto& t = (*f)->tensors();
  ASSERT_EQ(t.size(), ts.size());
  EXPECT_EQ((*f)->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_EQ((*f)->path(), Path("m.safetensors"));

  const TensorView& vf32 = t.at("w.f32");
  EXPECT_EQ(vf32.name, "w.f32");
  EXPECT_EQ(vf32.dtype, DType::kF32);
  EXPECT_EQ(vf32.ShapeString(), "[2, 3]");
  EXPECT_EQ(vf32.numel(), 6);
  EXPECT_EQ(vf32.nbytes, 24u);
  EXPECT_EQ(ToF32(vf32), f32);

  const TensorView& vbf = t.at("w.bf16");
  EXPECT_EQ(vbf.dtype, DType::kBF16);
  EXPECT_EQ(vbf.ShapeString(), "[3, 2]");
  EXPECT_EQ(std::memcmp(vbf.data, bf16.data(), 12), 0);
  std::vector<float> got = ToF32(vbf);
  EXPECT_EQ(got[0], 1.0f);
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_EQ(got[i], RoundBf16(f32[i])) << i;

  const TensorView& vf16 = t.at("w.f16");
  EXPECT_EQ(vf16.dtype, DType::kF16);
  got = ToF32(vf16);
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[1], -2.5f);
  EXPECT_EQ(got[5], -65504.0f);
  EXPECT_NEAR(got[4], 1e-3f, 1e-6f);

  const TensorView& vf8 = t.at("w.f8");
  EXPECT_EQ(vf8.dtype, DType::kF8E4M3);
  EXPECT_EQ(vf8.ShapeString(), "[1, 2, 3]");
  got = ToF32(vf8);
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[1], 448.0f);
  EXPECT_EQ(got[2], 0.0f);
  EXPECT_EQ(got[3], -1.0f);
  EXPECT_EQ(got[4], std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(got[5]));

  const TensorView& vi32 = t.at("w.i32");
  EXPECT_EQ(vi32.dtype, DType::kI32);
  std::vector<int32_t> back(6);
  std::memcpy(back.data(), vi32.data, 24);
  EXPECT_EQ(back, i32);

  EXPECT_EQ(t.at("w.empty").numel(), 0);
  EXPECT_EQ(t.at("w.empty").nbytes, 0u);
  EXPECT_EQ(t.at("w.scalar").ShapeString(), "[]");
  EXPECT_EQ(t.at("w.scalar").numel(), 1);
  EXPECT_EQ(ToF32(t.at("w.scalar"))[0], 7.0f);
}

TEST_F(SafetensorsTest, WriterLayoutMatchesHfConventions) {
  std::vector<float> a = {1, 2}, b = {3, 4, 5};
  std::vector<TensorToWrite> ts = {{"zeta", DType::kF32, {3}, Bytes(b)}, {"alpha", DType::kF32, {2}, Bytes(a)}};
  ASSERT_TRUE(WriteSafetensors(Path("m.safetensors"), ts).ok());
  std::ifstream in(Path("m.safetensors"), std::ios::binary);
  std::string img((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(img[i]);
  EXPECT_EQ(n % 8, 0u);  // data starts 8-aligned
  ASSERT_EQ(img.size(), 8 + n + 20);
  std::string header = img.substr(8, n);
  EXPECT_EQ(header.find("alpha"), header.find('"') + 1) << header;  // keys sorted
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));     // space padding after JSON

  auto h = ParseSafetensorsHeader({reinterpret_cast<const uint8_t*>(img.data()), img.size()}, img.size());
  ASSERT_TRUE(h.ok()) << h.error().ToString();
  EXPECT_EQ(h->data_offset, 8 + n);
  EXPECT_EQ(h->tensors.at("alpha").begin, 0u);  // contiguous in name order
  EXPECT_EQ(h->tensors.at("alpha").end, 8u);
  EXPECT_EQ(h->tensors.at("zeta").begin, 8u);
  EXPECT_EQ(h->tensors.at("zeta").end, 20u);
  float z0;
  std::memcpy(&z0, img.data() + 8 + n + 8, 4);
  EXPECT_EQ(z0, 3.0f);
}

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  std::vector<float> a = {1, 2, 3};
  std::vector<TensorToWrite> wrong_size = {{"a", DType::kF32, {2, 2}, Bytes(a)}};
  Status s = WriteSafetensors(Path("m.safetensors"), wrong_size);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("12 bytes given, F32 [2, 2] needs 16"));

  std::vector<TensorToWrite> dup = {{"a", DType::kF32, {3}, Bytes(a)}, {"a", DType::kF32, {3}, Bytes(a)}};
  s = WriteSafetensors(Path("m.safetensors"), dup);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'a' given twice"));

  std::vector<TensorToWrite> neg = {{"a", DType::kF32, {-1, 3}, Bytes(a)}};
  EXPECT_EQ(WriteSafetensors(Path("m.safetensors"), neg).code(), StatusCode::kInvalidArgument);

  std::vector<TensorToWrite> meta = {{"__metadata__", DType::kF32, {3}, Bytes(a)}};
  EXPECT_EQ(WriteSafetensors(Path("m.safetensors"), meta).code(), StatusCode::kInvalidArgument);

  // Product wraps to 0 in 64 bits, but there is no zero dim.
  std::vector<TensorToWrite> wrap = {{"a", DType::kU8, {int64_t{1} << 32, int64_t{1} << 32}, {}}};
  EXPECT_EQ(WriteSafetensors(Path("m.safetensors"), wrap).code(), StatusCode::kInvalidArgument);

  std::vector<TensorToWrite> bad_utf8 = {{"a\xff", DType::kF32, {3}, Bytes(a)}};
  EXPECT_EQ(WriteSafetensors(Path("m.safetensors"), bad_utf8).code(), StatusCode::kInvalidArgument);

  std::vector<TensorToWrite> ok = {{"a", DType::kF32, {3}, Bytes(a)}};
  s = WriteSafetensors(Path("no/such/dir/m.safetensors"), ok);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("no/such/dir/m.safetensors"));
}

// ---------------------------------------------------------------------------------------------
// WeightFiles

TEST_F(SafetensorsTest, ShardedFolderWithIndex) {
  std::vector<float> a = {1, 2}, b = {3, 4, 5}, c = {6};
  std::vector<TensorToWrite> s1 = {{"layer.0.w", DType::kF32, {2}, Bytes(a)},
                                   {"layer.0.b", DType::kF32, {1}, Bytes(c)}};
  std::vector<TensorToWrite> s2 = {{"layer.1.w", DType::kF32, {3}, Bytes(b)}};
  ASSERT_TRUE(WriteSafetensors(Path("model-00001-of-00002.safetensors"), s1).ok());
  ASSERT_TRUE(WriteSafetensors(Path("model-00002-of-00002.safetensors"), s2).ok());
  WriteRaw("model.safetensors.index.json", R"({"metadata": {"total_size": 24}, "weight_map": {
      "layer.0.w": "model-00001-of-00002.safetensors",
      "layer.0.b": "model-00001-of-00002.safetensors",
      "layer.1.w": "model-00002-of-00002.safetensors"}})");
  // A stray file the index does not name is ignored.
  ASSERT_TRUE(WriteSafetensors(Path("stray.safetensors"), s2).ok());

  auto w = WeightFiles::Open(dir_);
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  EXPECT_EQ((*w)->num_files(), 2u);
  EXPECT_EQ((*w)->Names(), (std::vector<std::string>{"layer.0.b", "layer.0.w", "layer.1.w"}));
  const TensorView* v = (*w)->Find("layer.1.w");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(ToF32(*v), b);
  EXPECT_EQ(ToF32(*(*w)->Find("layer.0.w")), a);
  EXPECT_EQ((*w)->Find("layer.2.w"), nullptr);
}

TEST_F(SafetensorsTest, PrefersSingleFileOverIndex) {
  std::vector<float> a = {1, 2};
  std::vector<TensorToWrite> ts = {{"x", DType::kF32, {2}, Bytes(a)}};
  ASSERT_TRUE(WriteSafetensors(Path("model.safetensors"), ts).ok());
  WriteRaw("model.safetensors.index.json", R"({"weight_map": {"x": "gone.safetensors"}})");
  auto w = WeightFiles::Open(dir_);
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  EXPECT_EQ((*w)->num_files(), 1u);
  EXPECT_NE((*w)->Find("x"), nullptr);
}

TEST_F(SafetensorsTest, GlobsAllSafetensorsWhenNoIndex) {
  std::vector<float> a = {1, 2};
  std::vector<TensorToWrite> t1 = {{"x", DType::kF32, {2}, Bytes(a)}};
  std::vector<TensorToWrite> t2 = {{"y", DType::kF32, {2}, Bytes(a)}};
  ASSERT_TRUE(WriteSafetensors(Path("b.safetensors"), t1).ok());
  ASSERT_TRUE(WriteSafetensors(Path("a.safetensors"), t2).ok());
  WriteRaw("notes.txt", "not weights");
  auto w = WeightFiles::Open(dir_);
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  EXPECT_EQ((*w)->num_files(), 2u);
  EXPECT_EQ((*w)->Names(), (std::vector<std::string>{"x", "y"}));
}

TEST_F(SafetensorsTest, DuplicateTensorAcrossFilesIsInvalidArgument) {
  std::vector<float> a = {1, 2};
  std::vector<TensorToWrite> t = {{"x", DType::kF32, {2}, Bytes(a)}};
  ASSERT_TRUE(WriteSafetensors(Path("a.safetensors"), t).ok());
  ASSERT_TRUE(WriteSafetensors(Path("b.safetensors"), t).ok());
  auto w = WeightFiles::Open(dir_);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(w.error().message(), HasSubstr("'x'"));
  EXPECT_THAT(w.error().message(), HasSubstr("a.safetensors"));
  EXPECT_THAT(w.error().message(), HasSubstr("b.safetensors"));
}

TEST_F(SafetensorsTest, IndexNamingMissingShardIsNotFound) {
  std::vector<float> a = {1, 2};
  std::vector<TensorToWrite> t = {{"x", DType::kF32, {2}, Bytes(a)}};
  ASSERT_TRUE(WriteSafetensors(Path("model-00001-of-00002.safetensors"), t).ok());
  WriteRaw("model.safetensors.index.json", R"({"weight_map": {"x": "model-00001-of-00002.safetensors",
      "y": "model-00002-of-00002.safetensors"}})");
  auto w = WeightFiles::Open(dir_);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), StatusCode::kNotFound);
  EXPECT_THAT(w.error().message(), HasSubstr("model-00002-of-00002.safetensors"));
}

TEST_F(SafetensorsTest, IndexNamingTensorAbsentFromShardIsDataLoss) {
  std::vector<float> a = {1, 2};
  std::vector<TensorToWrite> t = {{"x", DType::kF32, {2}, Bytes(a)}};
  ASSERT_TRUE(WriteSafetensors(Path("shard1.safetensors"), t).ok());
  WriteRaw("model.safetensors.index.json",
           R"({"weight_map": {"x": "shard1.safetensors", "lm_head.weight": "shard1.safetensors"}})");
  auto w = WeightFiles::Open(dir_);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), StatusCode::kDataLoss);
  EXPECT_THAT(w.error().message(), HasSubstr("'lm_head.weight'"));
  EXPECT_THAT(w.error().message(), HasSubstr("'shard1.safetensors'"));
}

TEST_F(SafetensorsTest, CorruptIndex) {
  WriteRaw("model.safetensors.index.json", "{not json");
  auto w = WeightFiles::Open(dir_);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), StatusCode::kDataLoss);
  EXPECT_THAT(w.error().message(), HasSubstr("model.safetensors.index.json"));

  WriteRaw("model.safetensors.index.json", R"({"metadata": {}})");
  w = WeightFiles::Open(dir_);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), StatusCode::kDataLoss);
  EXPECT_THAT(w.error().message(), HasSubstr("weight_map"));

  WriteRaw("model.safetensors.index.json", R"({"weight_map": {"x": "../../etc/passwd"}})");
  w = WeightFiles::Open(dir_);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(w.error().message(), HasSubstr("outside the model folder"));
}

TEST(ParseSafetensorsIndexTest, ShardNames) {
  auto ok = ParseSafetensorsIndex(R"({"weight_map": {"a": "sub/x.safetensors", "b": "..x.safetensors"}})");
  ASSERT_TRUE(ok.ok()) << ok.error().ToString();
  EXPECT_EQ(ok->at("a"), "sub/x.safetensors");
  for (const char* bad : {R"({"weight_map": {"a": "/abs.safetensors"}})", R"({"weight_map": {"a": ""}})",
                          R"({"weight_map": {"a": "sub/../../x"}})", R"({"weight_map": {"a": ".."}})"}) {
    auto r = ParseSafetensorsIndex(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument) << bad;
  }
  auto r = ParseSafetensorsIndex(R"({"weight_map": {"a": 3}})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), StatusCode::kDataLoss);
  r = ParseSafetensorsIndex(R"({"weight_map": {}})");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("empty"));
}

TEST_F(SafetensorsTest, DirWithoutSafetensorsIsNotFound) {
  WriteRaw("config.json", "{}");
  auto w = WeightFiles::Open(dir_);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), StatusCode::kNotFound);
  EXPECT_EQ(w.error().message(), "no safetensors files in " + dir_);

  w = WeightFiles::Open(Path("nope"));
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), StatusCode::kNotFound);
  EXPECT_THAT(w.error().message(), HasSubstr("nope"));
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFile::Open failures

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  auto f = SafetensorsFile::Open(Path("absent.safetensors"));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code(), StatusCode::kNotFound);
  EXPECT_THAT(f.error().message(), HasSubstr("absent.safetensors"));
}

TEST_F(SafetensorsTest, DirectoryIsInvalidArgument) {
  auto f = SafetensorsFile::Open(dir_);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(f.error().message(), HasSubstr("not a regular file"));
}

TEST_F(SafetensorsTest, FileShorterThan8Bytes) {
  for (size_t n : {0, 1, 7}) {
    WriteRaw("t.safetensors", std::string(n, '\x01'));
    auto f = SafetensorsFile::Open(Path("t.safetensors"));
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.error().code(), StatusCode::kDataLoss);
    EXPECT_THAT(f.error().message(), HasSubstr("t.safetensors"));
    EXPECT_THAT(f.error().message(), HasSubstr("shorter than the 8-byte header length"));
  }
}

TEST_F(SafetensorsTest, HeaderLengthLargerThanFile) {
  Status s = OpenRaw("{}", 0, /*header_len_override=*/1000);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("header length 1000 runs past the end of the file (10 bytes"));

  s = OpenRaw("{}", 0, /*header_len_override=*/uint64_t{1} << 40);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("exceeds the 100000000-byte limit"));
}

TEST_F(SafetensorsTest, NonJsonHeader) {
  Status s = OpenRaw("{\"a\": ", 0);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("header: not valid JSON"));

  s = OpenRaw("[1, 2]", 0);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("header is not a JSON object"));
}

TEST_F(SafetensorsTest, UnknownDtype) {
  Status s = OpenRaw(R"({"x": {"dtype": "F7", "shape": [2], "data_offsets": [0, 2]}})", 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'x': unknown dtype 'F7'"));
}

TEST_F(SafetensorsTest, ShapeOffsetMismatch) {
  Status s = OpenRaw(R"({"x": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})", 16);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(),
            Path("t.safetensors") + ": tensor 'x': data_offsets [0, 12] do not match F32 [2, 2] (16 bytes)");
}

TEST_F(SafetensorsTest, OffsetsPastEndOfFile) {
  // Header claims 16 bytes of data, only 10 are there: a truncated download.
  Status s = OpenRaw(R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 10);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'x': data_offsets [0, 16] run past the end of the data (10 bytes"));
}

TEST_F(SafetensorsTest, OverlappingRanges) {
  Status s = OpenRaw(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                     12);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("tensors 'a' [0, 8] and 'b' [4, 12] overlap"));

  // Touching ranges, empty tensors inside others, and gaps are fine.
  s = OpenRaw(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                  "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},
                  "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]},
                  "c": {"dtype": "U8", "shape": [1], "data_offsets": [15, 16]}})",
              16);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(SafetensorsTest, MalformedEntries) {
  struct Case {
    const char* header;
    const char* want;
  };
  const Case cases[] = {
      {R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}})", "not a non-negative integer"},
      {R"({"x": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 0]}})", "not a non-negative integer"},
      {R"({"x": {"dtype": "F32", "shape": ["2"], "data_offsets": [0, 0]}})", "not a non-negative integer"},
      {R"({"x": {"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 0]}})",
       "not a non-negative integer"},
      {R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", "overflows"},
      {R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", "begin > end"},
      {R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", "\"data_offsets\" must be"},
      {R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, -8]}})", "\"data_offsets\" must be"},
      {R"({"x": {"dtype": "F32", "shape": [2]}})", "\"data_offsets\" must be"},
      {R"({"x": {"shape": [2], "data_offsets": [0, 8]}})", "\"dtype\""},
      {R"({"x": {"dtype": "F32", "data_offsets": [0, 8]}})", "\"shape\""},
      {R"({"x": [1, 2]})", "tensor 'x': entry is not a JSON object"},
      {R"({"__metadata__": {"a": 1}})", "__metadata__ value of 'a' is not a string"},
      {R"({"__metadata__": "pt"})", "__metadata__ is not a JSON object"},
      {R"({"x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
           "x": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
       "'x' more than once"},
  };
  for (const Case& c : cases) {
    Status s = OpenRaw(c.header, 16);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << c.header << " -> " << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr(c.want)) << c.header;
  }
  // A zero dim makes huge other dims harmless.
  Status s = OpenRaw(R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296, 0], "data_offsets": [0, 0]}})", 0);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(ParseSafetensorsHeaderTest, PrefixContract) {
  std::string img = std::string("\x02\0\0\0\0\0\0\0", 8) + "{}";
  std::span<const uint8_t> all(reinterpret_cast<const uint8_t*>(img.data()), img.size());
  auto h = ParseSafetensorsHeader(all, img.size());
  ASSERT_TRUE(h.ok()) << h.error().ToString();
  EXPECT_TRUE(h->tensors.empty());
  EXPECT_EQ(h->data_offset, 10u);
  // Prefix cut before the end of the header: caller error, not a crash.
  auto r = ParseSafetensorsHeader(all.first(9), img.size());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
  r = ParseSafetensorsHeader(all, 5);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
}

TEST(TensorViewTest, NumelAndShapeString) {
  TensorView v;
  EXPECT_EQ(v.numel(), 1);
  EXPECT_EQ(v.ShapeString(), "[]");
  v.shape = {2, 3, 4};
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(v.ShapeString(), "[2, 3, 4]");
  v.shape = {int64_t{1} << 40, int64_t{1} << 40, 0};
  EXPECT_EQ(v.numel(), 0);
}

}  // namespace
}  // namespace gyre
