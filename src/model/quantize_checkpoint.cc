// QuantizeCheckpoint, DropQuantizedStorage and BytesByLayer. Sections: helpers;
// QuantizeCheckpoint; DropQuantizedStorage; BytesByLayer.
#include "model/quantize_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/weights.h"
#include "quant/policy.h"
#include "quant/quant.h"

namespace gyre {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

template <typename T>
std::span<const uint8_t> Bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

Result<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json QuantizationConfig(const QuantizeOptions& o) {
  if (o.scheme == QuantScheme::kFp8Block) {
    return {{"quant_method", "fp8"},
            {"fmt", "e4m3"},
            {"weight_block_size", {o.block_n, o.block_k}},
            {"activation_scheme", "dynamic"}};
  }
  return {{"quant_method", "gyre-int8"},
          {"weight", "int8 symmetric per output channel (X.weight_scale [out, 1] fp32)"},
          {"activation_scheme", "dynamic"},
          {"activation", "int8 symmetric per token"}};
}

// Input files copied as they are: everything but weights, their index and config.json.
Status CopySmallFiles(const std::string& from, const std::string& to) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(from, ec)) {
    if (!e.is_regular_file()) continue;
    const std::string name = e.path().filename().string();
    if (name == "config.json" || name == "model.safetensors.index.json" || e.path().extension() == ".safetensors") {
      continue;
    }
    fs::copy_file(e.path(), fs::path(to) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return Status::Unavailable("cannot copy " + e.path().string() + ": " + ec.message());
  }
  if (ec) return Status::Unavailable("cannot list " + from + ": " + ec.message());
  return Status();
}

}  // namespace

// ---- QuantizeCheckpoint --------------------------------------------------------------------------

Result<QuantizeReport> QuantizeCheckpoint(const std::string& model_dir, const std::string& out_dir,
                                          const QuantizeOptions& opts) {
  if (opts.scheme == QuantScheme::kNone) return Status::InvalidArgument("no quantization scheme given");
  if (opts.block_n < 1 || opts.block_k < 1) return Status::InvalidArgument("block sizes must be >= 1");
  std::error_code ec;
  if (fs::exists(out_dir, ec) && fs::equivalent(model_dir, out_dir, ec)) {
    return Status::InvalidArgument("--out must differ from --model");
  }
  std::vector<std::regex> keep;
  for (const std::string& k : opts.keep) {
    try {
      keep.emplace_back(k, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return Status::InvalidArgument("keep pattern '" + k + "' is not a valid regex: " + e.what());
    }
  }
  GYRE_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(model_dir));
  if (config.quant.scheme != QuantScheme::kNone) {
    return Status::InvalidArgument(model_dir + " is already quantized (quant_method '" + config.quant.quant_method +
                                   "')");
  }
  GYRE_ASSIGN_OR_RETURN(std::string config_text, ReadText(model_dir + "/config.json"));
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<WeightFiles> files, WeightFiles::Open(model_dir));

  QuantizeReport rep;
  std::vector<TensorToWrite> out;
  std::vector<std::unique_ptr<QuantizedWeight>> owned;  // storage the TensorToWrite spans point into
  for (const std::string& name : files->Names()) {
    const TensorView* t = files->Find(name);
    ++rep.num_tensors;
    rep.bytes_in += static_cast<int64_t>(t->nbytes);
    const bool is_float = t->dtype == DType::kF32 || t->dtype == DType::kBF16 || t->dtype == DType::kF16;
    bool quantize = is_float && ShouldQuantize(name, t->shape);
    if (quantize) {
      for (const std::regex& k : keep) {
        if (std::regex_search(name, k)) {
          quantize = false;
          ++rep.num_kept;
          break;
        }
      }
    }
    if (!quantize) {
      out.push_back({name, t->dtype, t->shape, {t->data, t->nbytes}});
      rep.bytes_out += static_cast<int64_t>(t->nbytes);
      continue;
    }
    std::vector<float> w(t->numel());
    ConvertToF32(t->dtype, t->data, w.size(), w.data());
    const int64_t N = t->shape[0], K = t->shape[1];
    auto q = std::make_unique<QuantizedWeight>(opts.scheme == QuantScheme::kFp8Block
                                                   ? QuantizeFp8Block(w.data(), N, K, opts.block_n, opts.block_k)
                                                   : QuantizeInt8Channel(w.data(), N, K));
    const bool fp8 = opts.scheme == QuantScheme::kFp8Block;
    out.push_back({name, fp8 ? DType::kF8E4M3 : DType::kI8, t->shape, Bytes(q->q)});
    out.push_back({name + (fp8 ? "_scale_inv" : "_scale"), DType::kF32, {q->scale_rows(), q->scale_cols()},
                   Bytes(q->scale)});
    rep.bytes_out += static_cast<int64_t>(q->bytes());
    ++rep.num_quantized;
    owned.push_back(std::move(q));
  }

  fs::create_directories(out_dir, ec);
  if (ec) return Status::Unavailable("cannot create " + out_dir + ": " + ec.message());
  GYRE_RETURN_IF_ERROR(WriteSafetensors(out_dir + "/model.safetensors", out, {{"format", "pt"}}));
  json cfg;
  try {
    cfg = json::parse(config_text);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(model_dir + "/config.json: " + e.what());
  }
  cfg["quantization_config"] = QuantizationConfig(opts);
  std::ofstream cf(out_dir + "/config.json", std::ios::binary | std::ios::trunc);
  cf << cfg.dump(2) << "\n";
  if (!cf) return Status::Unavailable("cannot write " + out_dir + "/config.json");
  cf.close();
  GYRE_RETURN_IF_ERROR(CopySmallFiles(model_dir, out_dir));
  // A stale index from an earlier run would name shards that no longer match.
  fs::remove(out_dir + "/model.safetensors.index.json", ec);
  return rep;
}

