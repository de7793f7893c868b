// Image folders, packs and the batch pipeline (runtime/data/image_folder.h, pack.h, pipeline.h),
// on small real folders written here: Fashion-MNIST images as PNG (grey) and JPEG (RGB) in class
// folders, with planted corrupt, truncated, zero-byte and non-image files. Labels, shapes, the
// evaluation transform end to end against torchvision, determinism across worker counts, the bad
// data named and counted, packs (round trip, corruption, staleness), every error before training;
// and cb-train itself: LeNet-5 from the image folder against the IDX files (without augmentation,
// and with the default --augment auto on a subset), ResNet-18 on an ImageNet-style folder with no
// flag but --data.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>

#include "runtime/data/dataset.h"
#include "runtime/data/idx_dataset.h"
#include "runtime/data/image.h"
#include "runtime/data/image_folder.h"
#include "runtime/data/load_dataset.h"
#include "runtime/data/pack.h"
#include "runtime/data/pipeline.h"
#include "tests/fashion_folder.h"
#include "tests/test_util.h"

using namespace cb;
namespace fs = std::filesystem;
using test::class_name;
using test::contains;
using test::error_of;
using test::FolderFromIdx;
using test::grey_of;
using test::need;
using test::rgb_of;
using test::write_bytes;
using test::write_fashion_folder;

namespace {

const char* const kFashion = "/usr/share/datasets/fashion-mnist";
constexpr std::string_view kFashionHow =
    "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)";
const char* const kPython = "/usr/bin/python3";

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() / fmt::format("cb_test_pipe_{}_{}", tag, getpid());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path operator/(const std::string& f) const { return path / f; }
};

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

// Example i of an IDX set as a 28x28 grey Image (and replicated to RGB).
// The batches of a pipeline, as float vectors (and labels).
std::vector<std::vector<float>> batches(const Dataset& d, const TransformSpec& spec, bool train,
                                        int workers, int count, std::vector<int64_t>* labels,
                                        int64_t batch = 4, uint64_t seed = 7) {
  PipelineOptions o;
  o.batch = batch;
  o.train = train;
  o.seed = seed;
  o.workers = workers;
  BatchPipeline p(train ? d.train : d.test, spec, o, d.skipped);
  std::vector<std::vector<float>> out;
  Tensor img, lab;
  for (int b = 0; b < count && p.next(img, lab); ++b) {
    out.emplace_back(img.data<float>(), img.data<float>() + img.numel());
    if (labels)
      labels->insert(labels->end(), lab.data<int64_t>(), lab.data<int64_t>() + lab.numel());
  }
  return out;
}

bool need_torchvision() {
  if (!need(kPython, "Debian's python3 (the reference for the transforms)")) return false;
  if (std::system(
          fmt::format("{} -c 'import PIL, numpy, torchvision' 2>/dev/null", kPython).c_str()) == 0)
    return true;
  return need(fmt::format("{} with import PIL, numpy, torchvision", kPython),
              "python3-pil and python3-torchvision (./setup.sh installs them)");
}

}  // namespace

