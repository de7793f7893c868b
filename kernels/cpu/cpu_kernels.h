// CPU kernels, one function per op (dtype dispatch inside), listed in registry.cpp with the
// dtypes each supports. A kernel only computes: it gets views and params (runtime/kernel_args.h).
#pragma once

#include "runtime/kernel_args.h"
#include "runtime/op_catalog.h"

namespace cb::cpu {

using dtypes::kAll;
using dtypes::kF32;
using dtypes::kF64;
using dtypes::kFloat;
using dtypes::kInt;
using dtypes::kNumeric;
using dtypes::type_bit;

struct CpuKernel {
  OpKind op;
  KernelFn fn;
  uint32_t dtypes;  // dtypes of input 0 this kernel accepts
};

// The kernel of `op` for `dtype`, or nullptr.
KernelFn find_cpu_kernel(OpKind op, DType dtype);

// ---- elementwise, data movement, reductions, softmax, dropout, layernorm ----
// (declared by the files that define them; see registry.cpp)
#define CB_CPU_KERNEL_DECL(n) void n(const KernelArgs& a);
CB_OPS(CB_CPU_KERNEL_DECL)
#undef CB_CPU_KERNEL_DECL

}  // namespace cb::cpu
