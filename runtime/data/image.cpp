// Image decoding (TurboJPEG, libpng) and the torchvision transforms, each written to give the bytes
// PIL 9.4 gives: the same libjpeg settings as PIL's decoder (ISLOW DCT, fancy upsampling), PIL's
// convert() formulas, and PIL's BILINEAR resampling (ImagingResample) with its 22-bit fixed-point
// weights, so resize results are PIL's exactly. Every library call that can fail is checked here;
// nothing is printed by the libraries (TurboJPEG keeps its messages, libpng's go to our handlers).
#include "runtime/data/image.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "runtime/copy_bytes.h"
#include "runtime/error.h"

namespace cb {
namespace {

constexpr uint64_t kMaxPixels = uint64_t{1} << 28;  // a bigger picture is a decompression bomb

// PIL's cmyk2rgb after its JPEG decoder's "CMYK;I" unpacking (PIL assumes Adobe's inverted CMYK for
// every 4-component JPEG, so c = 255 - stored): channel = (255 - k) - (c * (255 - k)) / 255 with
// PIL's MULDIV255 rounding.
void cmyk_to_rgb(const uint8_t* in, uint8_t* out, size_t pixels) {
  auto muldiv255 = [](int a, int b) {
    const int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
  };
  for (size_t i = 0; i < pixels; ++i, in += 4, out += 3) {
    const int nk = in[3];  // 255 - k, with k = 255 - stored
    for (int c = 0; c < 3; ++c)
      out[c] = static_cast<uint8_t>(std::clamp(nk - muldiv255(255 - in[c], nk), 0, 255));
  }
}

// One TurboJPEG decompressor per thread (decoding runs on several worker threads at once), replaced
// after any failure: a failed tjDecompressHeader3 leaves the handle mid-header, and the next file
// would be read as that header's continuation.
struct TjDecompressor {
  tjhandle h = tjInitDecompress();
  ~TjDecompressor() {
    if (h) tjDestroy(h);
  }
  // The error message of the failed call, then a fresh handle.
  std::string fail() {
    std::string msg = tjGetErrorStr2(h);
    tjDestroy(h);
    h = tjInitDecompress();
    return msg;
  }
};

bool decode_jpeg(const uint8_t* data, size_t n, const DecodeOptions& o, Image& out,
                 std::string& why) {
  thread_local TjDecompressor tj;
  if (!tj.h) {
    why = "cannot initialise the JPEG decoder";
    return false;
  }
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj.h, data, static_cast<unsigned long>(n), &width, &height, &subsamp,
                          &colorspace) != 0) {
    why = "bad JPEG header: " + tj.fail();
    return false;
  }
  if (width <= 0 || height <= 0 ||
      static_cast<uint64_t>(width) * static_cast<uint64_t>(height) > kMaxPixels) {
    why = fmt::format("JPEG of {}x{} pixels is over the limit of 2^28", width, height);
    return false;
  }