TEST_CASE("image folder: train/ and val/ of PNG and JPEG, labels, skipped files, batches") {
  if (!need(fs::path(kFashion) / "train-images-idx3-ubyte.gz", kFashionHow)) return;
  TempDir d("folder");
  const fs::path root = d / "fm";
  FolderFromIdx idx = write_fashion_folder(root, 200, 40);
  // Planted bad files: a non-image, an empty file, random bytes and a truncated JPEG named as
  // images, a file outside any class folder.
  write_bytes(root / "train/class03/notes.txt", {'h', 'i'});
  write_bytes(root / "train/class03/empty.png", {});
  std::mt19937 rng(3);
  std::vector<uint8_t> noise(500);
  for (uint8_t& b : noise) b = static_cast<uint8_t>(rng());
  write_bytes(root / "train/class04/noise.jpg", noise);
  std::vector<uint8_t> jpeg = read_bytes(root / "train/class00/0_00001.JPG");  // a T-shirt
  REQUIRE(jpeg.size() > 100);
  jpeg.resize(jpeg.size() / 2);
  write_bytes(root / "train/class05/truncated.jpeg", jpeg);
  write_bytes(root / "train/README", {'x'});

  Dataset data = load_dataset(root.string());
  CHECK(data.format == DataFormat::Folder);
  CHECK(data.photos);
  CHECK(data.classes.size() == 10);
  CHECK(data.classes[3] == "class03");
  CHECK(data.train->size() == 202);  // 200 images + noise.jpg + truncated.jpeg (found on decode)
  CHECK(data.test->size() == 40);
  CHECK(data.skipped->count() == 3);  // notes.txt, empty.png, README
  size_t cursor = 0;
  std::string listed = skip_summary(data.skipped->since(&cursor));
  CHECK(contains(listed, "notes.txt (not a .jpg, .jpeg or .png file)"));
  CHECK(contains(listed, "empty.png (empty file (0 bytes))"));
  CHECK(contains(listed, "README (not inside a class folder)"));
  // Labels: the class folder's sorted position = the Fashion-MNIST label.
  for (int64_t i = 0; i < data.train->size(); ++i) {
    const std::string name = data.train->name(i);
    const auto at = name.find("class");
    REQUIRE(at != std::string::npos);
    CHECK(test::images(data.train).label(i) == std::stoi(name.substr(at + 5, 2)));
  }

  // A 1x28x28 model, no augmentation, mean 0 and std 1: each PNG example is exactly the IDX
  // pixels / 255, each JPEG one (RGB at quality 95, back to grey) close to them.
  TransformOptions plain;
  plain.augment = AugmentMode::None;
  plain.mean = {0};
  plain.std = {1};
  const TransformSpec spec = plan_transforms(data, {"x", {1, 28, 28}, DType::F32}, plain);
  CHECK(spec.rows == 28);
  CHECK(!spec.augment);
  std::vector<int64_t> labels;
  std::vector<std::vector<float>> ev = batches(data, spec, false, 2, 100, &labels);
  CHECK(ev.size() == 10);  // 40 test images, 4 per batch
  const ImageSet& test_idx = test::mem(idx.test);
  for (int64_t i = 0; i < 40; ++i) {
    // Test examples are listed by class, then file name: find which IDX example it is.
    const std::string name = data.test->name(i);
    const int64_t k = std::stoll(name.substr(name.rfind('_') + 1, 5));
    CHECK(labels[static_cast<size_t>(i)] == test_idx.labels[static_cast<size_t>(k)]);
    const float* got = ev[static_cast<size_t>(i / 4)].data() + (i % 4) * 784;
    double worst = 0;
    for (int q = 0; q < 784; ++q)
      worst = std::max<double>(worst, std::abs(got[q] - test_idx.chw(k)[q] / 255.0f));
    INFO(name);
    if (k % 2 == 0)
      CHECK(worst == 0);
    else
      CHECK(worst < 0.1);  // JPEG's loss at quality 95
  }

  // A model that takes uint8 pixels gets them as they are (no x / 255, no normalisation).
  const TransformSpec u8 = plan_transforms(data, {"x", {1, 28, 28}, DType::U8}, plain);
  CHECK(u8.dtype == DType::U8);
  {
    PipelineOptions po;
    po.batch = 40;
    po.train = false;
    BatchPipeline p(data.test, u8, po, data.skipped);
    Tensor img, lab;
    REQUIRE(p.next(img, lab));
    CHECK(img.dtype == DType::U8);
    CHECK(img.dims == std::vector<int64_t>{40, 1, 28, 28});
    int pngs = 0;
    for (int64_t i = 0; i < 40; ++i) {
      const std::string name = data.test->name(i);
      const int64_t k = std::stoll(name.substr(name.rfind('_') + 1, 5));
      if (k % 2 != 0) continue;  // JPEG
      ++pngs;
      const uint8_t* got = img.data<uint8_t>() + i * 784;
      CHECK(std::equal(got, got + 784, test_idx.chw(k)));
    }
    CHECK(pngs == 20);
    CHECK(!p.next(img, lab));
  }

  // One epoch of training batches: the two bad files are skipped, named with their reason, and
  // replaced, so every batch is full; the log counts each once.
  std::vector<std::vector<float>> tr = batches(data, spec, true, 2, 2 * 50, nullptr);
  CHECK(tr.size() == 100);
  for (const auto& b : tr) CHECK(b.size() == 4u * 784);
  CHECK(data.skipped->count() == 5);
  std::string decoded = skip_summary(data.skipped->since(&cursor));
  CHECK(contains(decoded, "noise.jpg"));
  CHECK(contains(decoded, "truncated.jpeg"));
  CHECK(contains(decoded, "JPEG"));
  CHECK(data.skipped->since(&cursor).empty());
}

