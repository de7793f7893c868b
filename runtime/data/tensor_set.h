// A data set of named arrays whose first axis is the example: what NumPy files hold (.npz of
// arrays x, y, or one array per model input), and the API's caller arrays and batches. As a
// source of examples (runtime/data/source.h) each array is a column and row i of every array is
// example i. The arrays stay where the reader put them (a memory-mapped file, an owned buffer):
// a batch copies its rows out, so a data set larger than memory trains at the speed the page
// cache allows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/source.h"
#include "runtime/dtype.h"

namespace cb {

// One array: [count, dims...] of dtype, rows of row_bytes each at data.
struct TensorColumn {
  std::string name;    // the array's name (an .npz member without ".npy")
  std::string source;  // where it came from, for messages ("train.npz: 'x'")
  DType dtype = DType::F32;
  int64_t count = 0;          // rows: the array's first axis
  std::vector<int64_t> dims;  // per example (the array's shape after the first axis)
  const std::byte* data = nullptr;
  size_t row_bytes = 0;
  std::shared_ptr<const void> keep;  // keeps `data` alive
  int64_t row_elems() const;
};

// Arrays of one split, all with `count` rows; with `rows` set, example i is row rows[i] of every
// array (a split held out of one file).
class TensorSet final : public Source {
 public:
  // Throws cb::Error when there is no array, or the arrays' rows differ (naming both).
  TensorSet(std::vector<TensorColumn> columns, std::string source);
  const std::vector<TensorColumn>& arrays() const { return columns_; }
  const TensorColumn* find(const std::string& name) const;
  const std::string& source() const { return source_; }
  // Example i of array c (its row bytes).
  const std::byte* row(size_t c, int64_t i) const;
  // The examples `rows` (indices into this set) as a set of their own, sharing the arrays.
  TensorSet subset(std::vector<int64_t> rows, std::string source) const;

  // Source: one column per array; describe() gives "x f32 [N,8], y f32 [N]".
  int64_t size() const override {
    return rows_.empty() ? count_ : static_cast<int64_t>(rows_.size());
  }
  std::vector<ColumnInfo> columns() const override;
  std::string name(int64_t i) const override;
  std::string origin() const override { return source_; }
  bool read(int64_t i, size_t c, const ReadOptions& o, ColumnValue& out,
            std::string& why) const override;

 private:
  std::vector<TensorColumn> columns_;
  std::string source_;
  int64_t count_ = 0;
  std::vector<int64_t> rows_;
};

}  // namespace cb
