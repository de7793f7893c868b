// The library ops of the host-run build (launch.h): there is no cuDNN or cuBLASLt on the host, so
// the library here declines every call and Conv, ConvGrad, ConvTranspose, Gemm and MatMul run on
// the CUDA backend's own fallback kernels (library_conv.h: direct convolution; library_gemm.h:
// naive GEMM), the code the GPU build takes whenever the library declines. The op harness
// (cuda-host) thereby checks those kernels and the logic around the library calls that does not
// depend on the library (bias, dB, Gemm's C, MatMul's batch decomposition) on every machine.
// One exception, for tests (CudaOptions::host_run_bf16_library): bf16 convolutions are accepted
// and run as cuDNN runs them (bf16 tensors in and out, accumulation in f64 here), so that the
// GPU's path around them (library_bf16.h: the result rounded to bf16 and converted back, dX'
// shifted back) runs on the host too.
#include "kernels/cuda/library_ops.h"

namespace cb::CB_GPU_NS {

namespace {
using namespace lib;

struct NoLibrary {
  static size_t conv_workspace(const GpuCtx&, ConvDir, const ConvShape&, DType, const void*,
                               const void*, const void*) {
    return 0;
  }
  static bool conv(const GpuCtx& c, ConvDir dir, const ConvShape& g, DType t, void* x, void* w,
                   void* y, void*, size_t) {
    if (t != DType::BF16 || !c.host_bf16_library) return false;
    auto* xb = static_cast<B16*>(x);
    auto* wb = static_cast<B16*>(w);
    auto* yb = static_cast<B16*>(y);
    switch (dir) {
      case ConvDir::Fwd:
        direct_fwd<B16, B16>(c, g, xb, wb, nullptr, yb);
        break;
      case ConvDir::BwdData:
        direct_bwd_data<B16, B16>(c, g, yb, wb, xb);
        break;
      case ConvDir::BwdFilter:
        direct_bwd_filter<B16, B16>(c, g, xb, yb, wb);
        break;
    }
    return true;
  }
  static size_t gemm_workspace(const GpuCtx&, const LtProblem&, DType, const void*, const void*,
                               const void*) {
    return 0;
  }
  static bool gemm(const GpuCtx&, const LtProblem&, DType, double, double, const void*, const void*,
                   void*, void*, size_t) {
    return false;
  }
};

using HostOps = Ops<NoLibrary>;
constexpr GpuKernel kKernels[] = {
    {OpKind::Conv, &HostOps::Conv, kFloat, &HostOps::ConvWs},
    {OpKind::ConvGrad, &HostOps::ConvGrad, kFloat, &HostOps::ConvGradWs},
    {OpKind::ConvTranspose, &HostOps::ConvTranspose, kFloat, &HostOps::ConvTransposeWs},
    {OpKind::Gemm, &HostOps::Gemm, kFloat, &HostOps::GemmWs},
    {OpKind::MatMul, &HostOps::MatMul, kFloat, &HostOps::MatMulWs},
};
}  // namespace

std::span<const GpuKernel> library_kernels() { return kKernels; }

}  // namespace cb::CB_GPU_NS
