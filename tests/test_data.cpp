// Data sets (runtime/data/): CIFAR-10/100 binaries written here (records with a known pixel
// pattern, so each R/G/B plane must land in its channel), the subset and subfolder layouts, every
// error naming its file, the detection of a folder's format by load_dataset (IDX, CIFAR, the
// ImageNet-style folder we refuse, an empty folder), batches of [n,3,32,32], and the CIFAR-shaped
// Fashion-MNIST that setup.sh generates (models/make_cifar_shaped.py). Inputs from outside the
// repository go through test::need: a missing one skips with a message, or fails when CI is set.
#include <doctest/doctest.h>

#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "importer/onnx_importer.h"
#include "kernels/cpu/cpu_device.h"
#include "runtime/data/cifar_dataset.h"
#include "runtime/data/dataset.h"
#include "runtime/data/idx_dataset.h"
#include "runtime/data/load_dataset.h"
#include "runtime/data/pipeline.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "sma/train_loop.h"
#include "sma/trainer.h"
#include "tests/test_util.h"
#include "tests/trainer_util.h"

using namespace cb;
namespace fs = std::filesystem;
using test::TempDir;

namespace {

const char* const kFashion = "/usr/share/datasets/fashion-mnist";
constexpr std::string_view kFashionHow =
    "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)";
constexpr size_t kPixels = 3 * 32 * 32;

// A fresh folder under the temp dir, removed at scope exit.
using test::contains;
using test::error_of;
using test::need;

// The byte of example `id` at channel c, row y, column x: distinct per plane and position.
uint8_t pixel(int id, int c, int y, int x) {
  return static_cast<uint8_t>((id * 31 + c * 85 + y * 7 + x * 3) % 256);
}

// `n` records of examples first_id, first_id + 1, ...; label bytes from `labels(id)` (one byte for
// CIFAR-10, coarse and fine for CIFAR-100).
std::vector<uint8_t> records(int first_id, int n,
                             const std::function<std::vector<uint8_t>(int)>& labels) {
  std::vector<uint8_t> b;
  for (int id = first_id; id < first_id + n; ++id) {
    for (uint8_t l : labels(id)) b.push_back(l);
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) b.push_back(pixel(id, c, y, x));
  }
  return b;
}
std::vector<uint8_t> cifar10(int first_id, int n) {
  return records(first_id, n, [](int id) { return std::vector<uint8_t>{uint8_t(id % 10)}; });
}
std::vector<uint8_t> cifar100(int first_id, int n) {
  return records(first_id, n, [](int id) {
    return std::vector<uint8_t>{uint8_t(id % 20), uint8_t((id * 7) % 100)};  // coarse, fine
  });
}

void write_file(const std::string& path, const std::vector<uint8_t>& b) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// data_batch_1.bin (ids 0-2), data_batch_2.bin (ids 3-4), test_batch.bin (ids 100-101) in `dir`.
void write_cifar10(const std::string& dir) {
  write_file(dir + "/data_batch_1.bin", cifar10(0, 3));
  write_file(dir + "/data_batch_2.bin", cifar10(3, 2));
  write_file(dir + "/test_batch.bin", cifar10(100, 2));
}

// Example `i` of `set` holds the pixels of example `id`.
void check_example(const ImageSet& set, int64_t i, int id) {
  const uint8_t* img = set.pixels.data() + static_cast<size_t>(i) * kPixels;
  for (int c = 0; c < 3; ++c)
    for (auto [y, x] : {std::pair{0, 0}, {5, 7}, {31, 31}, {17, 2}}) {
      INFO("example ", i, " channel ", c, " at ", y, ",", x);
      CHECK(img[(c * 32 + y) * 32 + x] == pixel(id, c, y, x));
    }
}

