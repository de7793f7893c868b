// runtime/checksum.h: CRC-32 and CRC-32C against their published check values, and CRC-32 against
// values computed by zlib (python3 -c "import zlib; ...") over every path of the sliced loop:
// empty, shorter than a slice, whole slices, slices plus a tail, and an unaligned start; the
// carry-less-multiply path against zlib's crc32 itself at every length up to 300 and beyond.
#include <doctest/doctest.h>
#include <zlib.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/checksum.h"

using namespace cb;

TEST_CASE("checksum: CRC-32 and CRC-32C check values") {
  CHECK(crc32_of("123456789", 9) == 0xCBF43926u);
  CHECK(crc32c_of("123456789", 9) == 0xE3069283u);
  CHECK(crc32_of(nullptr, 0) == 0u);
}

TEST_CASE("checksum: CRC-32 equals zlib's at every length and alignment") {
  std::vector<uint8_t> d(1003);
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>((i * 131 + 7) & 0xFF);
  // zlib.crc32(d[off:off+n]) for d as above.
  const std::vector<std::pair<size_t, uint32_t>> at0 = {
      {0, 0x00000000u},  {1, 0x4C667A2Eu},   {15, 0xA4762116u},
      {16, 0xEA7E5B68u}, {17, 0x293CDDB3u},  {31, 0xB3509C52u},
      {33, 0xD9298305u}, {255, 0x17AD3B28u}, {1000, 0x1ED57BB9u}};
  const std::vector<std::pair<size_t, uint32_t>> at3 = {
      {0, 0x00000000u},  {1, 0x220D7CC9u},   {15, 0x7BFBFBD2u},
      {16, 0xE2CCEB9Fu}, {17, 0x29346F03u},  {31, 0x2F30C7C1u},
      {33, 0xFBD66B25u}, {255, 0xF8B39D90u}, {1000, 0x3B3432F4u}};
  for (auto [n, want] : at0) CHECK(crc32_of(d.data(), n) == want);
  for (auto [n, want] : at3) CHECK(crc32_of(d.data() + 3, n) == want);
}

TEST_CASE("checksum: CRC-32 by carry-less multiply equals the tables and zlib, every length") {
  // Every path of the folding: under 64 bytes (tables only), the 64-byte loop, the 16-byte
  // folds, the tail, and every start alignment.
  std::vector<uint8_t> d(4096 + 16);
  uint32_t s = 12345;
  for (auto& b : d) b = static_cast<uint8_t>((s = s * 1103515245u + 12345u) >> 16);
  MESSAGE("carry-less multiply: " << (detail::crc32_has_clmul() ? "yes" : "no (tables only)"));
  int bad = 0;
  for (size_t off = 0; off < 16; ++off)
    for (size_t n = 0; n <= 4096; n += (n < 300 ? 1 : 37)) {
      const uint32_t z = static_cast<uint32_t>(::crc32(0, d.data() + off, static_cast<uInt>(n)));
      if (crc32_of(d.data() + off, n) != z || detail::crc32_portable(d.data() + off, n) != z) {
        if (++bad < 5)
          FAIL_CHECK("CRC-32 differs from zlib's at offset " << off << ", length " << n);
      }
    }
  CHECK(bad == 0);
}
