// The library ops' own logic (kernels/cuda/library.cu): what surrounds the cuDNN and cuBLASLt
// calls, written against launch.h so that it compiles in both builds. library.cu instantiates it
// with the libraries (CudaLib); anything else that provides the same four calls (a `Lib`) can run
// it, e.g. the host-run build (library_host_run.cpp), whose "library" declines every call so that
// the direct kernels run. This file: the `Lib` contract and the workspace helpers;
// library_conv.h: convolutions; library_gemm.h: Gemm and MatMul; library_ops.h: the kernel-table
// entries over a `Lib`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/common/geometry.h"
#include "kernels/cuda/launch.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS::lib {

// ---- the contract of a library `Lib` ------------------------------------------------------------
// Lib provides (static):
//   size_t conv_workspace(const GpuCtx&, ConvDir, const ConvShape&, DType, const void* x,
//                         const void* w, const void* y);
//   bool conv(const GpuCtx&, ConvDir, const ConvShape&, DType, void* x, void* w, void* y,
//             void* ws, size_t ws_bytes);   // false: it declines (nothing was enqueued)
//   size_t gemm_workspace(const GpuCtx&, const LtProblem&, DType, const void* a, const void* b,
//                         const void* d);
//   bool gemm(const GpuCtx&, const LtProblem&, DType, double alpha, double beta, const void* a,
//             const void* b, void* d, void* ws, size_t ws_bytes);
// The ConvShape handed to conv() is always a LibConv's (symmetric pads, g.in the X' extents).
// Pointers given to the workspace functions may be null (not yet known): assume them aligned;
// they are read only for their alignment (library_bf16.h passes stand-in addresses).
// DType::BF16 (library_bf16.h): conv's X, W and Y are all bf16; a GEMM's A and B are bf16 and
// its D f32; the products accumulate in f32.

inline const void* ws_at(const KernelArgs& a, size_t off) {
  return static_cast<const char*>(a.workspace) + off;
}
inline size_t ws_left(const KernelArgs& a, size_t off) {
  return a.workspace && a.workspace_bytes > off ? a.workspace_bytes - off : 0;
}

template <class T>
constexpr DType dtype_of() {
  return std::is_same_v<T, double> ? DType::F64 : DType::F32;
}

}  // namespace cb::CB_GPU_NS::lib
