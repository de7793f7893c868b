// --augment auto (runtime/data/transforms.h): the augmentation planned for inputs of several sizes
// and shapes, the boxes the training transform draws (inside the image, in the planned aspect
// range, the same for the same seed), and the evaluation resize of non-square inputs, which
// keeps the picture instead of a thin slice of it. The end-to-end measurements (LeNet-5 on a
// Fashion-MNIST PNG folder, PaddleOCR's direction classifier on text strips) are in
// test_data_pipeline.cpp and test_third_party.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <random>

#include "runtime/data/dataset.h"
#include "runtime/data/image.h"
#include "runtime/data/pipeline.h"
#include "tests/test_util.h"

using namespace cb;
using test::contains;

namespace {

// Images of one size, each a gradient with its index in it (no files).
struct Synthetic final : Examples {
  int64_t count = 16;
  int rows = 0, cols = 0;
  bool grey = false;  // R = G = B (a scan), else every channel differs
  Synthetic(int r, int c, bool g = false) : rows(r), cols(c), grey(g) {}
  int64_t size() const override { return count; }
  int64_t label(int64_t i) const override { return i % 2; }
  std::string name(int64_t i) const override { return fmt::format("synthetic {}", i); }
  ExampleDims dims() const override { return {3, 0, 0}; }  // sizes "vary", as a folder's
  bool load(int64_t i, const DecodeOptions& o, Image& out, std::string&) const override {
    out = picture(rows, cols, o.channels, static_cast<int>(i), grey);
    return true;
  }
  static Image picture(int rows, int cols, int channels, int seed, bool grey = false) {
    Image img{rows, cols, channels, {}};
    img.px.resize(static_cast<size_t>(rows) * static_cast<size_t>(cols) *
                  static_cast<size_t>(channels));
    for (int y = 0; y < rows; ++y)
      for (int x = 0; x < cols; ++x)
        for (int c = 0; c < channels; ++c)
          img.px[(static_cast<size_t>(y) * static_cast<size_t>(cols) + static_cast<size_t>(x)) *
                     static_cast<size_t>(channels) +
                 static_cast<size_t>(c)] =
              static_cast<uint8_t>((x * 7 + y * 3 + (grey ? 0 : c * 50) + seed * 11) % 256);
    return img;
  }
};

Dataset photos(int rows, int cols, bool grey = false) {
  Dataset d;
  d.photos = true;
  d.description = "synthetic photos";
  d.train = std::make_shared<Synthetic>(rows, cols, grey);
  d.test = std::make_shared<Synthetic>(rows, cols, grey);
  return d;
}

TransformSpec plan(const Dataset& d, int c, int h, int w, TransformOptions o = {}) {
  return plan_transforms(d, {"x", {c, h, w}, DType::F32}, o);
}

}  // namespace

TEST_CASE("augment auto: small colour images get CIFAR's pad + random crop + flip") {
  const TransformSpec cifar = plan(photos(32, 32), 3, 32, 32);
  CHECK(cifar.augment);
  CHECK(cifar.pad_rows == 4);
  CHECK(cifar.pad_cols == 4);
  CHECK(cifar.pad_prob == 1.0);
  CHECK(cifar.flip);
  CHECK(cifar.eval_margin == 1.0);
  CHECK(cifar.eval_resize() == 32);
  MESSAGE(cifar.describe());
  CHECK(contains(cifar.describe(), "training pad 4 + random crop 32x32 + flip (small images"));
  const TransformSpec c28 = plan(photos(28, 28), 3, 28, 28);
  CHECK(c28.pad_rows == 3);
  CHECK(c28.flip);
  // A big input fed small images (CIFAR PNGs to a 224 model): the same recipe at the input's
  // size, 1/8 of the side (4 px of the 32 px picture).
  const TransformSpec up = plan(photos(32, 32), 3, 224, 224);
  CHECK(up.pad_rows == 28);
  CHECK(contains(up.describe(), "small (about 32 px) images"));
  // --no-flip is obeyed.
  TransformOptions nf;
  nf.flip = false;
  const TransformSpec c2 = plan(photos(32, 32), 3, 32, 32, nf);
  CHECK(!c2.flip);
  CHECK(contains(c2.describe(), "no flip"));
  CHECK(contains(c2.describe(), "--no-flip"));
}

