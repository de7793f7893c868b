// Elementwise kernels: unary, binary and ternary functors from kernels/common/scalar_math.h run
// by the one numpy-broadcast driver (kernels/cpu/elementwise_driver.h: collapsed runs, inner
// strides 1 or 0 fixed at compile time, split over the pool by flat output index).
#include <array>
#include <cmath>
#include <limits>

#include "kernels/common/scalar_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise_driver.h"
#include "kernels/cpu/kernel_util.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {
using ew::apply;

template <class Op>
void unary_float(const KernelArgs& a, Op op) {
  dispatch_float(a.in[0].dtype, [&]<class T>(Tag<T>) { apply<T, T>(a, op, a.out[0], {&a.in[0]}); });
}
template <class Op>
void unary_numeric(const KernelArgs& a, Op op) {
  dispatch_numeric(a.in[0].dtype,
                   [&]<class T>(Tag<T>) { apply<T, T>(a, op, a.out[0], {&a.in[0]}); });
}
template <class Op>
void binary_numeric(const KernelArgs& a, Op op) {
  dispatch_numeric(a.in[0].dtype, [&]<class T>(Tag<T>) {
    apply<T, T, T>(a, op, a.out[0], {&a.in[0], &a.in[1]});
  });
}
}  // namespace

// ---- unary: [d...] -> [d...] ----
void Abs(const KernelArgs& a) { unary_numeric(a, math::AbsOp{}); }
void Neg(const KernelArgs& a) { unary_numeric(a, math::NegOp{}); }
void Relu(const KernelArgs& a) { unary_numeric(a, math::ReluOp{}); }
void Sqrt(const KernelArgs& a) { unary_float(a, math::SqrtOp{}); }
void Exp(const KernelArgs& a) { unary_float(a, math::ExpOp{}); }
void Log(const KernelArgs& a) { unary_float(a, math::LogOp{}); }
void Sigmoid(const KernelArgs& a) { unary_float(a, math::SigmoidOp{}); }
void Tanh(const KernelArgs& a) { unary_float(a, math::TanhOp{}); }
void Erf(const KernelArgs& a) { unary_float(a, math::ErfOp{}); }
void Ceil(const KernelArgs& a) { unary_float(a, math::CeilOp{}); }
void Floor(const KernelArgs& a) { unary_float(a, math::FloorOp{}); }
void Reciprocal(const KernelArgs& a) { unary_float(a, math::ReciprocalOp{}); }
void LeakyRelu(const KernelArgs& a) {
  unary_float(a, math::LeakyReluOp{a.p<ops::LeakyReluParams>().alpha});
}

// Clip(X, min?, max?): bounds from the scalar inputs (opset >= 11) or the params (attributes);
// an absent bound is the type's range.
void Clip(const KernelArgs& a) {
  const auto& p = a.p<ops::ClipParams>();
  dispatch_numeric(a.in[0].dtype, [&]<class T>(Tag<T>) {
    auto bound = [&](size_t i, float attr, T none) {
      if (a.in.size() > i && a.in[i].present()) return read_scalar<T>(a.in[i]);
      if (std::isinf(attr)) return none;
      return static_cast<T>(attr);
    };
    using L = std::numeric_limits<T>;
    T lo = bound(1, p.min, L::has_infinity ? -L::infinity() : L::lowest());
    T hi = bound(2, p.max, L::has_infinity ? L::infinity() : L::max());
    apply<T, T>(a, math::ClipOp<T>{lo, hi}, a.out[0], {&a.in[0]});
  });
}

// ---- binary with broadcasting: [a...] op [b...] -> broadcast([a...], [b...]) ----
void Add(const KernelArgs& a) { binary_numeric(a, math::AddOp{}); }
void Sub(const KernelArgs& a) { binary_numeric(a, math::SubOp{}); }
void Mul(const KernelArgs& a) { binary_numeric(a, math::MulOp{}); }
void Div(const KernelArgs& a) { binary_numeric(a, math::DivOp{}); }

void Equal(const KernelArgs& a) {
  dispatch_numeric(
      a.in[0].dtype,
      [&]<class T>(Tag<T>) {
        apply<bool, T, T>(a, math::EqualOp{}, a.out[0], {&a.in[0], &a.in[1]});
      },
      true);
}

// Pow(X: T, Y: U) -> T; the exponent may have another numeric type (opset >= 12).
void Pow(const KernelArgs& a) {
  dispatch_numeric(a.in[0].dtype, [&]<class T>(Tag<T>) {
    dispatch_numeric(a.in[1].dtype, [&]<class U>(Tag<U>) {
      apply<T, T, U>(a, math::PowOp{}, a.out[0], {&a.in[0], &a.in[1]});
    });
  });
}

// Where(cond: bool, X, Y) -> broadcast of all three; X/Y moved as bytes of their size.
void Where(const KernelArgs& a) {
  dispatch_bytes(a.in[1].dtype, [&]<class T>(Tag<T>) {
    apply<T, bool, T, T>(a, math::WhereOp{}, a.out[0], {&a.in[0], &a.in[1], &a.in[2]});
  });
}

}  // namespace cb::cpu
