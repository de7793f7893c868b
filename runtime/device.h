// The narrow device interface. A backend (kernels/cpu, kernels/cuda) implements it; the executor,
// the planner's consumers and SMA only talk to this. One line of contract per method.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernel.h"
#include "runtime/op_catalog.h"

namespace cb {

struct DeviceCaps {
  std::string name;          // "cpu", "cuda:0"
  bool host_memory = true;   // device pointers are host pointers (no copies needed)
  int64_t memory_total = 0;  // bytes
  int64_t memory_free = 0;   // bytes available now (what the auto-tuner may plan against)
  int cores = 1;             // worker threads (CPU) or SMs (GPU)
};

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceCaps caps() const = 0;
  // 64-byte aligned, zero-filled memory; throws cb::Error naming the bytes when it does not fit.
  virtual void* allocate(size_t bytes) = 0;
  // Frees memory from allocate(); nullptr is a no-op.
  virtual void release(void* p) noexcept = 0;
  // Host -> device and device -> host copies; ordered after work launched before them.
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  // Waits for all launched work; rethrows an asynchronous error from it.
  virtual void synchronize() = 0;
  // Marks the current point of the launch stream; wait_event makes later work wait on it.
  virtual uint64_t record_event() = 0;
  virtual void wait_event(uint64_t event) = 0;
  // Capability query for the plan-time check: is there a kernel for `op` on inputs of `dtype`?
  virtual bool supports(OpKind op, DType dtype) const = 0;
  // Runs (CPU) or enqueues (GPU) the kernel of `op` on views of this device's memory.
  virtual void launch(OpKind op, KernelArgs& args) = 0;
};

// The CPU backend (kernels/cpu): `threads` workers, optionally pinned to `cores`.
std::unique_ptr<Device> make_cpu_device(int threads, std::vector<int> cores = {});

// Device memory owned by RAII.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device& d, size_t bytes) : dev_(&d), p_(d.allocate(bytes)), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(dev_, o.dev_);
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceBuffer() {
    if (dev_) dev_->release(p_);
  }
  void* get() const { return p_; }
  size_t size() const { return bytes_; }

 private:
  Device* dev_ = nullptr;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace cb
