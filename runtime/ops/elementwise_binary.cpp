// Binary elementwise ops with numpy broadcasting: Add, Sub, Mul, Div, Pow, Equal.
// On integer inputs whose contents are known (shape arithmetic), the result is computed at import
// time, in terms of N where the batch size enters, so Reshape targets fold to constants.
#include "runtime/ops/op_util.h"

namespace cb::ops {

namespace {
using DimFn = std::optional<Dim> (*)(Dim, Dim);

void infer_arith(InferCtx& c, DimFn fold) {
  if (c.dtype(0) == DType::Bool) c.fail("inputs must be numeric, got bool");
  c.expect_same_dtype(0, 1);
  c.set(0, c.dtype(0), infer_broadcast(c, 0, 2));
  if (!dtype_is_int(c.dtype(0)) || !fold) return;
  if (auto k = known_elementwise(
          c, 2, [fold](const std::vector<Dim>& a) { return fold(a[0], a[1]); }))
    c.set_known(0, *k);
}

std::optional<Dim> int_div(Dim a, Dim b) {
  if (auto d = dim_div(a, b)) return d;
  if (a.batch || b.batch || b.value == 0) return std::nullopt;
  return Dim::of(a.value / b.value);  // ONNX integer Div truncates
}

void infer_add(InferCtx& c) { infer_arith(c, dim_add); }
void infer_sub(InferCtx& c) { infer_arith(c, dim_sub); }
void infer_mul(InferCtx& c) { infer_arith(c, dim_mul); }
void infer_div(InferCtx& c) { infer_arith(c, int_div); }

void infer_pow(InferCtx& c) {
  c.expect_float(0, "X");
  c.set(0, c.dtype(0), infer_broadcast(c, 0, 2));
}

void infer_equal(InferCtx& c) {
  c.expect_same_dtype(0, 1);
  c.set(0, DType::Bool, infer_broadcast(c, 0, 2));
  if (auto k = known_elementwise(c, 2, [](const std::vector<Dim>& a) -> std::optional<Dim> {
        if (a[0] == a[1]) return Dim::of(1);
        if (a[0].batch == a[1].batch) return Dim::of(0);
        return std::nullopt;  // N == 3 depends on N
      }))
    c.set_known(0, *k);
}
}  // namespace

const OpDef kAdd{OpKind::Add, "Add", 2, 2, 1, 1, nullptr, infer_add};
const OpDef kSub{OpKind::Sub, "Sub", 2, 2, 1, 1, nullptr, infer_sub};
const OpDef kMul{OpKind::Mul, "Mul", 2, 2, 1, 1, nullptr, infer_mul};
const OpDef kDiv{OpKind::Div, "Div", 2, 2, 1, 1, nullptr, infer_div};
const OpDef kPow{OpKind::Pow, "Pow", 2, 2, 1, 1, nullptr, infer_pow, bit(1)};
const OpDef kEqual{OpKind::Equal, "Equal", 2, 2, 1, 1, nullptr, infer_equal};

}  // namespace cb::ops
