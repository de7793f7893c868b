// The last-level cache's size (kernel_util.h). Linux describes core 0's caches under sysfs; the
// C library's sysconf(_SC_LEVEL3_CACHE_SIZE) can report the whole host's L3 inside a VM (384 MiB
// on a guest whose core shares 32), so sysfs comes first.
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/kernel_util.h"

namespace cb::cpu {

namespace {

// "32768K" -> bytes; 0 where unreadable.
int64_t parse_size(const std::string& text) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (...) {
    return 0;
  }
  const char unit = used < text.size() ? text[used] : ' ';
  return unit == 'K' ? v << 10 : unit == 'M' ? v << 20 : unit == 'G' ? v << 30 : v;
}

int64_t detect() {
  int64_t best = 0;
  int best_level = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level_file(dir + "level"), size_file(dir + "size"), type_file(dir + "type");
    int level = 0;
    std::string size, type;
    if (!(level_file >> level) || !(size_file >> size) || !(type_file >> type)) continue;
    if (type == "Instruction" || level < best_level) continue;
    if (const int64_t bytes = parse_size(size); bytes > 0) best = bytes, best_level = level;
  }
  if (best > 0) return best;
  for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE})
    if (const long v = sysconf(name); v > 0) return v;
  return int64_t{8} << 20;
}

std::atomic<int64_t> g_override{0};

}  // namespace

int64_t last_level_cache_bytes() {
  static const int64_t bytes = detect();
  const int64_t forced = g_override.load(std::memory_order_relaxed);
  return forced > 0 ? forced : bytes;
}

void set_last_level_cache_bytes(int64_t bytes) {
  g_override.store(bytes, std::memory_order_relaxed);
}

}  // namespace cb::cpu