  // The smallest M/8 keeping both sides >= min_side; TurboJPEG's list runs from 2/1 down to 1/8.
  tjscalingfactor scale{1, 1};
  if (o.min_side > 0) {
    int count = 0;
    const tjscalingfactor* sf = tjGetScalingFactors(&count);
    for (int i = 0; sf && i < count; ++i) {
      if (sf[i].num > sf[i].denom) continue;
      const int w = TJSCALED(width, sf[i]), h = TJSCALED(height, sf[i]);
      if (w >= o.min_side && h >= o.min_side && sf[i].num * scale.denom < scale.num * sf[i].denom)
        scale = sf[i];
    }
  }
  const int w = TJSCALED(width, scale), h = TJSCALED(height, scale);
  const size_t pixels = static_cast<size_t>(w) * static_cast<size_t>(h);

  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  const bool grey = colorspace == TJCS_GRAY;
  const int pf = cmyk ? TJPF_CMYK : grey ? TJPF_GRAY : TJPF_RGB;
  const int decoded_channels = tjPixelSize[pf];
  out.rows = h;
  out.cols = w;
  out.channels = o.channels;
  out.px.resize(pixels * static_cast<size_t>(o.channels));
  std::vector<uint8_t> tmp;
  const bool direct = decoded_channels == o.channels;
  if (!direct) tmp.resize(pixels * static_cast<size_t>(decoded_channels));
  uint8_t* dst = direct ? out.px.data() : tmp.data();
  // STOPONWARNING: libjpeg's warnings (premature end of data, corrupt data) are failures;
  // LIMITSCANS refuses progressive files with absurd scan counts (a CPU bomb).
  if (tjDecompress2(tj.h, data, static_cast<unsigned long>(n), dst, w, 0, h, pf,
                    TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0) {
    why = "bad JPEG data: " + tj.fail();
    return false;
  }
  if (direct) return true;
  if (cmyk) {
    if (o.channels == 3) {
      cmyk_to_rgb(tmp.data(), out.px.data(), pixels);
    } else {  // PIL converts CMYK to L through RGB
      std::vector<uint8_t> rgb(pixels * 3);
      cmyk_to_rgb(tmp.data(), rgb.data(), pixels);
      convert_channels(rgb.data(), 3, out.px.data(), 1, pixels);
    }
  } else {
    convert_channels(tmp.data(), decoded_channels, out.px.data(), o.channels, pixels);
  }
  return true;
}

// ---- PNG: libpng's classic API ----------------------------------------------------------------
// Not the simplified png_image API: that one applies gamma (it treats 16-bit files as linear and
// converts them to sRGB, and honours gAMA), where PIL ignores gamma and keeps the high byte of
// 16-bit samples. With the classic API we ask for exactly PIL's conversions.

struct PngSource {
  const uint8_t* data;
  size_t n;
  size_t pos;
  char error[200];
};

void png_read_bytes(png_structp png, png_bytep dst, size_t len) {
  auto* s = static_cast<PngSource*>(png_get_io_ptr(png));
  if (len > s->n - s->pos) png_error(png, "truncated PNG data");
  std::memcpy(dst, s->data + s->pos, len);
  s->pos += len;
}

void png_on_error(png_structp png, png_const_charp msg) {
  auto* s = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(s->error, sizeof s->error, "%s", msg);
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}  // benign (an ancillary chunk's CRC, ...)

// Every libpng call that may longjmp is in here, and this function owns no C++ object (the
// vectors are the caller's), so the longjmp from png_on_error skips no destructor.
bool png_read_pixels(png_structp png, png_infop info, PngSource& src, int channels, Image& out,
                     std::vector<uint8_t>& tmp, std::vector<png_bytep>& rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (static_cast<uint64_t>(w) * h > kMaxPixels) {
    std::snprintf(src.error, sizeof src.error, "PNG of %ux%u pixels is over the limit of 2^28",
                  static_cast<unsigned>(w), static_cast<unsigned>(h));
    return false;
  }
  const int colour_type = png_get_color_type(png, info);
  // PIL keeps the high byte of 16-bit RGB(A)/LA samples (rawmodes "RGB;16B" etc.), which
  // strip_16 does. A 16-bit grey PNG (no alpha) differs: PIL opens it as mode I;16 and
  // convert("L") clips values above 255 to white; we keep the high byte there too.
  png_set_strip_16(png);
  if (colour_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (colour_type == PNG_COLOR_TYPE_GRAY) png_set_expand_gray_1_2_4_to_8(png);  // 0..255 as PIL
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int cin = png_get_channels(png, info);  // 1..4: palette tRNS may have become alpha
  if (png_get_bit_depth(png, info) != 8 || cin < 1 || cin > 4) {
    std::snprintf(src.error, sizeof src.error, "unsupported PNG pixel format");
    return false;
  }
  const size_t row_bytes = png_get_rowbytes(png, info);
  if (row_bytes != static_cast<size_t>(w) * static_cast<size_t>(cin)) {
    std::snprintf(src.error, sizeof src.error, "unsupported PNG pixel format");
    return false;
  }
  const size_t pixels = static_cast<size_t>(w) * h;
  out.rows = static_cast<int>(h);
  out.cols = static_cast<int>(w);
  out.channels = channels;
  out.px.resize(pixels * static_cast<size_t>(channels));
  const bool direct = cin == channels;
  if (!direct) tmp.resize(pixels * static_cast<size_t>(cin));
  uint8_t* dst = direct ? out.px.data() : tmp.data();
  rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = dst + y * row_bytes;
  png_read_image(png, rows.data());
  if (!direct) convert_channels(tmp.data(), cin, out.px.data(), channels, pixels);
  return true;
}

bool decode_png(const uint8_t* data, size_t n, const DecodeOptions& o, Image& out,
                std::string& why) {
  PngSource src{data, n, 0, {}};
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!info) {
    png_destroy_read_struct(png ? &png : nullptr, nullptr, nullptr);
    why = "cannot initialise the PNG decoder";
    return false;
  }
  png_set_read_fn(png, &src, png_read_bytes);
  std::vector<uint8_t> tmp;
  std::vector<png_bytep> rows;
  const bool ok = png_read_pixels(png, info, src, o.channels, out, tmp, rows);
  png_destroy_read_struct(&png, &info, nullptr);
  if (!ok) why = std::string("bad PNG data: ") + src.error;
  return ok;
}

// ---- PIL's BILINEAR resampling (libImaging/Resample.c) ----------------------------------------
constexpr int kPrecisionBits = 32 - 8 - 2;  // PIL's fixed point for 8-bit images

// For each output index: the first input index, the tap count, and `ksize` fixed-point weights.
struct Taps {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> w;
};

// PIL's precompute_coeffs with the triangle filter (support 1) on [0, in_size), then
// normalize_coeffs_8bpc. The expressions keep PIL's order so the doubles round alike.
Taps bilinear_taps(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  Taps t;
  t.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(static_cast<size_t>(out_size));
  t.count.resize(static_cast<size_t>(out_size));
  t.w.assign(static_cast<size_t>(out_size) * static_cast<size_t>(t.ksize), 0);
  std::vector<double> k(static_cast<size_t>(t.ksize));
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double d = std::abs((x + xmin - center + 0.5) * ss);
      k[static_cast<size_t>(x)] = d < 1.0 ? 1.0 - d : 0.0;
      ww += k[static_cast<size_t>(x)];
    }
    int32_t* wk = &t.w[static_cast<size_t>(xx) * static_cast<size_t>(t.ksize)];
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? k[static_cast<size_t>(x)] / ww : k[static_cast<size_t>(x)];
      wk[x] = static_cast<int32_t>(0.5 + v * (1 << kPrecisionBits));  // triangle weights are >= 0
    }
    t.first[static_cast<size_t>(xx)] = xmin;
    t.count[static_cast<size_t>(xx)] = xmax;
  }
  return t;
}

