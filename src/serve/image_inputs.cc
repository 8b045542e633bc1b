#include "serve/image_inputs.h"

#include <climits>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "model/safetensors.h"
#include "runtime/vision.h"
#include "serve/openai_protocol.h"

namespace gyre::serve {

Result<std::shared_ptr<const ImageEncoder>> LoadImageEncoder(const std::string& model_dir, ImageInputOptions options) {
  GYRE_ASSIGN_OR_RETURN(std::optional<VisionConfig> vc, LoadVisionConfig(model_dir));
  if (!vc) return Status::NotFound(model_dir + "/config.json has no vision_config: the model takes no images");
  GYRE_ASSIGN_OR_RETURN(auto files, WeightFiles::Open(model_dir));
  GYRE_ASSIGN_OR_RETURN(VisionWeights w, BindVisionWeights(*vc, *files));
  auto enc = std::make_shared<ImageEncoder>();
  enc->config = *vc;
  enc->weights = std::move(w);
  enc->preprocess.patch_size = vc->patch_size;
  enc->preprocess.temporal_patch_size = vc->temporal_patch_size;
  enc->preprocess.merge_size = vc->spatial_merge_size;
  enc->options = std::move(options);
  if (enc->options.make_tower) {
    GYRE_ASSIGN_OR_RETURN(enc->tower, enc->options.make_tower(enc->config, enc->weights));
  }
  if (enc->options.cache_bytes > 0) enc->cache = std::make_shared<ImageEmbeddingCache>(enc->options.cache_bytes);
  return std::shared_ptr<const ImageEncoder>(std::move(enc));
}

Result<std::vector<uint8_t>> DecodeBase64(std::string_view s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!s.empty() && s.back() == '=') s.remove_suffix(1);
  if (s.size() % 4 == 1) return Status::InvalidArgument("invalid base64: its length is impossible");
  std::vector<uint8_t> out;
  out.reserve(s.size() / 4 * 3 + 2);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const int v = val(s[i]);
    if (v < 0) return Status::InvalidArgument("invalid base64: character " + std::to_string(i) + " is not in the alphabet");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>(acc >> bits));
    }
  }
  return out;
}

Result<std::vector<uint8_t>> LoadImageUrl(const std::string& url, const std::string& field, const ImageInputOptions& o) {
  const int64_t max_b64 = o.limits.max_bytes / 3 * 4 + 8;
  if (url.rfind("data:", 0) == 0) {
    const size_t comma = url.find(',');
    if (comma == std::string::npos) return FieldError(field, "data URL has no ',' before its data");
    const std::string_view meta(url.data() + 5, comma - 5);
    if (meta.size() < 7 || meta.substr(meta.size() - 7) != ";base64")
      return FieldError(field, "data URL must be base64 (data:image/png;base64,... or data:image/jpeg;base64,...)");
    if (meta.rfind("image/", 0) != 0) return FieldError(field, "data URL media type must be image/png or image/jpeg");
    if (static_cast<int64_t>(url.size() - comma - 1) > max_b64)
      return FieldError(field, "image is over the limit of " + std::to_string(o.limits.max_bytes) + " bytes");
    auto bytes = DecodeBase64(std::string_view(url).substr(comma + 1));
    if (!bytes.ok()) return FieldError(field, bytes.status().message());
    return std::move(*bytes);
  }
  if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0)
    return FieldError(field, "http(s) image URLs are not fetched by this server; send the image as a data: URL "
                             "(data:image/png;base64,...)");
  if (url.rfind("file://", 0) == 0) {
    if (o.allowed_local_media_path.empty())
      return FieldError(field, "file:// URLs are refused unless the server runs with --allowed-local-media-path");
    char root[PATH_MAX], path[PATH_MAX];
    if (!realpath(o.allowed_local_media_path.c_str(), root))
      return FieldError(field, "the allowed local media path does not exist");
    if (!realpath(url.c_str() + 7, path)) return FieldError(field, "file not found: " + url.substr(7));
    const std::string r = std::string(root) + "/", p = path;
    if (p.rfind(r, 0) != 0) return FieldError(field, "file is outside the allowed local media path");
    std::ifstream f(p, std::ios::binary | std::ios::ate);
    if (!f) return FieldError(field, "cannot read " + url.substr(7));
    if (static_cast<int64_t>(f.tellg()) > o.limits.max_bytes)
      return FieldError(field, "image is over the limit of " + std::to_string(o.limits.max_bytes) + " bytes");
    f.seekg(0);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  return FieldError(field, "unsupported image URL scheme (data: URLs are accepted, file:// under "
                           "--allowed-local-media-path)");
}

