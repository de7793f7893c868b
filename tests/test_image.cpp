// Images (runtime/data/image.h) against PIL 9.4 and torchvision 0.14, run by /usr/bin/python3 on
// files written here: each test lists jobs ("convert FILE OUT MODE", "resize SRC OUT W H", ...) in
// jobs.txt, the script below runs them on PIL images and writes each result as OUT.raw (the bytes
// or float32s) with OUT.shape (numpy's shape), and the test compares them to ours. Decoding is
// exact (the same libjpeg-turbo as PIL's, the same conversions), and so is resampling (PIL's
// fixed-point weights). Bad inputs must fail with a reason, never crash.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <tuple>

#include "runtime/data/image.h"
#include "tests/test_util.h"

using namespace cb;
namespace fs = std::filesystem;
using test::TempDir;

namespace {

const char* const kPython = "/usr/bin/python3";

// The job runner: PIL opens every image from the test's folder (argv[1]).
constexpr std::string_view kScript = R"(import sys
import numpy as np
from PIL import Image, ImageOps
d = sys.argv[1]

def save(name, a):
    a = np.ascontiguousarray(np.asarray(a))
    open(f'{d}/{name}.shape', 'w').write(' '.join(map(str, a.shape)))
    a.tofile(f'{d}/{name}.raw')

def load(name):
    return Image.open(f'{d}/{name}')

def make_pil_files(src):
    # Files written by PIL itself, from our PNG: JPEG variants, CMYK, alpha, palettes, bilevel,
    # 16-bit grey.
    im = load(src)
    im.save(f'{d}/pil_q85.jpg', quality=85)
    im.save(f'{d}/pil_444.jpg', quality=95, subsampling=0)
    im.save(f'{d}/pil_prog.jpg', quality=90, progressive=True)
    im.convert('L').save(f'{d}/pil_grey.jpg', quality=90)
    im.convert('CMYK').save(f'{d}/pil_cmyk.jpg', quality=90)
    a = np.asarray(im)
    h, w = a.shape[:2]
    alpha = (np.arange(w)[None, :] * 255 // max(w - 1, 1) + np.zeros((h, 1), int)).astype(np.uint8)
    Image.fromarray(np.dstack([a, alpha]), 'RGBA').save(f'{d}/rgba.png')
    Image.fromarray(np.dstack([a[..., 1], alpha]), 'LA').save(f'{d}/la.png')
    p = im.convert('P', palette=Image.ADAPTIVE, colors=64)
    p.save(f'{d}/palette.png')
    p.save(f'{d}/palette_trns.png', transparency=3)
    im.convert('1').save(f'{d}/bilevel.png')
    g16 = (a[..., 0].astype(np.uint16) * 257 + np.arange(w, dtype=np.uint16)[None, :]) % 65536
    Image.fromarray(g16.astype(np.uint16)).save(f'{d}/grey16.png')
    save('grey16_hi', (g16 >> 8).astype(np.uint8))

for line in open(f'{d}/jobs.txt'):
    op, *a = line.split()
    if op == 'make_pil_files':
        make_pil_files(a[0])
    elif op == 'convert':
        save(a[1], load(a[0]).convert(a[2]))
    elif op == 'draft':
        im = load(a[0])
        im.draft(a[2], (int(a[3]), int(a[4])))
        save(a[1], im.convert(a[2]))
    elif op == 'resize':
        save(a[1], load(a[0]).resize((int(a[2]), int(a[3])), Image.BILINEAR))
    elif op == 'crop_resize':
        l, t, r, b, w, h = map(int, a[2:])
        save(a[1], load(a[0]).crop((l, t, r, b)).resize((w, h), Image.BILINEAR))
    elif op == 'mirror':
        save(a[1], ImageOps.mirror(load(a[0])))
    elif op == 'eval':
        from torchvision import transforms as T
        save(a[1], T.Compose([T.Resize(256), T.CenterCrop(224)])(load(a[0])))
    elif op == 'tensor':
        from torchvision import transforms as T
        mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
        im = load(a[0])
        n = len(im.getbands())
        t = T.Normalize(mean[:n], std[:n])(T.ToTensor()(im))
        save(a[1], t.numpy().astype(np.float32))
    elif op == 'rrc_fallback':
        from torchvision import transforms as T
        rows, cols = int(a[1]), int(a[2])
        box = T.RandomResizedCrop.get_params(Image.new('L', (cols, rows)), [0.08, 1.0], [3 / 4, 4 / 3])
        save(a[0], np.array(box, np.int32))
    else:
        raise SystemExit(f'unknown job {op}')
)";

// A fresh folder under the temp dir, removed at scope exit.
// Whether /usr/bin/python3 can import `modules`; a missing interpreter or module goes through
// test::need (a skip, or a failure under CI).
bool need_python(const std::string& modules, std::string_view what) {
  if (!test::need(kPython, "Debian's python3 (the reference for images)")) return false;
  const std::string cmd = fmt::format("{} -c 'import {}' > /dev/null 2>&1", kPython, modules);
  if (std::system(cmd.c_str()) == 0) return true;
  return test::need(fmt::format("{} with import {}", kPython, modules), what);
}
bool need_pil() {
  return need_python("PIL, numpy",
                     "PIL and numpy for /usr/bin/python3 (python3-pil python3-numpy)");
}
bool need_torchvision() {
  return need_pil() && need_python("torch, torchvision",
                                   "torchvision for /usr/bin/python3 (python3-torchvision)");
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}
std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot read " << path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Runs the jobs (one per line) in `dir` with the script above.
void run_jobs(const TempDir& dir, const std::string& jobs) {
  std::ofstream(dir / "jobs.txt") << jobs;
  std::ofstream(dir / "jobs.py") << kScript;
  const std::string cmd = fmt::format("{} {} {}", kPython, dir / "jobs.py", dir.path.string());
  const int rc = std::system(cmd.c_str());
  REQUIRE_MESSAGE((WIFEXITED(rc) && WEXITSTATUS(rc) == 0), "failed: " << cmd);
}

std::vector<int> shape_of(const TempDir& dir, const std::string& name) {
  std::ifstream f(dir / (name + ".shape"));
  std::vector<int> s;
  for (int v; f >> v;) s.push_back(v);
  return s;
}

// A result the script wrote as an image: (rows, cols) or (rows, cols, 3).
Image load_image(const TempDir& dir, const std::string& name) {
  const std::vector<int> s = shape_of(dir, name);
  REQUIRE((s.size() == 2 || s.size() == 3));
  Image img{s[0], s[1], s.size() == 3 ? s[2] : 1, read_file(dir / (name + ".raw"))};
  REQUIRE(img.px.size() == static_cast<size_t>(img.rows) * img.cols * img.channels);
  return img;
}

std::vector<float> load_floats(const TempDir& dir, const std::string& name) {
  const std::vector<uint8_t> b = read_file(dir / (name + ".raw"));
  std::vector<float> v(b.size() / sizeof(float));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(float));
  return v;
}

