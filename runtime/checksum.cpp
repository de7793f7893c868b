#include "runtime/checksum.h"

#include <array>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CB_CRC_CLMUL 1
#endif

namespace cb {

namespace {

// Slice-by-16 tables of a reflected CRC-32 polynomial: t[0] is the classic byte table, t[k][b] the
// CRC of byte b followed by k zero bytes, so 16 bytes are folded per step with 16 independent
// lookups. About half zlib's speed: the portable path (and CRC-32C's), and the tail of the
// carry-less multiply below.
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

// Reads bytes one at a time (no unaligned loads, any byte order). `c` is the running register
// (0xFFFFFFFF at the start); returns it, not yet inverted.
uint32_t crc_sliced(const CrcTables& t, const void* data, size_t n, uint32_t c = 0xFFFFFFFFu) {
  const auto* b = static_cast<const uint8_t*>(data);
  for (; n >= 16; n -= 16, b += 16) {
    const uint32_t w0 =
        c ^ (uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24);
    uint32_t x =
        t[15][w0 & 0xFF] ^ t[14][(w0 >> 8) & 0xFF] ^ t[13][(w0 >> 16) & 0xFF] ^ t[12][w0 >> 24];
    for (size_t i = 4; i < 16; ++i) x ^= t[15 - i][b[i]];
    c = x;
  }
  for (; n > 0; --n, ++b) c = t[0][(c ^ *b) & 0xFF] ^ (c >> 8);
  return c;
}

constexpr CrcTables kCrc32 = crc_tables(0xEDB88320u);   // zlib's, gzip's, PNG's
constexpr CrcTables kCrc32c = crc_tables(0x82F63B78u);  // Castagnoli

#ifdef CB_CRC_CLMUL
// CRC-32 by folding with carry-less multiplies (PCLMULQDQ), as in Gopal et al., "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ Instruction" (Intel, 2009): four 128-bit
// lanes folded 64 bytes per step, then into one lane, then 128 -> 64 bits and a Barrett reduction
// to 32. The constants are x^k mod P(x) for the reflected polynomial 0xEDB88320 (bit-reflected,
// shifted by one): k1 = x^(4*128+32), k2 = x^(4*128-32) (the 64-byte fold), k3 = x^(128+32),
// k4 = x^(128-32) (the 16-byte fold), k5 = x^64, and the Barrett pair P'(x) and mu = x^64 / P.
// 2.3x zlib's crc32 on this machine's CPU (cb-bench-checksum); n >= 64. Returns the running
// register, as crc_sliced.
#define CB_CLMUL_TARGET __attribute__((target("pclmul,sse4.1")))

CB_CLMUL_TARGET inline __m128i load(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// x's low half times k's low, xor x's high half times k's high: a 128-bit lane carried 512 (or
// 128) bits forward.
CB_CLMUL_TARGET inline __m128i fold(__m128i x, __m128i k) {
  return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

CB_CLMUL_TARGET uint32_t crc_clmul(const uint8_t* b, size_t n, uint32_t c) {
  const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
  const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
  const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124);
  const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
  const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);

  __m128i x1 = _mm_xor_si128(load(b), _mm_cvtsi32_si128(static_cast<int>(c)));
  __m128i x2 = load(b + 16), x3 = load(b + 32), x4 = load(b + 48);
  b += 64;
  n -= 64;
  for (; n >= 64; n -= 64, b += 64) {
    x1 = _mm_xor_si128(fold(x1, k1k2), load(b));
    x2 = _mm_xor_si128(fold(x2, k1k2), load(b + 16));
    x3 = _mm_xor_si128(fold(x3, k1k2), load(b + 32));
    x4 = _mm_xor_si128(fold(x4, k1k2), load(b + 48));
  }
  x1 = _mm_xor_si128(fold(x1, k3k4), x2);
  x1 = _mm_xor_si128(fold(x1, k3k4), x3);
  x1 = _mm_xor_si128(fold(x1, k3k4), x4);
  for (; n >= 16; n -= 16, b += 16) x1 = _mm_xor_si128(fold(x1, k3k4), load(b));

  // 128 -> 64 bits: the low half times k4 added to the high half; then the top 32 of those 96
  // bits times k5.
  x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
  x2 = _mm_srli_si128(x1, 4);
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5, 0x00), x2);
  // Barrett reduction of the remaining 64 bits to the 32-bit remainder.
  x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10);
  x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, low32), poly, 0x00);
  c = static_cast<uint32_t>(_mm_extract_epi32(_mm_xor_si128(x1, x2), 1));
  return crc_sliced(kCrc32, b, n, c);  // the last n < 16 bytes
}

bool have_clmul() {
  static const bool yes = [] {
    __builtin_cpu_init();  // may run before the constructors that would have done it
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  }();
  return yes;
}
#endif

}  // namespace

namespace detail {

uint32_t crc32_portable(const void* data, size_t n) {
  return crc_sliced(kCrc32, data, n) ^ 0xFFFFFFFFu;
}

bool crc32_has_clmul() {
#ifdef CB_CRC_CLMUL
  return have_clmul();
#else
  return false;
#endif
}

}  // namespace detail

uint32_t crc32_of(const void* data, size_t n) {
#ifdef CB_CRC_CLMUL
  if (n >= 64 && have_clmul())
    return crc_clmul(static_cast<const uint8_t*>(data), n, 0xFFFFFFFFu) ^ 0xFFFFFFFFu;
#endif
  return detail::crc32_portable(data, n);
}

uint32_t crc32c_of(const void* data, size_t n) {
  return crc_sliced(kCrc32c, data, n) ^ 0xFFFFFFFFu;
}

}  // namespace cb
