// The CUDA backend's kernel layer: what every kernel file in kernels/cuda/ is written against.
//
// One source, two builds. Each kernel file (kernels/cuda/*.cu) is compiled
//   - by nvcc into the CUDA backend (cb_kernels_cuda, namespace cb::cuda): parallel_for() and
//     segmented_reduce() launch grid-stride / block-per-row kernels on the learner's stream;
//   - by the host C++ compiler into the host-run build of the same kernels (cb_kernels_cuda_host,
//     namespace cb::cuda_host, CB_GPU_HOST_RUN): the same bodies run as plain loops on host
//     memory. The op harness runs that build against the CPU backend on every machine, so the
//     indexing, broadcasting and dtype logic of every CUDA kernel is tested without a GPU; the
//     nvcc build adds only the launch, which the harness checks where a GPU is present.
// Kernel bodies are CB_HOST_DEVICE lambdas or functors that capture only PODs (pointers, the
// fixed-size Dims below, params structs, which are trivially copyable): never a std::vector or a
// TensorView. Library calls (cuBLASLt, cuDNN) exist only in the nvcc build (library*.cu); the
// host-run build runs those ops on the backend's fallback kernels (library_host_run.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "kernels/common/scalar_math.h"
#include "kernels/cuda/device_error.h"
#include "runtime/error.h"
#include "runtime/kernel_args.h"
#include "runtime/op_catalog.h"
#include "runtime/small_vec.h"

#if defined(__CUDACC__) && !defined(CB_GPU_HOST_RUN)
#include <cuda_runtime.h>
#define CB_GPU_DEVICE_CODE 1
#endif

#ifndef CB_GPU_NS
#error "CB_GPU_NS must be defined by the build: cuda (nvcc build) or cuda_host (host-run build)"
#endif

namespace cb::CB_GPU_NS {

using namespace cb::dtypes;

// What a kernel gets besides its KernelArgs: the learner's stream and its library handles
// (opaque here so that this header compiles without the CUDA headers).
struct GpuCtx {
  void* stream = nullptr;   // cudaStream_t
  void* blas_lt = nullptr;  // cublasLtHandle_t
  void* dnn = nullptr;      // cudnnHandle_t
  int device = 0;           // the CUDA device ordinal
  int sm_count = 1;
  bool allow_tf32 = false;  // cb-train --tf32: cuBLASLt and cuDNN may use TF32 tensor cores
  // cb-train --deterministic: no kernel sums in an order that changes from run to run (the
  // gradients that scatter with atomic adds gather instead; cuDNN engines noted
  // NONDETERMINISTIC are not used).
  bool deterministic = false;
  DeviceErrorFlag error;  // where kernels report bad input values (device_error.h)
  // Host-run build only: parallel_for runs its indices last to first, as a GPU's threads may run
  // in any order (the tests' way to see whether a kernel's result depends on that order).
  bool host_reverse = false;
  // Host-run build only: CudaOptions::host_run_bf16_library (library_host_run.cpp).
  bool host_bf16_library = false;
};

using GpuKernelFn = void (*)(const KernelArgs&, const GpuCtx&);
// Workspace bytes the kernel wants for these views (nullptr: none).
using GpuWorkspaceFn = size_t (*)(const KernelArgs&, const GpuCtx&);

struct GpuKernel {
  OpKind op;
  GpuKernelFn fn;
  uint32_t dtypes;  // dtypes of input 0 (kernel_dtype) it accepts
  GpuWorkspaceFn workspace = nullptr;
};

// The kernel tables of the kernel files (each returns its own entries).
std::span<const GpuKernel> elementwise_kernels();         // elementwise.cu
std::span<const GpuKernel> data_movement_kernels();       // data_movement.cu
std::span<const GpuKernel> data_movement_grad_kernels();  // data_movement_grad.cu
std::span<const GpuKernel> resize_kernels();              // resize.cu (Resize, Upsample, grad)
std::span<const GpuKernel> reduce_kernels();              // reduce.cu (reductions, softmax, losses)
std::span<const GpuKernel> masked_softmax_kernels();      // masked_softmax.cu (attention's)
std::span<const GpuKernel> norm_kernels();                // norm.cu (BatchNorm, LayerNorm)
std::span<const GpuKernel> pool_kernels();                // pool.cu (pooling and its gradients)
std::span<const GpuKernel> optimizer_kernels();           // optimizer.cu (SGD, AdamW, SMA)
std::span<const GpuKernel> dropout_kernels();             // dropout.cu
std::span<const GpuKernel> library_kernels();  // library*.cu (cuDNN conv, cuBLASLt; nvcc only)

// The kernel of `op` for `dtype` in this build, or nullptr.
const GpuKernel* find_gpu_kernel(OpKind op, DType dtype);

// Throws cb::Error naming `what` when a CUDA call failed (err: a cudaError_t; 0 is success).
void check_cuda(int err, const char* what);
// Throws cb::Error: `op` has no kernel for dtype `t` in this backend.
[[noreturn]] void unsupported_dtype(const char* op, DType t);

// ---- fixed-size shapes that device code can capture ---------------------------------------------
struct Dims {
  int rank = 0;
  int64_t d[kMaxRank] = {};

