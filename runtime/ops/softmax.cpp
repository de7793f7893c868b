// Softmax and LogSoftmax along `axis`. Before opset 13 the input is coerced to 2-D at `axis`
// (default 1); from 13 the op works along one axis (default -1). Shape is unchanged either way.
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse(ParseCtx& c) {
  bool old = c.opset() < 13;
  return SoftmaxParams{c.i("axis", old ? 1 : -1), old};
}
void infer(InferCtx& c) {
  c.expect_float(0, "input");
  auto& p = c.p_mut<SoftmaxParams>();
  int64_t r = std::max<int64_t>(c.rank(0), 1);
  p.axis = c.axis(p.axis, r, "axis");
  infer_same_as_input(c);
}
void vjp_softmax(VjpCtx& c) {  // dx = y (dy - sum(dy y))
  c.set_dx(0, c.b.emit_with("SoftmaxGrad", {c.dy(0), c.y(0)}, c.p<SoftmaxParams>())[0]);
}
void vjp_log_softmax(VjpCtx& c) {  // dx = dy - exp(y) sum(dy)
  c.set_dx(0, c.b.emit_with("LogSoftmaxGrad", {c.dy(0), c.y(0)}, c.p<SoftmaxParams>())[0]);
}
void infer_grad(InferCtx& c) { infer_like(c, 0, 1); }
}  // namespace

const OpDef kSoftmax{.kind = OpKind::Softmax,
                     .name = "Softmax",
                     .inputs_min = 1,
                     .inputs_max = 1,
                     .outputs_min = 1,
                     .outputs_max = 1,
                     .parse = parse,
                     .infer = infer,
                     .vjp = vjp_softmax};
const OpDef kLogSoftmax{.kind = OpKind::LogSoftmax,
                        .name = "LogSoftmax",
                        .inputs_min = 1,
                        .inputs_max = 1,
                        .outputs_min = 1,
                        .outputs_max = 1,
                        .parse = parse,
                        .infer = infer,
                        .vjp = vjp_log_softmax};

// SoftmaxGrad(dY, Y) and LogSoftmaxGrad(dY, Y) (internal), with the forward's SoftmaxParams.
const OpDef kSoftmaxGrad{.kind = OpKind::SoftmaxGrad,
                         .name = "SoftmaxGrad",
                         .inputs_min = 2,
                         .inputs_max = 2,
                         .outputs_min = 1,
                         .outputs_max = 1,
                         .infer = infer_grad,
                         .internal = true};
const OpDef kLogSoftmaxGrad{.kind = OpKind::LogSoftmaxGrad,
                            .name = "LogSoftmaxGrad",
                            .inputs_min = 2,
                            .inputs_max = 2,
                            .outputs_min = 1,
                            .outputs_max = 1,
                            .infer = infer_grad,
                            .internal = true};
}  // namespace cb::ops
