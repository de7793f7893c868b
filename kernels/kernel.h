// What a kernel sees: typed attribute params, dense row-major tensor views of its inputs and
// outputs (resolved dims, no IR), a thread pool and a seed. Kernels only compute.
// Convention: a kernel writes every element of every output it is given (data != nullptr);
// omitted optional inputs/outputs have data == nullptr.
#pragma once

#include <any>
#include <cstdint>
#include <vector>

#include "runtime/dtype.h"

namespace cb {

class ThreadPool;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> dims;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool present() const { return data != nullptr; }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
};

struct KernelArgs {
  const std::any* params = nullptr;  // the op's params struct (runtime/ops/params.h)
  std::vector<TensorView> in;
  std::vector<TensorView> out;
  ThreadPool* pool = nullptr;
  uint64_t seed = 0;  // per node and step, for Dropout

  template <typename T>
  const T& p() const {
    return std::any_cast<const T&>(*params);
  }
};

using KernelFn = void (*)(const KernelArgs&);

// The dtype a kernel is selected by: the first present input's, or output 0's without inputs.
inline DType kernel_dtype(const KernelArgs& a) {
  for (const TensorView& v : a.in)
    if (v.present()) return v.dtype;
  return a.out.at(0).dtype;
}

}  // namespace cb
