#include "quant/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/json_depth.h"
#include "quant/fp8.h"

namespace gyre {

const char* KvDtypeName(KvDtype d) {
  switch (d) {
    case KvDtype::kF32: return "fp32";
    case KvDtype::kBf16: return "bf16";
    case KvDtype::kFp8: return "fp8";
    case KvDtype::kInt8: return "int8";
  }
  return "?";
}

Result<KvDtype> ParseKvDtype(std::string_view s) {
  if (s == "fp32" || s == "float32" || s == "auto") return KvDtype::kF32;
  if (s == "bf16" || s == "bfloat16") return KvDtype::kBf16;
  if (s == "fp8" || s == "fp8_e4m3") return KvDtype::kFp8;
  if (s == "int8") return KvDtype::kInt8;
  return Status::InvalidArgument("kv cache dtype '" + std::string(s) +
                                 "': expected one of auto, fp32, bf16, fp8 (fp8_e4m3), int8");
}

int64_t KvScaleOffset(int64_t width) { return (width + 15) / 16 * 16; }

int64_t KvRowBytes(KvDtype d, int64_t width) {
  switch (d) {
    case KvDtype::kF32: return 4 * width;
    case KvDtype::kBf16: return (2 * width + 15) / 16 * 16;
    case KvDtype::kFp8:
    case KvDtype::kInt8: return KvScaleOffset(width) + 16;
  }
  return 0;
}

namespace {

float RowScale(KvDtype d, std::span<const float> x) {
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  return d == KvDtype::kFp8 ? std::max(amax, 1e-4f) / kF8E4M3Max : std::max(amax, 1e-8f) / 127.0f;
}

}  // namespace

void KvEncodeRow(KvDtype d, std::span<const float> x, uint8_t* row) {
  const int64_t w = static_cast<int64_t>(x.size());
  std::memset(row, 0, static_cast<size_t>(KvRowBytes(d, w)));
  switch (d) {
    case KvDtype::kF32: std::memcpy(row, x.data(), x.size() * 4); return;
    case KvDtype::kBf16:
      for (int64_t i = 0; i < w; ++i) {
        const uint16_t b = F32ToBf16(x[i]);
        std::memcpy(row + 2 * i, &b, 2);
      }
      return;
    case KvDtype::kFp8:
    case KvDtype::kInt8: {
      const float s = RowScale(d, x);
      for (int64_t i = 0; i < w; ++i) {
        const float q = x[i] / s;
        if (d == KvDtype::kFp8) {
          row[i] = F32ToF8E4M3(q);
        } else {
          const float r = std::clamp(std::nearbyint(q), -127.0f, 127.0f);
          row[i] = static_cast<uint8_t>(static_cast<int8_t>(r));
        }
      }
      std::memcpy(row + KvScaleOffset(w), &s, 4);
      return;
    }
  }
}

void KvDecodeRow(KvDtype d, const uint8_t* row, std::span<float> out) {
  const int64_t w = static_cast<int64_t>(out.size());
  switch (d) {
    case KvDtype::kF32: std::memcpy(out.data(), row, out.size() * 4); return;
    case KvDtype::kBf16:
      for (int64_t i = 0; i < w; ++i) {
        uint16_t b;
        std::memcpy(&b, row + 2 * i, 2);
        out[i] = Bf16ToF32(b);
      }
      return;
    case KvDtype::kFp8:
    case KvDtype::kInt8: {
      float s;
      std::memcpy(&s, row + KvScaleOffset(w), 4);
      for (int64_t i = 0; i < w; ++i)
        out[i] = (d == KvDtype::kFp8 ? F8E4M3ToF32(row[i]) : static_cast<float>(static_cast<int8_t>(row[i]))) * s;
      return;
    }
  }
}

bool KvCachePolicy::uniform_fp32() const {
  return std::all_of(layers.begin(), layers.end(), [](KvDtype d) { return d == KvDtype::kF32; });
}

std::string KvCachePolicy::Describe() const {
  std::map<int, std::vector<size_t>> by;
  for (size_t l = 0; l < layers.size(); ++l) by[static_cast<int>(layers[l])].push_back(l);
  if (by.size() <= 1) return by.empty() ? "fp32" : KvDtypeName(static_cast<KvDtype>(by.begin()->first));
  std::ostringstream o;
  bool first = true;
  for (const auto& [d, ls] : by) {
    o << (first ? "" : ", ") << KvDtypeName(static_cast<KvDtype>(d)) << " layers";
    for (size_t i = 0; i < ls.size(); ++i) o << (i ? "," : " ") << ls[i];
    first = false;
  }
  return o.str();
}

KvCachePolicy UniformKvPolicy(int64_t num_layers, KvDtype d) {
  return KvCachePolicy{std::vector<KvDtype>(static_cast<size_t>(std::max<int64_t>(num_layers, 0)), d)};
}

Result<KvCachePolicy> ParseKvCachePolicy(std::string_view text, const std::vector<bool>& is_attention) {
  const auto bad = [](const std::string& m) { return Status::InvalidArgument("kv cache policy: " + m); };
  GYRE_RETURN_IF_ERROR(CheckJsonDepth(text, "kv cache policy"));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("not valid JSON");
  if (!j.is_object()) return bad("expected a JSON object {\"default\": ..., \"layers\": {...}}");
  KvDtype def = KvDtype::kF32;
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "default" && it.key() != "layers") return bad("unknown key '" + it.key() + "'");
  if (j.contains("default")) {
    if (!j["default"].is_string()) return bad("'default' must be a dtype name");
    auto d = ParseKvDtype(j["default"].get<std::string>());
    if (!d.ok()) return bad(d.error().message());
    def = *d;
  }
  const int64_t n = static_cast<int64_t>(is_attention.size());
  KvCachePolicy p = UniformKvPolicy(n, KvDtype::kF32);
  for (int64_t l = 0; l < n; ++l)
    if (is_attention[l]) p.layers[l] = def;
  if (j.contains("layers")) {
    if (!j["layers"].is_object()) return bad("'layers' must be an object of \"layer index\": dtype");
    for (auto it = j["layers"].begin(); it != j["layers"].end(); ++it) {
      const std::string& k = it.key();
      int64_t l = -1;
      if (!k.empty() && k.size() <= 9 && std::all_of(k.begin(), k.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
        l = std::stoll(k);
      if (l < 0 || l >= n)
        return bad("layer '" + k + "' is not a layer index in [0, " + std::to_string(n) + ")");
      if (!is_attention[l])
        return bad("layer " + k + " is a KDA layer: its state is fp32 and has no KV cache dtype");
      if (!it.value().is_string()) return bad("layer " + k + ": the dtype must be a string");
      auto d = ParseKvDtype(it.value().get<std::string>());
      if (!d.ok()) return bad("layer " + k + ": " + d.error().message());
      p.layers[l] = *d;
    }
  }
  return p;
}

Result<KvCachePolicy> LoadKvCachePolicy(const std::string& path, const std::vector<bool>& is_attention) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::NotFound("kv cache policy: cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  if (ss.str().size() > (1u << 20)) return Status::InvalidArgument("kv cache policy: " + path + " is over 1 MiB");
  auto p = ParseKvCachePolicy(ss.str(), is_attention);
  if (!p.ok()) return p.error().WithContext(path);
  return p;
}

}  // namespace gyre
