// One split of a data set as a source of examples, each example a set of named tensors (its
// columns): the one interface every kind of data gives the feed (runtime/data/feed.h plan_feed,
// make_batches), which maps columns to a model's inputs the same way for all of them.
//
// What each kind gives:
//  - image data sets (IDX, CIFAR, image folders, packs; runtime/data/dataset.h Examples): an
//    image column "image" (u8 [C,H,W], H = W = 0 when the sizes vary, as in a folder), whose
//    examples are read as decoded images (HWC) that the transforms (runtime/data/transforms.h)
//    bring to the model's input, and a label column "label" (i64, one per example);
//  - arrays (NumPy files, the API's caller arrays and batches; runtime/data/tensor_set.h): one
//    column per array, its rows the examples, read where the array lies (a memory-mapped file,
//    the caller's buffer) without a copy.
//
// Reading is thread-safe (the pipeline's workers read at once) and never throws for bad data: an
// example that cannot be read is false with the reason, and the feed replaces it (SkipLog).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/data/image.h"
#include "runtime/dtype.h"

namespace cb {

// What one column gives per example.
struct ColumnInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> dims;  // per example; an image column's {C, H, W}, H = W = 0 when they vary
  bool image = false;         // read as a decoded Image (ColumnValue::image), transformed to fit
  std::string source;         // where it comes from, for messages ("train.npz: 'x'")
  int64_t elems() const;      // values per example (0 for an image column of varying sizes)
};

struct ReadOptions {
  DecodeOptions decode;  // image columns: how to decode
  // Image columns: the stored uint8 CHW pixels at the column's dims, when the source holds them
  // in memory (ColumnValue::data, nothing decoded); else the image is decoded as always.
  bool stored = false;
};

// One example's value of one column. Not to be copied while `data` points into it.
struct ColumnValue {
  // Tensor columns (and stored image pixels): the example's values, valid while the source lives
  // (or, for a value the source computes, such as a label, until the next read into this value).
  const std::byte* data = nullptr;
  Image image;         // image columns, decoded (when `data` is null)
  int64_t scalar = 0;  // room for a computed value `data` may point to
};

class Source {
 public:
  virtual ~Source() = default;
  virtual int64_t size() const = 0;
  virtual std::vector<ColumnInfo> columns() const = 0;
  // What example i is, for messages: its file, or its place in a file.
  virtual std::string name(int64_t i) const = 0;
  // Where the examples come from, for messages (a file, "batch 3").
  virtual std::string origin() const = 0;
  // Example i's column c into `out`. False and `why` when it cannot be read or decoded; never
  // throws for bad data. Callable from several threads at once.
  virtual bool read(int64_t i, size_t c, const ReadOptions& o, ColumnValue& out,
                    std::string& why) const = 0;

  // The index of the column `name`, or -1.
  int column(const std::string& name) const;
  // The index of the (first) image column, or -1.
  int image_column() const;
  // "x f32 [N,8], y f32 [N]" for messages.
  std::string describe() const;
};

}  // namespace cb
