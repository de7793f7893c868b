// The host-run device (cuda_device.h: make_cuda_host_run_device): the CUDA kernels' bodies as
// host loops over host memory, for the op harness on machines without a GPU. Compiled into the
// host-run build only (namespace cb::cuda_host).
#include "kernels/cpu/cpu_device.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/launch.h"
#include "runtime/error.h"

namespace cb {

namespace {
class HostRunDevice final : public Device {
 public:
  // Memory and copies are a 1-thread CPU device's (host memory); the kernels are the CUDA ones.
  DeviceCaps caps() const override {
    DeviceCaps c = host_->caps();
    c.name = "cuda-host";
    return c;
  }
  void* allocate(size_t bytes) override { return host_->allocate(bytes); }
  void release(void* p) noexcept override { host_->release(p); }
  void upload(void* dst, const void* src, size_t n, Stream s) override {
    host_->upload(dst, src, n, s);
  }
  void download(void* dst, const void* src, size_t n, Stream s) override {
    host_->download(dst, src, n, s);
  }
  Stream create_stream(int, int) override { return next_stream_++; }
  void destroy_stream(Stream) override {}
  void synchronize(Stream) override {}
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
  std::unique_ptr<Device> host_ = make_cpu_device(1, {}, "cuda-host");
  cuda_host::GpuCtx ctx_;
  Stream next_stream_ = 1;
  uint64_t events_ = 0;
};
}  // namespace

std::unique_ptr<Device> make_cuda_host_run_device() { return std::make_unique<HostRunDevice>(); }

}  // namespace cb
