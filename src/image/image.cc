#include "image/image.h"

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>

namespace gyre {
namespace {

// 8-bit pixels with 1 (L), 2 (LA), 3 (RGB) or 4 (RGBA) channels, as PIL holds them after open().
struct Decoded {
  int64_t width = 0, height = 0;
  int channels = 0;
  std::vector<uint8_t> px;
};

Status CheckDims(const char* fmt, int64_t w, int64_t h, const ImageLimits& lim) {
  if (w <= 0 || h <= 0) {
    return Status::InvalidArgument(std::string(fmt) + " image has an empty size " + std::to_string(w) + "x" +
                                   std::to_string(h));
  }
  if (w > lim.max_side || h > lim.max_side || w * h > lim.max_pixels) {
    return Status::ResourceExhausted(std::string(fmt) + " image declares " + std::to_string(w) + "x" +
                                     std::to_string(h) + " pixels, over the limit of " +
                                     std::to_string(lim.max_pixels) + " pixels (" + std::to_string(lim.max_side) +
                                     " per side): refused as a possible decompression bomb");
  }
  return Status::Ok();
}

// ---- PNG (libpng; errors longjmp back to DecodePng) ----

struct PngCtx {
  const uint8_t* data = nullptr;
  size_t size = 0, pos = 0;
  char error[200] = {0};
};

void PngError(png_structp png, png_const_charp msg) {
  auto* ctx = static_cast<PngCtx*>(png_get_error_ptr(png));
  std::snprintf(ctx->error, sizeof(ctx->error), "%s", msg);
  png_longjmp(png, 1);
}
void PngWarning(png_structp, png_const_charp) {}

void PngRead(png_structp png, png_bytep out, png_size_t n) {
  auto* ctx = static_cast<PngCtx*>(png_get_io_ptr(png));
  if (ctx->size - ctx->pos < n) png_error(png, "truncated PNG data");
  std::memcpy(out, ctx->data + ctx->pos, n);
  ctx->pos += n;
}

struct PngState {
  png_structp png = nullptr;
  png_infop info = nullptr;
  std::vector<png_bytep> rows;
  std::vector<uint8_t> raw;
  ~PngState() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

Status DecodePng(std::span<const uint8_t> data, const ImageLimits& lim, Decoded* out) {
  // The declared size is checked from the IHDR bytes first: libpng would read on past the header.
  if (data.size() >= 24 && std::memcmp(data.data() + 12, "IHDR", 4) == 0) {
    auto be32 = [&](size_t i) {
      return (uint32_t{data[i]} << 24) | (uint32_t{data[i + 1]} << 16) | (uint32_t{data[i + 2]} << 8) | data[i + 3];
    };
    GYRE_RETURN_IF_ERROR(CheckDims("PNG", be32(16), be32(20), lim));
  }
  PngCtx ctx{data.data(), data.size(), 0, {0}};
  PngState s;  // everything that owns memory lives outside the setjmp region
  s.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, PngError, PngWarning);
  if (!s.png) return Status::Internal("png_create_read_struct failed");
  s.info = png_create_info_struct(s.png);
  if (!s.info) return Status::Internal("png_create_info_struct failed");
  if (setjmp(png_jmpbuf(s.png))) {
    return Status::InvalidArgument(std::string("corrupt PNG: ") + ctx.error);
  }
  png_set_read_fn(s.png, &ctx, PngRead);
  // Refuse oversized declarations inside libpng too (its own check runs before any row buffer).
  png_set_user_limits(s.png, static_cast<png_uint_32>(std::min<int64_t>(lim.max_side, 0x7fffffff)),
                      static_cast<png_uint_32>(std::min<int64_t>(lim.max_side, 0x7fffffff)));
  png_set_chunk_malloc_max(s.png, 8u << 20);
  png_read_info(s.png, s.info);
  png_uint_32 w = 0, h = 0;
  int depth = 0, color = 0, interlace = 0;
  png_get_IHDR(s.png, s.info, &w, &h, &depth, &color, &interlace, nullptr, nullptr);
  if (!CheckDims("PNG", w, h, lim).ok()) return CheckDims("PNG", w, h, lim);
  const bool trns = png_get_valid(s.png, s.info, PNG_INFO_tRNS) != 0;
  bool grey16 = false;
  switch (color) {
    case PNG_COLOR_TYPE_PALETTE:
      png_set_palette_to_rgb(s.png);
      if (trns) png_set_tRNS_to_alpha(s.png);
      break;
    case PNG_COLOR_TYPE_GRAY:
      if (depth < 8) png_set_expand_gray_1_2_4_to_8(s.png);
      if (depth == 16) {
        grey16 = true;  // PIL: mode I;16, clipped to 255 when converted to 8 bits
        png_set_swap(s.png);  // little-endian samples
      } else if (trns) {
        png_set_tRNS_to_alpha(s.png);
      }
      break;
    case PNG_COLOR_TYPE_RGB:
      if (depth == 16) png_set_strip_16(s.png);  // PIL: RGB;16B keeps the high byte
      if (trns) png_set_tRNS_to_alpha(s.png);
      break;
    default:  // grey+alpha, RGBA
      if (depth == 16) png_set_strip_16(s.png);
      break;
  }
  png_set_interlace_handling(s.png);
  png_read_update_info(s.png, s.info);
  const int ch = png_get_channels(s.png, s.info);
  const size_t rowbytes = png_get_rowbytes(s.png, s.info);
  if (ch < 1 || ch > 4 || rowbytes != static_cast<size_t>(w) * ch * (grey16 ? 2 : 1)) {
    return Status::InvalidArgument("unsupported PNG layout (" + std::to_string(ch) + " channels)");
  }
  out->width = w;
  out->height = h;
  out->channels = ch;
  std::vector<uint8_t>& raw = s.raw;
  raw.resize(rowbytes * h);
  s.rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) s.rows[y] = raw.data() + y * rowbytes;
  png_read_image(s.png, s.rows.data());
  png_read_end(s.png, nullptr);
  if (grey16) {
    out->px.resize(static_cast<size_t>(w) * h);
    for (size_t i = 0; i < out->px.size(); ++i) {
      const unsigned v = raw[2 * i] | (unsigned{raw[2 * i + 1]} << 8);
      out->px[i] = static_cast<uint8_t>(std::min(v, 255u));
    }
  } else {
    out->px.swap(raw);
  }
  return Status::Ok();
}

// ---- JPEG (libjpeg-turbo; errors longjmp back to DecodeJpeg) ----

struct JpegErr {
  jpeg_error_mgr mgr;
  std::jmp_buf jmp;
  char error[JMSG_LENGTH_MAX] = {0};
};

void JpegErrorExit(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErr*>(c->err);
  (*c->err->format_message)(c, e->error);
  std::longjmp(e->jmp, 1);
}
void JpegMessage(j_common_ptr c, int level) {
  // PIL refuses a truncated JPEG ("image file is truncated"); libjpeg only warns and pads it.
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) JpegErrorExit(c);
}