// PIL's clip8: the accumulator (which started at half a unit) shifted down, clamped to a byte.
inline uint8_t clip8(int32_t v) {
  if (v >= (1 << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

// Horizontal pass over `rows` rows: src rows `src_stride` bytes apart, dst packed.
template <int C>
void resample_horizontal(const uint8_t* src, size_t src_stride, int rows, const Taps& t,
                         int out_cols, uint8_t* dst) {
  for (int y = 0; y < rows; ++y) {
    const uint8_t* in = src + static_cast<size_t>(y) * src_stride;
    uint8_t* o = dst + static_cast<size_t>(y) * static_cast<size_t>(out_cols) * C;
    for (int x = 0; x < out_cols; ++x) {
      const int32_t* k = &t.w[static_cast<size_t>(x) * static_cast<size_t>(t.ksize)];
      const uint8_t* p = in + static_cast<size_t>(t.first[static_cast<size_t>(x)]) * C;
      const int count = t.count[static_cast<size_t>(x)];
      int32_t acc[C];
      for (int c = 0; c < C; ++c) acc[c] = 1 << (kPrecisionBits - 1);
      for (int i = 0; i < count; ++i)
        for (int c = 0; c < C; ++c) acc[c] += p[i * C + c] * k[i];
      for (int c = 0; c < C; ++c) o[x * C + c] = clip8(acc[c]);
    }
  }
}

// Vertical pass: each output row accumulates its input rows (`row_bytes` wide, `src_stride`
// apart) in `acc`, streaming along rows.
void resample_vertical(const uint8_t* src, size_t src_stride, size_t row_bytes, const Taps& t,
                       int out_rows, uint8_t* dst) {
  std::vector<int32_t> acc(row_bytes);
  for (int y = 0; y < out_rows; ++y) {
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    const int32_t* k = &t.w[static_cast<size_t>(y) * static_cast<size_t>(t.ksize)];
    const int first = t.first[static_cast<size_t>(y)];
    for (int i = 0; i < t.count[static_cast<size_t>(y)]; ++i) {
      const uint8_t* in = src + static_cast<size_t>(first + i) * src_stride;
      const int32_t w = k[i];
      for (size_t j = 0; j < row_bytes; ++j) acc[j] += in[j] * w;
    }
    uint8_t* o = dst + static_cast<size_t>(y) * row_bytes;
    for (size_t j = 0; j < row_bytes; ++j) o[j] = clip8(acc[j]);
  }
}

void check_box(const Image& src, const CropBox& b) {
  CB_CHECK(b.top >= 0 && b.left >= 0 && b.height > 0 && b.width > 0 &&
           b.top + b.height <= src.rows && b.left + b.width <= src.cols);
}

}  // namespace

// PIL's L24 luma (ITU-R 601-2), used by convert("L") from RGB, CMYK (via RGB) and palettes.
void convert_channels(const uint8_t* in, int cin, uint8_t* out, int cout, size_t pixels) {
  for (size_t i = 0; i < pixels; ++i, in += cin, out += cout) {
    const bool colour = cin >= 3;
    if (cout == 1) {
      out[0] = colour ? static_cast<uint8_t>(
                            (in[0] * 19595u + in[1] * 38470u + in[2] * 7471u + 0x8000u) >> 16)
                      : in[0];
    } else {
      out[0] = in[0];
      out[1] = colour ? in[1] : in[0];
      out[2] = colour ? in[2] : in[0];
    }
  }
}

ImageKind sniff_image(const uint8_t* data, size_t n) {
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (n >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return ImageKind::Jpeg;
  if (n >= 8 && std::memcmp(data, kPng, 8) == 0) return ImageKind::Png;
  return ImageKind::Unknown;
}

bool decode_image(const uint8_t* data, size_t n, const DecodeOptions& o, Image& out,
                  std::string& why) {
  if (o.channels != 1 && o.channels != 3) {
    why = fmt::format("cannot decode to {} channels (1 or 3)", o.channels);
    return false;
  }
  if (!data || n == 0) {
    why = "empty image data";
    return false;
  }
  switch (sniff_image(data, n)) {
    case ImageKind::Jpeg:
      return decode_jpeg(data, n, o, out, why);
    case ImageKind::Png:
      return decode_png(data, n, o, out, why);
    case ImageKind::Unknown:
      break;
  }
  why = "not a JPEG or PNG file";
  return false;
}

std::vector<uint8_t> encode_jpeg(const Image& img, int quality) {
  CB_CHECK(img.channels == 1 || img.channels == 3);
  tjhandle h = tjInitCompress();
  if (!h) fail("encode_jpeg: cannot initialise the JPEG encoder");
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const bool grey = img.channels == 1;
  const int rc = tjCompress2(h, img.px.data(), img.cols, 0, img.rows, grey ? TJPF_GRAY : TJPF_RGB,
                             &buf, &size, grey ? TJSAMP_GRAY : TJSAMP_420, quality, 0);
  std::string err = rc != 0 ? tjGetErrorStr2(h) : "";
  std::vector<uint8_t> out;
  if (rc == 0) out.assign(buf, buf + size);
  tjFree(buf);
  tjDestroy(h);
  if (rc != 0) fail("encode_jpeg: {}", err);
  return out;
}

std::vector<uint8_t> encode_png(const Image& img) {
  CB_CHECK(img.channels == 1 || img.channels == 3);
  png_image pi{};
  pi.version = PNG_IMAGE_VERSION;
  pi.width = static_cast<png_uint_32>(img.cols);
  pi.height = static_cast<png_uint_32>(img.rows);
  pi.format = img.channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  // The first call measures, the second writes.
  if (!png_image_write_to_memory(&pi, nullptr, &size, 0, img.px.data(), 0, nullptr))
    fail("encode_png: {}", pi.message);
  std::vector<uint8_t> out(size);
  if (!png_image_write_to_memory(&pi, out.data(), &size, 0, img.px.data(), 0, nullptr))
    fail("encode_png: {}", pi.message);
  out.resize(size);
  return out;
}

CropBox random_resized_crop_box(int rows, int cols, std::mt19937_64& rng, double scale_lo,
                                double scale_hi, double ratio_lo, double ratio_hi) {
  const double area = static_cast<double>(rows) * cols;
  std::uniform_real_distribution<double> scale_d(scale_lo, scale_hi);
  std::uniform_real_distribution<double> log_ratio_d(std::log(ratio_lo), std::log(ratio_hi));
  // Python's round(): half to even, which nearbyint does in the default rounding mode.
  auto round_int = [](double v) { return static_cast<int>(std::nearbyint(v)); };
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * scale_d(rng);
    const double aspect = std::exp(log_ratio_d(rng));
    const int w = round_int(std::sqrt(target_area * aspect));
    const int h = round_int(std::sqrt(target_area / aspect));
    if (w > 0 && w <= cols && h > 0 && h <= rows) {
      const int top = std::uniform_int_distribution<int>(0, rows - h)(rng);
      const int left = std::uniform_int_distribution<int>(0, cols - w)(rng);
      return {top, left, h, w};
    }
  }
  // torchvision's fallback: the centre crop at the ratio clamped to the range.
  const double in_ratio = static_cast<double>(cols) / rows;
  int w = cols, h = rows;
  if (in_ratio < std::min(ratio_lo, ratio_hi)) {
    h = round_int(w / std::min(ratio_lo, ratio_hi));
  } else if (in_ratio > std::max(ratio_lo, ratio_hi)) {
    w = round_int(h * std::max(ratio_lo, ratio_hi));
  }
  return {(rows - h) / 2, (cols - w) / 2, h, w};
}

CropBox center_crop_box(int rows, int cols, int out_rows, int out_cols) {
  CB_CHECK(out_rows > 0 && out_cols > 0 && out_rows <= rows && out_cols <= cols);
  return {static_cast<int>(std::nearbyint((rows - out_rows) / 2.0)),
          static_cast<int>(std::nearbyint((cols - out_cols) / 2.0)), out_rows, out_cols};
}

std::pair<int, int> shorter_side_size(int rows, int cols, int s) {
  const int64_t shorter = std::min(rows, cols), longer = std::max(rows, cols);
  const int new_long = static_cast<int>(static_cast<double>(int64_t{s} * longer) / shorter);
  return rows <= cols ? std::pair{s, new_long} : std::pair{new_long, s};
}

std::pair<int, int> cover_size(int rows, int cols, int out_rows, int out_cols, double margin) {
  CB_CHECK(rows > 0 && cols > 0 && out_rows > 0 && out_cols > 0 && margin >= 1.0);
  const int64_t tr = std::lround(out_rows * margin), tc = std::lround(out_cols * margin);
  // Rows limit when tr / rows >= tc / cols (in integers, so that equal aspects compare equal).
  if (tr * cols >= tc * rows) {
    const int c = static_cast<int>(static_cast<double>(tr * cols) / rows);
    return {static_cast<int>(tr), std::max(c, out_cols)};
  }
  const int r = static_cast<int>(static_cast<double>(tc * rows) / cols);
  return {std::max(r, out_rows), static_cast<int>(tc)};
}

Image crop_resize(const Image& src, const CropBox& box, int out_rows, int out_cols) {
  check_box(src, box);
  CB_CHECK(out_rows > 0 && out_cols > 0 && (src.channels == 1 || src.channels == 3));
  const int C = src.channels;
  const size_t src_stride = static_cast<size_t>(src.cols) * static_cast<size_t>(C);
  const uint8_t* origin = src.px.data() + static_cast<size_t>(box.top) * src_stride +
                          static_cast<size_t>(box.left) * static_cast<size_t>(C);
  const bool horizontal = out_cols != box.width, vertical = out_rows != box.height;
  // As PIL: an axis whose size is unchanged is not resampled (no pass, not an identity filter).
  if (!horizontal && !vertical) return crop(src, box);

  Image out;
  out.rows = out_rows;
  out.cols = out_cols;
  out.channels = C;
  out.px.resize(static_cast<size_t>(out_rows) * static_cast<size_t>(out_cols) *
                static_cast<size_t>(C));
  const size_t out_row_bytes = static_cast<size_t>(out_cols) * static_cast<size_t>(C);
  auto horizontal_pass = [&](const uint8_t* in, int rows, uint8_t* dst) {
    const Taps tx = bilinear_taps(box.width, out_cols);
    if (C == 1)
      resample_horizontal<1>(in, src_stride, rows, tx, out_cols, dst);
    else
      resample_horizontal<3>(in, src_stride, rows, tx, out_cols, dst);
  };
  if (!vertical) {
    horizontal_pass(origin, box.height, out.px.data());
    return out;
  }
  Taps ty = bilinear_taps(box.height, out_rows);
  if (!horizontal) {
    resample_vertical(origin, src_stride, out_row_bytes, ty, out_rows, out.px.data());
    return out;
  }
  // Both: the horizontal pass covers only the rows the vertical taps read (PIL's ybox), into an
  // 8-bit intermediate; the vertical taps are shifted to it.
  const int first = ty.first.front(), last = ty.first.back() + ty.count.back();
  std::vector<uint8_t> mid(static_cast<size_t>(last - first) * out_row_bytes);
  horizontal_pass(origin + static_cast<size_t>(first) * src_stride, last - first, mid.data());
  for (int& f : ty.first) f -= first;
  resample_vertical(mid.data(), out_row_bytes, out_row_bytes, ty, out_rows, out.px.data());
  return out;
}

Image resize(const Image& src, int out_rows, int out_cols) {
  return crop_resize(src, {0, 0, src.rows, src.cols}, out_rows, out_cols);
}

Image crop(const Image& src, const CropBox& box) {
  check_box(src, box);
  Image out;
  out.rows = box.height;
  out.cols = box.width;
  out.channels = src.channels;
  const size_t C = static_cast<size_t>(src.channels);
  const size_t row_bytes = static_cast<size_t>(box.width) * C;
  out.px.resize(static_cast<size_t>(box.height) * row_bytes);
  for (int y = 0; y < box.height; ++y) {
    const uint8_t* in =
        src.px.data() + (static_cast<size_t>(box.top + y) * static_cast<size_t>(src.cols) +
                         static_cast<size_t>(box.left)) *
                            C;
    copy_bytes(out.px.data() + static_cast<size_t>(y) * row_bytes, in, row_bytes);
  }
  return out;
}

Image crop_padded(const Image& src, const CropBox& box) {
  CB_CHECK(box.height > 0 && box.width > 0);
  if (box.top >= 0 && box.left >= 0 && box.top + box.height <= src.rows &&
      box.left + box.width <= src.cols)
    return crop(src, box);
  Image out;
  out.rows = box.height;
  out.cols = box.width;
  out.channels = src.channels;
  const size_t C = static_cast<size_t>(src.channels);
  out.px.assign(static_cast<size_t>(box.height) * static_cast<size_t>(box.width) * C, 0);
  // The part of the box inside the image, in the box's and the image's coordinates.
  const int x0 = std::max(0, -box.left), x1 = std::min(box.width, src.cols - box.left);
  if (x1 <= x0) return out;
  const size_t row_bytes = static_cast<size_t>(x1 - x0) * C;
  for (int y = std::max(0, -box.top); y < std::min(box.height, src.rows - box.top); ++y) {
    const uint8_t* in =
        src.px.data() + (static_cast<size_t>(box.top + y) * static_cast<size_t>(src.cols) +
                         static_cast<size_t>(box.left + x0)) *
                            C;
    copy_bytes(
        out.px.data() +
            (static_cast<size_t>(y) * static_cast<size_t>(box.width) + static_cast<size_t>(x0)) * C,
        in, row_bytes);
  }
  return out;
}

void flip_horizontal(Image& img) {
  if (img.cols < 2) return;
  const size_t C = static_cast<size_t>(img.channels);
  for (int y = 0; y < img.rows; ++y) {
    uint8_t* row = img.px.data() + static_cast<size_t>(y) * static_cast<size_t>(img.cols) * C;
    for (size_t l = 0, r = static_cast<size_t>(img.cols) - 1; l < r; ++l, --r)
      std::swap_ranges(row + l * C, row + (l + 1) * C, row + r * C);
  }
}

void to_chw_f32(const Image& img, const float* mean, const float* std, float* out) {
  const size_t plane = static_cast<size_t>(img.rows) * static_cast<size_t>(img.cols);
  const size_t C = static_cast<size_t>(img.channels);
  for (size_t c = 0; c < C; ++c) {
    float* o = out + c * plane;
    // ToTensor divides by 255 in float, Normalize subtracts then divides: the same float steps.
    for (size_t i = 0; i < plane; ++i) o[i] = (img.px[i * C + c] / 255.0f - mean[c]) / std[c];
  }
}

}  // namespace cb
