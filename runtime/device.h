// The narrow device interface. A backend (kernels/cpu, kernels/cuda) implements it; the executor,
// the trainer and the collectives only talk to this. One line of contract per method.
//
// Streams: ordered queues of work on one device. Stream kSyncStream (0) always exists: the
// device's synchronisation stream (SMA's fused update, the all-reduce, evaluation). Learner
// streams are made with create_stream(), one per learner. Work on one stream runs in launch
// order; work on different streams may overlap unless ordered by events (record_event on one,
// wait_event on another). Each stream is driven by one host thread at a time.
//   CPU: a stream is a thread pool over a share of the device's cores; launches run to completion
//        before launch() returns (so events are complete when recorded). The thread that creates a
//        stream (or first launches on kSyncStream) is pinned to its first core and works in it.
//   CUDA: a stream with its own library handles; launches enqueue.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/kernel_args.h"
#include "runtime/op_catalog.h"

namespace cb {

using Stream = int;
constexpr Stream kSyncStream = 0;

// A point in one stream's work; ids are unique within a device, so any of its streams can wait.
// Event{} (id 0) is a point that is always complete.
struct Event {
  uint64_t id = 0;
};

struct DeviceCaps {
  std::string name;           // "cpu", "cpu:1", "cuda:0"
  bool host_memory = true;    // device pointers are host pointers (no copies needed)
  int64_t memory_total = 0;   // bytes
  int64_t memory_free = 0;    // bytes available now (what the auto-tuner may plan against)
  std::string memory_source;  // where memory_free comes from, for messages ("cgroup v2 memory.max
                              // 2.0 GiB, 1.0 GiB in use", "host: MemAvailable"); may be empty
  int cores = 1;              // worker threads (CPU) or SMs (GPU)
  // Conv / ConvGrad, Gemm and MatMul marked bf16 (set_compute_precision) run bf16 arithmetic at
  // speed here; where not, `bf16_why` says why (no AVX-512 BF16 on these cores, built without
  // oneDNN, a GPU older than compute capability 8.0).
  bool bf16 = false;
  std::string bf16_why;
  // Kernels read and write activations in oneDNN's blocked layout (Value::blocked) where
  // assign_blocked_layouts puts them: the CPU with oneDNN.
  bool blocked_layouts = false;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceCaps caps() const = 0;
  // 64-byte aligned, zero-filled memory; throws cb::Error naming the bytes when it does not fit.
  virtual void* allocate(size_t bytes) = 0;
  // Frees memory from allocate(); nullptr is a no-op.
  virtual void release(void* p) noexcept = 0;
  // Host -> device and device -> host copies on `stream`, ordered after the work launched on it
  // before them. download returns when the bytes are in `dst`. upload returns when `src` may be
  // reused; the copy itself may still be in flight (CUDA: staged in pinned memory), and is
  // ordered before later work on `stream` only: another stream needs an event recorded after it
  // (or a synchronize) before it reads `dst`.
  virtual void upload(void* dst, const void* src, size_t bytes, Stream stream = kSyncStream) = 0;
  virtual void download(void* dst, const void* src, size_t bytes, Stream stream = kSyncStream) = 0;
  // A new learner stream: share `slot` of `slots` of the device's compute (CPU: cores
  // [slot*c/slots, (slot+1)*c/slots), or one shared core when slots > cores). Call it from the
  // thread that will drive the stream.
  virtual Stream create_stream(int slot, int slots) = 0;
  // Destroys a stream from create_stream() after its work is done.
  virtual void destroy_stream(Stream stream) = 0;
  // Waits for all work launched on `stream`; rethrows an asynchronous error from it.
  virtual void synchronize(Stream stream = kSyncStream) = 0;
  // Marks the current point of `stream`; wait_event makes later work on another stream wait on it.
  virtual Event record_event(Stream stream) = 0;
  virtual void wait_event(Stream stream, Event event) = 0;
  // Capability query for the plan-time check: is there a kernel for `op` on inputs of `dtype`?
  virtual bool supports(OpKind op, DType dtype) const = 0;
  // Scratch bytes the kernel of `op` wants for these views (0: none); the executor gives each
  // node a workspace of that size (KernelArgs::workspace).
  virtual size_t workspace_bytes(OpKind op, const KernelArgs& args) const = 0;
  // Runs (CPU) or enqueues (GPU) the kernel of `op` on `stream`, on views of this device's memory.
  virtual void launch(OpKind op, KernelArgs& args, Stream stream = kSyncStream) = 0;
};

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
  float* f32(int64_t offset = 0) const { return static_cast<float*>(p_) + offset; }
  size_t size() const { return bytes_; }

 private:
  Device* dev_ = nullptr;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace cb
