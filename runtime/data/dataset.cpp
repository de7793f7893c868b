// The in-memory data set (ImageSet), detection of a --data folder's format, and the batch
// iterator. Detection looks at file names only; the reader of the detected format then checks the
// content and names whatever is wrong.
#include "runtime/data/dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "runtime/data/cifar_dataset.h"
#include "runtime/data/idx_dataset.h"
#include "runtime/error.h"

namespace cb {

namespace fs = std::filesystem;

std::string ImageSet::image_shape() const { return fmt::format("{}x{}x{}", channels, rows, cols); }

int64_t ImageSet::label_max() const {
  int64_t m = -1;
  for (int64_t l : labels) m = std::max(m, l);
  return m;
}

ImageSet ImageSet::head(int64_t n) const {
  if (n <= 0 || n >= count) return *this;
  ImageSet s;
  s.count = n;
  s.channels = channels;
  s.rows = rows;
  s.cols = cols;
  s.images.assign(images.begin(), images.begin() + n * image_elems());
  s.labels.assign(labels.begin(), labels.begin() + n);
  return s;
}

void ImageSet::slice(int64_t begin, int64_t n, Tensor& img, Tensor& lab) const {
  CB_CHECK(begin >= 0 && n >= 0 && begin + n <= count);
  img.dtype = DType::F32;
  img.dims = {n, channels, rows, cols};
  img.bytes.resize(static_cast<size_t>(n * image_elems()) * sizeof(float));
  std::copy_n(images.data() + begin * image_elems(), n * image_elems(), img.data<float>());
  lab.dtype = DType::I64;
  lab.dims = {n};
  lab.bytes.resize(static_cast<size_t>(n) * sizeof(int64_t));
  std::copy_n(labels.data() + begin, n, lab.data<int64_t>());
}

// ---- detection ---------------------------------------------------------------------------------

namespace {

bool has_file(const fs::path& dir, const char* name) {
  return fs::is_regular_file(dir / name) || fs::is_regular_file(dir / (std::string(name) + ".gz"));
}

// A few of the folder's entries, for the message when nothing is recognised.
std::string listing(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    names.push_back(e.path().filename().string() + (e.is_directory() ? "/" : ""));
  if (names.empty()) return "it is empty";
  std::sort(names.begin(), names.end());
  std::string s = "it holds ";
  const size_t shown = std::min<size_t>(names.size(), 8);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += fmt::format(" and {} more", names.size() - shown);
  return s;
}

}  // namespace

Dataset load_dataset(const std::string& dir) {
  if (!fs::is_directory(dir))
    fail(
        "data folder {} does not exist (or is not a folder); pass --data DIR with IDX files "
        "(MNIST, Fashion-MNIST: Debian's dataset-fashion-mnist installs "
        "/usr/share/datasets/fashion-mnist) or CIFAR-10/100 binaries",
        dir);
  const fs::path p(dir);
  const char* const idx_files[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                   "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
  bool idx = false;
  for (const char* f : idx_files) idx = idx || has_file(p, f);
  const bool cifar = looks_like_cifar(dir);
  if (idx && cifar)
    fail(
        "data folder {} holds both IDX files (train-images-idx3-ubyte, ...) and CIFAR binaries; "
        "keep one data set per folder",
        dir);
  if (idx) return load_idx_dataset(dir);
  if (cifar) return load_cifar_dataset(dir);
  if (fs::is_directory(p / "train") && fs::is_directory(p / "val"))
    fail(
        "data folder {} looks like an ImageNet-style folder (train/ and val/ of class folders); "
        "those are not supported yet (no JPEG decoding): use IDX files or CIFAR-10/100 binaries",
        dir);
  fail(
      "data folder {}: no data set recognised ({}); looked for IDX files "
      "(train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
      "t10k-labels-idx1-ubyte, optionally .gz), CIFAR-10 binaries (data_batch_1.bin ... "
      "data_batch_5.bin, test_batch.bin, also in cifar-10-batches-bin/), CIFAR-100 binaries "
      "(train.bin, test.bin, also in cifar-100-binary/) and ImageNet-style train/ and val/ "
      "folders (not supported yet)",
      dir, listing(p));
}

// ---- batches -----------------------------------------------------------------------------------

BatchIterator::BatchIterator(const ImageSet& set, int64_t batch, bool shuffle, uint64_t seed)
    : set_(set), batch_(batch), shuffle_(shuffle), seed_(seed), rng_(seed) {
  if (batch <= 0) fail("batch size must be positive, got {}", batch);
  if (batch > set.count)
    fail("batch size {} is larger than the {} training examples", batch, set.count);
  order_.resize(static_cast<size_t>(set.count));
  start_epoch();
}

void BatchIterator::start_epoch() {
  ++epoch_;
  pos_ = 0;
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<int64_t>(i);
  if (!shuffle_) return;
  // Fisher-Yates; j uniform in [0, i] by a 64x64->128 multiply (same result on every platform,
  // unlike std::uniform_int_distribution).
  for (size_t i = order_.size(); i-- > 1;) {
    auto j = static_cast<size_t>((static_cast<unsigned __int128>(rng_()) * (i + 1)) >> 64);
    std::swap(order_[i], order_[j]);
  }
}

void BatchIterator::seek(int64_t batches) {
  CB_CHECK(batches >= 0);
  rng_.seed(seed_);
  epoch_ = -1;
  start_epoch();
  const int64_t spe = batches_per_epoch();
  for (int64_t e = 0; e < batches / spe; ++e) start_epoch();
  pos_ = (batches % spe) * batch_;
}

void BatchIterator::next(Tensor& img, Tensor& lab) {
  const int64_t e = set_.image_elems();
  img.dtype = DType::F32;
  img.dims = {batch_, set_.channels, set_.rows, set_.cols};
  img.bytes.resize(static_cast<size_t>(batch_ * e) * sizeof(float));
  lab.dtype = DType::I64;
  lab.dims = {batch_};
  lab.bytes.resize(static_cast<size_t>(batch_) * sizeof(int64_t));
  float* ip = img.data<float>();
  int64_t* lp = lab.data<int64_t>();
  for (int64_t b = 0; b < batch_; ++b) {
    int64_t k = order_[static_cast<size_t>(pos_ + b)];
    std::copy_n(set_.images.data() + k * e, e, ip + b * e);
    lp[b] = set_.labels[static_cast<size_t>(k)];
  }
  pos_ += batch_;
  if (pos_ + batch_ > set_.count) start_epoch();  // drop the last partial batch
}

}  // namespace cb
