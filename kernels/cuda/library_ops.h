// The kernel-table entries of the library ops (Conv, ConvGrad, ConvTranspose, Gemm, MatMul) over a
// library `Lib` (library_util.h): library.cu instantiates them with cuDNN and cuBLASLt, the
// host-run build with a library that declines every call.
#pragma once

#include "kernels/cuda/launch.h"
#include "kernels/cuda/library_bf16.h"
#include "kernels/cuda/library_conv.h"
#include "kernels/cuda/library_gemm.h"

namespace cb::CB_GPU_NS::lib {

// The kernel-table entries over `Lib`: F32 and F64 (the CPU's masks); an F32 op marked bf16
// (--precision bf16) runs its products in bf16 (library_bf16.h).
template <class Lib>
struct Ops {
  using Fn = void (*)(const KernelArgs&, const GpuCtx&);
  using WsFn = size_t (*)(const KernelArgs&, const GpuCtx&);
  static void dispatch(const char* op, const KernelArgs& a, const GpuCtx& c, Fn f32, Fn f64,
                       Fn bf16) {
    switch (kernel_dtype(a)) {
      case DType::F32:
        (bf16 && bf16_marked(a) ? bf16 : f32)(a, c);
        break;
      case DType::F64:
        f64(a, c);
        break;
      default:
        unsupported_dtype(op, kernel_dtype(a));
    }
  }
  static size_t ws(const KernelArgs& a, const GpuCtx& c, WsFn plain, WsFn bf16) {
    return (bf16 && bf16_marked(a) ? bf16 : plain)(a, c);
  }

  static void Conv(const KernelArgs& a, const GpuCtx& c) {
    dispatch("Conv", a, c, conv_run<Lib, float>, conv_run<Lib, double>, conv_bf16_run<Lib>);
  }
  static void ConvGrad(const KernelArgs& a, const GpuCtx& c) {
    dispatch("ConvGrad", a, c, conv_grad_run<Lib, float>, conv_grad_run<Lib, double>,
             conv_grad_bf16_run<Lib>);
  }
  static void ConvTranspose(const KernelArgs& a, const GpuCtx& c) {
    dispatch("ConvTranspose", a, c, conv_transpose_run<Lib, float>, conv_transpose_run<Lib, double>,
             nullptr);
  }
  static void Gemm(const KernelArgs& a, const GpuCtx& c) {
    dispatch("Gemm", a, c, gemm_run<Lib, float>, gemm_run<Lib, double>, gemm_bf16_run<Lib>);
  }
  static void MatMul(const KernelArgs& a, const GpuCtx& c) {
    dispatch("MatMul", a, c, matmul_run<Lib, float>, matmul_run<Lib, double>, matmul_bf16_run<Lib>);
  }
  static size_t ConvWs(const KernelArgs& a, const GpuCtx& c) {
    return ws(a, c, conv_ws<Lib>, conv_bf16_ws<Lib>);
  }
  static size_t ConvGradWs(const KernelArgs& a, const GpuCtx& c) {
    return ws(a, c, conv_grad_ws<Lib>, conv_grad_bf16_ws<Lib>);
  }
  static size_t ConvTransposeWs(const KernelArgs& a, const GpuCtx& c) {
    return conv_transpose_ws<Lib>(a, c);
  }
  static size_t GemmWs(const KernelArgs& a, const GpuCtx& c) {
    return ws(a, c, gemm_ws<Lib>, gemm_bf16_ws<Lib>);
  }
  static size_t MatMulWs(const KernelArgs& a, const GpuCtx& c) {
    return ws(a, c, matmul_ws<Lib>, matmul_bf16_ws<Lib>);
  }
};

}  // namespace cb::CB_GPU_NS::lib
