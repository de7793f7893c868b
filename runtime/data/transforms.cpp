// Transforms of image columns (see transforms.h).
#include "runtime/data/transforms.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/error.h"

namespace cb {

namespace {

// splitmix64: the seed of example i's generator in epoch e (independent streams per example).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// --augment auto's thresholds (see transforms.h): inputs or data at most this long on their longer
// side get CIFAR's recipe; square inputs at least this big ImageNet's; others the mild scale.
// 0.25 rather than 0.5: PaddleOCR's direction classifier (48x192) on 400 text strips, one epoch,
// three seeds, reached 100/100/100% with 0.25 and 86/90/100% with 0.5 (ImageNet's 0.08 with the
// centred aspect 46/84/100%).
constexpr int kSmallSide = 64, kImageNetSide = 160;
constexpr double kMildScale = 0.25;

const float kImageNetMean[3] = {0.485f, 0.456f, 0.406f};
const float kImageNetStd[3] = {0.229f, 0.224f, 0.225f};

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[N";
  for (int64_t v : d) s += fmt::format(",{}", v);
  return s + "]";
}

void write_chw(const Image& img, const TransformSpec& s, void* out) {
  CB_CHECK(img.rows == s.rows && img.cols == s.cols && img.channels == s.channels);
  if (s.dtype == DType::U8) {
    auto* o = static_cast<uint8_t*>(out);
    const size_t plane = static_cast<size_t>(s.rows) * static_cast<size_t>(s.cols);
    for (size_t k = 0; k < plane; ++k)
      for (int c = 0; c < s.channels; ++c)
        o[static_cast<size_t>(c) * plane + k] = img.px[k * static_cast<size_t>(s.channels) + c];
    return;
  }
  to_chw_f32(img, s.mean.data(), s.std.data(), static_cast<float*>(out));
}

// What a few training images (up to 9, spread over the set) say about the data, for the choice
// of augmentation, at the cost of a few decodes: their median longer side (0 when none loads)
// and whether they are all grey (R = G = B everywhere, or decoded to the model's one channel).
struct SampledImages {
  int side = 0;
  bool grey = false;
};

SampledImages sample_images(const Source& ex, int channels) {
  const ExampleDims dd = image_dims(ex);
  const int col = ex.image_column();
  const int64_t n = std::min<int64_t>(ex.size(), 9);
  std::vector<int> sides;
  bool grey = true;
  ReadOptions o;
  o.decode.channels = channels;
  ColumnValue v;
  const Image& img = v.image;
  std::string why;
  for (int64_t k = 0; k < n; ++k) {
    if (!ex.read(k * ex.size() / n, static_cast<size_t>(col), o, v, why)) continue;
    sides.push_back(std::max(img.rows, img.cols));
    for (size_t p = 0; grey && img.channels == 3 && p + 2 < img.px.size(); p += 3)
      grey = img.px[p] == img.px[p + 1] && img.px[p] == img.px[p + 2];
  }
  SampledImages out;
  out.grey = !sides.empty() && grey;
  if (dd.fixed()) {
    out.side = std::max(dd.rows, dd.cols);
  } else if (!sides.empty()) {
    std::nth_element(sides.begin(), sides.begin() + sides.size() / 2, sides.end());
    out.side = sides[sides.size() / 2];
  }
  return out;
}

// --augment auto (and crop): which augmentation, and the evaluation margin (see transforms.h).
void choose_augmentation(TransformSpec& s, const Dataset& data, const TransformOptions& o) {
  const int H = s.rows, W = s.cols;
  const double aspect = static_cast<double>(W) / H;
  const bool squarish = aspect >= 3.0 / 4.0 && aspect <= 4.0 / 3.0;
  const bool imagenet_size = squarish && std::min(H, W) >= kImageNetSide;
  // Evaluation: torchvision's 256/224 margin for ImageNet-size inputs only, however training is
  // augmented (a pretrained model is evaluated as it was measured).
  s.eval_margin = imagenet_size && data.photos ? 256.0 / 224.0 : 1.0;
  if (!s.augment) return;
  const bool wide = W >= 2 * H;
  s.flip = o.flip && !(o.augment == AugmentMode::Auto && wide);
  std::string no_flip = !o.flip ? "--no-flip" : "wide input: mirrored text is no text";
  if (o.augment == AugmentMode::Crop) {  // the ImageNet recipe, as asked
    s.why = !s.flip ? fmt::format("--augment crop: ImageNet's recipe; {}", no_flip)
                    : std::string("--augment crop: ImageNet's recipe");
    return;
  }
  const SampledImages sampled = sample_images(*data.train, s.channels);
  const int data_side = sampled.side;
  std::vector<std::string> why;
  if (std::max(H, W) <= kSmallSide || (data_side > 0 && data_side <= kSmallSide)) {
    const std::string small = std::max(H, W) <= kSmallSide
                                  ? std::string("small")
                                  : fmt::format("small (about {} px)", data_side);
    if (sampled.grey) {
      // Grey scans (digits, garments), centred by construction: a milder shift on half the
      // examples, no flip (see transforms.h for the measurements).
      s.pad_rows = std::max(1, static_cast<int>(std::lround(H / 16.0)));
      s.pad_cols = std::max(1, static_cast<int>(std::lround(W / 16.0)));
      s.pad_prob = 0.5;
      s.flip = false;
      why.push_back(fmt::format("{} grey images: CIFAR's recipe, milder", small));
      if (o.flip) no_flip = "grey scans (digits, garments): a flip costs accuracy";
    } else {
      s.pad_rows = std::max(1, H / 8);
      s.pad_cols = std::max(1, W / 8);
      why.push_back(fmt::format("{} images: CIFAR's recipe", small));
    }
  } else {
    s.scale_lo = imagenet_size ? 0.08 : kMildScale;
    s.ratio_lo = 3.0 / 4.0 * aspect;
    s.ratio_hi = 4.0 / 3.0 * aspect;
    why.push_back(imagenet_size ? std::string("photos at ImageNet's size")
                                : std::string("a milder scale: not a square input >= 160"));
  }
  if (!s.flip) why.push_back(no_flip);
  s.why = fmt::format("{}", fmt::join(why, "; "));
}

}  // namespace

int TransformSpec::eval_resize() const {
  return static_cast<int>(std::lround(std::max(rows, cols) * eval_margin));
}

std::pair<int, int> TransformSpec::eval_size(int img_rows, int img_cols) const {
  return cover_size(img_rows, img_cols, rows, cols, eval_margin);
}

std::string TransformSpec::describe() const {
  std::string norm = dtype == DType::U8 ? std::string("uint8 pixels as they are")
                                        : fmt::format("(x/255 - mean) / std, mean {} std {}",
                                                      fmt::join(mean, ","), fmt::join(std, ","));
  std::string aug = "no augmentation (the evaluation transform)";
  if (augment) {
    if (pad_rows > 0) {
      aug = pad_rows == pad_cols ? fmt::format("pad {}", pad_rows)
                                 : fmt::format("pad {}x{}", pad_rows, pad_cols);
      aug += fmt::format(" + random crop {}x{}", rows, cols);
      if (pad_prob < 1.0)
        aug += pad_prob == 0.5 ? std::string(" on half the examples")
                               : fmt::format(" with probability {:.3g}", pad_prob);
    } else {
      const double aspect = static_cast<double>(cols) / rows;
      aug = fmt::format("random-resized crop scale {:.3g}-{:.3g}, ratio {:.3g}-{:.3g}", scale_lo,
                        scale_hi, ratio_lo, ratio_hi);
      const double mid = std::sqrt(ratio_lo * ratio_hi);
      if (std::abs(mid - 1.0) > 1e-6)
        aug += fmt::format(" around {}x{}'s {:.3g}", rows, cols, aspect);
    }
    aug += flip ? " + flip" : ", no flip";
    if (!why.empty()) aug += fmt::format(" ({})", why);
  }
  const std::string eval =
      eval_margin > 1.0
          ? fmt::format("{}x{} as is, else shorter side to {} + centre crop", rows, cols,
                        eval_resize())
          : fmt::format("{}x{} as is, else resized to cover it (aspect kept) + centre crop", rows,
                        cols);
  return fmt::format("{}x{}x{}; training {}; evaluation: {}; {}", channels, rows, cols, aug, eval,
                     norm);
}

AugmentMode parse_augment(const std::string& s) {
  if (s == "auto") return AugmentMode::Auto;
  if (s == "none") return AugmentMode::None;
  if (s == "crop") return AugmentMode::Crop;
  fail("unknown --augment '{}' (choices: auto, none, crop)", s);
}

TransformSpec plan_transforms(const Dataset& data, const ModelInput& in,
                              const TransformOptions& o) {
  const ExampleDims dd = image_dims(*data.train);
  for (int64_t d : in.dims)
    if (d <= 0)
      fail("model input '{}' has a size that is not fixed ({}): give the model fixed sizes",
           in.name, dims_text(in.dims));
  if (in.dtype != DType::F32 && in.dtype != DType::U8)
    fail("model input '{}' is {}: images are fed as float32 (or uint8 pixels)", in.name,
         dtype_name(in.dtype));
  TransformSpec s;
  s.dtype = in.dtype;
  const bool image_model =
      in.dims.size() == 3 && (in.dims[0] == 1 || in.dims[0] == 3) && in.dims[1] > 0;
  int64_t want = 1;
  for (int64_t d : in.dims) want *= d;
  const int64_t have = dd.fixed() ? static_cast<int64_t>(dd.channels) * dd.rows * dd.cols : -1;
  if (data.photos && image_model) {
    // Photographs are resized and converted to whatever the model takes.
    s.channels = static_cast<int>(in.dims[0]);
    s.rows = static_cast<int>(in.dims[1]);
    s.cols = static_cast<int>(in.dims[2]);
  } else if (!data.photos && have == want) {
    // IDX/CIFAR: the data's own pixels, reshaped to the input (a flat [N,784] takes 1x28x28).
    s.channels = dd.channels;
    s.rows = dd.rows;
    s.cols = dd.cols;
  } else {
    fail(
        "model input '{}' is {} but the images of the {} are {} ({} values each); this model does "
        "not fit this data set{}",
        in.name, dims_text(in.dims), data.description, dd.str(),
        have >= 0 ? fmt::format("{}", have) : std::string("varying"),
        data.photos ? " (image folders and packs are resized to a model of images, which takes "
                      "[N,C,H,W] with C = 1 or 3)"
                    : " (IDX and CIFAR images are fed as they are: the model must take their "
                      "size)");
  }
  s.augment = o.augment == AugmentMode::Crop || (o.augment == AugmentMode::Auto && data.photos);
  if (s.augment && !image_model)
    fail("--augment crop needs a model that takes images [N,C,H,W]; model input '{}' is {}",
         in.name, dims_text(in.dims));
  choose_augmentation(s, data, o);
  auto per_channel = [&](const std::vector<float>& v, const char* flag) {
    if (v.size() == 1) return std::vector<float>(static_cast<size_t>(s.channels), v[0]);
    if (v.size() != static_cast<size_t>(s.channels))
      fail("{} has {} values; give 1, or one per channel ({})", flag, v.size(), s.channels);
    return v;
  };
  if (!o.mean.empty()) {
    s.mean = per_channel(o.mean, "--mean");
  } else if (data.photos) {
    s.mean = s.channels == 3 ? std::vector<float>(kImageNetMean, kImageNetMean + 3)
                             : std::vector<float>{0.449f};  // ImageNet's, for grey images
  } else {
    s.mean.assign(static_cast<size_t>(s.channels), 0.0f);
  }
  if (!o.std.empty()) {
    s.std = per_channel(o.std, "--std");
  } else if (data.photos) {
    s.std = s.channels == 3 ? std::vector<float>(kImageNetStd, kImageNetStd + 3)
                            : std::vector<float>{0.226f};
  } else {
    s.std.assign(static_cast<size_t>(s.channels), 1.0f);
  }
  for (float v : s.std)
    if (!(v > 0)) fail("--std values must be positive, got {}", v);
  for (float v : s.mean)
    if (!std::isfinite(v)) fail("--mean values must be finite, got {}", v);
  return s;
}

namespace {

// The evaluation transform's geometry: `img` resized to cover HxW, centre-cropped.
Image eval_image(const Image& img, const TransformSpec& s) {
  if (img.rows == s.rows && img.cols == s.cols) return img;
  const auto [r, c] = s.eval_size(img.rows, img.cols);
  const Image big = resize(img, r, c);
  return crop(big, center_crop_box(r, c, s.rows, s.cols));
}

}  // namespace

Image augment_image(const Image& img, const TransformSpec& s, std::mt19937_64& rng, CropBox* box,
                    bool* flipped) {
  Image t;
  CropBox b;
  if (s.pad_rows > 0 || s.pad_cols > 0) {
    // torchvision's RandomCrop(padding): the top, then the left offset, in the padded image.
    const Image fit = eval_image(img, s);
    b.height = s.rows;
    b.width = s.cols;
    // With pad_prob < 1, first whether the example is moved at all (else the centre, as is).
    if (s.pad_prob >= 1.0 || std::uniform_real_distribution<double>(0.0, 1.0)(rng) < s.pad_prob) {
      b.top = std::uniform_int_distribution<int>(0, 2 * s.pad_rows)(rng) - s.pad_rows;
      b.left = std::uniform_int_distribution<int>(0, 2 * s.pad_cols)(rng) - s.pad_cols;
    }
    t = crop_padded(fit, b);
  } else {
    b = random_resized_crop_box(img.rows, img.cols, rng, s.scale_lo, s.scale_hi, s.ratio_lo,
                                s.ratio_hi);
    t = crop_resize(img, b, s.rows, s.cols);
  }
  const bool f = s.flip && (rng() >> 63);
  if (f) flip_horizontal(t);
  if (box) *box = b;
  if (flipped) *flipped = f;
  return t;
}

void transform_example(const Image& img, const TransformSpec& s, bool augment, std::mt19937_64& rng,
                       void* out) {
  if (augment) {
    write_chw(augment_image(img, s, rng), s, out);
  } else if (img.rows == s.rows && img.cols == s.cols) {
    write_chw(img, s, out);
  } else {
    write_chw(eval_image(img, s), s, out);
  }
}

uint64_t example_seed(uint64_t seed, int64_t epoch, int64_t i) {
  return mix(mix(mix(seed) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(i));
}

}  // namespace cb
