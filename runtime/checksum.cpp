#include "runtime/checksum.h"

#include <zlib.h>

#include <algorithm>

namespace cb {

uint32_t crc32_of(const void* data, size_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  const auto* b = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib's length is a uInt
    const auto k = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    c = crc32(c, b, k);
    b += k;
    n -= k;
  }
  return static_cast<uint32_t>(c);
}

}  // namespace cb