struct JpegState {
  jpeg_decompress_struct cinfo{};
  bool created = false;
  ~JpegState() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

Status DecodeJpeg(std::span<const uint8_t> data, const ImageLimits& lim, Decoded* out) {
  JpegErr err;
  JpegState s;
  s.cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = JpegErrorExit;
  err.mgr.emit_message = JpegMessage;
  if (setjmp(err.jmp)) {
    return Status::InvalidArgument(std::string("corrupt JPEG: ") + err.error);
  }
  jpeg_create_decompress(&s.cinfo);
  s.created = true;
  s.cinfo.mem->max_memory_to_use = 1L << 30;
  jpeg_mem_src(&s.cinfo, data.data(), static_cast<unsigned long>(data.size()));
  jpeg_read_header(&s.cinfo, TRUE);
  if (!CheckDims("JPEG", s.cinfo.image_width, s.cinfo.image_height, lim).ok()) {
    return CheckDims("JPEG", s.cinfo.image_width, s.cinfo.image_height, lim);
  }
  const J_COLOR_SPACE cs = s.cinfo.jpeg_color_space;
  if (cs == JCS_GRAYSCALE) {
    s.cinfo.out_color_space = JCS_GRAYSCALE;
  } else if (cs == JCS_YCbCr || cs == JCS_RGB) {
    s.cinfo.out_color_space = JCS_RGB;
  } else {
    return Status::InvalidArgument("unsupported JPEG colour space (" + std::to_string(static_cast<int>(cs)) +
                                   ", e.g. CMYK / YCCK): only greyscale and YCbCr / RGB JPEGs are accepted");
  }
  // PIL's defaults: the accurate integer IDCT and fancy upsampling.
  s.cinfo.dct_method = JDCT_ISLOW;
  s.cinfo.do_fancy_upsampling = TRUE;
  jpeg_start_decompress(&s.cinfo);
  const int ch = s.cinfo.output_components;
  out->width = s.cinfo.output_width;
  out->height = s.cinfo.output_height;
  out->channels = ch;
  out->px.resize(static_cast<size_t>(out->width) * out->height * ch);
  while (s.cinfo.output_scanline < s.cinfo.output_height) {
    JSAMPROW row = out->px.data() + static_cast<size_t>(s.cinfo.output_scanline) * out->width * ch;
    jpeg_read_scanlines(&s.cinfo, &row, 1);
  }
  jpeg_finish_decompress(&s.cinfo);
  return Status::Ok();
}

// Pillow's alpha_composite of (r, g, b, a) over opaque white, integer arithmetic of AlphaComposite.c.
inline uint8_t OverWhite(unsigned c, unsigned a) {
  if (a == 0) return 255;
  constexpr unsigned kBits = 7;
  const unsigned outa255 = a * 255 + 255 * (255 - a);
  const unsigned coef1 = a * 255 * 255 * (1u << kBits) / outa255;
  const unsigned coef2 = 255 * (1u << kBits) - coef1;
  const unsigned t = c * coef1 + 255 * coef2 + (0x80u << kBits);
  return static_cast<uint8_t>((((t >> 8) + t) >> 8) >> kBits);
}

RgbImage ToRgb(const Decoded& d, AlphaMode alpha) {
  RgbImage o;
  o.width = d.width;
  o.height = d.height;
  const size_t n = static_cast<size_t>(d.width) * d.height;
  o.pixels.resize(n * 3);
  const bool white = alpha == AlphaMode::kCompositeOnWhite;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = d.px.data() + i * d.channels;
    uint8_t* q = o.pixels.data() + i * 3;
    switch (d.channels) {
      case 1: q[0] = q[1] = q[2] = p[0]; break;
      case 2: q[0] = q[1] = q[2] = white ? OverWhite(p[0], p[1]) : p[0]; break;
      case 3: q[0] = p[0], q[1] = p[1], q[2] = p[2]; break;
      default:
        for (int c = 0; c < 3; ++c) q[c] = white ? OverWhite(p[c], p[3]) : p[c];
    }
  }
  return o;
}

