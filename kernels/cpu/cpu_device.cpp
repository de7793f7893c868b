// The CPU backend of the Device interface: host memory, synchronous launches on a thread pool.
// Events are trivially complete because every launch finishes before launch() returns.
#include <sys/sysinfo.h>

#include <cstdlib>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/thread_pool.h"

namespace cb {

namespace {
class CpuDevice final : public Device {
 public:
  CpuDevice(int threads, std::vector<int> cores) : pool_(threads, std::move(cores)) {}

  DeviceCaps caps() const override {
    DeviceCaps c;
    c.name = "cpu";
    c.host_memory = true;
    struct sysinfo si {};
    if (sysinfo(&si) == 0) {
      c.memory_total = static_cast<int64_t>(si.totalram) * si.mem_unit;
      c.memory_free = static_cast<int64_t>(si.freeram + si.bufferram) * si.mem_unit;
    }
    c.cores = pool_.size();
    return c;
  }
  void* allocate(size_t bytes) override {
    size_t n = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, n);
    if (!p)
      fail(
          "out of memory on cpu: allocating {} bytes ({:.1f} MiB) failed; lower the batch size "
          "or the number of learners",
          bytes, static_cast<double>(bytes) / (1 << 20));
    std::memset(p, 0, n);
    return p;
  }
  void release(void* p) noexcept override { std::free(p); }
  // n == 0 may come with null pointers (an empty tensor), which memcpy must not be given.
  void upload(void* dst, const void* src, size_t n) override {
    if (n > 0) std::memcpy(dst, src, n);
  }
  void download(void* dst, const void* src, size_t n) override {
    if (n > 0) std::memcpy(dst, src, n);
  }
  void synchronize() override {}
  uint64_t record_event() override { return ++events_; }
  void wait_event(uint64_t) override {}
  bool supports(OpKind op, DType t) const override {
    return cpu::find_cpu_kernel(op, t) != nullptr;
  }
  void launch(OpKind op, KernelArgs& args) override {
    KernelFn fn = cpu::find_cpu_kernel(op, kernel_dtype(args));
    CB_CHECK(fn);  // the executor checked coverage before step 0
    args.pool = &pool_;
    fn(args);
  }

 private:
  ThreadPool pool_;
  uint64_t events_ = 0;
};
}  // namespace

std::unique_ptr<Device> make_cpu_device(int threads, std::vector<int> cores) {
  return std::make_unique<CpuDevice>(threads, std::move(cores));
}

}  // namespace cb
