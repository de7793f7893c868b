// Max, Min, Mean, Sum over 1..N inputs with numpy broadcasting: out = op(in0, in1), then
// out = op(out, in_i) for each further input (the broadcast driver reads element i before it
// writes it, so out may be in0's or in1's buffer: the ops' inplace_inputs), Mean then divides by
// N. One input: a broadcast copy.
#include "kernels/common/scalar_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise_driver.h"
#include "kernels/cpu/kernel_util.h"

namespace cb::cpu {

namespace {
using ew::apply;

template <class T, class Op>
void fold(const KernelArgs& a, Op op) {
  const TensorView& out = a.out[0];
  if (a.in.size() == 1) {
    apply<T, T>(a, math::IdentityOp{}, out, {&a.in[0]});
    return;
  }
  apply<T, T, T>(a, op, out, {&a.in[0], &a.in[1]});
  for (size_t i = 2; i < a.in.size(); ++i) apply<T, T, T>(a, op, out, {&out, &a.in[i]});
}
}  // namespace

void Max(const KernelArgs& a) {
  dispatch_numeric(a.in[0].dtype, [&]<class T>(Tag<T>) { fold<T>(a, math::MaxOp{}); });
}
void Min(const KernelArgs& a) {
  dispatch_numeric(a.in[0].dtype, [&]<class T>(Tag<T>) { fold<T>(a, math::MinOp{}); });
}
void Sum(const KernelArgs& a) {
  dispatch_numeric(a.in[0].dtype, [&]<class T>(Tag<T>) { fold<T>(a, math::AddOp{}); });
}
void Mean(const KernelArgs& a) {
  dispatch_float(a.in[0].dtype, [&]<class T>(Tag<T>) {
    fold<T>(a, math::AddOp{});
    if (a.in.size() == 1) return;
    T n = static_cast<T>(a.in.size());
    TensorView count{&n, a.in[0].dtype, {}};
    apply<T, T, T>(a, math::DivOp{}, a.out[0], {&a.out[0], &count});
  });
}

}  // namespace cb::cpu