// ---- Pillow's resampling (Resample.c: precompute_coeffs + the 8 bpc passes) ----

double Bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

constexpr int kPrecisionBits = 32 - 8 - 2;

struct Coeffs {
  int ksize = 0;
  std::vector<int> bounds;  // per output: xmin, count
  std::vector<int32_t> k;   // [out][ksize] fixed point
};

Coeffs PrecomputeCoeffs(int64_t in_size, int64_t out_size) {
  constexpr double kSupport = 2.0;
  const double scale = static_cast<double>(static_cast<float>(in_size) - 0.0f) / static_cast<double>(out_size);
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = kSupport * filterscale;
  Coeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.bounds.resize(out_size * 2);
  c.k.assign(out_size * c.ksize, 0);
  std::vector<double> kk(c.ksize);
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = 0.0 + (static_cast<double>(xx) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = static_cast<int>(in_size);
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = Bicubic((x + xmin - center + 0.5) * ss);
      kk[x] = w;
      ww += w;
    }
    for (int x = 0; x < xmax; ++x) {
      if (ww != 0.0) kk[x] /= ww;
      const double v = kk[x] * (1 << kPrecisionBits);
      c.k[xx * c.ksize + x] = static_cast<int32_t>(kk[x] < 0 ? -0.5 + v : 0.5 + v);
    }
    c.bounds[xx * 2] = xmin;
    c.bounds[xx * 2 + 1] = xmax;
  }
  return c;
}

inline uint8_t Clip8(int64_t ss) {
  const int64_t v = ss >> kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

}  // namespace

std::string SniffImageFormat(std::span<const uint8_t> d) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
  if (d.size() >= 8 && std::memcmp(d.data(), kPng, 8) == 0) return "png";
  if (d.size() >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff) return "jpeg";
  return "";
}