struct Diff {
  int max = 0;
  double mean = 0;
};
// Shapes must agree; then the largest and the mean absolute byte difference.
Diff diff(const Image& a, const Image& b) {
  REQUIRE(a.rows == b.rows);
  REQUIRE(a.cols == b.cols);
  REQUIRE(a.channels == b.channels);
  Diff d;
  for (size_t i = 0; i < a.px.size(); ++i) {
    const int e = std::abs(int{a.px[i]} - int{b.px[i]});
    d.max = std::max(d.max, e);
    d.mean += e;
  }
  d.mean /= static_cast<double>(std::max<size_t>(a.px.size(), 1));
  return d;
}

// A photo-like test picture: smooth gradients and waves, a sharp-edged block, and noise.
Image synthetic(int rows, int cols, int channels, uint32_t seed, int noise = 12,
                bool block = true) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> nd(-noise, noise);
  Image img{rows, cols, channels, {}};
  img.px.resize(static_cast<size_t>(rows) * cols * channels);
  size_t i = 0;
  for (int y = 0; y < rows; ++y)
    for (int x = 0; x < cols; ++x)
      for (int c = 0; c < channels; ++c) {
        double v = 128 + 90 * std::sin(x * 0.045 + c * 1.3) * std::cos(y * 0.061 - c) +
                   30.0 * x / cols - 20.0 * y / rows;
        if (block && y > rows / 3 && y < rows / 2 && x > cols / 4 && x < cols / 2) v = 40 + 70 * c;
        img.px[i++] = static_cast<uint8_t>(std::clamp(v + nd(rng), 0.0, 255.0));
      }
  return img;
}

