// Comparison and logical kernels: Greater, GreaterOrEqual, Less, LessOrEqual (numeric inputs of
// one type) and And, Or, Xor, Not (bool), all with a bool output, run by the shared broadcast
// driver (elementwise_driver.h) with the functors of kernels/common/scalar_math.h.
#include "kernels/common/scalar_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise_driver.h"
#include "kernels/cpu/kernel_util.h"

namespace cb::cpu {

namespace {
using ew::apply;

// [a...] cmp [b...] -> bool broadcast([a...], [b...])
template <class Op>
void compare(const KernelArgs& a, Op op) {
  dispatch_numeric(a.in[0].dtype, [&]<class T>(Tag<T>) {
    apply<bool, T, T>(a, op, a.out[0], {&a.in[0], &a.in[1]});
  });
}
template <class Op>
void logical(const KernelArgs& a, Op op) {
  CB_CHECK(a.in[0].dtype == DType::Bool && a.in[1].dtype == DType::Bool);
  apply<bool, bool, bool>(a, op, a.out[0], {&a.in[0], &a.in[1]});
}
}  // namespace

void Greater(const KernelArgs& a) { compare(a, math::GreaterOp{}); }
void GreaterOrEqual(const KernelArgs& a) { compare(a, math::GreaterOrEqualOp{}); }
void Less(const KernelArgs& a) { compare(a, math::LessOp{}); }
void LessOrEqual(const KernelArgs& a) { compare(a, math::LessOrEqualOp{}); }

void And(const KernelArgs& a) { logical(a, math::AndOp{}); }
void Or(const KernelArgs& a) { logical(a, math::OrOp{}); }
void Xor(const KernelArgs& a) { logical(a, math::XorOp{}); }
void Not(const KernelArgs& a) {
  CB_CHECK(a.in[0].dtype == DType::Bool);
  apply<bool, bool>(a, math::NotOp{}, a.out[0], {&a.in[0]});
}

}  // namespace cb::cpu
