// SoftmaxCrossEntropyLoss(scores [N,C], labels [N] int) -> loss: the default classification
// loss; reduction mean (default: over the samples whose label is not ignore_index), sum or none.
// Class weights and scores of rank > 2 are rejected with a clear error. Its gradient op:
// SoftmaxCrossEntropyLossGrad(dloss, scores, labels) -> dscores = (softmax(scores) - onehot) *
// dloss (/ N for mean).
#include "runtime/ops/op_util.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse(ParseCtx& c) {
  SoftmaxCrossEntropyLossParams p;
  using R = SoftmaxCrossEntropyLossParams::Reduction;
  p.reduction =
      c.choice<R>("reduction", "mean", {{"mean", R::Mean}, {"sum", R::Sum}, {"none", R::None}});
  p.ignore_index = c.opt_i("ignore_index");
  return p;
}
void infer(InferCtx& c) {
  c.expect_float(0, "scores");
  if (c.rank(0) != 2) c.fail("scores must be [N,C], got {}", to_string(c.shape(0)));
  if (c.has_input(2)) c.fail("class weights are not supported");
  if (!dtype_is_int(c.dtype(1))) c.fail("labels must be integers, got {}", dtype_name(c.dtype(1)));
  if (c.rank(1) != 1 || c.shape(1)[0] != c.shape(0)[0])
    c.fail("labels {} must be [{}] for scores {}", to_string(c.shape(1)), to_string(c.shape(0)[0]),
           to_string(c.shape(0)));
  bool none = c.p<SoftmaxCrossEntropyLossParams>().reduction ==
              SoftmaxCrossEntropyLossParams::Reduction::None;
  c.set(0, c.dtype(0), none ? Shape{c.shape(0)[0]} : Shape{});
  c.set(1, c.dtype(0), c.shape(0));  // log_prob
}
void vjp(VjpCtx& c) {
  if (c.dy(1) != kNoValue) c.fail("the gradient of log_prob is not supported");
  c.set_dx(0, c.b.emit_with("SoftmaxCrossEntropyLossGrad", {c.dy(0), c.x(0), c.x(1)},
                            c.p<SoftmaxCrossEntropyLossParams>())[0]);
}
void infer_grad(InferCtx& c) { infer_like(c, 0, 1); }
}  // namespace

const OpDef kSoftmaxCrossEntropyLoss{.kind = OpKind::SoftmaxCrossEntropyLoss,
                                     .name = "SoftmaxCrossEntropyLoss",
                                     .inputs_min = 2,
                                     .inputs_max = 3,
                                     .outputs_min = 1,
                                     .outputs_max = 2,
                                     .parse = parse,
                                     .infer = infer,
                                     .nondiff_inputs = bit(1) | bit(2),
                                     .vjp = vjp};
const OpDef kSoftmaxCrossEntropyLossGrad{.kind = OpKind::SoftmaxCrossEntropyLossGrad,
                                         .name = "SoftmaxCrossEntropyLossGrad",
                                         .inputs_min = 3,
                                         .inputs_max = 3,
                                         .outputs_min = 1,
                                         .outputs_max = 1,
                                         .infer = infer_grad,
                                         .internal = true};

}  // namespace cb::ops
