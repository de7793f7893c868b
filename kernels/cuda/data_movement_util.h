// Helpers shared by the CUDA data movement kernels (data_movement.cu, data_movement_grad.cu):
// dispatch on the element size, the rank check, and small integer inputs read in device memory.
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"
#include "runtime/error.h"

namespace cb::CB_GPU_NS {

// fn<E>(args...) with E the unsigned integer type of dtype t's element size.
#define CB_DM_DISPATCH_BYTES(t, op, fn, ...)     \
  switch (dtype_size(t)) {                       \
    case 1:                                      \
      fn<uint8_t>(__VA_ARGS__);                  \
      break;                                     \
    case 2:                                      \
      fn<uint16_t>(__VA_ARGS__);                 \
      break;                                     \
    case 4:                                      \
      fn<uint32_t>(__VA_ARGS__);                 \
      break;                                     \
    case 8:                                      \
      fn<uint64_t>(__VA_ARGS__);                 \
      break;                                     \
    default:                                     \
      ::cb::CB_GPU_NS::unsupported_dtype(op, t); \
  }

inline void check_rank(const char* op, size_t rank) {
  if (rank > static_cast<size_t>(kMaxRank))
    fail("{}: the CUDA backend supports rank <= {}, got {}", op, kMaxRank, rank);
}

// A small integer input in device memory (i32 or i64), read by kernel bodies.
struct IntsRef {
  const void* p = nullptr;
  bool i32 = false;
  CB_HOST_DEVICE int64_t operator[](int64_t i) const {
    return i32 ? static_cast<const int32_t*>(p)[i] : static_cast<const int64_t*>(p)[i];
  }
};
inline IntsRef ints_ref(const char* op, const TensorView& v) {
  if (v.dtype != DType::I64 && v.dtype != DType::I32)
    fail("{}: integer input must be i32 or i64, got {}", op, dtype_name(v.dtype));
  return {v.data, v.dtype == DType::I32};
}

}  // namespace cb::CB_GPU_NS