// ---- DropQuantizedStorage -------------------------------------------------------------------------

namespace {
int64_t Drop(Matrix& m) {
  const bool had = m.quant != nullptr;
  m.quant.reset();
  return had;
}
int64_t DropMla(MlaWeights& w) {
  int64_t n = 0;
  for (Matrix* m : {&w.q_a, &w.q_b, &w.q_proj, &w.kv_a, &w.kv_b, &w.o, &w.indexer.wq_b, &w.indexer.wk,
                    &w.indexer.weights_proj, &w.indexer.compress_gate, &w.indexer.ape})
    n += Drop(*m);
  return n;
}
int64_t DropMlp(MlpWeights& w) { return Drop(w.gate) + Drop(w.up) + Drop(w.down); }
}  // namespace

int64_t DropQuantizedStorage(ModelWeights* w) {
  int64_t n = Drop(w->embed) + Drop(w->lm_head);
  for (LayerWeights& L : w->layers) {
    n += Drop(L.attn_hc.fn) + Drop(L.ffn_hc.fn);
    KdaWeights& k = L.kda;
    for (Matrix* m : {&k.q, &k.k, &k.v, &k.conv, &k.f_a, &k.f_b, &k.b, &k.g_a, &k.g_b, &k.o}) n += Drop(*m);
    n += DropMla(L.mla) + DropMlp(L.dense) + DropMlp(L.moe.shared) + Drop(L.moe.router);
    for (MlpWeights& e : L.moe.experts) n += DropMlp(e);
  }
  n += Drop(w->mtp.eh_proj) + Drop(w->mtp.head) + DropMla(w->mtp.mla) + DropMlp(w->mtp.mlp);
  return n;
}

// ---- BytesByLayer --------------------------------------------------------------------------------

std::map<std::string, GroupBytes> BytesByLayer(const WeightFiles& files) {
  std::map<std::string, GroupBytes> r;
  for (const std::string& name : files.Names()) {
    const TensorView* t = files.Find(name);
    std::string key = "other";
    if (size_t p = name.find("layers."); p != std::string::npos) {
      size_t e = name.find('.', p + 7);
      key = name.substr(p, e == std::string::npos ? std::string::npos : e - p);
    } else if (name.find("embed_tokens") != std::string::npos) {
      key = "embed_tokens";
    } else if (name.find("lm_head") != std::string::npos) {
      key = "lm_head";
    } else if (name.find("norm") != std::string::npos) {
      key = "norm";
    }
    const bool scale = name.ends_with("weight_scale_inv") || name.ends_with("weight_scale");
    const bool quantized = t->dtype == DType::kF8E4M3 || t->dtype == DType::kI8;
    GroupBytes& g = r[key];
    if (quantized || scale) {
      g.quantized += static_cast<int64_t>(t->nbytes);
      if (quantized) ++g.num_quantized_weights;
    } else {
      g.high_precision += static_cast<int64_t>(t->nbytes);
    }
  }
  return r;
}

}  // namespace gyre
