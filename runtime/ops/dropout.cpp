// Dropout(data, ratio?, training_mode?) -> output, mask?
// Opset < 12: `ratio` is an attribute and the node is inference-only unless it has a mask output;
// from 12: ratio and training_mode are optional scalar inputs that must be known before execution.
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"

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
}  // namespace

const OpDef kDropout{OpKind::Dropout, "Dropout", 1, 3, 1, 2, parse, infer, 0, 0,
                     bit(1) | bit(2), bit(0), false, set_training};

}  // namespace cb::ops
