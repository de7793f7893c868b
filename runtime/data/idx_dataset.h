// MNIST / Fashion-MNIST in their IDX files, and the batch iterator the trainer draws from.
//
// A folder holds train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
// t10k-labels-idx1-ubyte, each optionally gzip-compressed (".gz", read through zlib). Images
// become f32 [n,1,rows,cols] scaled to [0,1] (x / 255, as torchvision's ToTensor; no mean/std
// normalisation), labels i64 [n]. Every problem (missing file, bad magic, truncated data, image
// and label counts that differ) is a cb::Error naming the file.
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
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<float> images;    // [count, 1, rows, cols], in [0, 1]
  std::vector<int64_t> labels;  // [count]

  int64_t image_elems() const { return rows * cols; }
  int64_t label_max() const;  // largest label (-1 when empty)
  // The first `n` examples (all when n <= 0 or n >= count).
  ImageSet head(int64_t n) const;
  // Copies examples [begin, begin + n) into `images` (f32 [n,1,rows,cols]) and `labels` (i64 [n]).
  void slice(int64_t begin, int64_t n, Tensor& images, Tensor& labels) const;
};

struct IdxDataset {
  std::string dir;
  ImageSet train, test;
};

// Reads one IDX pair (images file, labels file): each path as given, or with ".gz" appended.
ImageSet read_idx_pair(const std::string& images_path, const std::string& labels_path);
// Reads the four files of an MNIST-style folder. Throws cb::Error naming a missing/corrupt file.
IdxDataset load_idx_dataset(const std::string& dir);

// Fixed-size batches over an ImageSet, epoch after epoch.
class BatchIterator {
 public:
  BatchIterator(const ImageSet& set, int64_t batch, bool shuffle, uint64_t seed);
  int64_t batch() const { return batch_; }
  int64_t batches_per_epoch() const { return set_.count / batch_; }  // drop_last
  int64_t epoch() const { return epoch_; }  // 0-based epoch of the next batch
  // Fills the next batch; starts (and reshuffles) a new epoch when the current one is used up.
  void next(Tensor& images, Tensor& labels);
  // The order of the current epoch (for tests).
  const std::vector<int64_t>& order() const { return order_; }

 private:
  void start_epoch();
  const ImageSet& set_;
  int64_t batch_;
  bool shuffle_;
  std::mt19937_64 rng_;
  std::vector<int64_t> order_;
  int64_t pos_ = 0, epoch_ = -1;
};

}  // namespace cb
