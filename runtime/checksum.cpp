#include "runtime/checksum.h"

#include <array>

namespace cb {

namespace {

// Slice-by-16 tables of a reflected CRC-32 polynomial: t[0] is the classic byte table, t[k][b] the
// CRC of byte b followed by k zero bytes, so 16 bytes are folded per step with 16 independent
// lookups. zlib's crc32 is about twice as fast, but linking it here would put a compression
// library under the whole runtime; checkpoints and a pack's once-per-record check afford this.
using CrcTables = std::array<std::array<uint32_t, 256>, 16>;

constexpr CrcTables crc_tables(uint32_t poly) {
  CrcTables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
    t[0][i] = c;
  }
  for (size_t k = 1; k < 16; ++k)
    for (uint32_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
  return t;
}

// Reads bytes one at a time (no unaligned loads, any byte order).
uint32_t crc_sliced(const CrcTables& t, const void* data, size_t n) {
  const auto* b = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (; n >= 16; n -= 16, b += 16) {
    const uint32_t w0 =
        c ^ (uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24);
    uint32_t x =
        t[15][w0 & 0xFF] ^ t[14][(w0 >> 8) & 0xFF] ^ t[13][(w0 >> 16) & 0xFF] ^ t[12][w0 >> 24];
    for (size_t i = 4; i < 16; ++i) x ^= t[15 - i][b[i]];
    c = x;
  }
  for (; n > 0; --n, ++b) c = t[0][(c ^ *b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

constexpr CrcTables kCrc32 = crc_tables(0xEDB88320u);   // zlib's, gzip's, PNG's
constexpr CrcTables kCrc32c = crc_tables(0x82F63B78u);  // Castagnoli

}  // namespace

uint32_t crc32_of(const void* data, size_t n) { return crc_sliced(kCrc32, data, n); }

uint32_t crc32c_of(const void* data, size_t n) { return crc_sliced(kCrc32c, data, n); }

}  // namespace cb