TEST_CASE("augment auto: small grey images get a milder pad + crop on half of them, no flip") {
  // Fashion-MNIST as PNGs, one epoch of LeNet-5: CIFAR's pad 3 + flip ended 4.5 points under
  // the IDX files, this recipe level with them (docs/data.md).
  const TransformSpec grey = plan(photos(28, 28, true), 1, 28, 28);
  CHECK(grey.augment);
  CHECK(grey.pad_rows == 2);  // 28/16 rounded
  CHECK(grey.pad_cols == 2);
  CHECK(grey.pad_prob == 0.5);
  CHECK(!grey.flip);
  CHECK(grey.eval_resize() == 28);
  MESSAGE(grey.describe());
  CHECK(contains(grey.describe(),
                 "training pad 2 + random crop 28x28 on half the examples, no "
                 "flip (small grey images"));
  CHECK(contains(grey.describe(), "grey scans"));
  // Grey is what the data is, whatever the model takes: grey images for a 3-channel input, a
  // 1-channel input fed colour files (decoded to grey).
  const TransformSpec rgb_in = plan(photos(32, 32, true), 3, 32, 32);
  CHECK(rgb_in.pad_rows == 2);
  CHECK(rgb_in.pad_prob == 0.5);
  CHECK(!rgb_in.flip);
  CHECK(plan(photos(32, 32), 1, 32, 32).pad_prob == 0.5);
  // 1/16 of the side, at least 1; for a big input fed small grey images, of the input's side.
  CHECK(plan(photos(16, 16, true), 1, 16, 16).pad_rows == 1);
  CHECK(plan(photos(28, 28, true), 1, 20, 64).pad_cols == 4);
  const TransformSpec up = plan(photos(28, 28, true), 1, 224, 224);
  CHECK(up.pad_rows == 14);
  CHECK(contains(up.describe(), "small (about 28 px) grey images"));
  // --no-flip says so; --augment crop keeps ImageNet's recipe and its flip.
  TransformOptions nf;
  nf.flip = false;
  CHECK(contains(plan(photos(28, 28, true), 1, 28, 28, nf).describe(), "--no-flip"));
  TransformOptions crop;
  crop.augment = AugmentMode::Crop;
  const TransformSpec c = plan(photos(28, 28, true), 1, 28, 28, crop);
  CHECK(c.pad_rows == 0);
  CHECK(c.flip);
}

TEST_CASE("augment auto: ImageNet's recipe for square inputs >= 160, milder for others") {
  const TransformSpec in = plan(photos(375, 500), 3, 224, 224);
  CHECK(in.augment);
  CHECK(in.pad_rows == 0);
  CHECK(in.scale_lo == 0.08);
  CHECK(in.ratio_lo == doctest::Approx(0.75));
  CHECK(in.ratio_hi == doctest::Approx(4.0 / 3.0));
  CHECK(in.flip);
  CHECK(in.eval_margin == doctest::Approx(256.0 / 224.0));
  CHECK(in.eval_resize() == 256);  // torchvision's Resize(256) + CenterCrop(224)
  MESSAGE(in.describe());
  CHECK(contains(in.describe(),
                 "3x224x224; training random-resized crop scale 0.08-1, ratio "
                 "0.75-1.33 + flip (photos at ImageNet's size)"));
  CHECK(contains(in.describe(), "shorter side to 256 + centre crop"));

  // A text line: the aspect range is centred on 4, the scale milder, no flip (mirrored text).
  const TransformSpec line = plan(photos(100, 300), 3, 48, 192);
  CHECK(line.pad_rows == 0);
  CHECK(line.scale_lo == 0.25);
  CHECK(line.ratio_lo == doctest::Approx(3.0));
  CHECK(line.ratio_hi == doctest::Approx(16.0 / 3.0));
  CHECK(std::sqrt(line.ratio_lo * line.ratio_hi) == doctest::Approx(4.0));
  CHECK(!line.flip);
  CHECK(line.eval_margin == 1.0);
  MESSAGE(line.describe());
  CHECK(contains(line.describe(),
                 "random-resized crop scale 0.25-1, ratio 3-5.33 around 48x192's 4, no flip"));
  CHECK(contains(line.describe(), "wide input"));
  CHECK(contains(line.describe(), "resized to cover it"));

  // Square but under 160: the milder scale, flipped. Tall: flipped (people, bottles).
  const TransformSpec mid = plan(photos(200, 200), 3, 128, 128);
  CHECK(mid.scale_lo == 0.25);
  CHECK(mid.flip);
  CHECK(mid.eval_margin == 1.0);
  const TransformSpec tall = plan(photos(300, 150), 3, 256, 128);
  CHECK(tall.scale_lo == 0.25);
  CHECK(tall.ratio_lo == doctest::Approx(0.375));
  CHECK(tall.flip);

  // --augment crop: ImageNet's recipe whatever the input; none: no augmentation.
  TransformOptions crop;
  crop.augment = AugmentMode::Crop;
  const TransformSpec c = plan(photos(100, 300), 3, 48, 192, crop);
  CHECK(c.scale_lo == 0.08);
  CHECK(c.ratio_lo == doctest::Approx(0.75));
  CHECK(c.flip);
  TransformOptions none;
  none.augment = AugmentMode::None;
  CHECK(!plan(photos(100, 300), 3, 48, 192, none).augment);
  CHECK(contains(plan(photos(100, 300), 3, 48, 192, none).describe(), "no augmentation"));
}

