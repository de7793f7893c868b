// Raw copies of tensor data. An empty tensor's storage may be a null pointer (an empty
// std::vector's data(), a zero-byte buffer), and std::memcpy must not be given one even for zero
// bytes (its arguments are declared nonnull; UBSan stops there). Every copy of tensor bytes whose
// length can be 0 goes through copy_bytes, which copies nothing then and never reads the pointers.
#pragma once

#include <cstddef>
#include <cstring>

namespace cb {

// Copies n bytes from src to dst (not overlapping); n == 0 does nothing, null pointers allowed.
inline void copy_bytes(void* dst, const void* src, size_t n) {
  if (n > 0) std::memcpy(dst, src, n);
}

}  // namespace cb
