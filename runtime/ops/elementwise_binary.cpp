// Binary elementwise ops with numpy broadcasting: Add, Sub, Mul, Div, Pow, Equal.
// On integer inputs whose contents are known (shape arithmetic), the result is computed at import
// time, in terms of N where the batch size enters, so Reshape targets fold to constants.
#include <limits>

#include "runtime/ops/op_util.h"
#include "runtime/vjp.h"

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
  if (b.value == -1 && a.value == std::numeric_limits<int64_t>::min()) return std::nullopt;
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
        // kN == c: false for every batch size N >= 1 unless c is a positive multiple of k
        // (PyTorch's expand(N, -1, -1) asks whether N == -1); N == 3 depends on N.
        const Dim& n = a[0].batch ? a[0] : a[1];
        const int64_t c = a[0].batch ? a[1].value : a[0].value;
        if (n.value != 0 && (c % n.value != 0 || c / n.value < 1)) return Dim::of(0);
        return std::nullopt;
      }))
    c.set_known(0, *k);
}

// ---- vjps: gradients are summed back over broadcast dims (sum_to)
void vjp_add(VjpCtx& c) {
  if (c.need(0)) c.set_dx(0, c.b.sum_to(c.dy(0), c.x_shape(0)));
  if (c.need(1)) c.set_dx(1, c.b.sum_to(c.dy(0), c.x_shape(1)));
}
void vjp_sub(VjpCtx& c) {
  if (c.need(0)) c.set_dx(0, c.b.sum_to(c.dy(0), c.x_shape(0)));
  if (c.need(1)) c.set_dx(1, c.b.sum_to(c.b.op("Neg", {c.dy(0)}), c.x_shape(1)));
}
void vjp_mul(VjpCtx& c) {
  if (c.need(0)) c.set_dx(0, c.b.sum_to(c.b.op("Mul", {c.dy(0), c.x(1)}), c.x_shape(0)));
  if (c.need(1)) c.set_dx(1, c.b.sum_to(c.b.op("Mul", {c.dy(0), c.x(0)}), c.x_shape(1)));
}
void vjp_div(VjpCtx& c) {  // y = a / b: da = dy / b, db = -dy * y / b
  if (c.need(0)) c.set_dx(0, c.b.sum_to(c.b.op("Div", {c.dy(0), c.x(1)}), c.x_shape(0)));
  if (c.need(1)) {
    ValueId t = c.b.op("Mul", {c.dy(0), c.b.op("Div", {c.y(0), c.x(1)})});
    c.set_dx(1, c.b.sum_to(c.b.op("Neg", {t}), c.x_shape(1)));
  }
}
void vjp_pow(VjpCtx& c) {  // y = x^e: dx = dy * e * x^(e-1); e is not differentiated
  DType t = c.val(c.x(1)).dtype;
  if (!dtype_is_float(t)) c.fail("integer exponents are not differentiable here");
  ValueId em1 = c.b.op("Sub", {c.x(1), c.b.scalar(1.0, t)});
  ValueId d = c.b.op("Mul", {c.x(1), c.b.op("Pow", {c.x(0), em1})});
  if (c.val(c.x(0)).dtype != t) c.fail("base and exponent types differ");
  c.set_dx(0, c.b.sum_to(c.b.op("Mul", {c.dy(0), d}), c.x_shape(0)));
}
}  // namespace

const OpDef kAdd{.kind = OpKind::Add,
                 .name = "Add",
                 .inputs_min = 2,
                 .inputs_max = 2,
                 .outputs_min = 1,
                 .outputs_max = 1,
                 .infer = infer_add,
                 .inplace_inputs = bit(0) | bit(1),
                 .vjp = vjp_add};
const OpDef kSub{.kind = OpKind::Sub,
                 .name = "Sub",
                 .inputs_min = 2,
                 .inputs_max = 2,
                 .outputs_min = 1,
                 .outputs_max = 1,
                 .infer = infer_sub,
                 .inplace_inputs = bit(0) | bit(1),
                 .vjp = vjp_sub};
const OpDef kMul{.kind = OpKind::Mul,
                 .name = "Mul",
                 .inputs_min = 2,
                 .inputs_max = 2,
                 .outputs_min = 1,
                 .outputs_max = 1,
                 .infer = infer_mul,
                 .inplace_inputs = bit(0) | bit(1),
                 .vjp = vjp_mul};
const OpDef kDiv{.kind = OpKind::Div,
                 .name = "Div",
                 .inputs_min = 2,
                 .inputs_max = 2,
                 .outputs_min = 1,
                 .outputs_max = 1,
                 .infer = infer_div,
                 .inplace_inputs = bit(0) | bit(1),
                 .vjp = vjp_div};
const OpDef kPow{.kind = OpKind::Pow,
                 .name = "Pow",
                 .inputs_min = 2,
                 .inputs_max = 2,
                 .outputs_min = 1,
                 .outputs_max = 1,
                 .infer = infer_pow,
                 .nondiff_inputs = bit(1),
                 .inplace_inputs = bit(0),
                 .vjp = vjp_pow};
const OpDef kEqual{.kind = OpKind::Equal,
                   .name = "Equal",
                   .inputs_min = 2,
                   .inputs_max = 2,
                   .outputs_min = 1,
                   .outputs_max = 1,
                   .infer = infer_equal};

}  // namespace cb::ops