void check_cifar10(const Dataset& d) {
  CHECK(test::mem(d.train).count == 5);
  CHECK(test::mem(d.test).count == 2);
  for (const ImageSet* s : {&test::mem(d.train), &test::mem(d.test)}) {
    CHECK(s->channels == 3);
    CHECK(s->rows == 32);
    CHECK(s->cols == 32);
    CHECK(s->image_shape() == "3x32x32");
    CHECK(s->pixels.size() == static_cast<size_t>(s->count) * kPixels);
  }
  CHECK(test::mem(d.train).labels == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(test::mem(d.test).labels == std::vector<int64_t>{0, 1});
  for (int i = 0; i < 5; ++i) check_example(test::mem(d.train), i, i);
  check_example(test::mem(d.test), 1, 101);
}

// Where setup.sh put the CIFAR-shaped Fashion-MNIST: this build's data/, else build/data/ of the
// source tree (where setup.sh writes it), which is also the path need() reports when neither is.
fs::path generated_cifar_shaped() {
  const fs::path in_build = fs::path(CB_BINARY_DIR) / "data" / "fmnist-cifar";
  if (fs::is_regular_file(in_build / "test_batch.bin")) return in_build;
  return fs::path(CB_SOURCE_DIR) / "build" / "data" / "fmnist-cifar";
}

}  // namespace

TEST_CASE("cifar: CIFAR-10 records: each plane in its channel, labels, batches in order") {
  TempDir d("c10");
  write_cifar10(d.str());
  Dataset data = load_cifar_dataset(d.str());
  CHECK(data.dir == d.str());
  check_cifar10(data);
  // The pixel bytes are kept as they are (uint8), as the IDX reader keeps its.
  CHECK(test::mem(data.train).pixels[0] == 0);
  CHECK(test::mem(data.train).pixels[kPixels - 1] == pixel(0, 2, 31, 31));

  // A subset of the batches is fine.
  fs::remove(d / "data_batch_2.bin");
  Dataset one = load_cifar_dataset(d.str());
  CHECK(test::mem(one.train).count == 3);
  CHECK(test::mem(one.test).count == 2);
}

TEST_CASE("cifar: the tarballs' subfolders are found, by load_cifar_dataset and load_dataset") {
  TempDir d("c10sub");
  write_cifar10(d / "cifar-10-batches-bin");
  check_cifar10(load_cifar_dataset(d.str()));
  check_cifar10(load_dataset(d.str()));
  check_cifar10(load_dataset(d / "cifar-10-batches-bin"));

  TempDir e("c100sub");
  write_file(e / "cifar-100-binary/train.bin", cifar100(0, 4));
  write_file(e / "cifar-100-binary/test.bin", cifar100(50, 3));
  Dataset c = load_dataset(e.str());
  CHECK(test::mem(c.train).count == 4);
  CHECK(test::mem(c.test).count == 3);
  CHECK(test::mem(c.train).labels == std::vector<int64_t>{0, 7, 14, 21});  // the fine label
}

TEST_CASE("cifar: CIFAR-100 uses the fine label, skips both label bytes") {
  TempDir d("c100");
  write_file(d / "train.bin", cifar100(0, 16));
  write_file(d / "test.bin", cifar100(40, 2));
  Dataset data = load_cifar_dataset(d.str());
  CHECK(test::mem(data.train).count == 16);
  CHECK(test::mem(data.test).count == 2);
  CHECK(test::mem(data.train).channels == 3);
  CHECK(test::mem(data.train).rows == 32);
  CHECK(test::mem(data.train).cols == 32);
  for (int i = 0; i < 16; ++i)
    CHECK(test::mem(data.train).labels[static_cast<size_t>(i)] == (i * 7) % 100);
  CHECK(test::mem(data.train).label_max() == 98);  // i = 14
  CHECK(test::mem(data.test).labels == std::vector<int64_t>{80, 87});
  for (int i : {0, 9, 15}) check_example(test::mem(data.train), i, i);
  check_example(test::mem(data.test), 1, 41);
}