TEST_CASE("pipeline: augmented batches are the same with 1, 2 or 3 workers, and differ per epoch") {
  if (!need(fs::path(kFashion) / "train-images-idx3-ubyte.gz", kFashionHow)) return;
  TempDir d("workers");
  write_fashion_folder(d / "fm", 64, 16);
  Dataset data = load_dataset((d / "fm").string());
  const TransformSpec spec = plan_transforms(data, {"x", {3, 20, 24}, DType::F32}, {});
  CHECK(spec.augment);  // image folders: augmented by default (20x24 grey: the mild pad + crop)
  CHECK(spec.channels == 3);
  CHECK(spec.mean[0] == doctest::Approx(0.485));
  std::vector<int64_t> l1, l2, l3;
  auto one = batches(data, spec, true, 1, 40, &l1, 4, 11);
  auto two = batches(data, spec, true, 2, 40, &l2, 4, 11);
  auto three = batches(data, spec, true, 3, 40, &l3, 4, 11);
  CHECK(one == two);
  CHECK(one == three);
  CHECK(l1 == l3);
  CHECK(one[0].size() == 4u * 3 * 20 * 24);
  // Epoch 2 visits the same examples in another order with other crops.
  CHECK(one[0] != one[16]);
  auto other_seed = batches(data, spec, true, 2, 4, nullptr, 4, 12);
  CHECK(other_seed[0] != one[0]);
  // A pipeline started at batch 22 (a resumed run, or the loop's new ring when K changes) makes
  // the same batches as one that got there from the start.
  PipelineOptions po;
  po.batch = 4;
  po.seed = 11;
  po.workers = 2;
  po.start = 22;
  BatchPipeline later(data.train, spec, po, data.skipped);
  Tensor img, lab;
  for (size_t b = 22; b < 40; ++b) {
    later.next(img, lab);
    CHECK(std::vector<float>(img.data<float>(), img.data<float>() + img.numel()) == one[b]);
  }
}

