// The CUDA backend's kernel table, built from the kernel files' own tables (launch.h). The same
// file is compiled into the nvcc build (namespace cb::cuda) and the host-run build
// (cb::cuda_host, CB_GPU_HOST_RUN), whose library ops run on the fallback kernels
// (library_host_run.cpp).
#include <array>

#include "kernels/cuda/launch.h"
#include "runtime/error.h"

#if !defined(CB_GPU_HOST_RUN)
#include <cuda_runtime.h>
#endif

namespace cb::CB_GPU_NS {

namespace {
struct Index {
  std::array<const GpuKernel*, static_cast<size_t>(OpKind::Count)> by_op{};
  Index() {
    for (auto table : {elementwise_kernels(), data_movement_kernels(), data_movement_grad_kernels(),
                       resize_kernels(), reduce_kernels(), masked_softmax_kernels(), norm_kernels(),
                       pool_kernels(), optimizer_kernels(), dropout_kernels(), library_kernels()})
      for (const GpuKernel& k : table) {
        CB_CHECK(!by_op[static_cast<size_t>(k.op)]);  // one entry per op
        by_op[static_cast<size_t>(k.op)] = &k;
      }
  }
};
}  // namespace

const GpuKernel* find_gpu_kernel(OpKind op, DType dtype) {
  static const Index index;
  const GpuKernel* k = index.by_op[static_cast<size_t>(op)];
  return k && (k->dtypes & type_bit(dtype)) ? k : nullptr;
}

void check_cuda(int err, const char* what) {
  if (err == 0) return;
#if defined(CB_GPU_HOST_RUN)
  fail("{} failed (error {})", what, err);
#else
  const auto e = static_cast<cudaError_t>(err);
  fail("CUDA: {} failed: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
#endif
}

void unsupported_dtype(const char* op, DType t) {
  fail("{}: the CUDA backend has no kernel for dtype {}", op, dtype_name(t));
}

}  // namespace cb::CB_GPU_NS