Result<EncodedImage> EncodeImage(const ImageEncoder& enc, const std::vector<uint8_t>& bytes, const std::string& field) {
  if (enc.cache) {
    if (std::shared_ptr<const EncodedImage> hit = enc.cache->Find(bytes)) return *hit;
  }
  auto img = DecodeImage(bytes, enc.options.limits);
  if (!img.ok()) return FieldError(field, img.status().message());
  auto pre = PreprocessImage(*img, enc.preprocess);
  if (!pre.ok()) return FieldError(field, pre.status().message());
  const ImageGrid grid{pre->grid_t, pre->grid_h, pre->grid_w};
  EncodedImage out;
  if (enc.tower) {
    GYRE_RETURN_IF_ERROR(enc.tower(pre->pixel_values, std::span<const ImageGrid>(&grid, 1), &out.embeds));
  } else {
    GYRE_RETURN_IF_ERROR(VisionForward(enc.config, enc.weights, pre->pixel_values,
                                       std::span<const ImageGrid>(&grid, 1), &out.embeds));
  }
  out.num_tokens = pre->num_tokens;
  if (enc.cache) enc.cache->Insert(bytes, std::make_shared<const EncodedImage>(out));
  return out;
}

Result<int64_t> ImageTokenCount(const ImageEncoder& enc, const std::vector<uint8_t>& bytes, const std::string& field) {
  auto img = DecodeImage(bytes, enc.options.limits);
  if (!img.ok()) return FieldError(field, img.status().message());
  auto size = PlanImageSize(img->width, img->height, enc.preprocess);
  if (!size.ok()) return FieldError(field, size.status().message());
  const int64_t unit = enc.preprocess.patch_size * enc.preprocess.merge_size;
  return (size->canvas_h / unit) * (size->canvas_w / unit);
}

Result<ImagePrompt> BuildImagePrompt(const std::string& text, const std::vector<EncodedImage>& images,
                                     const VisionConfig& vc, const EncodeTextFn& encode) {
  ImagePrompt p;
  p.embeds = std::make_shared<PromptEmbeds>();
  const std::string sentinel = kImageSentinel;
  size_t at = 0, k = 0;
  bool first = true;
  for (;;) {
    const size_t next = text.find(sentinel, at);
    const std::string seg = text.substr(at, next == std::string::npos ? std::string::npos : next - at);
    if (!seg.empty() || first) {
      GYRE_ASSIGN_OR_RETURN(std::vector<int32_t> ids, encode(seg, first));
      p.ids.insert(p.ids.end(), ids.begin(), ids.end());
    }
    first = false;
    if (next == std::string::npos) break;
    if (k >= images.size()) break;
    const EncodedImage& im = images[k++];
    const int64_t width = static_cast<int64_t>(im.embeds.size()) / std::max<int64_t>(1, im.num_tokens);
    if (p.embeds->width == 0) p.embeds->width = width;
    p.ids.push_back(vc.image_start_token_id);
    for (int64_t t = 0; t < im.num_tokens; ++t) {
      p.embeds->positions.push_back(static_cast<int64_t>(p.ids.size()));
      p.ids.push_back(vc.image_token_id);
    }
    p.ids.push_back(vc.image_end_token_id);
    p.embeds->rows.insert(p.embeds->rows.end(), im.embeds.begin(), im.embeds.end());
    at = next + sentinel.size();
  }
  size_t rendered = 0;
  for (size_t i = text.find(sentinel); i != std::string::npos; i = text.find(sentinel, i + 1)) ++rendered;
  if (rendered != images.size())
    return FieldError("messages", "the chat template rendered " + std::to_string(rendered) + " of the " +
                                      std::to_string(images.size()) + " images");
  return p;
}

}  // namespace gyre::serve
