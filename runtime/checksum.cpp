#include "runtime/checksum.h"

#include <zlib.h>

#include <algorithm>
#include <array>

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

uint32_t crc32c_of(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  const auto* b = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) c = table[(c ^ b[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

}  // namespace cb
