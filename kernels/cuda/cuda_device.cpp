// The CUDA Device (cuda_device.h). One per GPU:
//   - memory: the GPU's default stream-ordered pool (cudaMallocAsync), kept by the pool once
//     freed (release threshold: unlimited), where cudaDevAttrMemoryPoolsSupported says the GPU
//     has one (some virtualised GPUs do not); else plain cudaMalloc/cudaFree. A failed
//     allocation says "out of memory" only for cudaErrorMemoryAllocation, else names the error;
//   - streams: kSyncStream (the synchronisation stream: SMA's fused update, the all-reduce,
//     evaluation) and one per learner from create_stream(), each with its own cuBLASLt and cuDNN
//     handles (GpuCtx) so learners never share a library handle;
//   - events: a ring of reusable CUDA events (ids map to slots), for record_event/wait_event; a
//     slot remembers the id last recorded in it, and waiting on an id whose slot was recorded
//     again since waits for the whole device instead (correct, only slower);
//   - copies: through two pinned staging buffers per stream, so an upload returns once the host
//     bytes are in pinned memory and the copy overlaps the stream's compute (runtime/device.h's
//     contract); a staging buffer is reused only after the copy that read it has completed (an
//     event per buffer).
//   - errors: each stream has a device-side error flag (device_error.h: a claim word in device
//     memory, the record in mapped pinned host memory) that kernels set on a bad input value;
//     synchronize() and download() read the record after the stream is idle (no copy: it is
//     host memory), clear it and throw the CPU kernels' message.
// At creation each device prints one line on stderr: the GPU, the driver, the CUDA runtime,
// cuDNN, cuBLASLt and NCCL versions and whether memory pools are used (the first thing to read
// when a GPU run goes wrong).
// Every entry point first makes this GPU current on the calling thread (cudaSetDevice is cheap
// and thread-local): a learner's thread may drive streams of several devices.
#include "kernels/cuda/cuda_device.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <nccl.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>

#include "kernels/cuda/launch.h"
#include "runtime/error.h"

namespace cb {

std::string cublaslt_load_error();  // cublaslt_lazy.cpp

using cuda::check_cuda;

bool cuda_backend_built() { return true; }

bool cuda_kernel_exists(OpKind op, DType dtype) {
  return cuda::find_gpu_kernel(op, dtype) != nullptr;
}

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) {
      if (e == cudaErrorInsufficientDriver)
        *why = fmt::format(
            "no GPU found: no NVIDIA driver is loaded, or it is older than this CUDA runtime "
            "({}.{}) needs ({})",
            CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, cudaGetErrorName(e));
      else if (e == cudaErrorNoDevice || e == cudaSuccess)
        *why = "no GPU found: the NVIDIA driver reports no CUDA device";
      else
        *why = fmt::format("no GPU found: {} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
    }
    (void)cudaGetLastError();  // clear the sticky error of a failed probe
    return 0;
  }
  return n;
}

namespace {

void check_dnn(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) fail("cuDNN: {} failed: {}", what, cudnnGetErrorString(s));
}

constexpr size_t kStagingChunk = size_t{8} << 20;  // bytes per pinned staging buffer
constexpr size_t kEventRing = 4096;

// "13.0" from CUDA's 13000.
std::string cuda_version_str(int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); }

