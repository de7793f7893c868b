// HardSigmoid, HardSwish and their gradients (dY, X) -> dX: functors of
// kernels/common/scalar_math.h run by the shared broadcast driver (elementwise_driver.h).
#include "kernels/common/scalar_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise_driver.h"
#include "kernels/cpu/kernel_util.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

using ew::apply;

// [d...] -> [d...]
void HardSigmoid(const KernelArgs& a) {
  const auto& p = a.p<ops::HardSigmoidParams>();
  dispatch_float(a.in[0].dtype, [&]<class T>(Tag<T>) {
    apply<T, T>(a, math::HardSigmoidOp{p.alpha, p.beta}, a.out[0], {&a.in[0]});
  });
}
void HardSwish(const KernelArgs& a) {
  dispatch_float(a.in[0].dtype, [&]<class T>(Tag<T>) {
    apply<T, T>(a, math::HardSwishOp{}, a.out[0], {&a.in[0]});
  });
}

// (dY [d...], X [d...]) -> dX [d...]
void HardSigmoidGrad(const KernelArgs& a) {
  const auto& p = a.p<ops::HardSigmoidParams>();
  dispatch_float(a.in[0].dtype, [&]<class T>(Tag<T>) {
    apply<T, T, T>(a, math::HardSigmoidGradOp{p.alpha, p.beta}, a.out[0], {&a.in[0], &a.in[1]});
  });
}
void HardSwishGrad(const KernelArgs& a) {
  dispatch_float(a.in[0].dtype, [&]<class T>(Tag<T>) {
    apply<T, T, T>(a, math::HardSwishGradOp{}, a.out[0], {&a.in[0], &a.in[1]});
  });
}

}  // namespace cb::cpu
