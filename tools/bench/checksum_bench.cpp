// CRC-32 speed: cb::crc32_of (what checkpoints and packs are checked with) against zlib's crc32
// over the same buffer, best of several passes, and the ratio:
//   cb-bench-checksum [MiB=256] [passes=5]
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "runtime/checksum.h"

namespace {

template <class F>
double best_seconds(int passes, F&& f) {
  double best = 1e30;
  for (int p = 0; p < passes; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
  const int passes = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<unsigned char> buf(mib << 20);
  for (size_t i = 0; i < buf.size(); ++i)
    buf[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  volatile uint32_t sink = 0;
  const double ours =
      best_seconds(passes, [&] { sink = sink ^ cb::crc32_of(buf.data(), buf.size()); });
  const double table = best_seconds(
      passes, [&] { sink = sink ^ cb::detail::crc32_portable(buf.data(), buf.size()); });
  const double zlib = best_seconds(passes, [&] {
    sink = sink ^ static_cast<uint32_t>(::crc32_z(::crc32(0, Z_NULL, 0), buf.data(), buf.size()));
  });
  const uint32_t a = cb::crc32_of(buf.data(), buf.size());
  const uint32_t b =
      static_cast<uint32_t>(::crc32_z(::crc32(0, Z_NULL, 0), buf.data(), buf.size()));
  const double gb = static_cast<double>(buf.size()) / 1e9;
  std::printf("CRC-32 of %zu MiB, best of %d\n", mib, passes);
  std::printf("  crc32_of (%s)  %7.2f GB/s\n",
              cb::detail::crc32_has_clmul() ? "carry-less multiply" : "tables", gb / ours);
  std::printf("  crc32_of's tables          %7.2f GB/s\n", gb / table);
  std::printf("  zlib crc32                 %7.2f GB/s\n", gb / zlib);
  std::printf("  ratio crc32_of / zlib      %7.2fx   (values %s)\n", zlib / ours,
              a == b ? "equal" : "DIFFER");
  return a == b ? 0 : 1;
}
