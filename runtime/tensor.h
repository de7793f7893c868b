// A dense host tensor: element type, static dims and bytes. Used for initializers, constants and
// test fixtures; device storage is the executor's business, not this type's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/dtype.h"

namespace cb {

struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> dims;
  std::vector<std::byte> bytes;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
  template <typename T>
  T* data() {
    return reinterpret_cast<T*>(bytes.data());
  }
  // Reads element i of an integer or bool tensor as int64 (the types that carry shapes/indices).
  int64_t int_at(int64_t i) const;
  // Reads element i of a floating point (f32/f64/f16/bf16) or integer tensor as double.
  double real_at(int64_t i) const;
};

using TensorPtr = std::shared_ptr<const Tensor>;

}  // namespace cb