Image decode_ok(const std::vector<uint8_t>& bytes, int channels, int min_side = 0) {
  Image img;
  std::string why;
  const bool ok = decode_image(bytes.data(), bytes.size(), {channels, min_side}, img, why);
  REQUIRE_MESSAGE(ok, why);
  return img;
}

}  // namespace

TEST_CASE("image: JPEG and PNG decode to PIL's convert('L'/'RGB') bytes") {
  if (!need_pil()) return;
  TempDir d("decode");
  write_file(d / "src.png", encode_png(synthetic(45, 67, 3, 1)));
  write_file(d / "ours_rgb.jpg", encode_jpeg(synthetic(45, 67, 3, 2), 90));
  write_file(d / "ours_grey.jpg", encode_jpeg(synthetic(45, 67, 1, 3), 90));
  write_file(d / "ours_rgb.png", encode_png(synthetic(45, 67, 3, 4)));
  write_file(d / "ours_grey.png", encode_png(synthetic(45, 67, 1, 5)));
  const std::vector<std::string> files = {
      "ours_rgb.jpg", "ours_grey.jpg", "pil_q85.jpg",      "pil_444.jpg",   "pil_prog.jpg",
      "pil_grey.jpg", "pil_cmyk.jpg",  "ours_rgb.png",     "ours_grey.png", "rgba.png",
      "la.png",       "palette.png",   "palette_trns.png", "bilevel.png"};
  std::string jobs = "make_pil_files src.png\n";
  for (const std::string& f : files)
    jobs += fmt::format("convert {0} {0}_L L\nconvert {0} {0}_RGB RGB\n", f);
  run_jobs(d, jobs);

  for (const std::string& f : files) {
    CAPTURE(f);
    const std::vector<uint8_t> bytes = read_file(d / f);
    CHECK(sniff_image(bytes.data(), bytes.size()) ==
          (f.ends_with(".jpg") ? ImageKind::Jpeg : ImageKind::Png));
    for (int channels : {1, 3}) {
      CAPTURE(channels);
      const Diff e =
          diff(decode_ok(bytes, channels), load_image(d, f + (channels == 1 ? "_L" : "_RGB")));
      CHECK(e.max == 0);
    }
  }

  // A 16-bit grey PNG: the high byte of each sample (PIL's I;16 would clip at 255 instead).
  const std::vector<uint8_t> g16 = read_file(d / "grey16.png");
  const Image hi = load_image(d, "grey16_hi");
  CHECK(diff(decode_ok(g16, 1), hi).max == 0);
  const Image rgb = decode_ok(g16, 3);
  for (int y = 0; y < hi.rows; ++y)
    for (int x = 0; x < hi.cols; ++x)
      for (int c = 0; c < 3; ++c) REQUIRE(rgb.at(y, x, c) == hi.at(y, x, 0));
}

TEST_CASE("image: JPEG DCT scaling picks the smallest M/8 that keeps min_side, as PIL's draft") {
  if (!need_pil()) return;
  TempDir d("scale");
  const std::vector<uint8_t> jpg = encode_jpeg(synthetic(800, 1000, 3, 6), 90);
  write_file(d / "big.jpg", jpg);
  run_jobs(d, "draft big.jpg quarter RGB 250 200\ndraft big.jpg quarter_L L 250 200\n");

  const Image quarter = decode_ok(jpg, 3, 200);  // 1/4 is the smallest with both sides >= 200
  CHECK(quarter.cols == 250);
  CHECK(quarter.rows == 200);
  CHECK(diff(quarter, load_image(d, "quarter")).max == 0);
  // Grey from a colour JPEG: luma of the scaled RGB (PIL's draft('L') would let libjpeg convert).
  CHECK(decode_ok(jpg, 1, 200).cols == 250);

  const Image three_eighths = decode_ok(jpg, 3, 256);  // 2/8 gives 200 rows < 256
  CHECK(three_eighths.cols == 375);
  CHECK(three_eighths.rows == 300);
  const Image full = decode_ok(jpg, 3, 900);  // smaller than min_side already: full size
  CHECK(full.cols == 1000);
  CHECK(full.rows == 800);
  CHECK(decode_ok(jpg, 3, 0).px == full.px);
}

