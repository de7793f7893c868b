// Gradient kernels of the elementwise activations: dx = f(dy, a saved forward tensor), one
// functor each in kernels/common/scalar_math.h (so a CUDA backend reuses them), run by the shared
// broadcast driver (elementwise_driver.h). All shapes are equal: [d...], [d...] -> [d...]; the
// planner may give dx dy's buffer (inplace_inputs), which the driver allows.
// Convention: the saved tensor decides, the gradient is passed through or zeroed, never
// recomputed from the forward's output in another way than its vjp says (Relu reads Y, LeakyRelu
// and Clip read X, Dropout reads its mask).
#include "kernels/common/scalar_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise_driver.h"
#include "kernels/cpu/kernel_util.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

using ew::apply;

// ReluGrad(dY, Y): dY where Y > 0, else 0.
void ReluGrad(const KernelArgs& a) {
  dispatch_float(a.in[0].dtype, [&]<class T>(Tag<T>) {
    apply<T, T, T>(a, math::ReluGradOp{}, a.out[0], {&a.in[0], &a.in[1]});
  });
}

// LeakyReluGrad(dY, X): dY where X > 0, else alpha * dY.
void LeakyReluGrad(const KernelArgs& a) {
  const float alpha = a.p<ops::LeakyReluParams>().alpha;
  dispatch_float(a.in[0].dtype, [&]<class T>(Tag<T>) {
    apply<T, T, T>(a, math::LeakyReluGradOp{alpha}, a.out[0], {&a.in[0], &a.in[1]});
  });
}

// ClipGrad(dY, X, min?, max?): dY where min <= X <= max, else 0. Bounds as Clip reads them: the
// scalar inputs when present, else the params (attributes before opset 11); absent: unbounded.
void ClipGrad(const KernelArgs& a) {
  const auto& p = a.p<ops::ClipParams>();
  dispatch_float(a.in[0].dtype, [&]<class T>(Tag<T>) {
    auto bound = [&](size_t i, float attr) {
      if (a.in.size() > i && a.in[i].present()) return read_scalar<T>(a.in[i]);
      return static_cast<T>(attr);  // +-inf when the attribute is absent
    };
    T lo = bound(2, p.min), hi = bound(3, p.max);
    apply<T, T, T>(a, math::ClipGradOp<T>{lo, hi}, a.out[0], {&a.in[0], &a.in[1]});
  });
}

// DropoutGrad(dY, mask): dY * mask / (1 - ratio); the mask is bool (or dY's type before opset
// 10). The scale is computed as the forward computes it, so dx is exactly the forward's factor.
void DropoutGrad(const KernelArgs& a) {
  const float ratio = a.p<ops::DropoutParams>().ratio;
  dispatch_float(a.in[0].dtype, [&]<class T>(Tag<T>) {
    const T scale = T(1) / (T(1) - static_cast<T>(ratio));
    if (a.in[1].dtype == DType::Bool)
      apply<T, T, bool>(a, math::DropoutGradOp<T>{scale}, a.out[0], {&a.in[0], &a.in[1]});
    else if (a.in[1].dtype == a.in[0].dtype)
      apply<T, T, T>(a, math::DropoutGradOp<T>{scale}, a.out[0], {&a.in[0], &a.in[1]});
    else
      throw InternalError(fmt::format("DropoutGrad: mask of type {} for a gradient of type {}",
                                      dtype_name(a.in[1].dtype), dtype_name(a.in[0].dtype)));
  });
}

}  // namespace cb::cpu