TEST_CASE("cifar: every problem names the file and what is wrong") {
  TempDir d("cerr");
  std::string e;

  // Missing files.
  write_cifar10(d.str());
  fs::remove(d / "test_batch.bin");
  e = error_of([&] { load_cifar_dataset(d.str()); });
  CHECK(contains(e, "missing data file"));
  CHECK(contains(e, d / "test_batch.bin"));
  CHECK(contains(e, "cifar-10-binary.tar.gz"));

  write_cifar10(d.str());
  fs::remove(d / "data_batch_1.bin");
  e = error_of([&] { load_dataset(d.str()); });
  CHECK(contains(e, "missing data file"));
  CHECK(contains(e, d / "data_batch_1.bin"));

  write_cifar10(d.str());
  write_file(d / "data_batch_4.bin", cifar10(5, 1));
  e = error_of([&] { load_cifar_dataset(d.str()); });
  CHECK(contains(e, d / "data_batch_3.bin"));
  CHECK(contains(e, "data_batch_4.bin"));
  CHECK(contains(e, "without gaps"));
  fs::remove(d / "data_batch_4.bin");

  // A size that is not a whole number of records.
  auto b = cifar10(0, 2);
  b.resize(b.size() + 5);
  write_file(d / "data_batch_2.bin", b);
  e = error_of([&] { load_cifar_dataset(d.str()); });
  CHECK(contains(e, d / "data_batch_2.bin"));
  CHECK(contains(e, "6151 bytes"));
  CHECK(contains(e, "3073 bytes"));
  CHECK(contains(e, "not a multiple"));

  // Empty.
  write_file(d / "data_batch_2.bin", {});
  e = error_of([&] { load_cifar_dataset(d.str()); });
  CHECK(contains(e, d / "data_batch_2.bin"));
  CHECK(contains(e, "empty"));

  // A label out of range: record 1 of the test file.
  write_cifar10(d.str());
  b = cifar10(100, 3);
  b[kPixels + 1] = 10;
  write_file(d / "test_batch.bin", b);
  e = error_of([&] { load_cifar_dataset(d.str()); });
  CHECK(contains(e, d / "test_batch.bin"));
  CHECK(contains(e, "record 1"));
  CHECK(contains(e, "label 10"));
  CHECK(contains(e, "0..9"));

  // CIFAR-100: the fine label out of range, the record size, a missing test.bin.
  TempDir h("c100err");
  b = cifar100(0, 3);
  b[2 * (kPixels + 2) + 1] = 100;
  write_file(h / "train.bin", b);
  write_file(h / "test.bin", cifar100(0, 1));
  e = error_of([&] { load_dataset(h.str()); });
  CHECK(contains(e, h / "train.bin"));
  CHECK(contains(e, "record 2"));
  CHECK(contains(e, "label 100"));
  CHECK(contains(e, "0..99"));
  write_file(h / "train.bin", cifar10(0, 2));  // CIFAR-10 records in a CIFAR-100 file
  e = error_of([&] { load_dataset(h.str()); });
  CHECK(contains(e, h / "train.bin"));
  CHECK(contains(e, "3074 bytes"));
  fs::remove(h / "train.bin");
  e = error_of([&] { load_dataset(h.str()); });
  CHECK(contains(e, "missing data file"));
  CHECK(contains(e, h / "train.bin"));

  // Both data sets in one folder.
  write_file(h / "train.bin", cifar100(0, 1));
  write_file(h / "cifar-10-batches-bin/data_batch_1.bin", cifar10(0, 1));
  e = error_of([&] { load_dataset(h.str()); });
  CHECK(contains(e, "more than one data set"));
  CHECK(contains(e, "cifar-10-batches-bin"));

  CHECK(contains(error_of([&] { load_cifar_dataset(d / "nope"); }), "does not exist"));
  fs::create_directories(d / "empty");
  e = error_of([&] { load_cifar_dataset(d / "empty"); });
  CHECK(contains(e, d / "empty"));
  CHECK(contains(e, "no CIFAR binaries"));
}