TEST_CASE("image: bad data fails with a reason and never crashes") {
  const std::vector<uint8_t> jpg = encode_jpeg(synthetic(120, 160, 3, 7), 90);
  const std::vector<uint8_t> png = encode_png(synthetic(120, 160, 3, 8));
  std::mt19937 rng(9);
  std::vector<uint8_t> noise(5000);
  for (uint8_t& b : noise) b = static_cast<uint8_t>(rng());
  const std::string text = "id,label\n1,cat\n2,dog\n";
  std::vector<uint8_t> overwritten = jpg;
  for (size_t i = jpg.size() / 3; i < jpg.size() / 3 + 200; ++i)
    overwritten[i] = static_cast<uint8_t>(rng());
  std::vector<uint8_t> png_garbage(png.begin(), png.begin() + 8);  // the signature, then noise
  png_garbage.insert(png_garbage.end(), noise.begin(), noise.end());
  std::vector<uint8_t> jpg_garbage = {0xFF, 0xD8, 0xFF};
  jpg_garbage.insert(jpg_garbage.end(), noise.begin(), noise.end());

  const std::vector<std::pair<std::string, std::vector<uint8_t>>> cases = {
      {"empty", {}},
      {"random bytes", noise},
      {"text", {text.begin(), text.end()}},
      {"JPEG truncated at half", {jpg.begin(), jpg.begin() + jpg.size() / 2}},
      {"PNG truncated at half", {png.begin(), png.begin() + png.size() / 2}},
      {"JPEG middle overwritten", overwritten},
      {"PNG signature then noise", png_garbage},
      {"JPEG SOI then noise", jpg_garbage},
      {"JPEG header only", {jpg.begin(), jpg.begin() + 200}}};
  for (const auto& [name, bytes] : cases) {
    for (int channels : {1, 3}) {
      CAPTURE(name);
      CAPTURE(channels);
      Image img;
      std::string why;
      CHECK_FALSE(decode_image(bytes.data(), bytes.size(), {channels, 0}, img, why));
      CHECK(!why.empty());
    }
  }
  Image img;
  std::string why;
  CHECK_FALSE(decode_image(nullptr, 0, {}, img, why));
  CHECK(test::contains(why, "empty"));
  CHECK_FALSE(decode_image(noise.data(), noise.size(), {}, img, why));
  CHECK(why == "not a JPEG or PNG file");
  CHECK_FALSE(decode_image(jpg.data(), jpg.size(), {2, 0}, img, why));
  CHECK(test::contains(why, "channels"));
  // The intact files still decode after the failures (the thread's TurboJPEG handle is reused).
  CHECK(decode_ok(jpg, 3).cols == 160);
  CHECK(decode_ok(png, 1).rows == 120);
}

