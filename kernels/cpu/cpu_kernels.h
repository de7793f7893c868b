// CPU kernels, one function per op (dtype dispatch inside), listed in registry.cpp with the
// dtypes each supports. A kernel only computes: it gets views and params (runtime/kernel_args.h).
#pragma once

#include "runtime/kernel_args.h"
#include "runtime/op_catalog.h"

namespace cb::cpu {

constexpr uint32_t type_bit(DType t) { return 1u << static_cast<unsigned>(t); }
constexpr uint32_t kF32 = type_bit(DType::F32), kF64 = type_bit(DType::F64);
constexpr uint32_t kFloat = kF32 | kF64;
constexpr uint32_t kInt =
    type_bit(DType::I64) | type_bit(DType::I32) | type_bit(DType::I8) | type_bit(DType::U8);
constexpr uint32_t kNumeric = kFloat | kInt;
constexpr uint32_t kAll = ~0u;  // byte-moving ops work on every dtype

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
