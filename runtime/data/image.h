// Images for training: decoding JPEG (libjpeg-turbo's TurboJPEG API, with its DCT scaling) and PNG
// (libpng), and the ImageNet transforms, each matched to what PyTorch users get from torchvision
// on PIL images (torchvision 0.14: RandomResizedCrop, RandomHorizontalFlip, Resize, CenterCrop,
// ToTensor, Normalize).
//
// An Image is 8-bit, rows x cols x channels interleaved (HWC, as PIL's bytes), channels 1 (grey)
// or 3 (RGB). Channel conversions follow PIL's Image.convert:
//  - grey -> RGB replicates the grey value;
//  - RGB -> grey is ITU-R 601-2 luma, L = (R*19595 + G*38470 + B*7471 + 0x8000) >> 16;
//  - an alpha channel is dropped (not composited), as convert("RGB") does;
//  - CMYK (Adobe-inverted, as JPEG files store it) -> RGB as PIL's JPEG decoder + convert("RGB").
//
// Resampling is PIL's Image.resize with BILINEAR: separable, antialiased when shrinking (a triangle
// filter widened by the scale), horizontal pass first, rounded to 8 bits between the passes, with
// PIL's 22-bit fixed-point weights: the bytes are PIL's exactly (tests/test_image.cpp compares).
// An axis whose size does not change is not resampled, as in PIL.
//
// Bad data never throws and never crashes: decode_image returns false with the reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace cb {

struct Image {
  int rows = 0, cols = 0, channels = 0;
  std::vector<uint8_t> px;  // rows * cols * channels, HWC

  uint8_t at(int y, int x, int c) const {
    return px[(static_cast<size_t>(y) * static_cast<size_t>(cols) + static_cast<size_t>(x)) *
                  static_cast<size_t>(channels) +
              static_cast<size_t>(c)];
  }
};

enum class ImageKind { Unknown, Jpeg, Png };
// The format from the first bytes (JPEG: FF D8 FF; PNG: the 8-byte signature).
ImageKind sniff_image(const uint8_t* data, size_t n);

struct DecodeOptions {
  int channels = 3;  // 1 or 3: the result's channels, converted as above
  // > 0: a JPEG is decoded at the smallest of libjpeg-turbo's scales M/8 (M = 1..8) that keeps
  // both sides >= min_side (full size when the image is already smaller): a 3000x2000 photo for a
  // 256 target decodes straight to 375x250. PNG is always decoded at full size.
  int min_side = 0;
};

// Decodes a JPEG or PNG file's bytes. PIL ignores PNG gamma (gAMA) and so do we; a 16-bit PNG
// keeps the high byte of each sample, as PIL does for RGB(A) and LA (for 16-bit grey PIL's
// convert("L") clips at 255 instead). False (and `why`, e.g. "bad JPEG data: Premature end of
// JPEG file", "not a JPEG or PNG file") for anything it cannot decode completely: a corrupt,
// truncated, empty or non-image input, an unsupported pixel format, or a picture over 2^28 pixels
// (a decompression bomb). libjpeg warnings (premature end of data, corrupt segments) count as
// failures.
bool decode_image(const uint8_t* data, size_t n, const DecodeOptions& o, Image& out,
                  std::string& why);

// Encoders, for tests, benchmarks and generated data sets: JPEG at `quality` (4:2:0 for RGB) and
// PNG (8-bit grey or RGB). Throw cb::Error if the library fails.
std::vector<uint8_t> encode_jpeg(const Image& img, int quality = 90);
std::vector<uint8_t> encode_png(const Image& img);

// Pixels of `in` with `cin` interleaved channels (1..4, 8-bit) to `cout` (1 or 3) channels, as
// PIL's convert: alpha dropped, grey replicated, RGB to the luma above.
void convert_channels(const uint8_t* in, int cin, uint8_t* out, int cout, size_t pixels);

// An integer box inside an image (PIL's crop box is (left, top, left + width, top + height)).
struct CropBox {
  int top = 0, left = 0, height = 0, width = 0;
};

// torchvision's RandomResizedCrop.get_params with scale [scale_lo, scale_hi] and ratio
// [ratio_lo, ratio_hi]: up to 10 draws of an area fraction (uniform) and a log-uniform aspect
// ratio, width = round(sqrt(area * ratio)), height = round(sqrt(area / ratio)), the first that fits
// taken at a uniform position; otherwise the centre crop at the ratio clamped to the range. The
// random numbers come from `rng` (std::uniform_real_distribution / uniform_int_distribution), so
// the box is deterministic for a seeded rng; it is not torch's random stream.
CropBox random_resized_crop_box(int rows, int cols, std::mt19937_64& rng, double scale_lo = 0.08,
                                double scale_hi = 1.0, double ratio_lo = 3.0 / 4.0,
                                double ratio_hi = 4.0 / 3.0);
// torchvision's CenterCrop box: top = int(round((rows - out_rows) / 2.0)), left likewise. The
// output must fit (out_rows <= rows, out_cols <= cols).
CropBox center_crop_box(int rows, int cols, int out_rows, int out_cols);
// torchvision's Resize(s) size for an int s: the shorter side becomes s, the longer
// int(s * long / short). Returns {rows, cols}.
std::pair<int, int> shorter_side_size(int rows, int cols, int s);
// The size a rows x cols image is resized to, keeping its aspect, so that it covers
// round(out_rows * margin) x round(out_cols * margin): the side that limits gets exactly its
// target, the other int(side * scale) as torchvision's Resize, and at least its out_ size. For a
// square output this is shorter_side_size(rows, cols, round(out * margin)); an image of the
// output's aspect with margin 1 becomes exactly out_rows x out_cols. Returns {rows, cols}.
std::pair<int, int> cover_size(int rows, int cols, int out_rows, int out_cols, double margin = 1.0);

// PIL: img.crop(box).resize((out_cols, out_rows), Image.BILINEAR). The box must lie inside `src`.
Image crop_resize(const Image& src, const CropBox& box, int out_rows, int out_cols);
// PIL: img.resize((out_cols, out_rows), Image.BILINEAR).
Image resize(const Image& src, int out_rows, int out_cols);
// PIL: img.crop(box) (no resampling).
Image crop(const Image& src, const CropBox& box);
// PIL: img.crop(box) for a box that may reach outside the image (negative top/left, or past the
// far edges): what lies outside is 0, as torchvision's RandomCrop(size, padding) with fill 0.
Image crop_padded(const Image& src, const CropBox& box);
// PIL: ImageOps.mirror (left-right), in place.
void flip_horizontal(Image& img);

// ToTensor + Normalize: out[c][y][x] = (px(y, x, c) / 255 - mean[c]) / std[c], CHW f32 for
// img.channels channels (mean and std have that many entries).
void to_chw_f32(const Image& img, const float* mean, const float* std, float* out);

}  // namespace cb
