// Dropout and DropoutGrad on the CUDA backend (mirroring kernels/cpu/dropout.cpp and DropoutGrad
// in elementwise_grad.cpp; contract in runtime/ops/dropout.cpp):
//   Dropout(data, ratio?, training_mode?) -> (output, mask?)    f32, f64
//   DropoutGrad(dY, mask) -> dX                                 f32, f64
// The mask comes from the counter-based hash of kernels/common/scalar_math.h (one hash per element
// index), so it depends only on the seed and matches the CPU's bit for bit.
#include <cstdint>

#include "kernels/common/scalar_math.h"
#include "kernels/cuda/launch.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS {

namespace {

// ---- Dropout, DropoutGrad -----------------------------------------------------------------------
template <class M>
void fill_ones(const GpuCtx& c, void* data, int64_t n) {
  M* m = static_cast<M*>(data);
  parallel_for(c, n, [=] CB_HOST_DEVICE(int64_t i) { m[i] = M(1); });
}

// Training: keep element i when uniform01(seed, i) >= ratio (the CPU's hash), scale kept values.
template <class T, class M>
void dropout_train(const GpuCtx& c, const T* x, T* y, M* m, int64_t n, uint64_t seed, float ratio,
                   T scale) {
  parallel_for(c, n, [=] CB_HOST_DEVICE(int64_t i) {
    const bool keep = math::uniform01(seed, static_cast<uint64_t>(i)) >= ratio;
    y[i] = keep ? x[i] * scale : T(0);
    if (m) m[i] = M(keep);
  });
}

template <class T>
void dropout(const KernelArgs& a, const GpuCtx& c, const TensorView* mask, uint64_t seed,
             float ratio) {
  const TensorView &in = a.in[0], &out = a.out[0];
  const T scale = T(1) / (T(1) - static_cast<T>(ratio));
  const T* x = in.ptr<const T>();
  T* y = out.ptr<T>();
  const int64_t n = in.numel();
  if (!mask)
    dropout_train<T, uint8_t>(c, x, y, nullptr, n, seed, ratio, scale);
  else if (mask->dtype == DType::Bool)
    dropout_train<T, uint8_t>(c, x, y, mask->ptr<uint8_t>(), n, seed, ratio, scale);
  else if (mask->dtype == in.dtype)
    dropout_train<T, T>(c, x, y, mask->ptr<T>(), n, seed, ratio, scale);  // opset < 10
  else
    fail("Dropout: mask of type {} for data of type {}", dtype_name(mask->dtype),
         dtype_name(in.dtype));
}

void Dropout(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::DropoutParams>();
  const TensorView &in = a.in.at(0), &out = a.out.at(0);
  const TensorView* mask = a.out.size() > 1 && a.out[1].present() ? &a.out[1] : nullptr;
  const int64_t n = in.numel();
  if (out.numel() != n || out.dtype != in.dtype || (mask && mask->numel() != n))
    fail("Dropout: output and mask must be shaped like data");
  if (!(p.training && p.ratio > 0)) {  // inference: y = x, mask all true
    copy_device(c, out.data, in.data, out.bytes());
    if (mask) {
      if (mask->dtype == DType::Bool) {
        fill_ones<uint8_t>(c, mask->data, n);
      } else {
        CB_GPU_DISPATCH_NUMERIC(mask->dtype, "Dropout (mask)", fill_ones, c, mask->data, n)
      }
    }
    return;
  }
  uint64_t seed = a.seed;
  if (p.seed) seed = math::splitmix64(seed ^ math::splitmix64(static_cast<uint64_t>(*p.seed)));
  CB_GPU_DISPATCH_FLOAT(in.dtype, "Dropout", dropout, a, c, mask, seed, p.ratio)
}

template <class T, class M>
void dropout_grad_as(const GpuCtx& c, const T* dy, const M* m, T* dx, int64_t n, T scale) {
  const math::DropoutGradOp<T> op{scale};
  parallel_for(c, n, [=] CB_HOST_DEVICE(int64_t i) { dx[i] = op(dy[i], m[i]); });
}

// dX = mask ? dY * scale : 0 with the forward's scale 1 / (1 - ratio).
template <class T>
void dropout_grad(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &dyv = a.in.at(0), &mv = a.in.at(1), &dxv = a.out.at(0);
  const int64_t n = dxv.numel();
  if (dyv.numel() != n || mv.numel() != n)
    fail("DropoutGrad: dY, mask and dX must have the same shape");
  const T scale = T(1) / (T(1) - static_cast<T>(a.p<ops::DropoutParams>().ratio));
  if (mv.dtype == DType::Bool)
    dropout_grad_as<T, uint8_t>(c, dyv.ptr<const T>(), mv.ptr<const uint8_t>(), dxv.ptr<T>(), n,
                                scale);
  else if (mv.dtype == dyv.dtype)
    dropout_grad_as<T, T>(c, dyv.ptr<const T>(), mv.ptr<const T>(), dxv.ptr<T>(), n, scale);
  else
    fail("DropoutGrad: mask of type {} for a gradient of type {}", dtype_name(mv.dtype),
         dtype_name(dyv.dtype));
}

void DropoutGrad(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_FLOAT(a.in.at(0).dtype, "DropoutGrad", dropout_grad, a, c)
}

constexpr GpuKernel kKernels[] = {
    {OpKind::Dropout, &Dropout, kFloat},
    {OpKind::DropoutGrad, &DropoutGrad, kFloat},
};

}  // namespace

std::span<const GpuKernel> dropout_kernels() { return kKernels; }

}  // namespace cb::CB_GPU_NS
