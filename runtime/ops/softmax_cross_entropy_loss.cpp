// SoftmaxCrossEntropyLoss(scores [N,C,d1..dk], labels [N,d1..dk] int, weights? [C]) -> loss,
// log_prob? [N,C,d1..dk]: the ONNX op (k >= 0; k = 0 and no weights is the trainer's
// classification loss). Per element, loss = -weights[label] * log_softmax(scores, axis 1)[label]
// (weight 1 without weights); elements labelled ignore_index add nothing. Reduction none
// ([N,d1..dk]), sum, or mean (the sum over the sum of the weights of the elements not ignored;
// without weights, over their count).
// Its gradient op: SoftmaxCrossEntropyLossGrad(dloss, scores, labels, weights?) -> dscores =
// (softmax(scores) - onehot(label)) * weights[label] * dloss (/ the mean's divisor). A gradient
// flowing into log_prob adds LogSoftmaxGrad along axis 1. Weights are not differentiable.
// Label smoothing e (params only, not an ONNX attribute; PyTorch's CrossEntropyLoss): per
// element loss = (1 - e) * nll + e * mean_c(-log_softmax_c), the mean's divisor unchanged (the
// count of elements not ignored); dscores = softmax - (1 - e) * onehot(label) - e / C, times
// dloss (/ divisor). Not with class weights.
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
// Checks scores, labels and weights (inputs `s`, `s + 1`, `s + 2`: the forward op has s = 0, its
// gradient op s = 1); returns the labels' shape [N,d1..dk].
Shape check_inputs(const InferCtx& c, size_t s) {
  c.expect_float(s, "scores");
  if (c.rank(s) < 2) c.fail("scores must be [N,C] or [N,C,d1,...], got {}", to_string(c.shape(s)));
  if (!dtype_is_int(c.dtype(s + 1)))
    c.fail("labels must be integers, got {}", dtype_name(c.dtype(s + 1)));
  const Shape& x = c.shape(s);
  Shape want{x[0]};
  want.insert(want.end(), x.begin() + 2, x.end());
  if (c.shape(s + 1) != want)
    c.fail("labels {} must be {} for scores {} (scores without the class dim 1)",
           to_string(c.shape(s + 1)), to_string(want), to_string(x));
  if (c.has_input(s + 2)) {
    if (c.dtype(s + 2) != c.dtype(s))
      c.fail("weights are {}, scores {}: they must have the same type", dtype_name(c.dtype(s + 2)),
             dtype_name(c.dtype(s)));
    if (c.shape(s + 2) != Shape{x[1]})
      c.fail("weights {} must be [C] = {} for scores {}", to_string(c.shape(s + 2)),
             to_string(Shape{x[1]}), to_string(x));
  }
  const double e = c.p<SoftmaxCrossEntropyLossParams>().label_smoothing;
  if (!(e >= 0 && e <= 1)) c.fail("label smoothing {} is outside [0, 1]", e);
  if (e > 0 && c.has_input(s + 2)) c.fail("label smoothing with class weights is not supported");
  return want;
}
void infer(InferCtx& c) {
  Shape labels = check_inputs(c, 0);
  bool none = c.p<SoftmaxCrossEntropyLossParams>().reduction ==
              SoftmaxCrossEntropyLossParams::Reduction::None;
  c.set(0, c.dtype(0), none ? labels : Shape{});
  c.set(1, c.dtype(0), c.shape(0));  // log_prob
}
void vjp(VjpCtx& c) {
  ValueId dx = kNoValue;
  if (c.dy(0) != kNoValue) {
    std::vector<ValueId> in{c.dy(0), c.x(0), c.x(1)};
    if (c.node().has_input(2)) in.push_back(c.x(2));
    dx = c.b.emit_with("SoftmaxCrossEntropyLossGrad", std::move(in),
                       c.p<SoftmaxCrossEntropyLossParams>())[0];
  }
  if (c.dy(1) != kNoValue) {  // log_prob = LogSoftmax(scores, axis 1)
    ValueId d = c.b.emit_with("LogSoftmaxGrad", {c.dy(1), c.y(1)}, SoftmaxParams{1, false})[0];
    dx = dx == kNoValue ? d : c.b.op("Add", {dx, d});
  }
  c.set_dx(0, dx);
}
// SoftmaxCrossEntropyLossGrad(dloss ([] or [N,d1..dk]), scores, labels, weights?) -> dscores
void infer_grad(InferCtx& c) {
  Shape labels = check_inputs(c, 1);
  bool none = c.p<SoftmaxCrossEntropyLossParams>().reduction ==
              SoftmaxCrossEntropyLossParams::Reduction::None;
  if (c.dtype(0) != c.dtype(1) || c.shape(0) != (none ? labels : Shape{}))
    c.fail("dloss {}{} does not match the loss of scores {}", dtype_name(c.dtype(0)),
           to_string(c.shape(0)), to_string(c.shape(1)));
  infer_like(c, 0, 1);
}
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
                                         .inputs_max = 4,
                                         .outputs_min = 1,
                                         .outputs_max = 1,
                                         .infer = infer_grad,
                                         .internal = true};

}  // namespace cb::ops