TEST_CASE("augment: IDX and CIFAR stay unaugmented under auto") {
  auto set = std::make_shared<ImageSet>();
  set->count = 4;
  set->rows = set->cols = 28;
  set->pixels.assign(4 * 28 * 28, 0);
  set->labels = {0, 1, 0, 1};
  Dataset idx;
  idx.train = idx.test = set;
  const TransformSpec s = plan(idx, 1, 28, 28);
  CHECK(!s.augment);
  CHECK(s.mean == std::vector<float>{0.0f});
}

TEST_CASE("augment: the boxes stay inside the image and within the planned aspect range") {
  for (auto [h, w] : {std::pair{48, 192}, {224, 224}, {128, 128}, {256, 128}})
    for (auto [r, c] : {std::pair{100, 300}, {48, 192}, {375, 500}, {30, 400}, {400, 60}}) {
      const TransformSpec s = plan(photos(r, c), 3, h, w);
      REQUIRE(s.pad_rows == 0);
      const Image img = Synthetic::picture(r, c, 3, 0);
      std::mt19937_64 rng(static_cast<uint64_t>(r * 1000 + c));
      int in_range = 0;
      const int n = 500;
      for (int k = 0; k < n; ++k) {
        CropBox b;
        const Image out = augment_image(img, s, rng, &b);
        INFO(h, "x", w, " from ", r, "x", c, ": box ", b.top, ",", b.left, " ", b.height, "x",
             b.width);
        REQUIRE(out.rows == h);
        REQUIRE(out.cols == w);
        REQUIRE(b.top >= 0);
        REQUIRE(b.left >= 0);
        REQUIRE(b.top + b.height <= r);
        REQUIRE(b.left + b.width <= c);
        // Within the range up to the rounding of both sides (the fallback clamps the ratio too).
        const double ratio = static_cast<double>(b.width) / b.height;
        const double slack = 0.5 / b.width + 0.5 / b.height + 1e-9;
        CHECK(ratio >= s.ratio_lo * (1 - slack));
        CHECK(ratio <= s.ratio_hi * (1 + slack));
        const double area = static_cast<double>(b.width) * b.height / (static_cast<double>(r) * c);
        in_range += area <= s.scale_hi * (1 + 2 * slack) && area >= s.scale_lo * (1 - 2 * slack);
      }
      // Images of another aspect fall back to the centre crop now and then; most draws fit.
      if (std::abs(std::log(static_cast<double>(c) / r / (static_cast<double>(w) / h))) < 0.3)
        CHECK(in_range >= n * 9 / 10);
    }
}

TEST_CASE("augment: the padded crop moves the picture by at most the padding, zeros around") {
  // Colour: CIFAR's pad 3 on every example + flip; grey: pad 2 on half of them, no flip.
  for (const bool grey : {false, true}) {
    const int ch = grey ? 1 : 3, pad = grey ? 2 : 3;
    const TransformSpec s = plan(photos(28, 28, grey), ch, 28, 28);
    REQUIRE(s.pad_rows == pad);
    const Image img = Synthetic::picture(28, 28, ch, 3, grey);
    std::mt19937_64 rng(1);
    int flips = 0, shifted = 0;
    for (int k = 0; k < 400; ++k) {
      CropBox b;
      bool flipped = false;
      Image out = augment_image(img, s, rng, &b, &flipped);
      REQUIRE(b.height == 28);
      REQUIRE(b.width == 28);
      REQUIRE(std::abs(b.top) <= pad);
      REQUIRE(std::abs(b.left) <= pad);
      flips += flipped;
      shifted += b.top != 0 || b.left != 0;
      if (flipped) flip_horizontal(out);
      for (int y = 0; y < 28; ++y)
        for (int x = 0; x < 28; ++x)
          for (int c = 0; c < ch; ++c) {
            const int sy = y + b.top, sx = x + b.left;
            const bool inside = sy >= 0 && sy < 28 && sx >= 0 && sx < 28;
            REQUIRE(out.at(y, x, c) == (inside ? img.at(sy, sx, c) : 0));
          }
    }
    INFO("grey ", grey, ": ", flips, " flips, ", shifted, " shifted of 400");
    if (grey) {
      CHECK(flips == 0);
      CHECK(shifted > 150);  // 400 x 1/2 x 24/25 = 192 expected
      CHECK(shifted < 235);
    } else {
      CHECK(flips > 150);
      CHECK(flips < 250);
      CHECK(shifted > 350);  // 400 x 48/49
    }
    // An image of another size is brought to the input's first (as the evaluation transform).
    const Image big = Synthetic::picture(56, 56, ch, 3, grey);
    CHECK(augment_image(big, s, rng).rows == 28);
  }
}