TEST_CASE("pipeline: the evaluation transform end to end against torchvision") {
  if (!need_torchvision()) return;
  TempDir d("torchvision");
  // Two photos-like RGB images: 300x280 decodes at full size (exact), 500x375 at libjpeg-turbo's
  // 6/8 scale (close: torchvision decodes at full size and resizes from there).
  std::mt19937 rng(5);
  for (auto [name, rows, cols] : {std::tuple{"a/small.jpg", 280, 300}, {"b/big.jpg", 375, 500}}) {
    Image img;
    img.rows = rows;
    img.cols = cols;
    img.channels = 3;
    img.px.resize(static_cast<size_t>(rows * cols * 3));
    for (int y = 0; y < rows; ++y)
      for (int x = 0; x < cols; ++x)
        for (int c = 0; c < 3; ++c)
          img.px[static_cast<size_t>((y * cols + x) * 3 + c)] = static_cast<uint8_t>(
              127 + 100 * std::sin(0.02 * x * (c + 1) + 0.015 * y) + (rng() % 4));
    write_bytes(d / "train" / name, encode_jpeg(img, 90));
    write_bytes(d / "val" / name, encode_jpeg(img, 90));
  }
  Dataset data = load_dataset(d.path.string());
  REQUIRE(data.test->size() == 2);
  const TransformSpec spec = plan_transforms(data, {"x", {3, 224, 224}, DType::F32}, {});
  std::vector<std::vector<float>> ours = batches(data, spec, false, 1, 2, nullptr, 1);
  REQUIRE(ours.size() == 2);
  const std::string script = (d / "ref.py").string();
  std::ofstream(script)
      << "import sys\nfrom PIL import Image\nimport torchvision.transforms as T\n"
         "t = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),\n"
         "  T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])\n"
         "for i, f in enumerate(sys.argv[2:]):\n"
         "  t(Image.open(f).convert('RGB')).numpy().tofile(f'{sys.argv[1]}/{i}.f32')\n";
  const std::string cmd = fmt::format("{} {} {} {} {}", kPython, script, d.path.string(),
                                      data.test->name(0), data.test->name(1));
  REQUIRE(std::system(cmd.c_str()) == 0);
  for (int i = 0; i < 2; ++i) {
    std::vector<uint8_t> raw = read_bytes(d / fmt::format("{}.f32", i));
    REQUIRE(raw.size() == 3u * 224 * 224 * 4);
    const auto* ref = reinterpret_cast<const float*>(raw.data());
    double worst = 0, mean = 0;
    for (size_t k = 0; k < 3u * 224 * 224; ++k) {
      const double e = std::abs(ours[static_cast<size_t>(i)][k] - ref[k]);
      worst = std::max(worst, e);
      mean += e;
    }
    mean /= 3.0 * 224 * 224;
    INFO(data.test->name(i), ": max ", worst, ", mean ", mean);
    if (contains(data.test->name(i), "small")) {
      CHECK(worst < 1e-5);  // the same pixels: only float rounding
    } else {
      CHECK(mean < 0.05);  // DCT-scaled decode: about 1-2 levels of 255 on average
    }
  }
}

TEST_CASE("image folder: class folders split by --val-split; every error before training") {
  if (!need(fs::path(kFashion) / "train-images-idx3-ubyte.gz", kFashionHow)) return;
  TempDir d("errors");
  write_fashion_folder(d / "flat", 300, 0, true, true);
  DataOptions o;
  o.val_split = 0.2;
  Dataset flat = load_dataset((d / "flat").string(), o);
  CHECK(flat.train->size() + flat.test->size() == 300);
  CHECK(flat.test->size() > 30);
  CHECK(flat.test->size() < 90);
  // The same split every time.
  Dataset again = load_dataset((d / "flat").string(), o);
  for (int64_t i = 0; i < flat.test->size(); ++i) CHECK(again.test->name(i) == flat.test->name(i));
  o.val_split = 0;
  CHECK(contains(error_of([&] { load_dataset((d / "flat").string(), o); }), "--val-split"));

  // A model that takes flat vectors cannot be fed a folder of photos.
  std::string e = error_of([&] { plan_transforms(flat, {"x", {784}, DType::F32}, {}); });
  CHECK(contains(e, "[N,784]"));
  CHECK(contains(e, "image folder"));
  TransformOptions two_means;
  two_means.mean = {1, 2};
  e = error_of([&] { plan_transforms(flat, {"x", {3, 32, 32}, DType::F32}, two_means); });
  CHECK(contains(e, "--mean has 2 values"));
  TransformOptions zero_std;
  zero_std.std = {0};
  e = error_of([&] { plan_transforms(flat, {"x", {3, 32, 32}, DType::F32}, zero_std); });
  CHECK(contains(e, "--std values must be positive"));

  // No class folders, an empty class, a val/ class train/ lacks, a folder of nothing.
  fs::create_directories(d / "none/train");
  fs::create_directories(d / "none/val");
  CHECK(contains(error_of([&] { load_dataset((d / "none").string()); }), "no class folders"));
  write_bytes(d / "emptyclass/train/a/x.png", encode_png(rgb_of(Image{2, 2, 1, {1, 2, 3, 4}})));
  fs::create_directories(d / "emptyclass/train/b");
  fs::create_directories(d / "emptyclass/val/a");
  e = error_of([&] { load_dataset((d / "emptyclass").string()); });
  CHECK(contains(e, "emptyclass/train/b"));
  CHECK(contains(e, "holds no images"));
  fs::remove_all(d / "emptyclass/train/b");
  write_bytes(d / "emptyclass/val/zebra/y.png", encode_png(rgb_of(Image{2, 2, 1, {1, 2, 3, 4}})));
  e = error_of([&] { load_dataset((d / "emptyclass").string()); });
  CHECK(contains(e, "val/zebra is not a class of train/"));
  DataOptions forced;
  forced.format = DataFormat::Folder;
  fs::create_directories(d / "nothing");
  CHECK(contains(error_of([&] { load_dataset((d / "nothing").string(), forced); }),
                 "no class folders"));
  // Every file undecodable: an error, not an endless search.
  write_bytes(d / "bad/train/a/x.jpg", {1, 2, 3});
  write_bytes(d / "bad/val/a/y.jpg", {1, 2, 3});
  Dataset bad = load_dataset((d / "bad").string());
  const TransformSpec spec = plan_transforms(bad, {"x", {3, 8, 8}, DType::F32}, {});
  e = error_of([&] { batches(bad, spec, false, 1, 1, nullptr); });
  CHECK(contains(e, "none of the 1 examples could be loaded"));
  CHECK(contains(e, "y.jpg"));
}