TEST_CASE("dataset: the format is detected from the folder's content") {
  TempDir d("detect");

  // A small IDX folder (2 images of 3x3, uncompressed).
  auto idx = [](std::vector<uint8_t> header, size_t n) {
    for (size_t i = 0; i < n; ++i) header.push_back(static_cast<uint8_t>(i));
    return header;
  };
  write_file(d / "idx/train-images-idx3-ubyte",
             idx({0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 3}, 18));
  write_file(d / "idx/train-labels-idx1-ubyte", idx({0, 0, 8, 1, 0, 0, 0, 2}, 2));
  write_file(d / "idx/t10k-images-idx3-ubyte",
             idx({0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 3}, 9));
  write_file(d / "idx/t10k-labels-idx1-ubyte", idx({0, 0, 8, 1, 0, 0, 0, 1}, 1));
  Dataset small = load_dataset(d / "idx");
  CHECK(test::mem(small.train).count == 2);
  CHECK(test::mem(small.train).channels == 1);
  CHECK(test::mem(small.train).image_shape() == "1x3x3");
  CHECK(test::mem(small.test).count == 1);
  // A partial IDX folder is IDX, and the IDX reader names the missing file.
  fs::remove(d / "idx/t10k-labels-idx1-ubyte");
  std::string e = error_of([&] { load_dataset(d / "idx"); });
  CHECK(contains(e, "missing data file"));
  CHECK(contains(e, "t10k-labels-idx1-ubyte"));

  if (need(fs::path(kFashion) / "train-images-idx3-ubyte.gz", kFashionHow)) {
    Dataset f = load_dataset(kFashion);
    CHECK(test::mem(f.train).count == 60000);
    CHECK(f.test->size() == 10000);
    CHECK(test::mem(f.train).image_shape() == "1x28x28");
  }

  write_cifar10(d / "c10");
  check_cifar10(load_dataset(d / "c10"));

  // ImageNet-style: recognised as an image folder; an empty class folder is named.
  fs::create_directories(d / "imagenet/train/n01440764");
  fs::create_directories(d / "imagenet/val/n01440764");
  e = error_of([&] { load_dataset(d / "imagenet"); });
  CHECK(contains(e, d / "imagenet/train/n01440764"));
  CHECK(contains(e, "holds no images"));

  // Nothing recognisable: say what was looked for, and what is there.
  fs::create_directories(d / "empty");
  e = error_of([&] { load_dataset(d / "empty"); });
  CHECK(contains(e, d / "empty"));
  CHECK(contains(e, "no data set recognised"));
  CHECK(contains(e, "it is empty"));
  CHECK(contains(e, "train-images-idx3-ubyte"));
  CHECK(contains(e, "data_batch_1.bin"));
  CHECK(contains(e, "train.bin"));
  CHECK(contains(e, "image folders"));
  write_file(d / "empty/images.zip", {1, 2, 3});
  CHECK(contains(error_of([&] { load_dataset(d / "empty"); }), "it holds images.zip"));

  e = error_of([&] { load_dataset(d / "nope"); });
  CHECK(contains(e, d / "nope"));
  CHECK(contains(e, "does not exist"));
}

TEST_CASE("dataset: slices and batches of CIFAR images are [n,3,32,32]") {
  TempDir d("batches");
  write_cifar10(d.str());
  Dataset data = load_dataset(d.str());
  Tensor img, lab;
  test::mem(data.train).slice(1, 3, img, lab);
  CHECK(img.dims == std::vector<int64_t>{3, 3, 32, 32});
  CHECK(lab.dims == std::vector<int64_t>{3});
  CHECK(lab.data<int64_t>()[0] == 1);
  // Example 2 (the slice's second), channel 2 (B), row 4, column 9.
  CHECK(img.data<float>()[kPixels + (2 * 32 + 4) * 32 + 9] ==
        static_cast<float>(pixel(2, 2, 4, 9)) / 255.0f);

  TransformSpec spec = plan_transforms(data, {"x", {3, 32, 32}, DType::F32}, {});
  PipelineOptions po;
  po.batch = 2;
  po.shuffle = false;
  BatchPipeline it(data.train, spec, po, data.skipped);
  CHECK(it.batches_per_epoch() == 2);
  it.next(img, lab);
  it.next(img, lab);
  CHECK(img.dims == std::vector<int64_t>{2, 3, 32, 32});
  CHECK(lab.data<int64_t>()[1] == 3);
  CHECK(img.data<float>()[kPixels + 1] == static_cast<float>(pixel(3, 0, 0, 1)) / 255.0f);
  ImageSet h = test::mem(data.train).head(2);
  CHECK(h.count == 2);
  CHECK(h.channels == 3);
  CHECK(h.pixels.size() == 2 * kPixels);
}