  CB_HOST_DEVICE int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= d[i];
    return n;
  }
  CB_HOST_DEVICE int64_t operator[](int i) const { return d[i]; }
};

inline Dims dims_of(const std::vector<int64_t>& v) {
  Dims r;
  r.rank = static_cast<int>(v.size());
  for (size_t i = 0; i < v.size() && i < kMaxRank; ++i) r.d[i] = v[i];
  return r;
}

// Row-major strides of `dims`.
inline Dims contiguous_strides(const Dims& dims) {
  Dims s;
  s.rank = dims.rank;
  int64_t st = 1;
  for (int i = dims.rank - 1; i >= 0; --i) {
    s.d[i] = st;
    st *= dims.d[i];
  }
  return s;
}

// Strides of an input of dims `in` read at the indices of an output of dims `out` under numpy
// broadcasting (`in` right-aligned; broadcast axes get stride 0). Rank of the result: out.rank.
inline Dims broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  Dims s;
  s.rank = static_cast<int>(out.size());
  const int off = static_cast<int>(out.size() - in.size());
  int64_t st = 1;
  for (int i = static_cast<int>(out.size()) - 1; i >= 0; --i) {
    const int j = i - off;
    if (j < 0) {
      s.d[i] = 0;
      continue;
    }
    const int64_t n = in[static_cast<size_t>(j)];
    s.d[i] = n == 1 ? 0 : st;
    st *= n;
  }
  return s;
}

// The offset of flat output index `i` (row-major over `out`) in a tensor with `strides`.
CB_HOST_DEVICE inline int64_t offset_of(int64_t i, const Dims& out, const Dims& strides) {
  int64_t off = 0;
  for (int k = out.rank - 1; k >= 0; --k) {
    const int64_t n = out.d[k];
    const int64_t c = n > 0 ? i % n : 0;
    i = n > 0 ? i / n : 0;
    off += c * strides.d[k];
  }
  return off;
}

// ---- launches -----------------------------------------------------------------------------------
#if defined(CB_GPU_DEVICE_CODE)
template <class F>
__global__ void for_each_index_kernel(int64_t n, F f) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    f(i);
}

template <class T, class Load, class Combine, class Store>
__global__ void block_reduce_kernel(int64_t n_out, int64_t n_red, T init, Load load, Combine comb,
                                    Store store) {
  extern __shared__ __align__(16) unsigned char cb_reduce_smem[];
  T* sm = reinterpret_cast<T*>(cb_reduce_smem);
  for (int64_t o = blockIdx.x; o < n_out; o += gridDim.x) {
    T acc = init;
    for (int64_t j = threadIdx.x; j < n_red; j += blockDim.x) acc = comb(acc, load(o, j));
    sm[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) sm[threadIdx.x] = comb(sm[threadIdx.x], sm[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) store(o, sm[0]);
    __syncthreads();
  }
}
#endif

// f(i) for every i in [0, n), in any order and concurrently: each i must write its own outputs.
template <class F>
void parallel_for(const GpuCtx& c, int64_t n, F f) {
  if (n <= 0) return;
#if defined(CB_GPU_DEVICE_CODE)
  constexpr int kBlock = 256;
  const int64_t blocks = std::min<int64_t>((n + kBlock - 1) / kBlock, int64_t{c.sm_count} * 32);
  for_each_index_kernel<<<static_cast<unsigned>(blocks), kBlock, 0,
                          static_cast<cudaStream_t>(c.stream)>>>(n, f);
  check_cuda(static_cast<int>(cudaGetLastError()), "parallel_for launch");
#else
  if (c.host_reverse)
    for (int64_t i = n - 1; i >= 0; --i) f(i);
  else
    for (int64_t i = 0; i < n; ++i) f(i);
#endif
}

// For every o in [0, n_out): store(o, comb(...comb(comb(init, load(o, 0)), load(o, 1))...,
// load(o, n_red - 1))), the combination in any order and grouping (comb must be associative and
// commutative, up to rounding). The GPU runs one thread per o when rows are short, or many and
// not long (a thread then walks at most kSerialRow elements); else a block of threads per o (a
// tree in shared memory), so a long row is never summed by one thread. (A few very long rows
// still use only as many blocks as rows: splitting a row across blocks would need a second pass.)
template <class T, class Load, class Combine, class Store>
void segmented_reduce(const GpuCtx& c, int64_t n_out, int64_t n_red, T init, Load load,
                      Combine comb, Store store) {
  if (n_out <= 0) return;
#if defined(CB_GPU_DEVICE_CODE)
  constexpr int64_t kSerialRow = 1024;
  if (n_red <= 64 || (n_out >= int64_t{c.sm_count} * 64 && n_red <= kSerialRow)) {
    parallel_for(c, n_out, [=] __device__(int64_t o) {
      T acc = init;
      for (int64_t j = 0; j < n_red; ++j) acc = comb(acc, load(o, j));
      store(o, acc);
    });
    return;
  }
  constexpr int kBlock = 256;
  const int64_t blocks = std::min<int64_t>(n_out, int64_t{c.sm_count} * 16);
  block_reduce_kernel<<<static_cast<unsigned>(blocks), kBlock, kBlock * sizeof(T),
                        static_cast<cudaStream_t>(c.stream)>>>(n_out, n_red, init, load, comb,
                                                               store);
  check_cuda(static_cast<int>(cudaGetLastError()), "segmented_reduce launch");
#else
  for (int64_t o = 0; o < n_out; ++o) {
    T acc = init;
    for (int64_t j = 0; j < n_red; ++j) acc = comb(acc, load(o, j));
    store(o, acc);
  }
#endif
}

// *p += v, atomically on the GPU (float and double; for scatter-adds such as GatherGrad).
template <class T>
CB_HOST_DEVICE inline void atomic_add(T* p, T v) {
#if defined(__CUDA_ARCH__)
  atomicAdd(p, v);
#else
  *p += v;
#endif
}

// ---- small kernel helpers -----------------------------------------------------------------------
// Sum of doubles, for segmented_reduce.
struct AddD {
  CB_HOST_DEVICE double operator()(double x, double y) const { return x + y; }
};

// Output i as T*, or nullptr when it is absent.
template <class T>
T* out_ptr(const KernelArgs& a, size_t i) {
  return a.out.size() > i && a.out[i].present() ? a.out[i].ptr<T>() : nullptr;
}

// The workspace as T*, after checking that the caller gave the bytes `ws` asks for.
template <class T>
T* workspace_of(const KernelArgs& a, const GpuCtx& c, GpuWorkspaceFn ws, const char* op) {
  const size_t need = ws(a, c);
  if (need > 0 && (!a.workspace || a.workspace_bytes < need))
    fail("{}: needs a workspace of {} bytes, got {}", op, need,
         a.workspace ? a.workspace_bytes : size_t{0});
  return static_cast<T*>(a.workspace);
}

// ---- copies on the kernel's stream --------------------------------------------------------------
// Device -> device (or host-run: memcpy). bytes may be 0 with null pointers.
inline void copy_device(const GpuCtx& c, void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
#if defined(CB_GPU_DEVICE_CODE)
  check_cuda(static_cast<int>(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                              static_cast<cudaStream_t>(c.stream))),
             "cudaMemcpyAsync (device to device)");
#else
  std::memmove(dst, src, bytes);
#endif
}

