// Data sets, whatever their files: each split a source of examples (runtime/data/source.h), an
// example a set of named tensors. Image data sets give an image column and a label column through
// Examples, which every image reader implements; arrays (NumPy files, the API's arrays) are
// tensor sets (runtime/data/tensor_set.h). Also the order in which an epoch visits the examples.
// Opening a --data path is runtime/data/load_dataset.h's; batches are made from a source by
// runtime/data/feed.h (make_batches), on the worker threads of runtime/data/pipeline.h; nothing
// here holds a data set in memory as f32.
//
// Image readers:
//  - IDX (MNIST, Fashion-MNIST; runtime/data/idx_dataset.h) and CIFAR-10/100 binaries
//    (runtime/data/cifar_dataset.h): small, held in memory as uint8 CHW (an ImageSet);
//  - image folders of JPEG/PNG files (runtime/data/image_folder.h): train/<class>/ and
//    val/<class>/, or <class>/ split by --val-split; each file is read and decoded when needed;
//  - packed caches (runtime/data/pack.h, made by cb-pack): decoded, resized samples in one
//    memory-mapped file.
//
// Labels are class indices (i64); for folders, the index of the class folder's name in sorted
// order (torchvision's ImageFolder).
//
// Epoch order (BatchOrder): file order, or a permutation drawn per epoch by Fisher-Yates from one
// std::mt19937_64 seeded once with the seed (deterministic for a seed). The last partial batch of
// an epoch is dropped (PyTorch's drop_last=True), so every step sees exactly `batch` examples;
// evaluation (see sma/trainer.h) covers every test example.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "runtime/data/image.h"
#include "runtime/data/source.h"
#include "runtime/data/tensor_set.h"
#include "runtime/tensor.h"

namespace cb {

// Files (or examples) that were skipped because they cannot be read or decoded: what they are and
// why, each counted once however often it is met. Thread-safe; shared by every pipeline on a data
// set, so that a warning names each bad file once.
class SkipLog {
 public:
  struct Entry {
    std::string name, why;
  };
  // Records `name` (once). Returns true when it is new.
  bool add(const std::string& name, const std::string& why);
  int64_t count() const;
  // The entries recorded since `*cursor` (an index into the log), which is moved to the end.
  std::vector<Entry> since(size_t* cursor) const;

 private:
  mutable std::mutex m_;
  std::vector<Entry> entries_;
  std::vector<std::string> sorted_names_;  // for the once-only check
};

// "3 files skipped: a.jpg (truncated JPEG data), b.png (not a JPEG or PNG file), ... and 12 more"
// for the entries given (at most `shown` named).
std::string skip_summary(const std::vector<SkipLog::Entry>& entries, size_t shown = 5);

// The per-example dims of a data set whose examples all have one size: channels, rows, cols.
// rows = cols = 0 when the sizes vary (image folders); channels is what load() produces.
struct ExampleDims {
  int channels = 0, rows = 0, cols = 0;
  bool fixed() const { return rows > 0 && cols > 0; }
  std::string str() const;  // "3x32x32", or "3 channels, sizes vary"
};

// One split (training or test) of an image data set: a source of two columns, "image" (u8
// [C,H,W] as dims() says, read as the decoded image) and "label" (i64 class indices). Image
// readers implement the per-example calls below; the Source calls are made of them.
class Examples : public Source {
 public:
  virtual int64_t label(int64_t i) const = 0;
  virtual ExampleDims dims() const = 0;
  // Example i as an 8-bit image (HWC). False and `why` when it cannot be read or decoded; never
  // throws for bad data. Callable from several threads at once.
  virtual bool load(int64_t i, const DecodeOptions& o, Image& out, std::string& why) const = 0;
  // In-memory sets: example i's uint8 CHW pixels at dims() (no copy); others: null.
  virtual const uint8_t* chw(int64_t i) const { return nullptr; }

  int64_t label_max() const;  // largest label (-1 when empty)

