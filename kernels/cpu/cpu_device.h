// The CPU backend's Device (runtime/device.h): host memory, streams that are thread pools over
// shares of the device's cores, synchronous launches. The tools and tests make CPU devices; the
// trainer is given them and never makes one.
#pragma once

#include <memory>
#include <vector>

#include "runtime/device.h"

namespace cb {

class ThreadPool;

// A CPU device of `threads` workers, optionally pinned to `cores` (empty: not pinned); `name`
// as printed ("cpu", "cpu:1").
std::unique_ptr<Device> make_cpu_device(int threads, std::vector<int> cores = {},
                                        std::string name = "cpu");

// CPU devices for `--devices cpu:G`: `cores` split into G consecutive groups, device d named
// "cpu:d" (just "cpu" when G is 1). Throws cb::Error when there are fewer cores than devices.
std::vector<std::unique_ptr<Device>> make_cpu_devices(int devices, const std::vector<int>& cores);

int hardware_threads();

namespace cpu {
// The thread pool of the stream whose kernel runs on this thread (set by the CPU device around
// each launch; nullptr outside one: kernels then run inline).
ThreadPool* current_pool();

// Publishes `pool` as this thread's current pool for its lifetime: for benchmarks that call CPU
// kernel internals directly (everything else launches through a Device).
class ScopedPool {
 public:
  explicit ScopedPool(ThreadPool* pool);
  ~ScopedPool();
  ScopedPool(const ScopedPool&) = delete;
  ScopedPool& operator=(const ScopedPool&) = delete;

 private:
  ThreadPool* saved_;
};
}  // namespace cpu

}  // namespace cb