// The library versions this process runs with (not the headers'): one line per device.
std::string versions_line(int ordinal, const cudaDeviceProp& prop, bool pools) {
  int driver = 0, runtime = 0, nccl = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  const size_t dnn = cudnnGetVersion();    // 9.19.0 is 91900
  const size_t lt = cublasLtGetVersion();  // 0 where libcublasLt cannot be loaded
  const std::string nccl_str =
      ncclGetVersion(&nccl) == ncclSuccess
          ? fmt::format("{}.{}.{}", nccl / 10000, nccl / 100 % 100, nccl % 100)
          : std::string("?");
  std::string line = fmt::format(
      "cuda:{}: {} (sm_{}{}, {} SMs, {:.1f} GiB), driver {}, CUDA runtime {}, cuDNN {}.{}.{}, "
      "cuBLASLt {}, NCCL {}, memory {}",
      ordinal, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
      static_cast<double>(prop.totalGlobalMem) / (1 << 30), cuda_version_str(driver),
      cuda_version_str(runtime), dnn / 10000, dnn / 100 % 100, dnn % 100,
      lt ? fmt::format("{}.{}.{}", lt / 10000, lt / 100 % 100, lt % 100)
         : "not loaded (" + cublaslt_load_error() + ")",
      nccl_str, pools ? "pool (cudaMallocAsync)" : "cudaMalloc (no memory pools on this GPU)");
  // Convolution graphs are built without a cuDNN handle (heuristics read the GPU from a
  // device-properties descriptor), which older cuDNN 9 releases refuse: every convolution would
  // then decline to the direct kernels.
  if (dnn < 90800) line += "; cuDNN older than 9.8: convolutions may decline to the direct kernels";
  return line;
}

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, const CudaOptions& opt) : ordinal_(ordinal), opt_(opt) {
    std::string why;
    const int n = cuda_device_count(&why);
    if (n == 0) fail("cuda:{}: {}", ordinal, why);
    if (ordinal < 0 || ordinal >= n)
      fail("cuda:{}: no such GPU (this machine has {}: cuda:0 to cuda:{})", ordinal, n, n - 1);
    check_cuda(cudaSetDevice(ordinal_), "cudaSetDevice");
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, ordinal_), "cudaGetDeviceProperties");
    gpu_name_ = prop.name;
    sm_count_ = prop.multiProcessorCount;
    cc_major_ = prop.major;
    cc_minor_ = prop.minor;
    int pools = 0;
    if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, ordinal_) != cudaSuccess)
      pools = 0;
    (void)cudaGetLastError();
    pools_ = pools != 0;
    if (pools_) {
      cudaMemPool_t pool{};
      check_cuda(cudaDeviceGetDefaultMemPool(&pool, ordinal_), "cudaDeviceGetDefaultMemPool");
      uint64_t keep = UINT64_MAX;  // freed blocks stay in the pool for the next allocation
      check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
                 "cudaMemPoolSetAttribute");
    }
    std::fprintf(stderr, "crossbow: %s\n", versions_line(ordinal_, prop, pools_).c_str());
    for (auto& id : slot_id_) id.store(0);
    for (auto& e : events_)
      check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    streams_[kSyncStream] = make_stream();
  }

  ~CudaDevice() override {
    cudaSetDevice(ordinal_);
    cudaDeviceSynchronize();
    for (auto& [id, s] : streams_) free_stream(*s);
    for (auto& e : events_) cudaEventDestroy(e);
  }

  DeviceCaps caps() const override {
    cudaSetDevice(ordinal_);
    DeviceCaps c;
    c.name = fmt::format("cuda:{}", ordinal_);
    c.host_memory = false;
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
      c.memory_total = static_cast<int64_t>(total);
      c.memory_free = static_cast<int64_t>(free);
    }
    c.cores = sm_count_;
    // bf16 tensor cores (cuDNN's bf16 convolutions, cuBLASLt's bf16 GEMMs) from Ampere on.
    c.bf16 = cc_major_ >= 8;
    if (!c.bf16)
      c.bf16_why = fmt::format(
          "{} (sm_{}{}) has no bf16 tensor cores (they start with compute capability 8.0)",
          gpu_name_, cc_major_, cc_minor_);
    return c;
  }

  void* allocate(size_t bytes) override {
    cudaSetDevice(ordinal_);
    StreamState& s = state(kSyncStream);
    void* p = nullptr;
    const size_t n = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
    const char* call = pools_ ? "cudaMallocAsync" : "cudaMalloc";
    cudaError_t e = pools_ ? cudaMallocAsync(&p, n, s.stream) : cudaMalloc(&p, n);
    if (e == cudaSuccess) {
      call = "cudaMemsetAsync";
      e = cudaMemsetAsync(p, 0, n, s.stream);
    }
    if (e == cudaSuccess) {
      call = "cudaStreamSynchronize (after the allocation)";
      e = cudaStreamSynchronize(s.stream);
    }
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      if (e != cudaErrorMemoryAllocation)
        fail("cuda:{} ({}): allocating {} bytes failed in {}: {} ({})", ordinal_, gpu_name_, bytes,
             call, cudaGetErrorString(e), cudaGetErrorName(e));
      fail(
          "out of memory on cuda:{} ({}): allocating {} bytes ({:.1f} MiB) failed: {}; {:.1f} "
          "MiB of {:.1f} MiB free. Lower the batch size or the number of learners",
          ordinal_, gpu_name_, bytes, static_cast<double>(bytes) / (1 << 20), cudaGetErrorString(e),
          static_cast<double>(free) / (1 << 20), static_cast<double>(total) / (1 << 20));
    }
    return p;
  }

  void release(void* p) noexcept override {
    if (!p) return;
    cudaSetDevice(ordinal_);
    // Work of any stream may still read p: wait for the device, then return it to the pool.
    // (A free happens when arenas are resized or at the end, not per step.)
    cudaDeviceSynchronize();
    if (pools_)
      cudaFreeAsync(p, state(kSyncStream).stream);
    else
      cudaFree(p);
  }

  void upload(void* dst, const void* src, size_t n, Stream stream) override {
    if (n == 0) return;
    cudaSetDevice(ordinal_);
    StreamState& s = state(stream);
    std::lock_guard<std::mutex> l(s.copy_mu);
    const auto* from = static_cast<const std::byte*>(src);
    auto* to = static_cast<std::byte*>(dst);
    for (size_t done = 0; done < n;) {
      const size_t k = std::min(kStagingChunk, n - done);
      Staging& st = s.staging[s.next_staging];
      s.next_staging ^= 1;
      check_cuda(cudaEventSynchronize(st.done), "cudaEventSynchronize (staging)");
      std::memcpy(st.host, from + done, k);
      check_cuda(cudaMemcpyAsync(to + done, st.host, k, cudaMemcpyHostToDevice, s.stream),
                 "cudaMemcpyAsync (upload)");
      check_cuda(cudaEventRecord(st.done, s.stream), "cudaEventRecord (staging)");
      done += k;
    }
  }

  void download(void* dst, const void* src, size_t n, Stream stream) override {
    if (n == 0) return;
    cudaSetDevice(ordinal_);
    StreamState& s = state(stream);
    std::lock_guard<std::mutex> l(s.copy_mu);
    auto* to = static_cast<std::byte*>(dst);
    const auto* from = static_cast<const std::byte*>(src);
    for (size_t done = 0; done < n;) {
      const size_t k = std::min(kStagingChunk, n - done);
      Staging& st = s.staging[s.next_staging];
      s.next_staging ^= 1;
      check_cuda(cudaEventSynchronize(st.done), "cudaEventSynchronize (staging)");
      check_cuda(cudaMemcpyAsync(st.host, from + done, k, cudaMemcpyDeviceToHost, s.stream),
                 "cudaMemcpyAsync (download)");
      check_cuda(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize (download)");
      std::memcpy(to + done, st.host, k);
      done += k;
    }
    raise_reported(s);
  }

  Stream create_stream(int slot, int slots) override {
    CB_CHECK(slots >= 1 && slot >= 0 && slot < slots);
    cudaSetDevice(ordinal_);
    auto s = make_stream();
    std::lock_guard<std::mutex> l(mu_);
    const Stream id = next_stream_++;
    streams_[id] = std::move(s);
    return id;
  }

  void destroy_stream(Stream stream) override {
    CB_CHECK(stream != kSyncStream);
    cudaSetDevice(ordinal_);
    std::unique_ptr<StreamState> s;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = streams_.find(stream);
      CB_CHECK(it != streams_.end());
      s = std::move(it->second);
      streams_.erase(it);
    }
    cudaStreamSynchronize(s->stream);
    free_stream(*s);
  }

  void synchronize(Stream stream) override {
    cudaSetDevice(ordinal_);
    StreamState& s = state(stream);
    const cudaError_t e = cudaStreamSynchronize(s.stream);
    if (e != cudaSuccess)
      fail("cuda:{}: a kernel failed: {} ({}); rerun with CUDA_LAUNCH_BLOCKING=1 to find which",
           ordinal_, cudaGetErrorString(e), cudaGetErrorName(e));
    raise_reported(s);
  }

  Event record_event(Stream stream) override {
    cudaSetDevice(ordinal_);
    const uint64_t id = ++event_count_;
    check_cuda(cudaEventRecord(events_[id % kEventRing], state(stream).stream), "cudaEventRecord");
    slot_id_[id % kEventRing].store(id);
    return Event{id};
  }

  // A slot of the ring may have been recorded again since `e` (after kEventRing more events, on
  // any stream): waiting on the slot would then wait for another point, not `e`'s. The work
  // before `e` was enqueued before that later record, so waiting for the whole device covers it.
  void wait_event(Stream stream, Event e) override {
    if (e.id == 0) return;
    cudaSetDevice(ordinal_);
    if (slot_id_[e.id % kEventRing].load() != e.id) {
      check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (event slot reused)");
      return;
    }
    check_cuda(cudaStreamWaitEvent(state(stream).stream, events_[e.id % kEventRing], 0),
               "cudaStreamWaitEvent");
  }

  bool supports(OpKind op, DType t) const override {
    return cuda::find_gpu_kernel(op, t) != nullptr;
  }

  size_t workspace_bytes(OpKind op, const KernelArgs& a) const override {
    const cuda::GpuKernel* k = cuda::find_gpu_kernel(op, kernel_dtype(a));
    if (!k || !k->workspace) return 0;
    cudaSetDevice(ordinal_);
    return k->workspace(a, const_cast<CudaDevice*>(this)->state(kSyncStream).ctx);
  }

  int ordinal() const { return ordinal_; }
  void* native_stream(Stream stream) { return state(stream).stream; }

  void launch(OpKind op, KernelArgs& a, Stream stream) override {
    const cuda::GpuKernel* k = cuda::find_gpu_kernel(op, kernel_dtype(a));
    CB_CHECK(k);  // the executor checked coverage before step 0
    cudaSetDevice(ordinal_);
    k->fn(a, state(stream).ctx);
  }

 private:
  struct Staging {
    void* host = nullptr;  // pinned, kStagingChunk bytes
    cudaEvent_t done{};    // the last copy that used it
  };
  struct StreamState {
    cudaStream_t stream{};
    cublasLtHandle_t lt{};
    cudnnHandle_t dnn{};
    cuda::GpuCtx ctx;
    unsigned int* error_claim = nullptr;              // device memory
    cuda::DeviceErrorRecord* error_record = nullptr;  // pinned, mapped into the device
    std::mutex copy_mu;
    std::array<Staging, 2> staging;
    int next_staging = 0;
  };

  std::unique_ptr<StreamState> make_stream() {
    auto s = std::make_unique<StreamState>();
    check_cuda(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    if (cublasLtCreate(&s->lt) != CUBLAS_STATUS_SUCCESS) {
      const std::string why = cublaslt_load_error();
      fail("cuda:{}: cuBLASLt: cublasLtCreate failed{}", ordinal_,
           why.empty() ? std::string()
                       : ": " + why +
                             " (put the CUDA toolkit's lib64 on the "
                             "library path)");
    }
    check_dnn(cudnnCreate(&s->dnn), "cudnnCreate");
    check_dnn(cudnnSetStream(s->dnn, s->stream), "cudnnSetStream");
    for (Staging& st : s->staging) {
      check_cuda(cudaMallocHost(&st.host, kStagingChunk), "cudaMallocHost (staging)");
      check_cuda(cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming), "cudaEventCreate");
    }
    void* claim = nullptr;
    check_cuda(cudaMalloc(&claim, sizeof(unsigned int)), "cudaMalloc (error flag)");
    s->error_claim = static_cast<unsigned int*>(claim);
    check_cuda(cudaMemset(s->error_claim, 0, sizeof(unsigned int)), "cudaMemset (error flag)");
    void* record = nullptr;
    check_cuda(cudaHostAlloc(&record, sizeof(cuda::DeviceErrorRecord), cudaHostAllocMapped),
               "cudaHostAlloc (error record)");
    s->error_record = new (record) cuda::DeviceErrorRecord{};
    void* record_dev = nullptr;
    check_cuda(cudaHostGetDevicePointer(&record_dev, record, 0),
               "cudaHostGetDevicePointer (error record)");
    s->ctx.stream = s->stream;
    s->ctx.blas_lt = s->lt;
    s->ctx.dnn = s->dnn;
    s->ctx.device = ordinal_;
    s->ctx.sm_count = sm_count_;
    s->ctx.allow_tf32 = opt_.tf32;
    s->ctx.deterministic = opt_.deterministic;
    s->ctx.error = {s->error_claim, static_cast<cuda::DeviceErrorRecord*>(record_dev)};
    return s;
  }

  // The first bad input value a kernel of this stream reported (device_error.h), as the CPU
  // kernels' cb::Error; the flag is cleared first. Call with the stream idle: the record is
  // then complete and visible in host memory.
  void raise_reported(StreamState& s) {
    volatile const uint32_t* code = &s.error_record->code;
    if (*code == 0) return;
    const std::string msg = cuda::device_error_message(*s.error_record);
    *s.error_record = cuda::DeviceErrorRecord{};
    check_cuda(cudaMemsetAsync(s.error_claim, 0, sizeof(unsigned int), s.stream),
               "cudaMemsetAsync (error flag)");
    throw Error(msg);
  }

  static void free_stream(StreamState& s) {
    for (Staging& st : s.staging) {
      cudaEventDestroy(st.done);
      cudaFreeHost(st.host);
    }
    cudaFree(s.error_claim);
    cudaFreeHost(s.error_record);
    cudnnDestroy(s.dnn);
    cublasLtDestroy(s.lt);
    cudaStreamDestroy(s.stream);
  }

  StreamState& state(Stream stream) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = streams_.find(stream);
    CB_CHECK(it != streams_.end());
    return *it->second;
  }

  const int ordinal_;
  const CudaOptions opt_;
  std::string gpu_name_;
  int cc_major_ = 0, cc_minor_ = 0;
  int sm_count_ = 1;
  bool pools_ = false;  // cudaMallocAsync from the default pool (else cudaMalloc)
  std::mutex mu_;       // streams_
  std::map<Stream, std::unique_ptr<StreamState>> streams_;
  Stream next_stream_ = 1;
  std::array<cudaEvent_t, kEventRing> events_{};
  std::array<std::atomic<uint64_t>, kEventRing> slot_id_;  // the id last recorded in each slot
  std::atomic<uint64_t> event_count_{0};
};

// For the NCCL collective (nccl_collective.cpp): the CUDA side of a device made here.
CudaDevice& as_cuda(Device& dev) {
  auto* d = dynamic_cast<CudaDevice*>(&dev);
  if (!d)
    fail("{} is not a CUDA device: NCCL collectives need the devices of --devices cuda",
         dev.caps().name);
  return *d;
}

}  // namespace

void* cuda_stream_handle(Device& dev, Stream stream) { return as_cuda(dev).native_stream(stream); }
int cuda_ordinal(Device& dev) { return as_cuda(dev).ordinal(); }

std::unique_ptr<Device> make_cuda_device(int ordinal, const CudaOptions& options) {
  return std::make_unique<CudaDevice>(ordinal, options);
}

}  // namespace cb
