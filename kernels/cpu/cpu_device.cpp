// The CPU backend of the Device interface (kernels/cpu/cpu_device.h). Every launch runs to
// completion on the calling thread and its stream's pool before launch() returns, so events are
// complete when recorded and synchronize() has nothing to wait for. The stream's pool is the
// kernels' context: it is published to them through cpu::current_pool() for the duration of the
// launch, never through KernelArgs.
#include "kernels/cpu/cpu_device.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/storage.h"
#include "runtime/copy_bytes.h"
#include "runtime/error.h"
#include "runtime/host_memory.h"
#include "runtime/thread_pool.h"

namespace cb {

int hardware_threads() { return ThreadPool::hardware_threads(); }

namespace {
class CpuDevice final : public Device {
 public:
  CpuDevice(int threads, std::vector<int> cores, std::string name)
      : threads_(std::max(1, threads)), cores_(std::move(cores)), name_(std::move(name)) {}

  DeviceCaps caps() const override {
    DeviceCaps c;
    c.name = name_;
    c.host_memory = true;
    const HostMemoryInfo m = host_memory_info();
    c.memory_total = m.total;
    c.memory_free = m.free;  // the container's cgroup limit when that is smaller than the host's
    c.memory_source = m.describe();
    c.cores = threads_;
    c.bf16 = cpu::dnnl_bf16_available();
    c.blocked_layouts = cpu::conv_dnnl_available();
    if (!c.bf16)
      c.bf16_why = cpu::conv_dnnl_available()
                       ? "oneDNN found no AVX-512 BF16 (or newer) on these cores"
                       : "crossbow was built without oneDNN (libdnnl-dev), which runs its bf16 "
                         "convolutions";
    return c;
  }
  void* allocate(size_t bytes) override { return allocate_host_memory(bytes, name_); }
  void release(void* p) noexcept override { release_host_memory(p); }
  void upload(void* dst, const void* src, size_t n, Stream) override {
    copy_bytes(dst, src, n);  // n == 0 may come with null pointers (an empty tensor)
  }
  void download(void* dst, const void* src, size_t n, Stream) override { copy_bytes(dst, src, n); }
  Stream create_stream(int slot, int slots) override {
    CB_CHECK(slots >= 1 && slot >= 0 && slot < slots);
    std::vector<int> cores;
    int threads = 1;
    if (slots > threads_) {  // several streams share a core, one thread each
      if (!cores_.empty()) cores = {cores_[static_cast<size_t>(slot % threads_)]};
    } else {
      const int b = slot * threads_ / slots, e = (slot + 1) * threads_ / slots;
      threads = e - b;
      if (!cores_.empty()) cores.assign(cores_.begin() + b, cores_.begin() + e);
    }
    auto pool = std::make_unique<ThreadPool>(threads, cores);  // pins this thread to cores[0]
    std::lock_guard<std::mutex> l(mu_);
    const Stream s = next_stream_++;
    streams_[s] = std::move(pool);
    return s;
  }
  void destroy_stream(Stream s) override {
    CB_CHECK(s != kSyncStream);
    std::unique_ptr<ThreadPool> p;
    std::lock_guard<std::mutex> l(mu_);
    auto it = streams_.find(s);
    CB_CHECK(it != streams_.end());
    p = std::move(it->second);
    streams_.erase(it);
  }
  void synchronize(Stream) override {}
  Event record_event(Stream) override { return Event{++events_}; }
  void wait_event(Stream, Event) override {}
  bool supports(OpKind op, DType t) const override {
    return cpu::find_cpu_kernel(op, t) != nullptr;
  }
  size_t workspace_bytes(OpKind, const KernelArgs&) const override { return 0; }
  void launch(OpKind op, KernelArgs& args, Stream s) override {
    KernelFn fn = cpu::find_cpu_kernel(op, kernel_dtype(args));
    CB_CHECK(fn);  // the executor checked coverage before step 0
    cpu::ScopedPool scope(pool(s));
    // Elementwise ops on bf16-stored activations (--precision bf16's blocked values) widen and
    // round per element; every other kernel reads TensorView::bf16_storage itself.
    if (!args.out.empty() && args.out[0].bf16_storage && cpu::bf16_storage_elementwise(op, args))
      return;
    fn(args);
  }

 private:
  ThreadPool* pool(Stream s) {
    std::lock_guard<std::mutex> l(mu_);
    if (s == kSyncStream) {  // made by the first thread that launches on it (and pinned there)
      if (!sync_) sync_ = std::make_unique<ThreadPool>(threads_, cores_);
      return sync_.get();
    }
    auto it = streams_.find(s);
    CB_CHECK(it != streams_.end());
    return it->second.get();
  }

  const int threads_;
  const std::vector<int> cores_;
  const std::string name_;
  std::mutex mu_;  // streams_ and sync_ (streams are made and looked up from several threads)
  std::unique_ptr<ThreadPool> sync_;
  std::map<Stream, std::unique_ptr<ThreadPool>> streams_;
  Stream next_stream_ = 1;
  std::atomic<uint64_t> events_{0};
};
}  // namespace

std::unique_ptr<Device> make_cpu_device(int threads, std::vector<int> cores, std::string name) {
  return std::make_unique<CpuDevice>(threads, std::move(cores), std::move(name));
}

std::vector<std::unique_ptr<Device>> make_cpu_devices(int devices, const std::vector<int>& cores) {
  const int n = static_cast<int>(cores.size());
  if (devices < 1) fail("the number of devices must be at least 1, got {}", devices);
  if (n < devices)
    fail("--devices cpu:{} needs at least {} cores, {} given (--threads)", devices, devices, n);
  std::vector<std::unique_ptr<Device>> v;
  for (int d = 0; d < devices; ++d) {
    std::vector<int> c(cores.begin() + d * n / devices, cores.begin() + (d + 1) * n / devices);
    const int t = static_cast<int>(c.size());
    v.push_back(make_cpu_device(t, std::move(c), devices == 1 ? "cpu" : fmt::format("cpu:{}", d)));
  }
  return v;
}

}  // namespace cb