TEST_CASE(
    "pack: a folder packed once reads back the same batches; corrupt and stale packs refused") {
  if (!need(fs::path(kFashion) / "train-images-idx3-ubyte.gz", kFashionHow)) return;
  TempDir d("pack");
  const fs::path root = d / "fm";
  write_fashion_folder(root, 120, 30);
  write_bytes(root / "train/class01/broken.jpg", {0xFF, 0xD8, 0xFF, 0, 1, 2});
  const std::string pack = (d / "fm.cbpack").string();
  PackOptions po;
  po.size = 32;  // the shorter side stored: the evaluation resize of a 32x32 input
  po.workers = 2;
  PackSummary sum = write_pack(root.string(), pack, po);
  CHECK(sum.train == 120);
  CHECK(sum.test == 30);
  CHECK(sum.skipped.size() == 1);
  CHECK(contains(sum.skipped[0].name, "broken.jpg"));
  CHECK(!fs::exists(pack + ".tmp"));

  Dataset folder = load_dataset(root.string());
  Dataset packed = load_dataset(pack);  // detected from the file
  CHECK(packed.format == DataFormat::Pack);
  CHECK(packed.classes == folder.classes);
  CHECK(packed.test->size() == 30);
  // Evaluation batches from the pack equal those from the folder (the pack stores what the
  // evaluation transform's resize makes).
  const TransformSpec spec = plan_transforms(folder, {"x", {3, 32, 32}, DType::F32}, {});
  CHECK(spec.eval_resize() == 32);
  std::vector<int64_t> la, lb;
  CHECK(batches(folder, spec, false, 2, 100, &la) == batches(packed, spec, false, 2, 100, &lb));
  CHECK(la == lb);
  // Training batches from the pack are deterministic across workers too.
  CHECK(batches(packed, spec, true, 1, 10, nullptr) == batches(packed, spec, true, 2, 10, nullptr));

  // Corruption: a record's pixel byte (found when it is read), the header, a truncated file.
  std::vector<uint8_t> bytes = read_bytes(pack);
  std::vector<uint8_t> bad = bytes;
  bad[4096] ^= 0x55;
  write_bytes(d / "bad.cbpack", bad);
  Dataset corrupt = load_dataset((d / "bad.cbpack").string());
  std::string e = error_of([&] { batches(corrupt, spec, false, 1, 1000, nullptr); });
  e += error_of([&] { batches(corrupt, spec, true, 1, 60, nullptr); });
  CHECK(contains(e, "fails its checksum"));
  CHECK(contains(e, "rebuild it with cb-pack"));
  bad = bytes;
  bad[20] ^= 1;
  write_bytes(d / "bad.cbpack", bad);
  CHECK(contains(error_of([&] { load_dataset((d / "bad.cbpack").string()); }),
                 "the header fails its checksum"));
  bad = bytes;
  bad.resize(bytes.size() - 100);
  write_bytes(d / "bad.cbpack", bad);
  CHECK(contains(error_of([&] { load_dataset((d / "bad.cbpack").string()); }), "truncated"));
  write_bytes(d / "bad.cbpack", {'n', 'o', 'p', 'e'});
  CHECK(contains(error_of([&] { load_dataset((d / "bad.cbpack").string()); }), "too short"));

  // Stale: the folder changed since it was packed. Another folder: refused for --cache.
  CHECK(contains(error_of([&] { load_pack_dataset(pack, (d / "elsewhere").string()); }),
                 "was made from"));
  write_bytes(root / "train/class02/new.png", encode_png(rgb_of(Image{2, 2, 1, {1, 2, 3, 4}})));
  e = error_of([&] { load_dataset(pack); });
  CHECK(contains(e, "stale"));
  CHECK(contains(e, "cb-pack"));
}

