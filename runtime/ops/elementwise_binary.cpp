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
  if (auto k =
          known_elementwise(c, 2, [fold](const std::vector<Dim>& a) { return fold(a[0], a[1]); }))
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

// Pow-7: X and Y share one float type. Pow-12 on: X is int32, int64 or float (bfloat16 from 13)
// and Y any numeric type; Z has X's type.
void infer_pow(InferCtx& c) {
  if (c.opset() < 12) {
    c.expect_float(0, "X");
    c.expect_same_dtype(0, 1);
  } else {
    DType x = c.dtype(0);
    bool ok = x == DType::F32 || x == DType::F16 || x == DType::F64 || x == DType::I32 ||
              x == DType::I64 || (x == DType::BF16 && c.opset() >= 13);
    if (!ok)
      c.fail(
          "X (input 0 '{}') must be int32, int64 or a floating point tensor at opset {}, "
          "got {}",
          c.in(0).name, c.opset(), dtype_name(x));
    if (c.dtype(1) == DType::Bool)
      c.fail("Y (input 1 '{}') must be numeric, got bool", c.in(1).name);
  }
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

const OpDef kAdd{OpKind::Add, "Add", 2, 2, 1, 1, nullptr, infer_add, 0, 0, 0, bit(0) | bit(1)};
const OpDef kSub{OpKind::Sub, "Sub", 2, 2, 1, 1, nullptr, infer_sub, 0, 0, 0, bit(0) | bit(1)};
const OpDef kMul{OpKind::Mul, "Mul", 2, 2, 1, 1, nullptr, infer_mul, 0, 0, 0, bit(0) | bit(1)};
const OpDef kDiv{OpKind::Div, "Div", 2, 2, 1, 1, nullptr, infer_div, 0, 0, 0, bit(0) | bit(1)};
const OpDef kPow{OpKind::Pow, "Pow", 2, 2, 1, 1, nullptr, infer_pow, bit(1), 0, 0, bit(0)};
const OpDef kEqual{OpKind::Equal, "Equal", 2, 2, 1, 1, nullptr, infer_equal};

}  // namespace cb::ops
