// Gelu(X) (ONNX opset 20; PyTorch's nn.GELU): X Phi(X) = X/2 (1 + erf(X/sqrt 2)), or with
// approximate "tanh" X/2 (1 + tanh(sqrt(2/pi) (X + 0.044715 X^3))). Files exported before opset
// 20 spell it as Div, Erf, Add, Mul, Mul; fuse_gelu (runtime/passes.h) turns those five nodes
// back into this one, so that training runs one pass forward and one backward (GeluGrad(dY, X))
// over the MLP's widest activation and keeps only X for the backward pass, instead of the four
// intermediate tensors the decomposition's gradient reads.
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse_gelu(ParseCtx& c) {
  return GeluParams{c.choice<bool>("approximate", "none", {{"none", false}, {"tanh", true}})};
}
void infer_gelu(InferCtx& c) {
  c.expect_float(0, "X");
  infer_same_as_input(c);
}
void infer_gelu_grad(InferCtx& c) {  // (dY, X) -> dX
  c.expect_same_dtype(0, 1);
  if (c.shape(0) != c.shape(1))
    c.fail("gradient {} and input {} shapes differ", to_string(c.shape(0)), to_string(c.shape(1)));
  infer_like(c, 0, 1);
}
void vjp_gelu(VjpCtx& c) {
  c.set_dx(0, c.b.emit_with("GeluGrad", {c.dy(0), c.x(0)}, c.p<GeluParams>())[0]);
}
}  // namespace

const OpDef kGelu{.kind = OpKind::Gelu,
                  .name = "Gelu",
                  .inputs_min = 1,
                  .inputs_max = 1,
                  .outputs_min = 1,
                  .outputs_max = 1,
                  .parse = parse_gelu,
                  .infer = infer_gelu,
                  .inplace_inputs = bit(0),
                  .vjp = vjp_gelu};
const OpDef kGeluGrad{.kind = OpKind::GeluGrad,
                      .name = "GeluGrad",
                      .inputs_min = 2,
                      .inputs_max = 2,
                      .outputs_min = 1,
                      .outputs_max = 1,
                      .infer = infer_gelu_grad,
                      .inplace_inputs = bit(0),
                      .internal = true};

}  // namespace cb::ops
