// The source-of-examples interface's shared helpers (see source.h).
#include "runtime/data/source.h"

#include <fmt/format.h>

namespace cb {

int64_t ColumnInfo::elems() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int Source::column(const std::string& name) const {
  const std::vector<ColumnInfo> cols = columns();
  for (size_t c = 0; c < cols.size(); ++c)
    if (cols[c].name == name) return static_cast<int>(c);
  return -1;
}

int Source::image_column() const {
  const std::vector<ColumnInfo> cols = columns();
  for (size_t c = 0; c < cols.size(); ++c)
    if (cols[c].image) return static_cast<int>(c);
  return -1;
}

std::string Source::describe() const {
  std::string s;
  for (const ColumnInfo& c : columns()) {
    std::string dims = "[N";
    for (int64_t d : c.dims) dims += fmt::format(",{}", d);
    s += fmt::format("{}{} {} {}]", s.empty() ? "" : ", ", c.name, dtype_name(c.dtype), dims);
  }
  return s;
}

}  // namespace cb