TEST_CASE(
    "image: resize, crop_resize, the eval pipeline and flip give PIL's and torchvision's bytes") {
  if (!need_torchvision()) return;
  TempDir d("transforms");
  const Image rgb = synthetic(375, 500, 3, 10);
  const Image grey = synthetic(45, 67, 1, 11);
  const Image small_rgb = synthetic(45, 67, 3, 12);
  const Image odd = synthetic(301, 289, 3, 13);
  const std::vector<std::pair<std::string, const Image*>> sources = {
      {"rgb.png", &rgb}, {"grey.png", &grey}, {"small_rgb.png", &small_rgb}, {"odd.png", &odd}};
  for (const auto& [name, img] : sources) write_file(d / name, encode_png(*img));

  struct Job {
    std::string out, line;
    std::function<Image()> ours;
  };
  std::vector<Job> jobs;
  auto add_resize = [&](const std::string& src, const Image& img, int w, int h) {
    const std::string out = fmt::format("resize_{}_{}x{}", src.substr(0, src.size() - 4), w, h);
    jobs.push_back({out, fmt::format("resize {} {} {} {}", src, out, w, h),
                    [&img, w, h] { return resize(img, h, w); }});
  };
  add_resize("rgb.png", rgb, 224, 224);            // shrink both
  add_resize("rgb.png", rgb, 97, 61);              // strong shrink, odd sizes
  add_resize("rgb.png", rgb, 500, 200);            // one axis only
  add_resize("rgb.png", rgb, 777, 401);            // enlarge both
  add_resize("grey.png", grey, 20, 13);            // grey shrink
  add_resize("grey.png", grey, 150, 101);          // grey enlarge
  add_resize("grey.png", grey, 33, 90);            // shrink one, enlarge the other
  add_resize("small_rgb.png", small_rgb, 67, 45);  // same size: PIL copies
  add_resize("small_rgb.png", small_rgb, 1, 1);

  std::mt19937_64 rng(42);
  for (int i = 0; i < 6; ++i) {
    const CropBox b = random_resized_crop_box(rgb.rows, rgb.cols, rng);
    const std::string out = fmt::format("crop_resize_{}", i);
    jobs.push_back({out,
                    fmt::format("crop_resize rgb.png {} {} {} {} {} 224 224", out, b.left, b.top,
                                b.left + b.width, b.top + b.height),
                    [&rgb, b] { return crop_resize(rgb, b, 224, 224); }});
  }
  const CropBox gb = random_resized_crop_box(grey.rows, grey.cols, rng);
  jobs.push_back({"crop_resize_grey",
                  fmt::format("crop_resize grey.png crop_resize_grey {} {} {} {} 32 32", gb.left,
                              gb.top, gb.left + gb.width, gb.top + gb.height),
                  [&grey, gb] { return crop_resize(grey, gb, 32, 32); }});

  // Resize(256) + CenterCrop(224); 375x500 gives 256x341, whose centre crop left is
  // round(58.5) = 58 (Python rounds half to even).
  for (const auto& [name, img] : sources) {
    if (img->rows < 100) continue;
    const std::string out = "eval_" + name.substr(0, name.size() - 4);
    const Image* src = img;
    jobs.push_back({out, fmt::format("eval {} {}", name, out), [src] {
                      const auto [r, c] = shorter_side_size(src->rows, src->cols, 256);
                      const Image resized = resize(*src, r, c);
                      return crop(resized, center_crop_box(r, c, 224, 224));
                    }});
  }
  for (const auto& [name, img] : sources) {
    const std::string out = "mirror_" + name.substr(0, name.size() - 4);
    const Image* src = img;
    jobs.push_back({out, fmt::format("mirror {} {}", name, out), [src] {
                      Image m = *src;
                      flip_horizontal(m);
                      return m;
                    }});
  }

  std::string lines;
  for (const Job& j : jobs) lines += j.line + "\n";
  run_jobs(d, lines);
  for (const Job& j : jobs) {
    CAPTURE(j.line);
    const Diff e = diff(j.ours(), load_image(d, j.out));
    CHECK(e.max <= 1);
    CHECK(e.mean < 0.05);
  }
}

TEST_CASE("image: to_chw_f32 is ToTensor + Normalize") {
  if (!need_torchvision()) return;
  TempDir d("tensor");
  const Image rgb = synthetic(37, 53, 3, 14);
  const Image grey = synthetic(29, 31, 1, 15);
  write_file(d / "rgb.png", encode_png(rgb));
  write_file(d / "grey.png", encode_png(grey));
  run_jobs(d, "tensor rgb.png t_rgb\ntensor grey.png t_grey\n");
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stdev[3] = {0.229f, 0.224f, 0.225f};
  for (const auto& [img, name] : {std::pair{&rgb, "t_rgb"}, std::pair{&grey, "t_grey"}}) {
    CAPTURE(name);
    const std::vector<float> want = load_floats(d, name);
    REQUIRE(want.size() == img->px.size());
    std::vector<float> got(want.size());
    to_chw_f32(*img, mean, stdev, got.data());
    float worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
    CHECK(worst <= 1e-6f);
  }
  // Channel-major: plane c holds channel c.
  std::vector<float> got(rgb.px.size());
  const float zero[3] = {0, 0, 0}, one[3] = {1, 1, 1};
  to_chw_f32(rgb, zero, one, got.data());
  const size_t plane = static_cast<size_t>(rgb.rows) * rgb.cols;
  CHECK(got[2 * plane + 5 * rgb.cols + 7] == rgb.at(5, 7, 2) / 255.0f);
}