namespace {

// Runs a command, returns its exit code and output (stdout and stderr).
int run(const std::string& cmd, std::string& out) {
  const std::string log = fs::temp_directory_path() / fmt::format("cb_pipe_run_{}.log", getpid());
  const int rc = std::system((cmd + " > " + log + " 2>&1").c_str());
  std::ifstream f(log);
  out.assign(std::istreambuf_iterator<char>(f), {});
  fs::remove(log);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// The last evaluation's accuracy in cb-train's output (a fraction).
double accuracy_of(const std::string& out) {
  const std::regex re("test accuracy ([0-9.]+)% on");
  double acc = -1;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it)
    acc = std::stod((*it)[1]) / 100;
  REQUIRE(acc >= 0);
  return acc;
}

}  // namespace

TEST_CASE("cb-train: LeNet-5 from the Fashion-MNIST image folder reaches the IDX accuracy") {
  if (!need(fs::path(kFashion) / "train-images-idx3-ubyte.gz", kFashionHow)) return;
  TempDir d("lenet");
  if (test::kSanitized) {
    // Under a sanitizer: the same path (PNG folder, decoding workers, cb-train) on 7,000 images
    // for 150 steps; the accuracy comparison below is the Release build's (minutes here).
    write_fashion_folder(d / "fm", 6000, 1000, true);
    std::string b;
    REQUIRE(run(fmt::format("{}/cb-train {}/models/lenet5_op17.onnx --steps 150 --learners 1 "
                            "--seed 3 --data {} --augment none --mean 0 --std 1",
                            CB_BINARY_DIR, CB_SOURCE_DIR, (d / "fm").string()),
                b) == 0);
    CHECK(contains(b, "image folder (train/ and val/ class folders), 6000 training, 1000 test"));
    CHECK(accuracy_of(b) > 0.2);  // above chance (0.1): 0.51 after 150 steps on the IDX files
    return;
  }
  write_fashion_folder(d / "fm", 60000, 10000, true);  // all 70,000 as PNG, lossless
  const std::string common = fmt::format(
      "{}/cb-train {}/models/lenet5_op17.onnx --epochs 2 --lr-schedule cosine "
      "--learners 1 --seed 3 ",
      CB_BINARY_DIR, CB_SOURCE_DIR);
  std::string a, b;
  REQUIRE(run(common + "--data " + kFashion, a) == 0);
  // The folder with the IDX conventions (no augmentation, x / 255): the same pixels, in another
  // order (class folders), so the same accuracy up to the order's noise.
  REQUIRE(run(common + "--data " + (d / "fm").string() + " --augment none --mean 0 --std 1", b) ==
          0);
  MESSAGE("IDX: " << accuracy_of(a) << ", image folder: " << accuracy_of(b));
  CHECK(contains(b, "image folder (train/ and val/ class folders), 60000 training, 10000 test"));
  CHECK(contains(b, "data wait"));
  // The order alone moves a 2-epoch run's accuracy: seeds 3..9 on the IDX files gave 87.38 to
  // 88.00% (sd 0.2 points, so sd 0.3 for a difference of two runs), and an ASan build's arithmetic
  // is another draw. 0.8 points is about 3 sd of the difference; a wrong scale, crop or label map
  // costs far more (the pixels themselves are checked against PIL in test_image).
  CHECK(std::abs(accuracy_of(a) - accuracy_of(b)) <= 0.008);
}

