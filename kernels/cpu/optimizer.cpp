// Optimizer steps over flat buffers, in place, with PyTorch's semantics (contracts in
// runtime/ops/optimizer.cpp; element math in kernels/common/optimizer_math.h):
//   SgdStep(grad [P]) -> (param [P], velocity [P]?)   torch.optim.SGD
//   AdamWStep(grad [P]) -> (param [P], m [P], v [P])   torch.optim.AdamW
// The reference single-buffer steps (f32 and f64); the trainer runs SmaStep, which computes the
// same per element. Each element is updated independently; the work is split over the pool.
#include <cmath>

#include "kernels/common/optimizer_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

void SgdStep(const KernelArgs& a) {
  const auto& p = a.p<ops::SgdParams>();
  const TensorView &grad = a.in.at(0), &param = a.out.at(0);
  const TensorView vel = a.out.size() > 1 ? a.out[1] : TensorView{};
  CB_CHECK(grad.numel() == param.numel() && grad.dtype == param.dtype);
  CB_CHECK(p.momentum == 0 || (vel.numel() == param.numel() && vel.dtype == param.dtype));
  dispatch_float(param.dtype, [&]<class T>(Tag<T>) {
    T* w = param.ptr<T>();
    const T* g = grad.ptr<T>();
    T* buf = vel.ptr<T>();
    const math::SgdUpdate<T> up{static_cast<T>(p.lr),
                                static_cast<T>(p.momentum),
                                static_cast<T>(p.weight_decay),
                                static_cast<T>(1) - static_cast<T>(p.dampening),
                                p.momentum != 0,
                                p.nesterov,
                                p.weight_decay != 0,
                                p.first_step};
    parallel(param.numel(), 4, [&](int64_t b, int64_t e) {
      T unused = 0;
      for (int64_t i = b; i < e; ++i) w[i] = up(w[i], g[i], buf ? buf[i] : unused);
    });
  });
}

void AdamWStep(const KernelArgs& a) {
  const auto& p = a.p<ops::AdamWParams>();
  const TensorView &grad = a.in.at(0), &param = a.out.at(0), &mv = a.out.at(1), &vv = a.out.at(2);
  CB_CHECK(grad.numel() == param.numel() && mv.numel() == param.numel() &&
           vv.numel() == param.numel());
  CB_CHECK(p.step >= 1);
  const auto sc = math::AdamWScalars::make(p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.step);
  dispatch_float(param.dtype, [&]<class T>(Tag<T>) {
    T* w = param.ptr<T>();
    const T* g = grad.ptr<T>();
    T* m = mv.ptr<T>();
    T* v = vv.ptr<T>();
    const auto up = math::AdamWUpdate<T>::from(sc);
    parallel(param.numel(), 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) w[i] = up(w[i], g[i], m[i], v[i]);
    });
  });
}

}  // namespace cb::cpu
