// The backend-neutral kernel contract: what a kernel of any backend (kernels/cpu, kernels/cuda)
// is handed. Typed attribute params (runtime/ops/params.h: plain structs, enums, no strings),
// dense row-major views of its inputs and outputs (resolved dims, no IR), a workspace and a seed.
// A backend's own context (thread pool, stream, library handles) is NOT here: it lives in its
// Device, which runs the kernel.
// Conventions:
//   - `in` is read only. Every buffer a kernel writes is in `out`; an in-place update (an
//     optimizer step, SMA) lists the buffer it updates as an output, which may alias an input.
//   - A kernel writes every element of every present output (data != nullptr); omitted optional
//     inputs/outputs have data == nullptr.
//   - `workspace` holds the bytes the backend asked the plan for (Device::workspace_bytes), or is
//     empty; kernels never allocate in the steady state.
#pragma once

#include <any>
#include <cstdint>
#include <vector>

#include "runtime/dtype.h"

namespace cb {

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> dims;
  bool blocked = false;       // [N, C/16, H, W, 16] (Value::blocked), not row-major [N, C, H, W]
  bool bf16_storage = false;  // f32 values stored as bf16 (Value::bf16_storage)

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  size_t bytes() const { return static_cast<size_t>(numel()) * stored_size(dtype, bf16_storage); }
  bool present() const { return data != nullptr; }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
};

// A flat 1-D f32 view of `elems` floats at `data`.
inline TensorView flat_f32(const void* data, int64_t elems) {
  TensorView v;
  v.data = const_cast<void*>(data);
  v.dtype = DType::F32;
  v.dims = {elems};
  return v;
}

struct KernelArgs {
  const std::any* params = nullptr;  // the op's params struct (runtime/ops/params.h)
  std::vector<TensorView> in;
  std::vector<TensorView> out;
  void* workspace = nullptr;  // Device::workspace_bytes(op, args) bytes, 64-byte aligned
  size_t workspace_bytes = 0;
  uint64_t seed = 0;  // per node and step, for Dropout

  template <typename T>
  const T& p() const {
    return std::any_cast<const T&>(*params);
  }
};

using KernelFn = void (*)(const KernelArgs&);

// Sets of dtypes as bit masks, for the backends' kernel tables (which dtypes of input 0 a kernel
// accepts).
namespace dtypes {
constexpr uint32_t type_bit(DType t) { return 1u << static_cast<unsigned>(t); }
constexpr uint32_t kF32 = type_bit(DType::F32), kF64 = type_bit(DType::F64);
constexpr uint32_t kFloat = kF32 | kF64;
constexpr uint32_t kInt =
    type_bit(DType::I64) | type_bit(DType::I32) | type_bit(DType::I8) | type_bit(DType::U8);
constexpr uint32_t kNumeric = kFloat | kInt;
constexpr uint32_t kAll = ~0u;  // byte-moving ops work on every dtype
}  // namespace dtypes

// The dtype a kernel is selected by: the first present input's, or output 0's without inputs.
inline DType kernel_dtype(const KernelArgs& a) {
  for (const TensorView& v : a.in)
    if (v.present()) return v.dtype;
  return a.out.at(0).dtype;
}

}  // namespace cb
