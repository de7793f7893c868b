// Tensor data sets (see tensor_set.h).
#include "runtime/data/tensor_set.h"

#include <fmt/format.h>

#include "runtime/error.h"

namespace cb {

int64_t TensorColumn::row_elems() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

TensorSet::TensorSet(std::vector<TensorColumn> columns, std::string source)
    : columns_(std::move(columns)), source_(std::move(source)) {
  if (columns_.empty()) fail("{} holds no arrays", source_);
  // Every array must have the same number of rows (the examples).
  count_ = columns_[0].count;
  for (const TensorColumn& c : columns_) {
    CB_CHECK(c.row_bytes == static_cast<size_t>(c.row_elems()) * dtype_size(c.dtype));
    if (c.count != count_)
      fail(
          "{}: array '{}' has {} rows but '{}' has {}; the arrays of a data set hold one row per "
          "example",
          source_, columns_[0].name, count_, c.name, c.count);
  }
}

const TensorColumn* TensorSet::find(const std::string& name) const {
  for (const TensorColumn& c : columns_)
    if (c.name == name) return &c;
  return nullptr;
}

const std::byte* TensorSet::row(size_t c, int64_t i) const {
  const int64_t r = rows_.empty() ? i : rows_[static_cast<size_t>(i)];
  const TensorColumn& col = columns_[c];
  return col.data + static_cast<size_t>(r) * col.row_bytes;
}

TensorSet TensorSet::subset(std::vector<int64_t> rows, std::string source) const {
  TensorSet s = *this;
  if (!rows_.empty())
    for (int64_t& r : rows) r = rows_[static_cast<size_t>(r)];
  s.rows_ = std::move(rows);
  s.source_ = std::move(source);
  return s;
}

std::vector<ColumnInfo> TensorSet::columns() const {
  std::vector<ColumnInfo> out;
  for (const TensorColumn& c : columns_) {
    ColumnInfo i;
    i.name = c.name;
    i.dtype = c.dtype;
    i.dims = c.dims;
    i.source = c.source;
    out.push_back(std::move(i));
  }
  return out;
}

std::string TensorSet::name(int64_t i) const { return fmt::format("example {} of {}", i, source_); }

bool TensorSet::read(int64_t i, size_t c, const ReadOptions&, ColumnValue& out,
                     std::string&) const {
  CB_CHECK(c < columns_.size() && i >= 0 && i < size());
  out.data = row(c, i);
  return true;
}

}  // namespace cb
