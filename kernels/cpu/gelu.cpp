// Gelu and GeluGrad(dY, X) -> dX on the CPU. f32 runs through a loop that GCC vectorises with
// glibc's vector math (libmvec's erff, expf, tanhf: within a few ulp of the scalar functions)
// in each target_clones variant (vector_math.h); f64, f16 and bf16 run
// kernels/common/scalar_math.h's functors through the elementwise driver.
#include <algorithm>

#include "kernels/common/scalar_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise_driver.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/storage.h"
#include "kernels/cpu/vector_math.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {

using math::kGeluTanhC;
using math::kGeluTanhK;
using math::kInvSqrt2;
using math::kInvSqrt2Pi;

// The loops, stored as S: float, or uint16_t holding bf16 bits (storage.h's store_s rounds to
// nearest even as a select, so the loop still vectorises). Inlined into each target_clones variant
// below (an out-of-line copy would get the baseline ISA).
template <class S>
CB_STAT_INLINE inline void gelu_loop(const float* x, S* y, int64_t n, bool approx_tanh) {
  if (approx_tanh) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      const float u = float(kGeluTanhK) * (v + float(kGeluTanhC) * v * v * v);
      store_s(y, i, 0.5f * v * (1.0f + tanhf(u)));
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    store_s(y, i, 0.5f * v * (1.0f + erff(v * float(kInvSqrt2))));
  }
}

template <class S>
CB_STAT_INLINE inline void gelu_grad_loop(const float* dy, const float* x, S* dx, int64_t n,
                                          bool approx_tanh) {
  if (approx_tanh) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i], v2 = v * v;
      const float t = tanhf(float(kGeluTanhK) * (v + float(kGeluTanhC) * v2 * v));
      const float du = float(kGeluTanhK) * (1.0f + float(3 * kGeluTanhC) * v2);
      store_s(dx, i, dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du));
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float cdf = 0.5f * (1.0f + erff(v * float(kInvSqrt2)));
    store_s(dx, i, dy[i] * (cdf + v * float(kInvSqrt2Pi) * expf(-0.5f * v * v)));
  }
}

// Every element through the same vector math functions, wherever it lies: the loops run over
// whole vectors of kLanes, and the last n % kLanes elements through a zero-padded vector of them
// (a loop's scalar remainder would call the scalar erff / expf / tanhf, whose last bit may differ
// from the vector ones'), so that the result does not depend on how the pool splits the range
// (the thread count).
constexpr int64_t kLanes = 16;

template <class S>
CB_STAT_INLINE inline void gelu_body(const float* x, S* y, int64_t n, bool t) {
  const int64_t full = n - n % kLanes;
  gelu_loop(x, y, full, t);
  if (full == n) return;
  float xt[kLanes] = {}, yt[kLanes];
  std::copy(x + full, x + n, xt);
  gelu_loop(xt, yt, kLanes, t);
  for (int64_t k = 0; k < n - full; ++k) store_s(y, full + k, yt[k]);
}

template <class S>
CB_STAT_INLINE inline void gelu_grad_body(const float* dy, const float* x, S* dx, int64_t n,
                                          bool t) {
  const int64_t full = n - n % kLanes;
  gelu_grad_loop(dy, x, dx, full, t);
  if (full == n) return;
  float dyt[kLanes] = {}, xt[kLanes] = {}, dxt[kLanes];
  std::copy(dy + full, dy + n, dyt);
  std::copy(x + full, x + n, xt);
  gelu_grad_loop(dyt, xt, dxt, kLanes, t);
  for (int64_t k = 0; k < n - full; ++k) store_s(dx, full + k, dxt[k]);
}

CB_CPU_CLONES void gelu_f32(const float* x, float* y, int64_t n, bool approx_tanh) {
  gelu_body(x, y, n, approx_tanh);
}
CB_CPU_CLONES void gelu_f32_bf16(const float* x, uint16_t* y, int64_t n, bool approx_tanh) {
  gelu_body(x, y, n, approx_tanh);
}
CB_CPU_CLONES void gelu_grad_f32(const float* dy, const float* x, float* dx, int64_t n,
                                 bool approx_tanh) {
  gelu_grad_body(dy, x, dx, n, approx_tanh);
}

// About 20 element operations per element (erf or tanh, exp): chunks of a fifth of kGrain.
constexpr int64_t kGeluCost = 20;

}  // namespace

// [d...] -> [d...]
void Gelu(const KernelArgs& a) {
  const bool t = a.p<ops::GeluParams>().tanh;
  if (a.in[0].dtype == DType::F32) {
    const float* x = a.in[0].ptr<const float>();
    if (a.out[0].bf16_storage) {  // Y only bf16 products read (assign_bf16_operands): rounded
      auto* y = static_cast<uint16_t*>(a.out[0].data);
      parallel(a.out[0].numel(), kGeluCost,
               [&](int64_t b, int64_t e) { gelu_f32_bf16(x + b, y + b, e - b, t); });
      return;
    }
    float* y = a.out[0].ptr<float>();
    parallel(a.out[0].numel(), kGeluCost,
             [&](int64_t b, int64_t e) { gelu_f32(x + b, y + b, e - b, t); });
    return;
  }
  dispatch_float(a.in[0].dtype, [&]<class T>(Tag<T>) {
    ew::apply<T, T>(a, math::GeluOp{t}, a.out[0], {&a.in[0]});
  });
}

// (dY [d...], X [d...]) -> dX [d...]
void GeluGrad(const KernelArgs& a) {
  const bool t = a.p<ops::GeluParams>().tanh;
  if (a.in[0].dtype == DType::F32) {
    const float* dy = a.in[0].ptr<const float>();
    const float* x = a.in[1].ptr<const float>();
    float* dx = a.out[0].ptr<float>();
    parallel(a.out[0].numel(), kGeluCost,
             [&](int64_t b, int64_t e) { gelu_grad_f32(dy + b, x + b, dx + b, e - b, t); });
    return;
  }
  dispatch_float(a.in[0].dtype, [&]<class T>(Tag<T>) {
    ew::apply<T, T, T>(a, math::GeluGradOp{t}, a.out[0], {&a.in[0], &a.in[1]});
  });
}

}  // namespace cb::cpu