Result<RgbImage> DecodeImage(std::span<const uint8_t> data, const ImageLimits& limits, AlphaMode alpha) {
  if (static_cast<int64_t>(data.size()) > limits.max_bytes) {
    return Status::ResourceExhausted("image is " + std::to_string(data.size()) + " bytes, over the limit of " +
                                     std::to_string(limits.max_bytes));
  }
  const std::string fmt = SniffImageFormat(data);
  Decoded d;
  if (fmt == "png") {
    GYRE_RETURN_IF_ERROR(DecodePng(data, limits, &d));
  } else if (fmt == "jpeg") {
    GYRE_RETURN_IF_ERROR(DecodeJpeg(data, limits, &d));
  } else {
    return Status::InvalidArgument(data.empty() ? "empty image data"
                                                : "unsupported image format: only PNG and JPEG are accepted");
  }
  return ToRgb(d, alpha);
}

RgbImage ResizeBicubic(const RgbImage& in, int64_t width, int64_t height) {
  if (width == in.width && height == in.height) return in;
  const Coeffs vert = PrecomputeCoeffs(in.height, height);
  // Rows of the source the vertical pass reads.
  const int64_t y_first = vert.bounds[0];
  const int64_t y_last = vert.bounds[(height - 1) * 2] + vert.bounds[(height - 1) * 2 + 1];
  RgbImage cur;
  const RgbImage* src = &in;
  int64_t row0 = 0;  // source row of src's row 0
  if (width != in.width) {
    const Coeffs hor = PrecomputeCoeffs(in.width, width);
    cur.width = width;
    cur.height = y_last - y_first;
    cur.pixels.resize(static_cast<size_t>(cur.width) * cur.height * 3);
#pragma omp parallel for schedule(static)
    for (int64_t yy = 0; yy < cur.height; ++yy) {
      const uint8_t* row = in.pixels.data() + (yy + y_first) * in.width * 3;
      for (int64_t xx = 0; xx < width; ++xx) {
        const int xmin = hor.bounds[xx * 2], n = hor.bounds[xx * 2 + 1];
        const int32_t* k = &hor.k[xx * hor.ksize];
        int64_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
        for (int x = 0; x < n; ++x) {
          const uint8_t* p = row + (x + xmin) * 3;
          s0 += p[0] * int64_t{k[x]};
          s1 += p[1] * int64_t{k[x]};
          s2 += p[2] * int64_t{k[x]};
        }
        uint8_t* q = cur.pixels.data() + (yy * width + xx) * 3;
        q[0] = Clip8(s0), q[1] = Clip8(s1), q[2] = Clip8(s2);
      }
    }
    src = &cur;
    row0 = y_first;
  }
  if (height == in.height) return cur;  // only the horizontal pass ran (all rows)
  RgbImage out;
  out.width = width;
  out.height = height;
  out.pixels.resize(static_cast<size_t>(width) * height * 3);
  const int64_t w3 = width * 3;
#pragma omp parallel for schedule(static)
  for (int64_t yy = 0; yy < height; ++yy) {
    const int ymin = vert.bounds[yy * 2], n = vert.bounds[yy * 2 + 1];
    const int32_t* k = &vert.k[yy * vert.ksize];
    for (int64_t i = 0; i < w3; ++i) {
      int64_t s = 1 << (kPrecisionBits - 1);
      for (int y = 0; y < n; ++y) s += src->pixels[(y + ymin - row0) * w3 + i] * int64_t{k[y]};
      out.pixels[yy * w3 + i] = Clip8(s);
    }
  }
  return out;
}