  std::vector<ColumnInfo> columns() const override;
  std::string origin() const override { return "the images"; }
  bool read(int64_t i, size_t c, const ReadOptions& o, ColumnValue& out,
            std::string& why) const override;
};

// The per-example dims of a source's image column (zero when it has none).
ExampleDims image_dims(const Source& s);
// The largest value of a source's "label" column (-1 when it has none, or no examples).
int64_t label_max(const Source& s);

// An in-memory set of fixed-size uint8 images (IDX, CIFAR, tests).
struct ImageSet final : Examples {
  int64_t count = 0, channels = 1, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // [count, channels, rows, cols]
  std::vector<int64_t> labels;  // [count]
  std::string source;           // the file the images came from (for messages)

  int64_t image_elems() const { return channels * rows * cols; }
  std::string image_shape() const;  // "3x32x32"
  // The first `n` examples (all when n <= 0 or n >= count).
  ImageSet head(int64_t n) const;
  // Examples [begin, begin + n) as f32 [n,channels,rows,cols] = byte / 255 and i64 [n] labels.
  void slice(int64_t begin, int64_t n, Tensor& images, Tensor& labels) const;

  int64_t size() const override { return count; }
  int64_t label(int64_t i) const override { return labels[static_cast<size_t>(i)]; }
  std::string name(int64_t i) const override;
  ExampleDims dims() const override;
  bool load(int64_t i, const DecodeOptions& o, Image& out, std::string& why) const override;
  const uint8_t* chw(int64_t i) const override {
    return pixels.data() + static_cast<size_t>(i * image_elems());
  }
  std::string origin() const override { return source.empty() ? "the data" : source; }
};

enum class DataFormat { Auto, Idx, Cifar, Folder, Pack, Npz };
DataFormat parse_data_format(const std::string& s);  // auto | idx | cifar | folder | pack | npz
const char* data_format_name(DataFormat f);

struct Dataset {
  std::string dir;  // the --data path
  DataFormat format = DataFormat::Auto;
  std::string description;  // "IDX files", "image folder (train/, val/)", ...
  // The splits as sources of examples (runtime/data/source.h); the batches are made from them
  // by runtime/data/feed.h.
  std::shared_ptr<const Source> train, test;
  // Arrays only (NumPy files, the API's arrays): a training split without an image column.
  bool tensors() const { return train != nullptr && train->image_column() < 0; }
  int64_t train_size() const { return train ? train->size() : 0; }
  int64_t test_size() const { return test ? test->size() : 0; }
  // Image folders and their packs: photographs, for which ImageNet's conventions are the default
  // (random-resized crop and flip for training, ImageNet's mean and std).
  bool photos = false;
  std::vector<std::string> classes;  // class names (folders); empty for IDX/CIFAR
  std::shared_ptr<SkipLog> skipped = std::make_shared<SkipLog>();
};

struct DataOptions {
  DataFormat format = DataFormat::Auto;
  double val_split = 0.1;  // flat class folders (each class) and a single .npz: the fraction held
                           // out for testing
  std::string temp_dir;    // compressed .npz members are inflated into files here ("" : $TMPDIR)
};

// The order in which an epoch visits `count` examples, `batch` at a time (see the top).
class BatchOrder {
 public:
  BatchOrder(int64_t count, int64_t batch, bool shuffle, uint64_t seed);
  int64_t batch() const { return batch_; }
  int64_t batches_per_epoch() const { return count_ / batch_; }  // drop_last
  // The same without an order (nothing drawn); throws cb::Error for a batch that does not fit.
  static int64_t epoch_batches(int64_t count, int64_t batch);
  int64_t epoch() const { return epoch_; }  // 0-based epoch of the next batch
  // Writes the next batch's example indices (batch() of them); starts (and reshuffles) a new
  // epoch when the current one is used up.
  void next(int64_t* indices);
  // Positions the order as if `batches` batches had been drawn since construction (the same seed
  // replayed): the data position of a resumed run.
  void seek(int64_t batches);
  // The order of the current epoch (for tests).
  const std::vector<int64_t>& order() const { return order_; }

 private:
  void start_epoch();
  int64_t count_, batch_;
  bool shuffle_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::vector<int64_t> order_;
  int64_t pos_ = 0, epoch_ = -1;
};

}  // namespace cb
