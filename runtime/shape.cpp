#include "runtime/shape.h"

#include <fmt/format.h>

#include <limits>

namespace cb {

std::string to_string(const Dim& d) {
  if (!d.batch) return std::to_string(d.value);
  if (d.value == 1) return "N";
  return fmt::format("{}N", d.value);
}

std::optional<Dim> dim_mul(Dim a, Dim b) {
  if (a.batch && b.batch) return std::nullopt;
  int64_t v;
  if (__builtin_mul_overflow(a.value, b.value, &v)) return std::nullopt;
  return Dim{v, a.batch || b.batch};
}

std::optional<Dim> dim_div(Dim a, Dim b) {
  // INT64_MIN / -1 (and its remainder) trap in hardware: not folded (the kernel wraps it).
  if (b.value == -1 && a.value == std::numeric_limits<int64_t>::min()) return std::nullopt;
  if (b.batch) {
    if (a.batch && b.value != 0 && a.value % b.value == 0) return Dim::of(a.value / b.value);
    return std::nullopt;
  }
  if (b.value == 0 || a.value % b.value != 0) return std::nullopt;
  return Dim{a.value / b.value, a.batch};
}

std::optional<Dim> dim_add(Dim a, Dim b) {
  if (a.batch == b.batch) {
    int64_t v;
    if (__builtin_add_overflow(a.value, b.value, &v)) return std::nullopt;
    return Dim{v, a.batch};
  }
  if (a.batch && a.value == 0) return b;
  if (b.batch && b.value == 0) return a;
  return std::nullopt;
}

std::optional<Dim> dim_sub(Dim a, Dim b) {
  if (b.value == INT64_MIN) return std::nullopt;
  return dim_add(a, Dim{-b.value, b.batch});
}

std::string to_string(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ',';
    out += to_string(s[i]);
  }
  return out + "]";
}

std::optional<Dim> shape_numel(const Shape& s) {
  Dim n = Dim::of(1);
  for (const Dim& d : s) {
    auto m = dim_mul(n, d);
    if (!m) return std::nullopt;
    n = *m;
  }
  return n;
}

bool shape_is_static(const Shape& s) {
  for (const Dim& d : s)
    if (d.batch) return false;
  return true;
}

Shape shape_of(const std::vector<int64_t>& dims) {
  Shape s;
  s.reserve(dims.size());
  for (int64_t d : dims) s.push_back(Dim::of(d));
  return s;
}

std::vector<int64_t> resolve(const Shape& s, int64_t n) {
  std::vector<int64_t> out;
  out.reserve(s.size());
  for (const Dim& d : s) out.push_back(d.resolve(n));
  return out;
}

std::optional<int64_t> normalize_axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

std::optional<Shape> broadcast(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    Dim da = i < rank - a.size() ? Dim::of(1) : a[i - (rank - a.size())];
    Dim db = i < rank - b.size() ? Dim::of(1) : b[i - (rank - b.size())];
    if (da == db || db == Dim::of(1)) {
      out[i] = da;
    } else if (da == Dim::of(1)) {
      out[i] = db;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

}  // namespace cb
