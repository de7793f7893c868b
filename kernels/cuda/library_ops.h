// The kernel-table entries of the library ops (Conv, ConvGrad, ConvTranspose, Gemm, MatMul) over a
// library `Lib` (library_util.h): library.cu instantiates them with cuDNN and cuBLASLt, the
// host-run build with a library that declines every call.
#pragma once

#include "kernels/cuda/launch.h"
#include "kernels/cuda/library_conv.h"
#include "kernels/cuda/library_gemm.h"

namespace cb::CB_GPU_NS::lib {

// The kernel-table entries over `Lib`: F32 and F64 (the CPU's masks).
template <class Lib>
struct Ops {
#define CB_LIB_DISPATCH(NAME, RUN)                         \
  static void NAME(const KernelArgs& a, const GpuCtx& c) { \
    switch (kernel_dtype(a)) {                             \
      case DType::F32:                                     \
        RUN<Lib, float>(a, c);                             \
        break;                                             \
      case DType::F64:                                     \
        RUN<Lib, double>(a, c);                            \
        break;                                             \
      default:                                             \
        unsupported_dtype(#NAME, kernel_dtype(a));         \
    }                                                      \
  }
  CB_LIB_DISPATCH(Conv, conv_run)
  CB_LIB_DISPATCH(ConvGrad, conv_grad_run)
  CB_LIB_DISPATCH(ConvTranspose, conv_transpose_run)
  CB_LIB_DISPATCH(Gemm, gemm_run)
  CB_LIB_DISPATCH(MatMul, matmul_run)
#undef CB_LIB_DISPATCH
  static size_t ConvWs(const KernelArgs& a, const GpuCtx& c) { return conv_ws<Lib>(a, c); }
  static size_t ConvGradWs(const KernelArgs& a, const GpuCtx& c) { return conv_grad_ws<Lib>(a, c); }
  static size_t ConvTransposeWs(const KernelArgs& a, const GpuCtx& c) {
    return conv_transpose_ws<Lib>(a, c);
  }
  static size_t GemmWs(const KernelArgs& a, const GpuCtx& c) { return gemm_ws<Lib>(a, c); }
  static size_t MatMulWs(const KernelArgs& a, const GpuCtx& c) { return matmul_ws<Lib>(a, c); }
};

}  // namespace cb::CB_GPU_NS::lib
