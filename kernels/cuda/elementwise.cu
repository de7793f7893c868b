// Elementwise kernels of the CUDA backend: the functors of kernels/common/scalar_math.h (the
// CPU backend's own math) applied over numpy broadcasting, one thread per output element.
#include "kernels/common/scalar_math.h"
#include "kernels/cuda/launch.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS {

namespace {

// y[i] = op(x[i]) over the output's elements (same shape).
template <class T, class Op>
void unary(const KernelArgs& a, const GpuCtx& c, Op op) {
  const T* x = a.in[0].ptr<T>();
  T* y = a.out[0].ptr<T>();
  parallel_for(c, a.out[0].numel(), [=] CB_HOST_DEVICE(int64_t i) { y[i] = op(x[i]); });
}

// y = op(a, b) with both inputs broadcast to the output's shape.
template <class R, class T, class U, class Op>
void binary(const KernelArgs& a, const GpuCtx& c, Op op) {
  const Dims out = dims_of(a.out[0].dims);
  const Dims sa = broadcast_strides(a.in[0].dims, a.out[0].dims);
  const Dims sb = broadcast_strides(a.in[1].dims, a.out[0].dims);
  const T* x = a.in[0].ptr<T>();
  const U* z = a.in[1].ptr<U>();
  R* y = a.out[0].ptr<R>();
  parallel_for(c, a.out[0].numel(), [=] CB_HOST_DEVICE(int64_t i) {
    y[i] = static_cast<R>(op(x[offset_of(i, out, sa)], z[offset_of(i, out, sb)]));
  });
}

template <class T>
void relu(const KernelArgs& a, const GpuCtx& c) {
  unary<T>(a, c, math::ReluOp{});
}
template <class T>
void add(const KernelArgs& a, const GpuCtx& c) {
  binary<T, T, T>(a, c, math::AddOp{});
}

void Relu(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_NUMERIC(a.in[0].dtype, "Relu", relu, a, c)
}
void Add(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_NUMERIC(a.in[0].dtype, "Add", add, a, c)
}

constexpr GpuKernel kKernels[] = {
    {OpKind::Add, &Add, kNumeric},
    {OpKind::Relu, &Relu, kNumeric},
};
}  // namespace

std::span<const GpuKernel> elementwise_kernels() { return kKernels; }

}  // namespace cb::CB_GPU_NS
