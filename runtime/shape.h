// Shapes with one symbolic dimension: the batch size N.
// A Dim is either a constant (`7`) or a multiple of N (`N`, `2N`): exports from PyTorch with a
// dynamic batch axis compute dims like N*S in shape arithmetic, and keeping the coefficient lets
// that arithmetic fold away at import time. Products of two symbolic dims are rejected.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cb {

struct Dim {
  int64_t value = 0;  // the constant, or the coefficient of N when `batch` is set
  bool batch = false;

  static Dim of(int64_t v) { return {v, false}; }
  static Dim N(int64_t coef = 1) { return {coef, true}; }

  bool is_static() const { return !batch; }
  int64_t resolve(int64_t n) const { return batch ? value * n : value; }
  friend bool operator==(const Dim&, const Dim&) = default;
};

std::string to_string(const Dim& d);

// Arithmetic on dims; nullopt where the result is not of the form a or a*N.
std::optional<Dim> dim_mul(Dim a, Dim b);
std::optional<Dim> dim_div(Dim a, Dim b);  // exact division only
std::optional<Dim> dim_add(Dim a, Dim b);
std::optional<Dim> dim_sub(Dim a, Dim b);

using Shape = std::vector<Dim>;

std::string to_string(const Shape& s);           // "[N,3,224,224]"
std::optional<Dim> shape_numel(const Shape& s);  // nullopt if not of the form a or a*N
bool shape_is_static(const Shape& s);
Shape shape_of(const std::vector<int64_t>& dims);
std::vector<int64_t> resolve(const Shape& s, int64_t n);

// Normalises an axis in [-rank, rank) to [0, rank); nullopt when out of range.
std::optional<int64_t> normalize_axis(int64_t axis, int64_t rank);

// numpy-style broadcasting of two shapes; nullopt when they do not broadcast.
std::optional<Shape> broadcast(const Shape& a, const Shape& b);

}  // namespace cb
