// Dropout(data, ratio?, training_mode?) -> output, mask?
// Opset < 12: `ratio` is an attribute and the node is inference-only unless it has a mask output;
// from 12: ratio and training_mode are optional scalar inputs that must be known before execution.
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse(ParseCtx& c) {
  DropoutParams p;
  if (c.opset() < 12) {
    p.ratio = c.f("ratio", 0.5f);
    if (c.opset() < 7) c.i("is_test", 0);
  } else {
    p.seed = c.opt_i("seed");
  }
  return p;
}
void infer(InferCtx& c) {
  auto& p = c.p_mut<DropoutParams>();
  c.expect_float(0, "data");
  if (c.opset() < 12) {
    p.training = c.has_output(1);
  } else {
    if (c.has_input(1)) {
      const Tensor* t = c.data(1);
      if (!t || t->numel() != 1)
        c.fail("ratio (input 1 '{}') must be a constant scalar", c.in(1).name);
      p.ratio = static_cast<float>(t->real_at(0));
    }
    if (c.has_input(2)) p.training = c.known_ints(2, "training_mode").at(0) != 0;
  }
  if (p.ratio < 0 || p.ratio >= 1) c.fail("ratio must be in [0, 1), got {}", p.ratio);
  infer_same_as_input(c);
  c.set(1, c.opset() < 10 ? c.dtype(0) : DType::Bool, c.shape(0));
}
void set_training(Node& n, bool training) {
  std::any_cast<DropoutParams&>(n.params).training = training;
}
void vjp(VjpCtx& c) {  // training: dx = dy * mask / (1 - ratio); inference: dx = dy
  const auto& p = c.p<DropoutParams>();
  if (!p.training || p.ratio == 0.0f) {
    c.set_dx(0, c.dy(0));
    return;
  }
  if (!c.node().has_output(1))
    c.fail("a training-mode Dropout needs its mask output for the gradient; re-export with it");
  c.set_dx(0, c.b.emit_with("DropoutGrad", {c.dy(0), c.y(1)}, p)[0]);
}
void infer_grad(InferCtx& c) { infer_like(c, 0, 0); }
}  // namespace

const OpDef kDropout{.kind = OpKind::Dropout,
                     .name = "Dropout",
                     .inputs_min = 1,
                     .inputs_max = 3,
                     .outputs_min = 1,
                     .outputs_max = 2,
                     .parse = parse,
                     .infer = infer,
                     .value_inputs = bit(1) | bit(2),
                     .inplace_inputs = bit(0),
                     .set_training = set_training,
                     .vjp = vjp};

// DropoutGrad(dY, mask) (internal), with the forward's DropoutParams.
const OpDef kDropoutGrad{.kind = OpKind::DropoutGrad,
                         .name = "DropoutGrad",
                         .inputs_min = 2,
                         .inputs_max = 2,
                         .outputs_min = 1,
                         .outputs_max = 1,
                         .infer = infer_grad,
                         .inplace_inputs = bit(0),
                         .internal = true};
}  // namespace cb::ops