TEST_CASE("image: random_resized_crop_box draws torchvision's boxes, seeded") {
  const int rows = 375, cols = 500;
  std::mt19937_64 rng(7), same(7), other(8);
  int differ = 0;
  for (int i = 0; i < 2000; ++i) {
    const CropBox b = random_resized_crop_box(rows, cols, rng);
    REQUIRE(b.top >= 0);
    REQUIRE(b.left >= 0);
    REQUIRE(b.height > 0);
    REQUIRE(b.width > 0);
    REQUIRE(b.top + b.height <= rows);
    REQUIRE(b.left + b.width <= cols);
    // Area and ratio as drawn, up to the rounding of each side by at most 0.5.
    const double area = double{rows} * cols, w = b.width, h = b.height;
    CHECK((w + 0.5) * (h + 0.5) >= 0.08 * area);
    CHECK((w - 0.5) * (h - 0.5) <= area);
    CHECK((w + 0.5) / (h - 0.5) >= 3.0 / 4.0);
    CHECK((w - 0.5) / (h + 0.5) <= 4.0 / 3.0);
    const CropBox s = random_resized_crop_box(rows, cols, same);
    CHECK((s.top == b.top && s.left == b.left && s.height == b.height && s.width == b.width));
    const CropBox o = random_resized_crop_box(rows, cols, other);
    differ += o.top != b.top || o.left != b.left || o.height != b.height || o.width != b.width;
  }
  CHECK(differ > 1900);

  // Thin pictures never fit a drawn box: torchvision's centre crop at the clamped ratio.
  if (!need_torchvision()) return;
  TempDir d("rrc");
  run_jobs(d, "rrc_fallback wide 10 1000\nrrc_fallback tall 1000 10\n");
  for (const auto& [name, r, c] : {std::tuple{"wide", 10, 1000}, std::tuple{"tall", 1000, 10}}) {
    CAPTURE(name);
    const std::vector<uint8_t> raw = read_file(d / (std::string(name) + ".raw"));
    REQUIRE(raw.size() == 4 * sizeof(int32_t));
    int32_t want[4];  // i, j, h, w
    std::memcpy(want, raw.data(), sizeof want);
    const CropBox b = random_resized_crop_box(r, c, rng);
    CHECK(b.top == want[0]);
    CHECK(b.left == want[1]);
    CHECK(b.height == want[2]);
    CHECK(b.width == want[3]);
  }
}

TEST_CASE("image: centre crop and shorter-side sizes follow torchvision's rounding") {
  CHECK(shorter_side_size(375, 500, 256) == std::pair{256, 341});
  CHECK(shorter_side_size(500, 375, 256) == std::pair{341, 256});
  CHECK(shorter_side_size(300, 300, 256) == std::pair{256, 256});
  CHECK(shorter_side_size(100, 1000, 256) == std::pair{256, 2560});
  const CropBox b = center_crop_box(256, 341, 224, 224);
  CHECK(b.top == 16);
  CHECK(b.left == 58);                                    // round(58.5) = 58
  CHECK(center_crop_box(256, 339, 224, 224).left == 58);  // round(57.5) = 58
  CHECK(center_crop_box(224, 224, 224, 224).top == 0);
}

TEST_CASE("image: encoders round-trip (PNG exactly, JPEG at quality 95 closely)") {
  for (int channels : {1, 3}) {
    CAPTURE(channels);
    const Image img = synthetic(61, 83, channels, 16, 0, false);  // smooth: JPEG's good case
    CHECK(decode_ok(encode_png(img), channels).px == img.px);
    const Diff e = diff(decode_ok(encode_jpeg(img, 95), channels), img);
    CHECK(e.max <= 8);
    CHECK(e.mean < 1);
  }
}