// Host memory -> device, ordered on the stream; `src` may be freed when this returns.
inline void copy_from_host(const GpuCtx& c, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
#if defined(CB_GPU_DEVICE_CODE)
  // Pageable source: CUDA stages it before returning, so `src` can go away afterwards.
  check_cuda(static_cast<int>(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                              static_cast<cudaStream_t>(c.stream))),
             "cudaMemcpyAsync (host to device)");
#else
  std::memcpy(dst, src, bytes);
#endif
}

inline void fill_zero(const GpuCtx& c, void* dst, size_t bytes) {
  if (bytes == 0) return;
#if defined(CB_GPU_DEVICE_CODE)
  check_cuda(static_cast<int>(cudaMemsetAsync(dst, 0, bytes, static_cast<cudaStream_t>(c.stream))),
             "cudaMemsetAsync");
#else
  std::memset(dst, 0, bytes);
#endif
}

// Calls fn<T>(args...) with T the C++ type of dtype `t`; any other dtype throws naming `op`.
// (A macro, not a generic lambda: nvcc allows no device lambda inside a generic lambda.)
// F16/BF16 (uint16_t storage) and Bool (uint8_t) are the caller's to handle before these.
#define CB_GPU_DISPATCH_FLOAT(t, op, fn, ...)    \
  switch (t) {                                   \
    case ::cb::DType::F32:                       \
      fn<float>(__VA_ARGS__);                    \
      break;                                     \
    case ::cb::DType::F64:                       \
      fn<double>(__VA_ARGS__);                   \
      break;                                     \
    default:                                     \
      ::cb::CB_GPU_NS::unsupported_dtype(op, t); \
  }
#define CB_GPU_DISPATCH_NUMERIC(t, op, fn, ...)  \
  switch (t) {                                   \
    case ::cb::DType::F32:                       \
      fn<float>(__VA_ARGS__);                    \
      break;                                     \
    case ::cb::DType::F64:                       \
      fn<double>(__VA_ARGS__);                   \
      break;                                     \
    case ::cb::DType::I64:                       \
      fn<int64_t>(__VA_ARGS__);                  \
      break;                                     \
    case ::cb::DType::I32:                       \
      fn<int32_t>(__VA_ARGS__);                  \
      break;                                     \
    case ::cb::DType::I8:                        \
      fn<int8_t>(__VA_ARGS__);                   \
      break;                                     \
    case ::cb::DType::U8:                        \
      fn<uint8_t>(__VA_ARGS__);                  \
      break;                                     \
    default:                                     \
      ::cb::CB_GPU_NS::unsupported_dtype(op, t); \
  }

}  // namespace cb::CB_GPU_NS
