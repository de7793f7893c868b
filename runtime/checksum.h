// Checksums and hashes of bytes, shared by every on-disk format of ours (packs, checkpoints) and
// by the fingerprints that tell a file is stale.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cb {

// CRC-32 (zlib's, as gzip and PNG use: values match zlib's crc32) of n bytes, any n. Computed
// here rather than by zlib, so the runtime links no compression library: by carry-less multiplies
// where the CPU has them (x86-64's PCLMULQDQ: above twice zlib's speed, `cb-bench-checksum`),
// else by tables.
uint32_t crc32_of(const void* data, size_t n);
namespace detail {
uint32_t crc32_portable(const void* data, size_t n);  // the table path alone (tests, reference)
bool crc32_has_clmul();                               // whether crc32_of multiplies
}  // namespace detail

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord files (TensorBoard's event
// files) frame their records with.
uint32_t crc32c_of(const void* data, size_t n);

// FNV-1a 64: `h` continues an earlier hash (the default starts one).
constexpr uint64_t kFnv1aStart = 1469598103934665603ull;
inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnv1aStart) {
  const auto* b = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

}  // namespace cb
