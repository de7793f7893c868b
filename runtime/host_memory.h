// Host memory as a Device whose memory is the host's hands it out (runtime/device.h: allocate,
// release, caps' memory figures), for backends that run on host memory without owning a CPU
// backend (the CUDA kernels run as host loops). The free figure is what this process may still
// use: the smallest of the host's available memory and the limits of the cgroups (v2 and v1) the
// process is in, so that a container's memory limit bounds the auto-tuner, not the host's RAM.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cb {

// 64-byte aligned, zero-filled memory of `bytes` (any n, 0 included); throws cb::Error naming
// `device` and the bytes when it does not fit. Freed by release_host_memory().
void* allocate_host_memory(size_t bytes, std::string_view device);
// Frees memory from allocate_host_memory(); nullptr is a no-op.
void release_host_memory(void* p) noexcept;
// Hands the pages of freed heap memory back to the system (glibc keeps freed blocks, even large
// ones once its mmap threshold has risen, for reuse): call after freeing a lot of memory that
// will not be allocated again, such as a loaded model's copies.
void return_free_host_memory() noexcept;

// Which figure bounds HostMemoryInfo::free.
enum class MemorySource {
  None,              // nothing readable: total and free are 0
  HostMemAvailable,  // /proc/meminfo MemAvailable (free + reclaimable page cache)
  HostSysinfo,       // sysinfo() freeram + bufferram (no /proc/meminfo, or a kernel < 3.14)
  CgroupV2,          // memory.max - memory.current of the process's cgroup or an ancestor
  CgroupV1,          // memory.limit_in_bytes - memory.usage_in_bytes (memory controller)
};

// The memory this process may use, in bytes (0 when the system does not say), and where the free
// figure came from. A cgroup's usage counts its page cache minus inactive_file (memory.stat), which
// the kernel reclaims before it kills anything, as `docker stats` and MemAvailable do.
struct HostMemoryInfo {
  int64_t total = 0;  // the host's RAM, or the smallest cgroup limit when that is smaller
  int64_t free = 0;   // the smallest of the host's available memory and every cgroup's headroom
  MemorySource source = MemorySource::None;
  int64_t limit = 0;   // cgroup sources: the binding cgroup's limit
  int64_t used = 0;    // cgroup sources: its usage (less inactive page cache)
  std::string cgroup;  // cgroup sources: its folder (under the fake root, if one was given)

  // For messages: "cgroup v2 memory.max 2.0 GiB, 1.0 GiB in use", "host: MemAvailable".
  std::string describe() const;
};

// Reads /proc/meminfo, /proc/self/cgroup, /proc/self/mountinfo and the cgroup files under the
// mount points mountinfo names, each path prefixed with `root` ("" for the real system; a temp
// folder holding a fake tree in tests). Unreadable or garbage files are skipped (that limit is
// then unknown): it never throws.
HostMemoryInfo host_memory_info(const std::string& root = "");

}  // namespace cb
