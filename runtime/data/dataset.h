// Image-classification data sets, whatever their files: the in-memory form every reader produces,
// the detection of a --data folder's format, and the batch iterator the trainers draw from.
//
// Convention (every reader): images f32 [count, channels, rows, cols], channel-major as PyTorch's
// NCHW, scaled to [0,1] (x / 255, as torchvision's ToTensor; no mean/std normalisation); labels
// i64 [count]. Readers: runtime/data/idx_dataset.h (MNIST, Fashion-MNIST: 1 channel) and
// runtime/data/cifar_dataset.h (CIFAR-10/100: 3 channels).
//
// Batches: an epoch visits the examples in file order (no shuffle) or in a permutation drawn per
// epoch by Fisher-Yates from one std::mt19937_64 seeded once with the seed (deterministic for a
// seed). The last partial batch of an epoch is dropped (PyTorch's drop_last=True), so every step
// sees exactly `batch` examples; evaluation (see sma/trainer.h) covers every test example.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace cb {

struct ImageSet {
  int64_t count = 0, channels = 1, rows = 0, cols = 0;
  std::vector<float> images;    // [count, channels, rows, cols], in [0, 1]
  std::vector<int64_t> labels;  // [count]

  int64_t image_elems() const { return channels * rows * cols; }
  std::string image_shape() const;  // "3x32x32"
  int64_t label_max() const;        // largest label (-1 when empty)
  // The first `n` examples (all when n <= 0 or n >= count).
  ImageSet head(int64_t n) const;
  // Copies examples [begin, begin + n) into `images` (f32 [n,channels,rows,cols]) and `labels`
  // (i64 [n]).
  void slice(int64_t begin, int64_t n, Tensor& images, Tensor& labels) const;
};

struct Dataset {
  std::string dir;
  ImageSet train, test;
};

// Reads the data set in `dir`, its format detected from the folder's content: IDX files
// (train-images-idx3-ubyte[.gz], ...) or CIFAR-10/100 binaries (data_batch_N.bin + test_batch.bin,
// or train.bin + test.bin, also inside cifar-10-batches-bin/ or cifar-100-binary/). An
// ImageNet-style folder (train/ and val/ of class folders) is recognised but not supported yet.
// Throws cb::Error naming the folder or file and what was looked for.
Dataset load_dataset(const std::string& dir);

// Fixed-size batches over an ImageSet, epoch after epoch.
class BatchIterator {
 public:
  BatchIterator(const ImageSet& set, int64_t batch, bool shuffle, uint64_t seed);
  int64_t batch() const { return batch_; }
  int64_t batches_per_epoch() const { return set_.count / batch_; }  // drop_last
  int64_t epoch() const { return epoch_; }  // 0-based epoch of the next batch
  // Fills the next batch (f32 [batch,channels,rows,cols], i64 [batch]); starts (and reshuffles) a
  // new epoch when the current one is used up.
  void next(Tensor& images, Tensor& labels);
  // Positions the iterator as if `batches` batches had been drawn since construction (the same
  // seed replayed): the data position of a resumed run.
  void seek(int64_t batches);
  // The order of the current epoch (for tests).
  const std::vector<int64_t>& order() const { return order_; }

 private:
  void start_epoch();
  const ImageSet& set_;
  int64_t batch_;
  bool shuffle_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::vector<int64_t> order_;
  int64_t pos_ = 0, epoch_ = -1;
};

}  // namespace cb
