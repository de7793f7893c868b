// Host memory as a Device whose memory is the host's hands it out (runtime/device.h: allocate,
// release, caps' memory figures), for backends that run on host memory without owning a CPU
// backend (the CUDA kernels run as host loops).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cb {

// 64-byte aligned, zero-filled memory of `bytes` (any n, 0 included); throws cb::Error naming
// `device` and the bytes when it does not fit. Freed by release_host_memory().
void* allocate_host_memory(size_t bytes, std::string_view device);
// Frees memory from allocate_host_memory(); nullptr is a no-op.
void release_host_memory(void* p) noexcept;

// The host's memory in bytes: installed, and available now (both 0 when the system does not say).
struct HostMemoryInfo {
  int64_t total = 0;
  int64_t free = 0;
};
HostMemoryInfo host_memory_info();

}  // namespace cb
