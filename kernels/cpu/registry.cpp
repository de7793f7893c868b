// The CPU kernel table: which op has a kernel for which dtypes. An op missing here is reported
// by the executor's plan-time check (every gap at once), never discovered mid-run.
#include <array>

#include "kernels/cpu/cpu_kernels.h"

namespace cb::cpu {

namespace {
constexpr CpuKernel kKernels[] = {
    // ---- elementwise, data movement, reductions, softmax, dropout, layernorm ----
    // ---- conv, gemm, matmul, pooling, batchnorm ----
};

struct Index {
  std::array<const CpuKernel*, static_cast<size_t>(OpKind::Count)> by_op{};
  Index() {
    for (const CpuKernel& k : kKernels) by_op[static_cast<size_t>(k.op)] = &k;
  }
};
}  // namespace

KernelFn find_cpu_kernel(OpKind op, DType dtype) {
  static const Index index;
  const CpuKernel* k = index.by_op[static_cast<size_t>(op)];
  return k && (k->dtypes & type_bit(dtype)) ? k->fn : nullptr;
}

}  // namespace cb::cpu