TEST_CASE("augment: the same (seed, epoch, example) gives the same crop; batches too") {
  const TransformSpec s = plan(photos(100, 300), 3, 48, 192);
  const Image img = Synthetic::picture(100, 300, 3, 0);
  std::mt19937_64 a(42), b(42), c(43);
  CropBox ba, bb, bc;
  const Image ia = augment_image(img, s, a, &ba);
  const Image ib = augment_image(img, s, b, &bb);
  augment_image(img, s, c, &bc);
  CHECK(ia.px == ib.px);
  CHECK((ba.top == bb.top && ba.left == bb.left && ba.height == bb.height));
  CHECK(
      !(ba.top == bc.top && ba.left == bc.left && ba.height == bc.height && ba.width == bc.width));
  // Through the pipeline: the same batches for a seed, whatever the workers; others per epoch.
  const Dataset d = photos(100, 300);
  auto run = [&](int workers, uint64_t seed, int count) {
    PipelineOptions o;
    o.batch = 4;
    o.seed = seed;
    o.workers = workers;
    BatchPipeline p(d.train, s, o, d.skipped);
    std::vector<std::vector<float>> out;
    Tensor x, y;
    for (int k = 0; k < count && p.next(x, y); ++k)
      out.emplace_back(x.data<float>(), x.data<float>() + x.numel());
    return out;
  };
  const auto one = run(1, 7, 8), two = run(2, 7, 8), other = run(1, 8, 8);
  CHECK(one == two);
  CHECK(one != other);
  // 16 examples, batch 4: batches 0-3 are epoch 0, 4-7 epoch 1 (another draw for each example).
  CHECK(one[0] != one[4]);
}

TEST_CASE("augment: evaluation of a non-square input keeps the whole picture's aspect") {
  const TransformSpec s = plan(photos(100, 300), 3, 48, 192);
  // 100x300 (aspect 3) for 48x192 (aspect 4): resized to 64x192, which keeps the aspect, and
  // its centre 48 rows kept: the whole width, 3/4 of the height. The old rule (shorter side to
  // 219, then 48x192 from 219x657) kept 22% of the height and 29% of the width.
  const auto [r, c] = s.eval_size(100, 300);
  CHECK(r == 64);
  CHECK(c == 192);
  CHECK(static_cast<double>(c) / r == doctest::Approx(300.0 / 100.0));
  const Image img = Synthetic::picture(100, 300, 3, 5);
  std::vector<float> got(3 * 48 * 192), want(3 * 48 * 192);
  std::mt19937_64 rng(0);
  transform_example(img, s, false, rng, got.data());
  const Image ref = crop(resize(img, 64, 192), {8, 0, 48, 192});
  to_chw_f32(ref, s.mean.data(), s.std.data(), want.data());
  CHECK(got == want);
  // An image of the input's aspect is resized to exactly 48x192, nothing cut.
  CHECK(s.eval_size(96, 384) == std::pair{48, 192});
  CHECK(s.eval_size(24, 96) == std::pair{48, 192});
  // Taller than the input: the whole height kept, the sides cut.
  CHECK(s.eval_size(48, 96) == std::pair{96, 192});
  // ImageNet-size inputs keep torchvision's Resize(256) + CenterCrop(224).
  const TransformSpec in = plan(photos(375, 500), 3, 224, 224);
  CHECK(in.eval_size(375, 500) == shorter_side_size(375, 500, 256));
  CHECK(in.eval_size(500, 375) == shorter_side_size(500, 375, 256));
  CHECK(cover_size(375, 500, 224, 224, 256.0 / 224.0) == std::pair{256, 341});
}
