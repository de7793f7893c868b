// Unary elementwise ops: output has the input's type and shape. Their vjps and kernels differ;
// their contract up to inference is this one shape rule, so they share this file.
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
void infer_float_unary(InferCtx& c) {
  c.expect_float(0, "X");
  infer_same_as_input(c);
}
void infer_numeric_unary(InferCtx& c) {
  if (c.dtype(0) == DType::Bool) c.fail("input must be numeric, got bool");
  infer_same_as_input(c);
}
void infer_identity(InferCtx& c) {
  infer_same_as_input(c);
  if (const auto* k = c.known(0)) c.set_known(0, *k);
}
void infer_neg(InferCtx& c) {
  infer_numeric_unary(c);
  if (auto k = known_elementwise(c, 1, [](const std::vector<Dim>& a) -> std::optional<Dim> {
        return Dim{-a[0].value, a[0].batch};
      }))
    c.set_known(0, *k);
}

std::any parse_leaky_relu(ParseCtx& c) { return LeakyReluParams{c.f("alpha", 0.01f)}; }

// ---- vjps (dy: gradient of the output; x: input; y: output)
void vjp_identity(VjpCtx& c) { c.set_dx(0, c.dy(0)); }
void vjp_neg(VjpCtx& c) { c.set_dx(0, c.b.op("Neg", {c.dy(0)})); }
void vjp_exp(VjpCtx& c) { c.set_dx(0, c.b.op("Mul", {c.dy(0), c.y(0)})); }
void vjp_log(VjpCtx& c) { c.set_dx(0, c.b.op("Div", {c.dy(0), c.x(0)})); }
void vjp_sqrt(VjpCtx& c) {  // dx = dy / (2 y)
  DType t = c.val(c.x(0)).dtype;
  c.set_dx(0, c.b.op("Div", {c.dy(0), c.b.op("Mul", {c.y(0), c.b.scalar(2.0, t)})}));
}
void vjp_reciprocal(VjpCtx& c) {  // dx = -dy y^2
  c.set_dx(0, c.b.op("Neg", {c.b.op("Mul", {c.dy(0), c.b.op("Mul", {c.y(0), c.y(0)})})}));
}
void vjp_sigmoid(VjpCtx& c) {  // dx = dy y (1 - y)
  DType t = c.val(c.x(0)).dtype;
  ValueId one_minus = c.b.op("Sub", {c.b.scalar(1.0, t), c.y(0)});
  c.set_dx(0, c.b.op("Mul", {c.dy(0), c.b.op("Mul", {c.y(0), one_minus})}));
}
void vjp_tanh(VjpCtx& c) {  // dx = dy (1 - y^2)
  DType t = c.val(c.x(0)).dtype;
  ValueId d = c.b.op("Sub", {c.b.scalar(1.0, t), c.b.op("Mul", {c.y(0), c.y(0)})});
  c.set_dx(0, c.b.op("Mul", {c.dy(0), d}));
}
void vjp_erf(VjpCtx& c) {  // dx = dy 2/sqrt(pi) exp(-x^2)
  DType t = c.val(c.x(0)).dtype;
  ValueId e = c.b.op("Exp", {c.b.op("Neg", {c.b.op("Mul", {c.x(0), c.x(0)})})});
  ValueId d = c.b.op("Mul", {e, c.b.scalar(1.1283791670955126, t)});
  c.set_dx(0, c.b.op("Mul", {c.dy(0), d}));
}
void vjp_relu(VjpCtx& c) { c.set_dx(0, c.b.op("ReluGrad", {c.dy(0), c.y(0)})); }
void vjp_leaky_relu(VjpCtx& c) {
  c.set_dx(0, c.b.emit_with("LeakyReluGrad", {c.dy(0), c.x(0)}, c.p<LeakyReluParams>())[0]);
}
void infer_grad_like_1(InferCtx& c) {  // (dY, Y or X) -> dX
  c.expect_same_dtype(0, 1);
  if (c.shape(0) != c.shape(1))
    c.fail("gradient {} and input {} shapes differ", to_string(c.shape(0)), to_string(c.shape(1)));
  infer_like(c, 0, 1);
}
}  // namespace

#define CB_UNARY(op_, infer_, parse_, vjp_)    \
  const OpDef k##op_{.kind = OpKind::op_,      \
                     .name = #op_,             \
                     .inputs_min = 1,          \
                     .inputs_max = 1,          \
                     .outputs_min = 1,         \
                     .outputs_max = 1,         \
                     .parse = parse_,          \
                     .infer = infer_,          \
                     .inplace_inputs = bit(0), \
                     .vjp = vjp_};

CB_UNARY(Abs, infer_numeric_unary, nullptr, nullptr)
CB_UNARY(Ceil, infer_float_unary, nullptr, nullptr)
CB_UNARY(Erf, infer_float_unary, nullptr, vjp_erf)
CB_UNARY(Exp, infer_float_unary, nullptr, vjp_exp)
CB_UNARY(Floor, infer_float_unary, nullptr, nullptr)
CB_UNARY(LeakyRelu, infer_float_unary, parse_leaky_relu, vjp_leaky_relu)
CB_UNARY(Log, infer_float_unary, nullptr, vjp_log)
CB_UNARY(Neg, infer_neg, nullptr, vjp_neg)
CB_UNARY(Reciprocal, infer_float_unary, nullptr, vjp_reciprocal)
CB_UNARY(Relu, infer_numeric_unary, nullptr, vjp_relu)
CB_UNARY(Sigmoid, infer_float_unary, nullptr, vjp_sigmoid)
CB_UNARY(Sqrt, infer_float_unary, nullptr, vjp_sqrt)
CB_UNARY(Tanh, infer_float_unary, nullptr, vjp_tanh)
#undef CB_UNARY

const OpDef kReluGrad{.kind = OpKind::ReluGrad,
                      .name = "ReluGrad",
                      .inputs_min = 2,
                      .inputs_max = 2,
                      .outputs_min = 1,
                      .outputs_max = 1,
                      .infer = infer_grad_like_1,
                      .inplace_inputs = bit(0),
                      .internal = true};
const OpDef kLeakyReluGrad{.kind = OpKind::LeakyReluGrad,
                           .name = "LeakyReluGrad",
                           .inputs_min = 2,
                           .inputs_max = 2,
                           .outputs_min = 1,
                           .outputs_max = 1,
                           .infer = infer_grad_like_1,
                           .inplace_inputs = bit(0),
                           .internal = true};

const OpDef kIdentity{.kind = OpKind::Identity,
                      .name = "Identity",
                      .inputs_min = 1,
                      .inputs_max = 1,
                      .outputs_min = 1,
                      .outputs_max = 1,
                      .infer = infer_identity,
                      .alias = true,
                      .vjp = vjp_identity};

}  // namespace cb::ops
