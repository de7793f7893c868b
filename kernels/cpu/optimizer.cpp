// Optimizer steps over flat buffers, in place, with PyTorch's semantics (launched by the trainer,
// never part of a graph):
//   SgdStep(param [P], grad [P], velocity [P])    torch.optim.SGD (dampening, nesterov, weight
//                                                 decay added to the gradient; the momentum buffer
//                                                 starts as the first gradient: first_step)
//   AdamWStep(param [P], grad [P], m [P], v [P])  torch.optim.AdamW (decoupled weight decay,
//                                                 bias correction from the 1-based `step`)
// Each element is updated independently, in the order of operations of PyTorch's single-tensor
// implementation, so fp32 results match it; the work is split over the pool.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

void SgdStep(const KernelArgs& a) {
  const auto& p = a.p<ops::SgdParams>();
  const TensorView &param = a.in.at(0), &grad = a.in.at(1), &vel = a.in.at(2);
  CB_CHECK(grad.numel() == param.numel() && grad.dtype == param.dtype);
  CB_CHECK(p.momentum == 0 || (vel.numel() == param.numel() && vel.dtype == param.dtype));
  dispatch_float(param.dtype, [&]<class T>(Tag<T>) {
    T* w = param.ptr<T>();
    const T* g = grad.ptr<T>();
    T* buf = vel.ptr<T>();
    const T lr = static_cast<T>(p.lr), mu = static_cast<T>(p.momentum),
            wd = static_cast<T>(p.weight_decay),
            damp1 = static_cast<T>(1) - static_cast<T>(p.dampening);
    const bool momentum = p.momentum != 0, first = p.first_step, nesterov = p.nesterov,
               decay = p.weight_decay != 0;
    parallel(a, param.numel(), 4, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        T d = g[i];
        if (decay) d = d + wd * w[i];  // d_p = d_p.add(param, alpha=weight_decay)
        if (momentum) {
          T v = first ? d : buf[i] * mu + damp1 * d;  // buf.mul_(momentum).add_(d_p, alpha=1-damp)
          buf[i] = v;
          d = nesterov ? d + mu * v : v;  // d_p.add(buf, alpha=momentum) or buf
        }
        w[i] = w[i] + (-lr) * d;  // param.add_(d_p, alpha=-lr)
      }
    });
  });
}

void AdamWStep(const KernelArgs& a) {
  const auto& p = a.p<ops::AdamWParams>();
  const TensorView &param = a.in.at(0), &grad = a.in.at(1), &mv = a.in.at(2), &vv = a.in.at(3);
  CB_CHECK(grad.numel() == param.numel() && mv.numel() == param.numel() &&
           vv.numel() == param.numel());
  CB_CHECK(p.step >= 1);
  // Scalars as PyTorch computes them in Python (double), then used at the tensor's precision.
  const double lr = p.lr, b1 = p.beta1, b2 = p.beta2;
  const double decay = 1.0 - lr * static_cast<double>(p.weight_decay);
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(p.step));
  const double step_size = lr / bc1, bc2_sqrt = std::sqrt(bc2);
  dispatch_float(param.dtype, [&]<class T>(Tag<T>) {
    T* w = param.ptr<T>();
    const T* g = grad.ptr<T>();
    T* m = mv.ptr<T>();
    T* v = vv.ptr<T>();
    const T tdecay = static_cast<T>(decay), tb1 = static_cast<T>(b1), tb2 = static_cast<T>(b2),
            one_b1 = static_cast<T>(1.0 - b1), one_b2 = static_cast<T>(1.0 - b2),
            tstep = static_cast<T>(-step_size), tbc2 = static_cast<T>(bc2_sqrt),
            eps = static_cast<T>(p.eps);
    const bool decayed = p.weight_decay != 0;
    parallel(a, param.numel(), 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        T wi = decayed ? w[i] * tdecay : w[i];  // param.mul_(1 - lr * weight_decay)
        T gi = g[i];
        T mi = m[i] * tb1 + one_b1 * gi;         // exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)
        T vi = v[i] * tb2 + one_b2 * (gi * gi);  // exp_avg_sq.mul_(beta2).addcmul_(g, g, 1-beta2)
        T denom = std::sqrt(vi) / tbc2 + eps;    // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
        w[i] = wi + tstep * (mi / denom);        // param.addcdiv_(exp_avg, denom, -step_size)
        m[i] = mi;
        v[i] = vi;
      }
    });
  });
}

}  // namespace cb::cpu
