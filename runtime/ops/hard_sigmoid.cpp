// HardSigmoid(X) = max(0, min(1, alpha X + beta)) and HardSwish(X) = X HardSigmoid(X) with alpha
// 1/6, beta 1/2 (ONNX; PyTorch's hardsigmoid/hardswish), with their gradient ops: one pass over
// (dY, X) each instead of the five nodes a decomposition into comparisons and Where would take.
// Kinks follow PyTorch: HardSigmoid's gradient is alpha strictly inside (0, 1), HardSwish's is
// X/3 + 1/2 on [-3, 3].
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse_hard_sigmoid(ParseCtx& c) {
  HardSigmoidParams p;
  p.alpha = c.f("alpha", p.alpha);
  p.beta = c.f("beta", p.beta);
  return p;
}
void infer(InferCtx& c) {
  c.expect_float(0, "X");
  infer_same_as_input(c);
}
void infer_grad(InferCtx& c) {  // (dY, X) -> dX
  c.expect_same_dtype(0, 1);
  if (c.shape(0) != c.shape(1))
    c.fail("gradient {} and input {} shapes differ", to_string(c.shape(0)), to_string(c.shape(1)));
  infer_like(c, 0, 1);
}
void vjp_hard_sigmoid(VjpCtx& c) {
  c.set_dx(0, c.b.emit_with("HardSigmoidGrad", {c.dy(0), c.x(0)}, c.p<HardSigmoidParams>())[0]);
}
void vjp_hard_swish(VjpCtx& c) { c.set_dx(0, c.b.op("HardSwishGrad", {c.dy(0), c.x(0)})); }
}  // namespace

const OpDef kHardSigmoid{.kind = OpKind::HardSigmoid,
                         .name = "HardSigmoid",
                         .inputs_min = 1,
                         .inputs_max = 1,
                         .outputs_min = 1,
                         .outputs_max = 1,
                         .parse = parse_hard_sigmoid,
                         .infer = infer,
                         .inplace_inputs = bit(0),
                         .vjp = vjp_hard_sigmoid};
const OpDef kHardSwish{.kind = OpKind::HardSwish,
                       .name = "HardSwish",
                       .inputs_min = 1,
                       .inputs_max = 1,
                       .outputs_min = 1,
                       .outputs_max = 1,
                       .infer = infer,
                       .inplace_inputs = bit(0),
                       .vjp = vjp_hard_swish};
const OpDef kHardSigmoidGrad{.kind = OpKind::HardSigmoidGrad,
                             .name = "HardSigmoidGrad",
                             .inputs_min = 2,
                             .inputs_max = 2,
                             .outputs_min = 1,
                             .outputs_max = 1,
                             .infer = infer_grad,
                             .inplace_inputs = bit(0),
                             .internal = true};
const OpDef kHardSwishGrad{.kind = OpKind::HardSwishGrad,
                           .name = "HardSwishGrad",
                           .inputs_min = 2,
                           .inputs_max = 2,
                           .outputs_min = 1,
                           .outputs_max = 1,
                           .infer = infer_grad,
                           .inplace_inputs = bit(0),
                           .internal = true};

}  // namespace cb::ops