Result<ImageSize> PlanImageSize(int64_t width, int64_t height, const ImagePreprocessConfig& c) {
  if (width <= 0 || height <= 0) return Status::InvalidArgument("empty image");
  constexpr int64_t kMaxSide = int64_t{1} << 24;  // keeps every product below in int64 (decoding caps far lower)
  if (width > kMaxSide || height > kMaxSide)
    return Status::InvalidArgument("image side " + std::to_string(std::max(width, height)) + " px is above 16M");
  // The rule of transformers 5.17's glm5_next image processor (read from its source, 2026-12-07):
  // the budget counts both temporal frames of a still image, and the canvas is decided on aligned
  // sides, the upscale of the content on the image's own pixels.
  const int64_t f = c.patch_size * c.merge_size, frames = c.temporal_patch_size;
  const int64_t min_px = c.min_tokens * frames * f * f, max_px = c.max_tokens * frames * f * f;
  if (max_px < frames * f * f) return Status::InvalidArgument("max_tokens leaves no room for one aligned patch");
  auto align = [f](int64_t v) { return (v + f - 1) / f * f; };
  ImageSize s;
  s.canvas_h = align(height);
  s.canvas_w = align(width);
  if (frames * s.canvas_h * s.canvas_w < min_px) {
    // Too small: both sides grow by √(min / pixels), rounded up, then aligned.
    const double scale = std::sqrt(static_cast<double>(min_px) / static_cast<double>(frames * height * width));
    s.canvas_h = align(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(static_cast<double>(height) * scale))));
    s.canvas_w = align(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(static_cast<double>(width) * scale))));
  }
  if (frames * s.canvas_h * s.canvas_w > max_px) {
    // Too large: the largest content height (bisection over 1..height, the width following the
    // aspect ratio, truncated) whose aligned canvas fits the budget; the same probes as the
    // reference, so the same answer where the fit is not monotone.
    int64_t lo = 1, hi = height, best_h = f, best_w = f;
    while (lo <= hi) {
      const int64_t h = (lo + hi) / 2;
      const int64_t w = std::max<int64_t>(
          1, static_cast<int64_t>(std::floor(static_cast<double>(width * h) / static_cast<double>(height))));
      if (frames * align(h) * align(w) <= max_px) {
        best_h = align(h);
        best_w = align(w);
        lo = h + 1;
      } else {
        hi = h - 1;
      }
    }
    s.canvas_h = best_h;
    s.canvas_w = best_w;
  }
  // The content keeps its aspect ratio: scaled by the smaller canvas / side ratio, never above 1
  // unless the image has fewer pixels than the minimum; truncated; the rest of the canvas is padding.
  double scale = std::min(static_cast<double>(s.canvas_h) / static_cast<double>(height),
                          static_cast<double>(s.canvas_w) / static_cast<double>(width));
  if (frames * height * width >= min_px) scale = std::min(1.0, scale);
  s.content_h = std::clamp<int64_t>(static_cast<int64_t>(std::floor(static_cast<double>(height) * scale)), 1, s.canvas_h);
  s.content_w = std::clamp<int64_t>(static_cast<int64_t>(std::floor(static_cast<double>(width) * scale)), 1, s.canvas_w);
  return s;
}

Result<PreprocessedImage> PreprocessImage(const RgbImage& img, const ImagePreprocessConfig& c) {
  GYRE_ASSIGN_OR_RETURN(const ImageSize sz, PlanImageSize(img.width, img.height, c));
  const RgbImage r = ResizeBicubic(img, sz.content_w, sz.content_h);
  const int64_t P = c.patch_size, M = c.merge_size, T = c.temporal_patch_size;
  PreprocessedImage out;
  out.grid_t = 1;
  out.grid_h = sz.canvas_h / P;
  out.grid_w = sz.canvas_w / P;
  out.num_tokens = out.grid_h * out.grid_w / (M * M);
  // Normalised canvas [3][H][W]: rescale in double then float (numpy's float64 · 1/255 cast to
  // float32), then (x − mean) / std in float32; pad pixels are 0 before normalisation.
  std::vector<float> lut[3];
  for (int ch = 0; ch < 3; ++ch) {
    lut[ch].resize(256);
    for (int v = 0; v < 256; ++v) {
      const float x = static_cast<float>(static_cast<double>(v) * (1.0 / 255.0));
      lut[ch][v] = (x - c.mean[ch]) / c.std[ch];
    }
  }
  const int64_t row = 3 * T * P * P;
  const int64_t rows = out.grid_h * out.grid_w;
  out.pixel_values.resize(static_cast<size_t>(rows * row));
  const int64_t bw = out.grid_w / M;
#pragma omp parallel for schedule(static)
  for (int64_t idx = 0; idx < rows; ++idx) {
    // Block-major: block (by, bx) row-major, then (my, mx) row-major inside the block.
    const int64_t blk = idx / (M * M), in = idx % (M * M);
    const int64_t gy = (blk / bw) * M + in / M, gx = (blk % bw) * M + in % M;
    float* o = out.pixel_values.data() + idx * row;
    for (int ch = 0; ch < 3; ++ch) {
      for (int64_t py = 0; py < P; ++py) {
        const int64_t y = gy * P + py;
        for (int64_t px = 0; px < P; ++px) {
          const int64_t x = gx * P + px;
          const uint8_t v = (y < r.height && x < r.width) ? r.pixels[(y * r.width + x) * 3 + ch] : 0;
          const float f = lut[ch][v];
          for (int64_t t = 0; t < T; ++t) o[((ch * T + t) * P + py) * P + px] = f;
        }
      }
    }
  }
  return out;
}

}  // namespace gyre
