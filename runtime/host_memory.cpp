#include "runtime/host_memory.h"

#include <sys/sysinfo.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "runtime/error.h"

namespace cb {

void* allocate_host_memory(size_t bytes, std::string_view device) {
  // aligned_alloc wants a size that is a multiple of the alignment, and never 0.
  const size_t n = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, n);
  if (!p)
    fail(
        "out of memory on {}: allocating {} bytes ({:.1f} MiB) failed; lower the batch size or "
        "the number of learners",
        device, bytes, static_cast<double>(bytes) / (1 << 20));
  std::memset(p, 0, n);
  return p;
}

void release_host_memory(void* p) noexcept { std::free(p); }

HostMemoryInfo host_memory_info() {
  HostMemoryInfo m;
  struct sysinfo si {};
  if (sysinfo(&si) == 0) {
    m.total = static_cast<int64_t>(si.totalram) * si.mem_unit;
    m.free = static_cast<int64_t>(si.freeram + si.bufferram) * si.mem_unit;
  }
  return m;
}

}  // namespace cb
