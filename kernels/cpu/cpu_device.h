// The CPU backend's Device (runtime/device.h): host memory, streams that are thread pools over
// shares of the device's cores, synchronous launches. The tools and tests make CPU devices; the
// trainer is given them and never makes one.
#pragma once

#include <memory>
#include <vector>

#include "kernels/cpu/current_pool.h"  // cpu::ScopedPool, for the tools and tests that use it
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

}  // namespace cb
