// The optimizer and SMA element updates, written once for every backend (CB_HOST_DEVICE
// functors, as the elementwise math in scalar_math.h): the CPU kernels (kernels/cpu/optimizer.cpp,
// kernels/cpu/sma.cpp) and a CUDA kernel instantiate the same code, so they compute the same
// operations in the same order. Each functor updates one element; its scalars are prepared once
// per launch on the host (PyTorch computes them in Python doubles; so do we).
// Convention: operations are written out one rounding at a time, in the order of PyTorch's
// single-tensor implementations; a build must not contract them into FMAs (ISO C++ builds do not;
// SMA's cloned step is also built with -ffp-contract=off), so that one learner with alpha 0 is
// torch.optim.SGD bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/scalar_math.h"

namespace cb::math {

// torch.optim.SGD: d = g + wd * theta; v = mu v + (1 - dampening) d (first step: v = d);
// d = nesterov ? d + mu v : v; theta <- theta - lr d. Returns the new theta.
template <class T>
struct SgdUpdate {
  T lr, mu, wd, damp1;
  bool momentum, nesterov, decay, first;

  CB_HOST_DEVICE T operator()(T theta, T g, T& v) const {
    // Selects, not branches, so that a loop over elements vectorises; each value still takes
    // exactly PyTorch's operations.
    const T d = decay ? g + wd * theta : g;  // d_p = d_p.add(param, alpha=weight_decay)
    const T vm = v * mu + damp1 * d;         // buf.mul_(momentum).add_(d_p, alpha=1-dampening)
    const T nv = first ? d : vm;             // first step: buf = d_p
    const T dm = nesterov ? d + mu * nv : nv;
    v = momentum ? nv : v;
    return theta + (-lr) * (momentum ? dm : d);  // param.add_(d_p, alpha=-lr)
  }
};

// Host-side scalars of one AdamW step (1-based `step`), as PyTorch computes them in doubles.
struct AdamWScalars {
  double decay, beta1, beta2, one_b1, one_b2, neg_step_size, bc2_sqrt, eps;
  bool decayed;
  static AdamWScalars make(double lr, double beta1, double beta2, double eps, double weight_decay,
                           int64_t step) {
    AdamWScalars s;
    s.decay = 1.0 - lr * weight_decay;
    s.beta1 = beta1;
    s.beta2 = beta2;
    s.one_b1 = 1.0 - beta1;
    s.one_b2 = 1.0 - beta2;
    const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
    s.neg_step_size = -(lr / bc1);
    s.bc2_sqrt = std::sqrt(bc2);
    s.eps = eps;
    s.decayed = weight_decay != 0;
    return s;
  }
};

// torch.optim.AdamW (decoupled weight decay, bias correction). Returns the new theta.
template <class T>
struct AdamWUpdate {
  T decay, b1, b2, one_b1, one_b2, neg_step, bc2_sqrt, eps;
  bool decayed;

  CB_HOST_DEVICE static AdamWUpdate from(const AdamWScalars& s) {
    return {static_cast<T>(s.decay),    static_cast<T>(s.beta1),  static_cast<T>(s.beta2),
            static_cast<T>(s.one_b1),   static_cast<T>(s.one_b2), static_cast<T>(s.neg_step_size),
            static_cast<T>(s.bc2_sqrt), static_cast<T>(s.eps),    s.decayed};
  }
  CB_HOST_DEVICE T operator()(T theta, T g, T& m, T& v) const {
    const T w = decayed ? theta * decay : theta;  // param.mul_(1 - lr * weight_decay)
    const T mi = m * b1 + one_b1 * g;             // exp_avg.mul_(beta1).add_(grad, 1-beta1)
    const T vi = v * b2 + one_b2 * (g * g);       // exp_avg_sq.mul_(beta2).addcmul_(g, g, 1-beta2)
    const T denom = m_sqrt(vi) / bc2_sqrt + eps;  // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
    m = mi;
    v = vi;
    return w + neg_step * (mi / denom);  // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
};

// SMA's correction of one learner element (sma/trainer.h has the whole algorithm). The pull rules
// (paper, elastic): c = alpha (theta - z) from the pre-step theta, and the learner's new value is
// its optimizer step minus c (alpha 0: exactly the optimizer step). The reset rules (slowmo,
// post-local; `post`): c = alpha (stepped - z) from the learner's new value, which it keeps (the
// trainer then resets every learner to the new z). Either way c is added to the device's sum of
// corrections.
// T: float, or a float wrapper with its own rounding (the CUDA kernels' Rn<float>, which keeps
// nvcc from contracting into FMAs).
struct SmaPull {
  float alpha;
  bool post = false;
  template <class T>
  CB_HOST_DEVICE T correction(T theta, T stepped, T z) const {
    return T(alpha) * ((post ? stepped : theta) - z);
  }
  template <class T>
  CB_HOST_DEVICE T apply(T stepped, T c) const {
    return alpha != 0 && !post ? stepped - c : stepped;
  }
};

// The central model's update from the all-reduced sum of corrections:
// z_new = z + scale sum + mu_z (z - z_prev); z_prev <- z. The paper's rule has scale 1 (then the
// sum is added as it is, no multiply); the other rules scale the sum into an outer step
// (sma/trainer.h).
struct SmaCentral {
  float mu;
  float scale = 1;
  template <class T>
  CB_HOST_DEVICE T operator()(T z, T z_prev, T sum) const {
    const T nz = z + (scale != 1 ? T(scale) * sum : sum);
    return mu != 0 ? nz + T(mu) * (z - z_prev) : nz;
  }
};

// The factor torch.nn.utils.clip_grad_norm_ scales a gradient by, from its L2 norm:
// min(1, max_norm / (norm + 1e-6)) in float, as PyTorch computes it on an f32 tensor (an add
// and a division: nothing a compiler could contract, so every backend rounds alike).
CB_HOST_DEVICE inline float clip_coef(float max_norm, float norm) {
  const float c = max_norm / (norm + 1e-6f);
  return c < 1.0f ? c : 1.0f;
}

// The exponential moving average of the weights (timm's ModelEma): e <- d e + (1 - d) m, with
// 1 - d rounded once on the host. d = 0 copies m exactly (before the average starts).
struct Ema {
  float decay, rest;
  static Ema make(float d) { return {d, 1.0f - d}; }
  template <class T>
  CB_HOST_DEVICE T operator()(T e, T m) const {
    return T(decay) * e + T(rest) * m;
  }
};

}  // namespace cb::math