namespace {

// The first n training and m test Fashion-MNIST examples as IDX files (uncompressed) in `dir`.
void write_idx_subset(const fs::path& dir, int64_t n, int64_t m) {
  Dataset idx = load_dataset(kFashion);
  auto be32 = [](std::vector<uint8_t>& b, uint32_t v) {
    for (int k = 3; k >= 0; --k) b.push_back(static_cast<uint8_t>(v >> (8 * k)));
  };
  for (int split = 0; split < 2; ++split) {
    const ImageSet& s = test::mem(split == 0 ? idx.train : idx.test);
    const auto count = static_cast<uint32_t>(split == 0 ? n : m);
    std::vector<uint8_t> images, labels;
    be32(images, 0x803);
    be32(images, count);
    be32(images, static_cast<uint32_t>(s.rows));
    be32(images, static_cast<uint32_t>(s.cols));
    images.insert(images.end(), s.pixels.begin(),
                  s.pixels.begin() + static_cast<int64_t>(count) * s.image_elems());
    be32(labels, 0x801);
    be32(labels, count);
    for (uint32_t i = 0; i < count; ++i) labels.push_back(static_cast<uint8_t>(s.labels[i]));
    const std::string pre = split == 0 ? "train" : "t10k";
    write_bytes(dir / (pre + "-images-idx3-ubyte"), images);
    write_bytes(dir / (pre + "-labels-idx1-ubyte"), labels);
  }
}

}  // namespace

TEST_CASE("cb-train --augment auto: a Fashion-MNIST PNG folder reaches the IDX files' accuracy") {
  // The default augmentation of a folder of 28x28 grey images is a milder CIFAR recipe: pad 2 +
  // random crop on half the examples, no flip (on the full set, one epoch, CIFAR's pad 3 + flip
  // cost 4.5 points against the IDX files and ImageNet's random-resized crop 11; docs/data.md).
  // One epoch of LeNet-5 on the same 12,000 + 2,000 images, as IDX files (fed as they are) and
  // as a PNG folder with every default: the folder must reach the IDX accuracy less 2 points.
  // One-sided: on this subset the folder's ImageNet normalisation alone puts it 5.9 points above
  // the IDX files' x/255 (--augment none, 20 seeds), so the folder may end well above (seed 3:
  // 77.6% against 74.8%). CIFAR's pad 3 + flip ended within 0.3 points at seed 3 only because
  // its cost cancelled that gain: over 20 seeds 7 ended more than 2 points under; this recipe
  // none (worst 1.55 under).
  if (!need(fs::path(kFashion) / "train-images-idx3-ubyte.gz", kFashionHow)) return;
  TempDir d("augment_auto");
  // Under a sanitizer: the augmented path on a tenth of the images for 60 steps; the accuracy
  // bar is the Release build's.
  const int64_t n = test::kSanitized ? 1200 : 12000, m = test::kSanitized ? 200 : 2000;
  write_idx_subset(d / "idx", n, m);
  write_fashion_folder(d / "fm", n, m, true);
  const std::string common =
      fmt::format("{}/cb-train {}/models/lenet5_op17.onnx {} --learners 1 --seed 3 ", CB_BINARY_DIR,
                  CB_SOURCE_DIR, test::kSanitized ? "--steps 60" : "--epochs 1");
  std::string a, b;
  REQUIRE(run(common + "--data " + (d / "idx").string(), a) == 0);
  REQUIRE(run(common + "--data " + (d / "fm").string(), b) == 0);
  MESSAGE("IDX: " << accuracy_of(a) << ", PNG folder with --augment auto: " << accuracy_of(b));
  CHECK(contains(b,
                 "training pad 2 + random crop 28x28 on half the examples, no flip (small "
                 "grey images"));
  if (!test::kSanitized) CHECK(accuracy_of(b) >= accuracy_of(a) - 0.02);
}