TEST_CASE("dataset: a 1x28x28 model refuses 3x32x32 images by name") {
  TempDir d("lenet");
  write_file(d / "data_batch_1.bin", cifar10(0, 8));
  write_file(d / "test_batch.bin", cifar10(0, 4));
  Dataset data = load_dataset(d.str());
  ImportResult r = import_model(CB_SOURCE_DIR "/models/lenet5_op17.onnx");
  auto dev = make_cpu_device(1);
  TrainerOptions to;
  to.batch = 4;
  test::CpuTrainer t(r.graph, detect_loss(r.graph), test::plain(to), *dev);
  RunOptions ro;
  ro.steps = 1;
  std::string e = error_of([&] { train(t, data, ro); });
  CHECK(contains(e, "[N,1,28,28]"));
  CHECK(contains(e, "3x32x32"));
  CHECK(contains(e, "3072 values"));
}

TEST_CASE("dataset: the CIFAR-shaped Fashion-MNIST of setup.sh (models/make_cifar_shaped.py)") {
  const fs::path dir = generated_cifar_shaped();
  if (!need(dir / "test_batch.bin",
            "the CIFAR-shaped Fashion-MNIST, made by ./setup.sh (models/make_cifar_shaped.py)"))
    return;
  Dataset data = load_dataset(dir.string());
  CHECK(data.train->size() == 10000);
  CHECK(test::mem(data.test).count == 2000);
  CHECK(test::mem(data.train).image_shape() == "3x32x32");
  CHECK(test::mem(data.test).image_shape() == "3x32x32");
  CHECK(test::mem(data.train).label_max() == 9);
  if (!need(fs::path(kFashion) / "train-images-idx3-ubyte.gz", kFashionHow)) return;
  // The recipe: R = x, G = x * 4 // 5, B = 255 - x on the 28x28 area, zero padding of 2.
  Dataset f = load_idx_dataset(kFashion);
  for (int64_t i : {int64_t{0}, int64_t{1234}, int64_t{9999}}) {
    CHECK(test::mem(data.train).labels[static_cast<size_t>(i)] ==
          test::mem(f.train).labels[static_cast<size_t>(i)]);
    const uint8_t* c = test::mem(data.train).pixels.data() + static_cast<size_t>(i) * kPixels;
    const uint8_t* m = test::mem(f.train).pixels.data() + static_cast<size_t>(i) * 784;
    int bad = 0;
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x) {
        const bool in = y >= 2 && y < 30 && x >= 2 && x < 30;
        const int v = in ? m[(y - 2) * 28 + (x - 2)] : 0;
        const int want[3] = {v, v * 4 / 5, in ? 255 - v : 0};
        for (int ch = 0; ch < 3; ++ch) bad += c[(ch * 32 + y) * 32 + x] != want[ch];
      }
    CHECK_MESSAGE(bad == 0, "example ", i, ": ", bad, " pixels differ from the recipe");
  }
  CHECK(test::mem(data.test).labels[1999] == test::mem(f.test).labels[1999]);
}

TEST_CASE("idx: a gzip bomb is read only as far as its header promises") {
  // Found by fuzzing: a small .gz that inflates to gigabytes was decompressed whole before its
  // header was checked ("internal error: std::bad_alloc").
  TempDir d("bomb");
  gzFile f = gzopen((d / "train-images-idx3-ubyte.gz").c_str(), "wb1");
  REQUIRE(f != nullptr);
  const uint8_t header[16] = {0, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 4, 0, 0, 0, 4};  // 10 x 4x4
  REQUIRE(gzwrite(f, header, sizeof header) == 16);
  std::vector<uint8_t> zeros(1 << 20);
  for (int i = 0; i < 256; ++i)  // 256 MiB once inflated
    REQUIRE(gzwrite(f, zeros.data(), static_cast<unsigned>(zeros.size())) ==
            static_cast<int>(zeros.size()));
  REQUIRE(gzclose(f) == Z_OK);
  const std::string e = error_of(
      [&] { read_idx_pair(d / "train-images-idx3-ubyte", d / "train-images-idx3-ubyte"); });
  CHECK(contains(e, "train-images-idx3-ubyte.gz"));
  CHECK(contains(e, "after the 160 bytes of data the header promises"));
}
