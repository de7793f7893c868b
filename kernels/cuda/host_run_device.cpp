// The host-run device (cuda_device.h: make_cuda_host_run_device): the CUDA kernels' bodies as
// host loops over host memory, for the op harness on machines without a GPU. Compiled into the
// host-run build only (namespace cb::cuda_host). Like the CUDA device it raises the bad input
// values its kernels report (kernels/cuda/device_error.h) at synchronize() and download() only,
// not at the launch, so the tests see the GPU's behaviour.
#include <cstring>
#include <string>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/launch.h"
#include "runtime/error.h"
#include "runtime/host_memory.h"

namespace cb {

namespace {
class HostRunDevice final : public Device {
 public:
  explicit HostRunDevice(const CudaOptions& opt) {
    ctx_.allow_tf32 = opt.tf32;
    ctx_.deterministic = opt.deterministic;
    ctx_.host_reverse = opt.host_run_reverse;
    ctx_.host_bf16_library = opt.host_run_bf16_library;
    ctx_.error = {&claim_, &record_};
  }
  // Memory is the host's (runtime/host_memory.h), copies are memcpy, one core runs the kernels
  // (the CUDA ones, as host loops).
  DeviceCaps caps() const override {
    DeviceCaps c;
    c.name = "cuda-host";
    c.host_memory = true;
    const HostMemoryInfo m = host_memory_info();
    c.memory_total = m.total;
    c.memory_free = m.free;  // the container's cgroup limit when that is smaller than the host's
    c.memory_source = m.describe();
    c.cores = 1;
    c.bf16 = true;  // the bf16 products' rounding, on the fallback kernels (library_bf16.h)
    return c;
  }
  void* allocate(size_t bytes) override { return allocate_host_memory(bytes, "cuda-host"); }
  void release(void* p) noexcept override { release_host_memory(p); }
  // n == 0 may come with null pointers (an empty tensor), which memcpy must not be given.
  void upload(void* dst, const void* src, size_t n, Stream) override {
    if (n > 0) std::memcpy(dst, src, n);
  }
  void download(void* dst, const void* src, size_t n, Stream) override {
    if (n > 0) std::memcpy(dst, src, n);
    raise_reported();
  }
  Stream create_stream(int, int) override { return next_stream_++; }
  void destroy_stream(Stream) override {}
  void synchronize(Stream) override { raise_reported(); }
  Event record_event(Stream) override { return Event{++events_}; }
  void wait_event(Stream, Event) override {}
  bool supports(OpKind op, DType t) const override {
    return cuda_host::find_gpu_kernel(op, t) != nullptr;
  }
  size_t workspace_bytes(OpKind op, const KernelArgs& a) const override {
    const cuda_host::GpuKernel* k = cuda_host::find_gpu_kernel(op, kernel_dtype(a));
    return k && k->workspace ? k->workspace(a, ctx_) : 0;
  }
  void launch(OpKind op, KernelArgs& a, Stream) override {
    const cuda_host::GpuKernel* k = cuda_host::find_gpu_kernel(op, kernel_dtype(a));
    CB_CHECK(k);  // the executor checked coverage before step 0
    k->fn(a, ctx_);
  }

 private:
  // The first bad value a kernel reported since the last check, as the CPU's cb::Error; cleared.
  void raise_reported() {
    if (record_.code == 0) return;
    const std::string msg = cuda_host::device_error_message(record_);
    record_ = {};
    claim_ = 0;
    throw Error(msg);
  }

  cuda_host::GpuCtx ctx_;
  unsigned int claim_ = 0;
  cuda_host::DeviceErrorRecord record_;
  Stream next_stream_ = 1;
  uint64_t events_ = 0;
};
}  // namespace

std::unique_ptr<Device> make_cuda_host_run_device(const CudaOptions& options) {
  return std::make_unique<HostRunDevice>(options);
}

}  // namespace cb