TEST_CASE("cb-train: ResNet-18 trains on an ImageNet-style folder of JPEGs with no other flag") {
  const fs::path model = fs::path(CB_SOURCE_DIR) / "models/resnet18_op17.onnx";
  if (!need(model, "a big zoo model, exported by ./setup.sh (models/export_zoo.py --big)")) return;
  TempDir d("imagenet");
  // 10 classes x (12 training + 2 validation) 500x375 JPEGs, one planted corrupt file.
  std::mt19937 rng(9);
  for (int c = 0; c < 10; ++c)
    for (int i = 0; i < 14; ++i) {
      Image img;
      img.rows = 375;
      img.cols = 500;
      img.channels = 3;
      img.px.resize(375u * 500 * 3);
      for (size_t k = 0; k < img.px.size(); ++k)
        img.px[k] =
            static_cast<uint8_t>((k % 3 == static_cast<size_t>(c % 3) ? 160 : 60) + rng() % 40);
      const std::string split = i < 12 ? "train" : "val";
      write_bytes(d / split / fmt::format("n{:08d}", c) / fmt::format("img_{}.JPEG", i),
                  encode_jpeg(img, 85));
    }
  write_bytes(d / "train/n00000003/corrupt.JPEG", {0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, 'J'});
  std::string out;
  const int rc = run(fmt::format("{}/cb-train {} --data {} --steps 3", CB_BINARY_DIR,
                                 model.string(), d.path.string()),
                     out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(contains(out, "image folder (train/ and val/ class folders), 121 training, 20 test"));
  CHECK(contains(out, "3x224x224; training random-resized crop"));
  CHECK(contains(out, "mean 0.485,0.456,0.406"));
  CHECK(contains(out, "corrupt.JPEG"));
  CHECK(contains(out, "done     3 steps"));
  CHECK(contains(out, "test accuracy"));
  // A model that cannot take images is refused before any learner is built.
  const int bad = run(fmt::format("{}/cb-train {}/models/transformer_op17.onnx --data {} "
                                  "--steps 1 --loss cross-entropy",
                                  CB_BINARY_DIR, CB_SOURCE_DIR, d.path.string()),
                      out);
  CHECK(bad == 1);
  CHECK(contains(out, "images are fed as float32"));
  CHECK(!contains(out, "memory "));  // nothing built
}

TEST_CASE("cb-train --cache: packs the folder on first use, reuses it, refuses it once stale") {
  if (!need(fs::path(kFashion) / "train-images-idx3-ubyte.gz", kFashionHow)) return;
  TempDir d("cache");
  write_fashion_folder(d / "fm", 400, 100);
  const std::string pack = (d / "fm.cbpack").string();
  const std::string cmd = fmt::format(
      "{}/cb-train {}/models/lenet5_op17.onnx --data {} --cache {} --steps 4 "
      "--learners 1 --workers 2",
      CB_BINARY_DIR, CB_SOURCE_DIR, (d / "fm").string(), pack);
  std::string out;
  REQUIRE(run(cmd, out) == 0);
  CHECK(contains(out, "cache    packing"));
  CHECK(contains(out, "400 training + 100 test images"));
  CHECK(contains(out, "pack of"));
  CHECK(fs::exists(pack));
  REQUIRE(run(cmd, out) == 0);
  CHECK(!contains(out, "cache    packing"));  // reused
  CHECK(contains(out, "pack of"));
  // The pack trains like the folder's files: the same examples (28x28, stored as they are).
  CHECK(contains(out, "400 training, 100 test images"));
  write_bytes(d / "fm/train/class00/extra.png", encode_png(rgb_of(Image{2, 2, 1, {1, 2, 3, 4}})));
  CHECK(run(cmd, out) == 1);
  CHECK(contains(out, "stale"));
  // --cache is for image folders only.
  CHECK(run(fmt::format("{}/cb-train {}/models/lenet5_op17.onnx --data {} --cache {} --steps 1",
                        CB_BINARY_DIR, CB_SOURCE_DIR, kFashion, pack),
            out) == 1);
  CHECK(contains(out, "--cache packs an image folder"));
}
